package admission

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Reports are the policies' audit reports (what each policy, enforced,
// would deny among the admitted deployments), kept on admission.audit as
// one entry per policy and deployment, and what they are computed from:
// each deployment's admitted request, followed from the record of what is
// deployed (deploy.deployments), so that compacting admission.verdicts
// loses no deployment. The stage writes the entries in the transaction of
// what changes them: a deployment decided, a policy written or deleted,
// a deployment deleted.
type Reports struct {
	mu sync.Mutex
	// entries: policy id -> deployment id -> what is kept of its entry,
	// as committed on admission.audit.
	entries map[string]map[string]kept
	// pending are the entries the stage wrote that the table has not
	// read back yet (a nil entry: removed), by key: they count for the
	// next decision at once, and are dropped when a transaction aborts
	// (rewind). Keyed by policy and deployment, not by the record's
	// key, so that looking an entry up builds no string.
	pending map[auditKey]*kept
	// committed and pendingOf count, per deployment, its entries in
	// entries and its keys in pending: a deployment with neither has
	// no entry for a policy to remove.
	committed, pendingOf map[string]int
	// admitted: deployment id -> its latest admitted request.
	admitted map[string]admittedRequest
}

// auditKey is a policy's entry for a deployment (events.AuditKey, split).
type auditKey struct{ policy, dep string }

// kept is what a report keeps of an entry: what tells whether a new entry
// says something else (entryOutput), its request and a digest of its
// findings, not the findings' texts.
type kept struct {
	requestID string
	findings  [2]uint64
}

// findingsSeeds seed the two halves of a findings digest (the digests
// live in memory only, so the seeds may differ from run to run).
var findingsSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// keep is what is kept of e (nil: none). Its request id is e's: a
// decoded entry's is copied by the caller (ApplyEntry), the stage's own
// entries share their deployment's admitted request's (copied once, as it
// is admitted).
func keep(e *events.AuditEntry) *kept {
	if e == nil {
		return nil
	}
	k := &kept{requestID: e.RequestID}
	for i, seed := range findingsSeeds {
		var h maphash.Hash
		h.SetSeed(seed)
		var n [8]byte
		field := func(s string) {
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.WriteString(s)
		}
		binary.LittleEndian.PutUint64(n[:], uint64(len(e.Findings)))
		h.Write(n[:])
		for _, f := range e.Findings {
			field(f.Rule)
			field(f.Object)
			field(f.Message)
		}
		k.findings[i] = h.Sum64()
	}
	return k
}

// admittedRequest is a deployment's latest admitted request, as mutated.
type admittedRequest struct {
	requestID, tenant string
	req               *admit.Request
}

// tenantOf is the tenant the request is checked for (admit.Audit's).
func (ar admittedRequest) tenantOf() string { return ar.req.Tenant }

// NewReports is an empty set.
func NewReports() *Reports {
	return &Reports{entries: map[string]map[string]kept{}, pending: map[auditKey]*kept{}, committed: map[string]int{}, pendingOf: map[string]int{}, admitted: map[string]admittedRequest{}}
}

// ApplyEntry folds one admission.audit record (a tombstone: nil) in.
func (r *Reports) ApplyEntry(key string, e *events.AuditEntry) {
	policyID, dep, ok := strings.Cut(key, "/")
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := keep(e)
	if k != nil {
		k.requestID = strings.Clone(k.requestID)
	}
	r.applyEntry(policyID, dep, k)
	r.unpend(auditKey{policyID, dep})
}

// applyKept folds in an admission.audit record the stage wrote itself,
// from what was kept of it as it was written (nil: a tombstone), as
// ApplyEntry does from the record.
func (r *Reports) applyKept(key string, e *kept) {
	policyID, dep, ok := strings.Cut(key, "/")
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyEntry(policyID, dep, e)
	r.unpend(auditKey{policyID, dep})
}

// pendingKept is what was kept of the entry the stage wrote last under an
// admission.audit key (nil: removed), and whether it wrote one.
func (r *Reports) pendingKept(key string) (*kept, bool) {
	policyID, dep, ok := strings.Cut(key, "/")
	if !ok {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.pending[auditKey{policyID, dep}]
	return e, ok
}

// rewind forgets the entries written in a transaction that aborted: what
// counts is what admission.audit holds.
func (r *Reports) rewind() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.pending)
	clear(r.pendingOf)
}

// unpend drops a key from pending.
func (r *Reports) unpend(k auditKey) {
	if _, ok := r.pending[k]; !ok {
		return
	}
	delete(r.pending, k)
	count(r.pendingOf, k.dep, -1)
}

// count adds d to m[k], deleting it at zero.
func count(m map[string]int, k string, d int) {
	if n := m[k] + d; n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// mayHold reports whether some policy may have an entry for a
// deployment, as last written.
func (r *Reports) mayHold(dep string) bool { return r.committed[dep] > 0 || r.pendingOf[dep] > 0 }

// entry is what is kept of a policy's entry for a deployment, as last
// written (nil: none).
func (r *Reports) entry(policyID, dep string) *kept {
	if e, ok := r.pending[auditKey{policyID, dep}]; ok {
		return e
	}
	if e, ok := r.entries[policyID][dep]; ok {
		return &e
	}
	return nil
}

// has reports whether a policy has an entry for a deployment, as last
// written.
func (r *Reports) has(policyID, dep string) bool { return r.entry(policyID, dep) != nil }

func (r *Reports) applyEntry(policyID, dep string, e *kept) {
	if e == nil {
		if m := r.entries[policyID]; m != nil {
			if _, ok := m[dep]; ok {
				count(r.committed, dep, -1)
			}
			delete(m, dep)
			if len(m) == 0 {
				delete(r.entries, policyID)
			}
		}
		return
	}
	m := r.entries[policyID]
	if m == nil {
		m = map[string]kept{}
		r.entries[policyID] = m
	}
	if _, ok := m[dep]; !ok {
		count(r.committed, dep, 1)
	}
	m[dep] = *e
}

// ApplyDeployment folds one deploy.deployments record (a tombstone: nil)
// in: the record holds the deployment's admitted request (a denial
// leaves the record, so what was admitted before stays, as it stays
// deployed), a tombstone (the deployment deleted) drops it. A record that
// does not say what it was admitted with is left out.
func (r *Reports) ApplyDeployment(dep string, d *events.Deployment) {
	var ar admittedRequest
	ok := false
	if d != nil {
		ar, ok = admittedOf(d)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		delete(r.admitted, dep)
		return
	}
	r.admitted[dep] = ar
}

// applyAdmitted sets a deployment's admitted request, as ApplyDeployment
// does from a record that holds it.
func (r *Reports) applyAdmitted(dep string, ar admittedRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admitted[dep] = ar
}

// admittedAs is the admitted request held for a deployment when it is the
// one the record d holds (the stage's own record of the decision that set
// it: its request is the verdict's, parsed once), and nil otherwise.
func (r *Reports) admittedAs(dep string, d *events.Deployment) *admittedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	ar, ok := r.admitted[dep]
	if !ok || d.Request == "" || ar.requestID != d.RequestID || ar.tenant != d.Tenant {
		return nil
	}
	return &ar
}

// admittedOf is the admitted request a deployment record holds. A record
// written before records carried their request holds what the policies
// read of an application but its image, properties and scripts: its
// applications as admitted.
func admittedOf(d *events.Deployment) (admittedRequest, bool) {
	if d.Request != "" {
		req, err := admit.ParseRequest([]byte(d.Request))
		if err != nil {
			return admittedRequest{}, false
		}
		return admittedRequest{requestID: strings.Clone(d.RequestID), tenant: strings.Clone(d.Tenant), req: req}, true
	}
	req := &admit.Request{DeploymentID: d.DeploymentID, Tenant: d.Tenant, Environment: d.Environment, Applications: make([]admit.Application, 0, len(d.Applications))}
	for _, a := range d.Applications {
		req.Applications = append(req.Applications, admit.Application{Name: a.Name, Package: a.Package, Class: a.Class,
			Inherits: slices.Clone(a.Inherits), Instances: int(a.Instances), Flavor: a.Flavor})
	}
	return admittedRequest{requestID: strings.Clone(d.RequestID), tenant: strings.Clone(d.Tenant), req: req}, true
}

// entryOutput is the output that sets a policy's entry for a deployment
// to e (nil: removes it), or nothing when it holds that already; it is
// applied at once, so the next decision sees it before it commits.
func (r *Reports) entryOutput(policyID, dep string, e *events.AuditEntry) []runtime.Output {
	old, now := r.entry(policyID, dep), keep(e)
	if now == nil && old == nil || now != nil && old != nil && *old == *now {
		return nil
	}
	k := auditKey{policyID, dep}
	if _, ok := r.pending[k]; !ok {
		count(r.pendingOf, dep, 1)
	}
	r.pending[k] = now
	o := runtime.Output{Topic: topology.AdmissionAudit, Key: []byte(events.AuditKey(policyID, dep))}
	if e != nil {
		o.Value = e
	}
	return []runtime.Output{o}
}

// check is the entry of policy p for an admitted request: nil when p
// would deny nothing (a policy of other tenants finds nothing).
func check(ctx context.Context, p *admit.Compiled, dep string, ar admittedRequest, now time.Time) *events.AuditEntry {
	if !p.AppliesTo(ar.req.Tenant) {
		return nil
	}
	fs := admit.Audit(ctx, ar.req, p)
	if len(fs) == 0 {
		return nil
	}
	e := &events.AuditEntry{PolicyID: p.ID, DeploymentID: dep, RequestID: ar.requestID, Tenant: ar.tenant, CheckedAt: now.UTC()}
	for _, f := range fs {
		e.Findings = append(e.Findings, events.AuditFinding{Rule: f.Rule, Object: f.Object, Message: f.Text(ar.tenant)})
	}
	return e
}

// deploymentDecided refreshes every policy's entry for a deployment whose
// verdict v was just made: an admitted request is checked against every
// policy; a denial changes nothing (what was admitted before stays).
func (r *Reports) deploymentDecided(ctx context.Context, v *events.AdmissionVerdict, policies []*admit.Compiled, now time.Time) []runtime.Output {
	if !v.Admitted {
		return nil
	}
	req, err := admit.ParseRequest([]byte(v.Request))
	if err != nil {
		return nil
	}
	// The request id is kept by every entry of the deployment: copied
	// out of the decoded record once.
	ar := admittedRequest{requestID: strings.Clone(v.RequestID), tenant: strings.Clone(v.Tenant), req: req}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admitted[v.DeploymentID] = ar
	// A policy that does not apply to the tenant finds nothing: it only
	// removes an entry the deployment holds, so when it holds none only
	// the policies that apply are checked.
	held := r.mayHold(v.DeploymentID)
	var outs []runtime.Output
	for _, p := range policies {
		if !held && !p.AppliesTo(req.Tenant) {
			continue
		}
		outs = append(outs, r.entryOutput(p.ID, v.DeploymentID, check(ctx, p, v.DeploymentID, ar, now))...)
	}
	return outs
}

// policyChanged rebuilds the report of policy id, as p now is (nil:
// deleted, or it does not compile): every admitted deployment of its
// tenants checked again.
func (r *Reports) policyChanged(ctx context.Context, id string, p *admit.Compiled, now time.Time) []runtime.Output {
	r.mu.Lock()
	defer r.mu.Unlock()
	// A deployment the policy does not apply to (or every deployment,
	// when the policy is gone) gets no entry: only one it holds is
	// removed, so only those it applies to and those holding an entry
	// are checked.
	var deps []string
	for dep, ar := range r.admitted {
		if p != nil && p.AppliesTo(ar.tenantOf()) {
			deps = append(deps, dep)
		}
	}
	for dep := range r.entries[id] {
		deps = append(deps, dep)
	}
	for key := range r.pending {
		if key.policy == id {
			deps = append(deps, key.dep)
		}
	}
	sort.Strings(deps)
	deps = slices.Compact(deps)
	var outs []runtime.Output
	for _, dep := range deps {
		var e *events.AuditEntry
		if ar, ok := r.admitted[dep]; ok && p != nil {
			e = check(ctx, p, dep, ar, now)
		}
		outs = append(outs, r.entryOutput(id, dep, e)...)
	}
	return outs
}

// deploymentDeleted drops a deployment (deleted: its record's tombstone
// is written in the same transaction) from every report.
func (r *Reports) deploymentDeleted(dep string) []runtime.Output {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.admitted, dep)
	var ids []string
	for id := range r.entries {
		ids = append(ids, id)
	}
	for key := range r.pending {
		ids = append(ids, key.policy)
	}
	sort.Strings(ids)
	ids = slices.Compact(ids)
	var outs []runtime.Output
	for _, id := range ids {
		if r.has(id, dep) {
			outs = append(outs, r.entryOutput(id, dep, nil)...)
		}
	}
	return outs
}

// policyWritten refreshes the audit report of the policy an app.policies
// record (or tombstone) is for, from the policy as the table now holds
// it. The tables are caught up with first, unless a catch-up that began
// more than ClockSkew after the record was written did (a poll of many
// policies costs one catch-up, not one each): then only the record itself
// is waited for in the table of app.policies.
func (a *admitter) policyWritten(ctx context.Context, in runtime.Input) ([]runtime.Output, error) {
	if a.caughtUp.After(in.Timestamp.Add(ClockSkew)) {
		if err := a.polsTable.WaitFor(ctx, in.Partition, in.Offset); err != nil {
			return nil, fmt.Errorf("admission: read %s: %w", a.env.Kafka.Topic(topology.AppPolicies), err)
		}
	} else if err := a.catchUp(ctx); err != nil {
		return nil, err
	}
	id := string(in.Key)
	p, _ := a.pols.Get(id)
	outs := a.reports.policyChanged(ctx, id, p, time.Now())
	if len(outs) > 0 {
		a.log.Info().Str("policy_id", id).Int("entries_changed", len(outs)).Msg("audit report refreshed")
	}
	return a.written(outs), nil
}
