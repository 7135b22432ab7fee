package policyapi

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// catalogEntry is one policy of the catalog view.
type catalogEntry struct {
	PolicyID      string
	PolicyName    string
	PolicyVersion string
	Status        string
	// Error says why the PDP's latest version is invalid (Status ERRORED).
	Error string
	Body  json.RawMessage // the latest valid policy_body, as stored
	// ChangedAt is when the entry was written to policy.catalog.
	ChangedAt time.Time
	// Tenant owns the policy; "" is global (policy.MayHold).
	Tenant string
	// BodyHash names Body; Revision is the catalog's revision of it.
	BodyHash string
	Revision int64
	decoded  policy.Body
	// What else the record says, for a decision on it as pdp-ingest and
	// the matcher make it (record).
	source    string
	updatedAt time.Time
}

// bodyHash is the entry's body hash: as its record named it, or computed
// from the body for records written without one. A rollout names its
// version by it.
func (e *catalogEntry) bodyHash() string {
	if e.BodyHash != "" {
		return e.BodyHash
	}
	return policy.BodyHash(string(e.Body))
}

// record is the policy.catalog record the entry was read from.
func (e *catalogEntry) record() *events.PolicyCatalogEntry {
	r := &events.PolicyCatalogEntry{
		PolicyID: e.PolicyID, PolicyName: e.PolicyName, PolicyVersion: e.PolicyVersion,
		Body: string(e.Body), BodyHash: e.BodyHash, Status: e.Status, UpdatedAt: e.updatedAt,
		Revision: e.Revision, Tenant: e.Tenant, Source: e.source,
	}
	if e.Error != "" {
		r.Error = &e.Error
	}
	return r
}

// catalogView is policy.catalog: the latest valid body per policy_id,
// decoded as it is read.
type catalogView struct {
	*runtime.TableOf[*events.PolicyCatalogEntry, *catalogEntry]
}

func followCatalog(env runtime.Env) (*catalogView, error) {
	t, err := runtime.FollowTableOf(env, topology.PolicyCatalog, func(m runtime.Msg[*events.PolicyCatalogEntry], _ *catalogEntry, _ bool) (*catalogEntry, error) {
		e := m.Value
		b, err := policy.DecodeBody([]byte(e.Body))
		if err != nil {
			return nil, fmt.Errorf("policy catalog view: entry %q: %w", e.PolicyID, err)
		}
		id := e.PolicyID
		if id == "" {
			id = string(m.Key)
		}
		return &catalogEntry{
			PolicyID:      id,
			PolicyName:    e.PolicyName,
			PolicyVersion: e.PolicyVersion,
			Status:        e.Status,
			Error:         stringOr(e.Error, ""),
			Body:          json.RawMessage(e.Body),
			ChangedAt:     m.Timestamp,
			Tenant:        e.Tenant,
			BodyHash:      e.BodyHash,
			Revision:      e.Revision,
			decoded:       b,
			source:        e.Source,
			updatedAt:     e.UpdatedAt,
		}, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &catalogView{t}, nil
}

func (v *catalogView) get(id string) (*catalogEntry, bool) { return v.Value(id) }

// each calls f on every entry.
func (v *catalogView) each(f func(*catalogEntry)) {
	for _, e := range v.Sorted() {
		f(e)
	}
}

// matching returns the entries whose body matches f and that p may read
// (mayReadPolicy), sorted by policy_id.
func (v *catalogView) matching(f *policy.CompiledFilter, p auth.Principal) []*catalogEntry {
	var out []*catalogEntry
	for _, e := range v.Sorted() {
		if !mayReadPolicy(p, e) {
			continue
		}
		if ok, _ := f.Match(e.decoded); ok {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PolicyID < out[j].PolicyID })
	return out
}

// componentsView is deploy.components: the registered components, and
// the last generation of each component ever seen, so that one deleted
// and registered again keeps counting up.
type componentsView struct {
	*runtime.Table[*events.Component]
	mu      sync.Mutex
	lastGen map[string]int64
}

func followComponents(env runtime.Env) (*componentsView, error) {
	v := &componentsView{lastGen: map[string]int64{}}
	t, err := runtime.FollowTable(env, topology.DeployComponents, func(m runtime.Msg[*events.Component]) {
		if m.Value == nil {
			return
		}
		v.mu.Lock()
		v.lastGen[string(m.Key)] = max(v.lastGen[string(m.Key)], m.Value.Generation)
		v.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	v.Table = t
	return v, nil
}

// all returns the registered components, sorted by id.
func (v *componentsView) all() []*events.Component { return v.Sorted() }

func (v *componentsView) get(id string) (*events.Component, bool) { return v.Value(id) }

// generation is the last generation the component had, registered or
// deleted since; 0 when never seen.
func (v *componentsView) generation(id string) int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lastGen[id]
}

// byServiceComponent returns the registered component with the service
// component name, the latest updated one when several share it.
func (v *componentsView) byServiceComponent(scn string) (*events.Component, bool) {
	var best *events.Component
	for _, c := range v.Sorted() {
		if c.ServiceComponentName != scn {
			continue
		}
		if best == nil || c.UpdatedAt.After(best.UpdatedAt) ||
			(c.UpdatedAt.Equal(best.UpdatedAt) && c.ComponentID < best.ComponentID) {
			best = c
		}
	}
	return best, best != nil
}

// deploymentTenants returns the tenants of the registered components of
// the deployment.
func (v *componentsView) deploymentTenants(deploymentID string) []string {
	var out []string
	for _, c := range v.Sorted() {
		if c.DeploymentID == deploymentID {
			out = append(out, c.Tenant)
		}
	}
	return out
}

// hasDeployment reports whether any registered component belongs to the
// deployment.
func (v *componentsView) hasDeployment(deploymentID string) bool {
	_, ok := v.Find(func(c *events.Component) bool { return c.DeploymentID == deploymentID })
	return ok
}

// withServiceComponent returns the registered components with the
// service component name, by component id.
func (v *componentsView) withServiceComponent(scn string) []*events.Component {
	var out []*events.Component
	for _, c := range v.Sorted() {
		if c.ServiceComponentName == scn {
			out = append(out, c)
		}
	}
	return out
}

// appliedPolicy is what the applied view remembers of one policy of a
// component: its version and the update that brought that version.
type appliedPolicy struct {
	Version     string
	BodyHash    string
	UpdateID    string
	ConsulIndex int64
	Generation  int64
	AppliedAt   time.Time
}

// appliedState is the last ComponentApplied of a component, without the
// policy bodies.
type appliedState struct {
	ComponentID          string
	ServiceComponentName string
	UpdateID             string
	Action               string
	ConsulIndex          int64
	PoliciesCount        int32
	Generation           int64
	Notify               events.NotifyTarget
	Uninstalled          bool
	AppliedAt            time.Time
	Policies             map[string]appliedPolicy
}

// appliedView is component.applied: what was last written to Consul for
// each component, each record folded over the component's previous state
// (foldApplied).
type appliedView struct {
	*runtime.TableOf[*events.ComponentApplied, *appliedState]
}

func followApplied(env runtime.Env) (*appliedView, error) {
	t, err := runtime.FollowTableOf(env, topology.ComponentApplied, func(m runtime.Msg[*events.ComponentApplied], prev *appliedState, _ bool) (*appliedState, error) {
		a := m.Value
		if a.ComponentID == "" {
			a.ComponentID = string(m.Key)
		}
		return foldApplied(prev, a), nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &appliedView{t}, nil
}

func (v *appliedView) get(id string) (*appliedState, bool) { return v.Value(id) }

// foldApplied computes a component's applied state from the previous one
// and a new ComponentApplied: a policy keeps the update that brought its
// version unless the new record updated it.
func foldApplied(prev *appliedState, a *events.ComponentApplied) *appliedState {
	updated := map[string]bool{}
	for _, p := range a.UpdatedRefs {
		updated[p.PolicyID] = true
	}
	collection := a.PolicyRefs
	st := &appliedState{
		ComponentID:          a.ComponentID,
		ServiceComponentName: a.ServiceComponentName,
		UpdateID:             a.UpdateID,
		Action:               a.Action,
		ConsulIndex:          a.ConsulIndex,
		PoliciesCount:        a.PoliciesCount,
		Generation:           a.Generation,
		Notify:               a.Notify,
		Uninstalled:          a.Uninstalled,
		AppliedAt:            a.AppliedAt,
		Policies:             make(map[string]appliedPolicy, len(collection)),
	}
	for _, p := range collection {
		if prev != nil && !updated[p.PolicyID] {
			if old, ok := prev.Policies[p.PolicyID]; ok && old.Version == p.PolicyVersion {
				st.Policies[p.PolicyID] = old
				continue
			}
		}
		st.Policies[p.PolicyID] = appliedPolicy{
			Version:     p.PolicyVersion,
			BodyHash:    p.BodyHash,
			UpdateID:    a.UpdateID,
			ConsulIndex: a.ConsulIndex,
			Generation:  a.Generation,
			AppliedAt:   a.AppliedAt,
		}
	}
	return st
}

// stringOr is *p, or def when p is nil.
func stringOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}
