// Package admission is the admission stage's wiring: the application
// policies table and the handler that turns a deployment request into a
// verdict and, when admitted, component registrations. The decision
// itself is package admit.
package admission

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/placement"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Policies is the compiled set of application policies, kept current from
// app.policies. A record that does not compile (written around the North
// API, which refuses such policies) is logged and left out, and the
// policy's previous version with it.
type Policies struct {
	log zerolog.Logger

	mu      sync.RWMutex
	byID    map[string]*admit.Compiled
	refused map[string]string // policy id -> why it was left out
	sorted  []*admit.Compiled // cached, nil when stale
	// tenants caches, per tenant, the policies that apply to it in the
	// order they are evaluated (admit.Applicable); emptied when a policy
	// is applied.
	tenants map[string][]*admit.Compiled
}

// NewPolicies is an empty set.
func NewPolicies(log zerolog.Logger) *Policies {
	return &Policies{log: log, byID: map[string]*admit.Compiled{}, refused: map[string]string{}, tenants: map[string][]*admit.Compiled{}}
}

// Apply folds one app.policies record (a tombstone: nil value) in.
func (p *Policies) Apply(id string, v *events.AppPolicy) {
	var c *admit.Compiled
	var err error
	if v != nil {
		c, err = admit.CompilePolicy(v)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sorted = nil
	clear(p.tenants)
	delete(p.byID, id)
	delete(p.refused, id)
	switch {
	case v == nil:
	case err != nil:
		p.refused[id] = err.Error()
		p.log.Error().Err(err).Str("policy_id", id).Msg("application policy does not compile: left out")
	default:
		p.byID[id] = c
	}
}

// All returns every compiled policy, by id.
func (p *Policies) All() []*admit.Compiled {
	p.mu.RLock()
	if s := p.sorted; s != nil {
		p.mu.RUnlock()
		return s
	}
	p.mu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := make([]*admit.Compiled, 0, len(p.byID))
	for _, c := range p.byID {
		s = append(s, c)
	}
	sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID })
	p.sorted = s
	return s
}

// ForTenant returns the policies that apply to a tenant, in the order
// they are evaluated (admit.Applicable of All): what a request of the
// tenant is decided against, computed once per tenant until a policy is
// applied rather than once per request.
func (p *Policies) ForTenant(tenant string) []*admit.Compiled {
	p.mu.RLock()
	s, ok := p.tenants[tenant]
	p.mu.RUnlock()
	if ok {
		return s
	}
	all := p.All()
	s = admit.Applicable(all, tenant)
	p.mu.Lock()
	defer p.mu.Unlock()
	// A policy applied since All was read leaves the cache cleared: keep
	// what was computed only when the set is still the one read.
	if p.sorted != nil && len(p.sorted) == len(all) && (len(all) == 0 || &p.sorted[0] == &all[0]) {
		p.tenants[tenant] = s
	}
	return s
}

// Get returns one compiled policy.
func (p *Policies) Get(id string) (*admit.Compiled, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	c, ok := p.byID[id]
	return c, ok
}

// Datacenters are the datacenter models, kept current from
// placement.datacenters and indexed as they are read. A record that does
// not validate (written around the North API) is logged and left out: a
// request naming it is denied as naming an unknown datacenter.
type Datacenters struct {
	log zerolog.Logger

	mu   sync.RWMutex
	byID map[string]*placement.Model
}

// NewDatacenters is an empty set.
func NewDatacenters(log zerolog.Logger) *Datacenters {
	return &Datacenters{log: log, byID: map[string]*placement.Model{}}
}

// Apply folds one placement.datacenters record (a tombstone: nil value)
// in.
func (d *Datacenters) Apply(id string, v *events.Datacenter) {
	var m *placement.Model
	var err error
	if v != nil {
		m, err = placement.ParseDatacenter([]byte(v.Model))
		if err == nil && m.ID() != id {
			err = fmt.Errorf("the record's key is %q, its model's id %q", id, m.ID())
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.byID, id)
	switch {
	case v == nil:
	case err != nil:
		d.log.Error().Err(err).Str("datacenter_id", id).Msg("datacenter model is not valid: left out")
	default:
		d.byID[id] = m
	}
}

// Get returns one datacenter model.
func (d *Datacenters) Get(id string) (*placement.Model, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m, ok := d.byID[id]
	return m, ok
}

// Len is how many datacenter models there are.
func (d *Datacenters) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.byID)
}

// ClockSkew is how far the clocks of the North API (which stamps a
// request when it writes it) and the admission stage may disagree. Before
// deciding a request the stage catches up with app.policies and
// placement.datacenters, so that every policy and datacenter written
// before the request decides it. A request needs no catch-up of its own
// when the last one covers it: when that catch-up began more than
// ClockSkew after the request's time stamp, or when the request was
// already in deploy.requests as the catch-up began (each catch-up first
// lists the end offsets of deploy.requests; a policy acknowledged before
// a request was written lies before every end offset listed after it).
// So a backlog, old or fresh, costs one catch-up, not a round trip for
// each request.
const ClockSkew = 2 * time.Second

// covers reports whether a catch-up that began at began, when the end
// offsets of deploy.requests were ends, covers a request stamped ts at
// offset of partition: it began more than ClockSkew after the request was
// stamped, or the request was in the log before it began.
func covers(began time.Time, ends map[int32]int64, ts time.Time, partition int32, offset int64) bool {
	if began.After(ts.Add(ClockSkew)) {
		return true
	}
	end, listed := ends[partition]
	return listed && offset < end
}

// tables are the tables a stage follows (runtime.Table), by topic.
type tables struct {
	bases []string
	ts    []interface {
		WaitCaughtUp(context.Context) error
		Close()
	}
}

// follow follows base as a table, each record folded in by apply (a
// tombstone with a nil value), and adds it to ts. The table keeps no
// record: apply folds each into the stage's own indexes (policies,
// datacenters, names, deployments, reports), and keeping the decoded
// records too held every deployment's request twice more on the heap.
func follow[V events.Event](env runtime.Env, ts *tables, base string, apply func(key string, v V)) (*runtime.TableOf[V, struct{}], error) {
	keep := func(runtime.Msg[V], struct{}, bool) (struct{}, error) { return struct{}{}, nil }
	t, err := runtime.FollowTableOf(env, base, keep, func(m runtime.Msg[V]) { apply(string(m.Key), m.Value) })
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	ts.bases, ts.ts = append(ts.bases, base), append(ts.ts, t)
	return t, nil
}

// catchUp returns once every table holds what its topic held.
func (ts *tables) catchUp(ctx context.Context, env runtime.Env) error {
	for i, t := range ts.ts {
		if err := t.WaitCaughtUp(ctx); err != nil {
			return fmt.Errorf("admission: read %s: %w", env.Kafka.Topic(ts.bases[i]), err)
		}
	}
	return nil
}

func (ts *tables) close() {
	for _, t := range ts.ts {
		t.Close()
	}
}

// PollRecords caps the requests one transaction of the stage decides.
const PollRecords = 1000

// PollBudget bounds how long the stage handles one poll's records
// (runtime.Stage.PollBudget; at most a third of the transaction timeout).
const PollBudget = 10 * time.Second

// Stage is the admission stage, its endpoint rules from the environment
// (and from flags when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(hooks.ConfigFromEnv()) }

// StageWith is the admission stage calling the policies' endpoints (external
// engines, notice webhooks) on the hosts cfg allows.
func StageWith(cfg hooks.Config) runtime.Stage { return (&stageConfig{hooks: cfg}).stage() }

func (st *stageConfig) stage() runtime.Stage {
	return runtime.Stage{
		Flags:    st.hooks.RegisterFlags,
		Settings: &st.hooks,
		Name:     topology.StageAdmission,
		Mode:     runtime.Transactional,
		// app.policies is an input too, besides a table: a policy
		// written refreshes its audit report in its own transaction.
		Inputs: []string{topology.DeployRequests, topology.AppPolicies},
		// A request costs an evaluation of its tenant's policies and up
		// to seven outputs: polls of a thousand keep a transaction
		// short on a busy machine.
		PollRecords: PollRecords,
		// An app.policies record checks every admitted deployment of
		// the policy's tenants again (a global policy: all of them), a
		// thousand times what a request costs: a poll that takes longer
		// than this is aborted and taken again in smaller polls, so that
		// no transaction approaches the transaction timeout.
		PollBudget: PollBudget,
		Setup:      st.setup,
		// The decisions of an aborted transaction were folded into the
		// names, the deployments and the audit reports at once
		// (admitter.took, Reports' pending entries): read the tables
		// again, without them, before its requests are decided again.
		Rewound: func(ctx context.Context, _ runtime.Env, _ map[string][]int32) error {
			if a := st.run.Load(); a != nil {
				return a.reread(ctx)
			}
			return nil
		},
	}
}

// stageConfig is what the stage's flags set, and the run they set up.
type stageConfig struct {
	hooks hooks.Config
	run   atomic.Pointer[admitter]
}

// admitter is one run of the stage: the tables it decides against and
// how far it has caught up with them.
type admitter struct {
	env   runtime.Env
	log   zerolog.Logger
	pols  *Policies
	dcs   *Datacenters
	names *Names
	deps  *Deployments
	// ts are the tables the stage decides against: the policies, the
	// datacenters, and who holds which names (components, deployments).
	ts tables
	// polsTable is the table of app.policies (one of ts).
	polsTable *runtime.TableOf[*events.AppPolicy, struct{}]
	cl        *kgo.Client
	adm       *kadm.Client
	// caughtUp is when the last catch-up with the tables began; covered
	// holds, per partition of deploy.requests, the end offset listed as
	// it began: the requests before it were written before that
	// catch-up.
	caughtUp time.Time
	covered  map[int32]int64
	// ext calls the external engines; notices delivers notices to their
	// webhooks.
	ext     admit.Env
	notices *delivery
	// reports are the policies' audit reports.
	reports *Reports
	// own are the records this run wrote to the tables it follows, until
	// they are read back.
	own *ownWrites
}

// setup follows the tables, reads them to their ends and returns the
// handler that decides each request.
func (st *stageConfig) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	log := env.Log.With().Str("stage", topology.StageAdmission).Logger()
	rules, err := st.hooks.Rules()
	if err != nil {
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	a := &admitter{env: env, log: log, ext: admit.Env{External: rules.Call}}
	a.notices = startDelivery(log, rules.Call)
	if err := a.start(ctx); err != nil {
		a.close()
		return nil, nil, err
	}
	st.run.Store(a)
	log.Info().Int("policies", len(a.pols.All())).Int("datacenters", a.dcs.Len()).Int("deployments", a.deps.Len()).Strs("hook_allow", rules.Allowed()).
		Msg("application policies, datacenters, components, verdicts and deployments read")
	return runtime.Route(map[string]runtime.Handler{
		topology.DeployRequests: runtime.Typed(runtime.RefuseTombstones, a.decide),
		topology.AppPolicies:    a.policyWritten,
	}), a.close, nil
}

// start reads every table afresh.
func (a *admitter) start(ctx context.Context) error {
	a.pols, a.dcs, a.names, a.deps = NewPolicies(a.log), NewDatacenters(a.log), NewNames(), NewDeployments()
	a.reports = NewReports()
	a.own = newOwnWrites()
	a.ts = tables{}
	began := time.Now()
	if err := a.open(ctx); err != nil {
		return err
	}
	a.adm = kadm.NewClient(a.cl)
	a.caughtUp, a.covered = began, nil
	return nil
}

// catchUp catches up with the tables, noting when it began and the end
// offsets of deploy.requests as it began (see covers).
func (a *admitter) catchUp(ctx context.Context) error {
	began := time.Now()
	ends, err := runtime.Ends(ctx, a.adm, a.env.Kafka.Topic(topology.DeployRequests))
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	if err := a.ts.catchUp(ctx, a.env); err != nil {
		return err
	}
	a.caughtUp, a.covered = began, ends
	return nil
}

// reread drops the tables and reads them again from their topics: what
// an aborted transaction folded in is gone.
func (a *admitter) reread(ctx context.Context) error {
	a.closeTables()
	a.cl, a.adm = nil, nil
	if err := a.start(ctx); err != nil {
		return fmt.Errorf("admission: read the tables again after an aborted transaction: %w", err)
	}
	a.log.Info().Int("deployments", a.deps.Len()).Msg("tables read again after an aborted transaction")
	return nil
}

// open follows the tables, creates the client that lists the offsets of
// deploy.requests, and catches up with the tables.
func (a *admitter) open(ctx context.Context) error {
	env := a.env
	var err error
	a.polsTable, err = follow(env, &a.ts, topology.AppPolicies, a.pols.Apply)
	if err == nil {
		_, err = follow(env, &a.ts, topology.Datacenters, a.dcs.Apply)
	}
	// The stage's own outputs come back on the topics it writes and
	// follows: they were folded in as they were made (took), and are
	// folded in again from what the stage made, not decoded.
	if err == nil {
		err = followOwn(env, &a.ts, topology.DeployComponents, a.own, a.names.ApplyComponent, func(id string, w ownWrite) {
			c, _ := w.value.(*events.Component)
			a.names.ApplyComponent(id, c)
		})
	}
	if err == nil {
		err = followOwn(env, &a.ts, topology.AdmissionVerdicts, a.own, a.names.ApplyVerdict, func(dep string, w ownWrite) {
			v, _ := w.value.(*events.AdmissionVerdict)
			a.names.ApplyVerdict(dep, v)
		})
	}
	if err == nil {
		err = followOwn(env, &a.ts, topology.AdmissionAudit, a.own, a.reports.ApplyEntry, func(key string, w ownWrite) {
			if w.keptEntry {
				a.reports.applyKept(key, w.entry)
				return
			}
			e, _ := w.value.(*events.AuditEntry)
			a.reports.ApplyEntry(key, e)
		})
	}
	if err == nil {
		err = followOwn(env, &a.ts, topology.Deployments, a.own, func(dep string, d *events.Deployment) {
			d = ownCopy(d)
			a.deps.Apply(dep, d)
			a.reports.ApplyDeployment(dep, d)
		}, func(dep string, w ownWrite) {
			d, _ := w.value.(*events.Deployment)
			a.deps.Apply(dep, d)
			if w.admitted != nil {
				a.reports.applyAdmitted(dep, *w.admitted)
			} else {
				a.reports.ApplyDeployment(dep, d)
			}
		})
	}
	if err != nil {
		return err
	}
	opts, err := env.Kafka.ClientOpts()
	if err == nil {
		a.cl, err = kgo.NewClient(opts...)
	}
	if err != nil {
		return fmt.Errorf("admission: client for the offsets of %s: %w", env.Kafka.Topic(topology.DeployRequests), err)
	}
	return a.ts.catchUp(ctx, env)
}

func (a *admitter) close() {
	if a.notices != nil {
		a.notices.close()
	}
	a.closeTables()
}

// closeTables stops following the tables and closes the offsets' client.
func (a *admitter) closeTables() {
	if a.cl != nil {
		a.cl.Close()
	}
	a.ts.close()
}

// decide decides one deployment request.
func (a *admitter) decide(ctx context.Context, in runtime.Msg[*events.DeploymentRequest]) ([]runtime.Output, error) {
	// A policy, datacenter, component or verdict written before the
	// request was must decide it: catch up with the tables first,
	// unless a catch-up that began after the request was written did.
	if !covers(a.caughtUp, a.covered, in.Timestamp, in.Partition, in.Offset) {
		if err := a.catchUp(ctx); err != nil {
			return nil, err
		}
	}
	if in.Value.Action == events.ActionDelete {
		var outs []runtime.Output
		var err error
		a.deps.With(func(deployed admit.DeployedState) {
			outs, err = Remove(in.Value, a.names, deployed, a.pols.ForTenant(in.Value.Tenant), time.Now())
		})
		if err != nil {
			return nil, err
		}
		a.took(outs)
		if v, refused := deletionRefused(outs); refused {
			a.log.Info().Str("request_id", in.Value.RequestID).Str("deployment_id", in.Value.DeploymentID).Str("tenant", in.Value.Tenant).
				Int("violations", len(v.Violations)).Msg("deletion refused")
			return a.written(outs), nil
		}
		if len(outs) > 0 {
			// A deleted deployment leaves every audit report, in the
			// transaction that tombstones its record.
			outs = append(a.reports.deploymentDeleted(in.Value.DeploymentID), outs...)
		}
		a.log.Info().Str("request_id", in.Value.RequestID).Str("deployment_id", in.Value.DeploymentID).Str("tenant", in.Value.Tenant).
			Int("outputs", len(outs)).Msg("deployment deleted")
		return a.written(outs), nil
	}
	var outs []runtime.Output
	var err error
	a.deps.With(func(deployed admit.DeployedState) {
		outs, err = Decide(ctx, in.Value, in.Key, State{Policies: a.pols.ForTenant(in.Value.Tenant), Datacenters: a.dcs.Get, Owners: a.names, Deployed: deployed, External: a.ext.External}, time.Now())
	})
	if err != nil {
		return nil, err
	}
	for _, o := range outs {
		if n, ok := o.Value.(*events.AdmissionNotice); ok && n.WebhookURL != "" {
			a.notices.send(n)
		}
	}
	a.took(outs)
	v := outs[len(outs)-1].Value.(*events.AdmissionVerdict)
	// The audit reports of an admitted deployment change with it.
	outs = append(a.reports.deploymentDecided(ctx, v, a.pols.All(), time.Now()), outs...)
	a.log.Info().Str("request_id", v.RequestID).Str("deployment_id", v.DeploymentID).Str("tenant", v.Tenant).
		Bool("admitted", v.Admitted).Int("violations", len(v.Violations)).Int("mutations", len(v.Mutations)).Msg("deployment request decided")
	return a.written(outs), nil
}

// written marks the outputs to the topics the stage follows as this
// run's (ownWrites), so that reading them back decodes nothing: a
// deployment record with the admitted request the audit reports hold
// for it.
func (a *admitter) written(outs []runtime.Output) []runtime.Output {
	for i := range outs {
		o := &outs[i]
		switch o.Topic {
		case topology.DeployComponents, topology.AdmissionVerdicts:
			a.own.mark(o, ownWrite{})
		case topology.AdmissionAudit:
			e, ok := a.reports.pendingKept(string(o.Key))
			a.own.mark(o, ownWrite{entry: e, keptEntry: ok})
		case topology.Deployments:
			var w ownWrite
			if d, ok := o.Value.(*events.Deployment); ok {
				w.admitted = a.reports.admittedAs(string(o.Key), d)
			}
			a.own.mark(o, w)
		}
	}
	return outs
}

// took folds a decision's outputs into the tables at once, before the
// transaction commits them: the names it took or released, and what it
// deployed or deleted, count for the next request.
func (a *admitter) took(outs []runtime.Output) {
	for _, o := range outs {
		switch o.Topic {
		case topology.DeployComponents:
			c, _ := o.Value.(*events.Component)
			a.names.ApplyComponent(string(o.Key), c)
		case topology.AdmissionVerdicts:
			v, _ := o.Value.(*events.AdmissionVerdict)
			a.names.ApplyVerdict(string(o.Key), v)
		case topology.Deployments:
			d, _ := o.Value.(*events.Deployment)
			if d != nil {
				// The request id is the decoded request's, carved out of
				// the buffer it was decoded from: the record is kept.
				d.RequestID = strings.Clone(d.RequestID)
			}
			a.deps.Apply(string(o.Key), d)
		}
	}
}

// deletionRefused is the denied verdict among a deletion's outputs, when
// the deletion was refused (its only output).
func deletionRefused(outs []runtime.Output) (*events.AdmissionVerdict, bool) {
	if len(outs) != 1 {
		return nil, false
	}
	v, ok := outs[0].Value.(*events.AdmissionVerdict)
	return v, ok && !v.Admitted
}

// Source names the admission stage in the events it writes.
const Source = events.NotifierAdmission

// State is what a request is decided against: the application
// policies, the datacenter models, who holds which name and what is
// deployed.
type State struct {
	Policies    []*admit.Compiled
	Datacenters admit.Datacenters
	Owners      admit.Owners
	// Deployed is what is deployed (nil: nothing).
	Deployed admit.DeployedState
	// External calls the external engines of External policies (nil:
	// none can be called; each fails as its failurePolicy says).
	External admit.ExternalCaller
}

// Decide is the admission of one deployment request: its verdict on
// admission.verdicts, preceded, when admitted, by the registration of its
// components on deploy.components and by each application's settings
// policy (admit.SettingsPolicy) pushed on pdp.notifications, which the
// policy flow delivers to the component's Consul folder. A request that cannot be read (its
// JSON, no tenant, a bad class name, a record whose deployment or tenant
// disagrees with its JSON) is denied with the reason. A request that names
// a datacenter has its placement checked against it (admit.CheckPlacement,
// looking the datacenter up with dcs). A request that would write a
// component id or Consul folder another tenant holds is denied naming the
// owner (admit.CheckNames against owners). What is deployed counts
// (st.Deployed, cut by admit.DeployedSet.For): the rules per environment
// and per tenant, and the capacity other deployments use on the
// datacenter. An admitted request also writes its record on
// deploy.deployments (admit.Record) and a billing event on
// billing.events. Each notice found (InstanceNotice) is written on
// admission.notices before the verdict. A record that names no
// deployment at all, so no verdict can be keyed, or a deployment another
// tenant holds, whose verdict it would replace, is an error
// (dead-lettered with the reason); a ctx that ends during the evaluation
// gives no verdict either, but an error that is retried: the request is
// decided again, not denied.
func Decide(ctx context.Context, dr *events.DeploymentRequest, key []byte, st State, now time.Time) ([]runtime.Output, error) {
	policies, dcs, owners := st.Policies, st.Datacenters, st.Owners
	dep := dr.DeploymentID
	if dep == "" {
		dep = string(key)
	}
	if dep == "" {
		return nil, runtime.Permanentf("admission: deployment request %s names no deployment_id and has no key, so its verdict has no key", dr.RequestID)
	}
	if c := admit.CheckClaim(admit.Claim{Tenant: dr.Tenant, DeploymentID: dep}, owners); c != nil {
		return nil, runtime.Permanentf("admission: deployment request %s: %v; its verdict would replace the owner's, so it is not written", dr.RequestID, c)
	}
	refuse := func(reason string) []runtime.Output {
		return []runtime.Output{{Topic: topology.AdmissionVerdicts, Key: []byte(dep), Value: admit.Refused(dr.RequestID, dep, dr.Tenant, reason, now)}}
	}
	req, err := admit.ParseRequest([]byte(dr.Request))
	if err != nil {
		return refuse(err.Error()), nil
	}
	if req.DeploymentID != dep || req.Tenant != dr.Tenant {
		return refuse(fmt.Sprintf("the record is for deployment %q of tenant %q but its request for deployment %q of tenant %q", dep, dr.Tenant, req.DeploymentID, req.Tenant)), nil
	}
	if st.Deployed == nil {
		st.Deployed = admit.DeployedSet{}
	}
	deployed := st.Deployed.For(req, dcs)
	v, err := admit.EvaluateWith(ctx, req, policies, admit.Env{External: st.External, Deployed: deployed})
	if err != nil {
		return nil, err
	}
	admit.CheckPlacement(&v, dcs, deployed.Usage)
	admit.CheckNames(&v, owners)
	var outs []runtime.Output
	var ids []string
	if v.Admitted {
		comps, err := admit.Components(v.Request, dr.SubmittedAt.UnixMilli(), now)
		if err != nil {
			return refuse(err.Error()), nil
		}
		for i, c := range comps {
			id, body, err := admit.SettingsPolicy(v.Request, &v.Request.Applications[i], dr.SubmittedAt.UnixMilli())
			if err != nil {
				return refuse(err.Error()), nil
			}
			ids = append(ids, c.ComponentID)
			outs = append(outs,
				runtime.Output{Topic: topology.PDPNotifications, Key: []byte(id), Value: &events.PdpNotification{
					NotificationID: dr.RequestID + "/" + id, Source: Source, ReceivedAt: now.UTC(),
					LoadedPolicies: []events.LoadedPolicy{}, RemovedPolicies: []events.UnloadedPolicy{}, PushedBodies: []string{string(body)},
					// The settings are the tenant's: only it reads them, only
					// its components hold them (policy.MayHold).
					Tenant: v.Request.Tenant,
				}},
				runtime.Output{Topic: topology.DeployComponents, Key: []byte(c.ComponentID), Value: c})
		}
	}
	ve, err := admit.VerdictEvent(dr.RequestID, req, v, ids, now)
	if err != nil {
		return nil, runtime.Permanent(fmt.Errorf("admission: verdict on %s: %w", dr.RequestID, err))
	}
	if v.Admitted {
		rec := admit.Record(dr.RequestID, v.Request, admit.PlacementUse(v.Request, dcs), ids, now)
		outs = append(outs,
			runtime.Output{Topic: topology.Deployments, Key: []byte(dep), Value: rec},
			runtime.Output{Topic: topology.BillingEvents, Key: []byte(dep), Value: admit.Billing(events.BillingAdmitted, dr.RequestID, rec, now)})
	}
	outs = append(outs, noticeOutputs(dr.RequestID, req, v, now)...)
	return append(outs, runtime.Output{Topic: topology.AdmissionVerdicts, Key: []byte(dep), Value: ve}), nil
}

// Remove is the deletion of a deployment (a request whose action is
// delete): its record on deploy.deployments, its components on
// deploy.components (each a tombstone, as DELETE
// /v1/components/{component_id} writes: the pipeline uninstalls the
// component and wipes its Consul folder), each component's settings
// policy (a removal for the tenant on pdp.notifications, which
// pdp-ingest applies as the owner's) and its verdict on
// admission.verdicts are tombstoned, releasing its capacity, its
// instances and its names, and a billing event says what it ran. A
// deployment that holds nothing (deleted already) gives no output. A
// record that names no deployment, or a deployment another tenant holds
// (the North API checked the caller against the holder, and writes the
// holder's tenant), is an error (dead-lettered with the reason). A
// deletion that a policy refuses (admit.EvaluateDeletion against the
// tenant's other deployments: an environment that keeps deployments
// would lose its required application) deletes nothing: its one output
// is a denied verdict for the deployment, naming the rule.
func Remove(dr *events.DeploymentRequest, names *Names, deployed admit.DeployedState, policies []*admit.Compiled, now time.Time) ([]runtime.Output, error) {
	dep := dr.DeploymentID
	if dep == "" {
		return nil, runtime.Permanentf("admission: deletion %s names no deployment_id", dr.RequestID)
	}
	if c := admit.CheckClaim(admit.Claim{Tenant: dr.Tenant, DeploymentID: dep}, names); c != nil {
		return nil, runtime.Permanentf("admission: deletion %s: %v; it is not deleted", dr.RequestID, c)
	}
	rec, _ := deployed.Lookup(dep)
	if rec != nil && rec.Tenant != dr.Tenant {
		return nil, runtime.Permanentf("admission: deletion %s of deployment %s by tenant %q: the deployment is tenant %q's; it is not deleted", dr.RequestID, dep, dr.Tenant, rec.Tenant)
	}
	if rec != nil {
		// A deletion that would break a policy (an environment left
		// without its required application) is refused: a denied
		// verdict, and the deployment stays.
		if v := admit.EvaluateDeletion(rec, deployed.Others(rec), policies); !v.Admitted {
			return []runtime.Output{{Topic: topology.AdmissionVerdicts, Key: []byte(dep), Value: admit.DeletionVerdict(dr.RequestID, rec, v, now)}}, nil
		}
	}
	var outs []runtime.Output
	// Each component's settings policy leaves the catalog with it: a
	// removal for the tenant, up to this deletion's version (the greater
	// of its submission time and now, in milliseconds: after every
	// settings version the deployment was admitted with).
	version := strconv.FormatInt(max(dr.SubmittedAt.UnixMilli(), now.UnixMilli()), 10)
	for _, h := range names.ComponentsOf(dep) {
		id := admit.SettingsPolicyID(h.ComponentID)
		outs = append(outs,
			runtime.Output{Topic: topology.DeployComponents, Key: []byte(h.ComponentID)},
			runtime.Output{Topic: topology.PDPNotifications, Key: []byte(id), Value: &events.PdpNotification{
				NotificationID: dr.RequestID + "/" + id, Source: Source, ReceivedAt: now.UTC(),
				LoadedPolicies: []events.LoadedPolicy{}, PushedBodies: []string{},
				RemovedPolicies: []events.UnloadedPolicy{{PolicyName: id + "." + version + ".json", VersionNo: version}},
				Tenant:          dr.Tenant,
			}})
	}
	held := len(names.Deployment(dep)) > 0
	if rec == nil && !held {
		return nil, nil
	}
	if rec != nil {
		outs = append(outs,
			runtime.Output{Topic: topology.Deployments, Key: []byte(dep)},
			runtime.Output{Topic: topology.BillingEvents, Key: []byte(dep), Value: admit.Billing(events.BillingDeleted, dr.RequestID, rec, now)})
	}
	return append(outs, runtime.Output{Topic: topology.AdmissionVerdicts, Key: []byte(dep)}), nil
}
