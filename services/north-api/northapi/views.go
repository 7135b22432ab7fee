package northapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
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
	Tenant  string
	decoded policy.Body
}

// catalogView is policy.catalog: the latest valid body per policy_id.
type catalogView struct {
	codec *events.Codec
	mu    sync.RWMutex
	byID  map[string]*catalogEntry
}

func newCatalogView(codec *events.Codec) *catalogView {
	return &catalogView{codec: codec, byID: map[string]*catalogEntry{}}
}

func (v *catalogView) apply(ctx context.Context, rec *kgo.Record) error {
	if rec.Value == nil {
		v.mu.Lock()
		delete(v.byID, string(rec.Key))
		v.mu.Unlock()
		return nil
	}
	var e events.PolicyCatalogEntry
	if err := v.codec.DecodeInto(ctx, rec.Value, &e); err != nil {
		return fmt.Errorf("policy catalog view: decode entry %q: %w", rec.Key, err)
	}
	b, err := policy.DecodeBody([]byte(e.Body))
	if err != nil {
		return fmt.Errorf("policy catalog view: entry %q: %w", e.PolicyID, err)
	}
	id := e.PolicyID
	if id == "" {
		id = string(rec.Key)
	}
	v.mu.Lock()
	v.byID[id] = &catalogEntry{
		PolicyID:      id,
		PolicyName:    e.PolicyName,
		PolicyVersion: e.PolicyVersion,
		Status:        e.Status,
		Error:         stringOr(e.Error, ""),
		Body:          json.RawMessage(e.Body),
		ChangedAt:     rec.Timestamp,
		Tenant:        e.Tenant,
		decoded:       b,
	}
	v.mu.Unlock()
	return nil
}

func (v *catalogView) get(id string) (*catalogEntry, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.byID[id]
	return e, ok
}

// each calls f on every entry, in no order, with the view locked for
// reading: f must not call back into the view.
func (v *catalogView) each(f func(*catalogEntry)) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, e := range v.byID {
		f(e)
	}
}

// matching returns the entries whose body matches f and that p may read
// (mayReadPolicy), sorted by policy_id.
func (v *catalogView) matching(f *policy.CompiledFilter, p auth.Principal) []*catalogEntry {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []*catalogEntry
	for _, e := range v.byID {
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

// componentsView is deploy.components: the registered components.
type componentsView struct {
	codec *events.Codec
	mu    sync.RWMutex
	byID  map[string]*events.Component
	// lastGen remembers the generation of components that were deleted,
	// so that one registered again keeps counting up.
	lastGen map[string]int64
}

func newComponentsView(codec *events.Codec) *componentsView {
	return &componentsView{codec: codec, byID: map[string]*events.Component{}, lastGen: map[string]int64{}}
}

func (v *componentsView) apply(ctx context.Context, rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		v.mu.Lock()
		if c, ok := v.byID[id]; ok {
			v.lastGen[id] = c.Generation
		}
		delete(v.byID, id)
		v.mu.Unlock()
		return nil
	}
	var c events.Component
	if err := v.codec.DecodeInto(ctx, rec.Value, &c); err != nil {
		return fmt.Errorf("components view: decode component %q: %w", id, err)
	}
	v.mu.Lock()
	v.byID[id] = &c
	if c.Generation > v.lastGen[id] {
		v.lastGen[id] = c.Generation
	}
	v.mu.Unlock()
	return nil
}

// all returns a copy of the registered components, sorted by id.
func (v *componentsView) all() []*events.Component {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*events.Component, 0, len(v.byID))
	for _, c := range v.byID {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ComponentID < out[j].ComponentID })
	return out
}

func (v *componentsView) get(id string) (*events.Component, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	c, ok := v.byID[id]
	return c, ok
}

// generation is the last generation the component had, registered or
// deleted since; 0 when never seen.
func (v *componentsView) generation(id string) int64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if c, ok := v.byID[id]; ok && c.Generation > v.lastGen[id] {
		return c.Generation
	}
	return v.lastGen[id]
}

// byServiceComponent returns the registered component with the service
// component name, the latest updated one when several share it.
func (v *componentsView) byServiceComponent(scn string) (*events.Component, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var best *events.Component
	for _, c := range v.byID {
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
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for _, c := range v.byID {
		if c.DeploymentID == deploymentID {
			out = append(out, c.Tenant)
		}
	}
	return out
}

// hasDeployment reports whether any registered component belongs to the
// deployment.
func (v *componentsView) hasDeployment(deploymentID string) bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.byID {
		if c.DeploymentID == deploymentID {
			return true
		}
	}
	return false
}

// appliedPolicy is what the applied view remembers of one policy of a
// component: its version and the update that brought that version.
type appliedPolicy struct {
	Version     string
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
// each component.
type appliedView struct {
	codec *events.Codec
	mu    sync.RWMutex
	byID  map[string]*appliedState
}

func newAppliedView(codec *events.Codec) *appliedView {
	return &appliedView{codec: codec, byID: map[string]*appliedState{}}
}

func (v *appliedView) apply(ctx context.Context, rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		v.mu.Lock()
		delete(v.byID, id)
		v.mu.Unlock()
		return nil
	}
	var a events.ComponentApplied
	if err := v.codec.DecodeInto(ctx, rec.Value, &a); err != nil {
		return fmt.Errorf("applied view: decode record of component %q: %w", id, err)
	}
	if a.ComponentID == "" {
		a.ComponentID = id
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	prev := v.byID[id]
	v.byID[id] = foldApplied(prev, &a)
	return nil
}

// foldApplied computes a component's applied state from the previous one
// and a new ComponentApplied: a policy keeps the update that brought its
// version unless the new record updated it.
func foldApplied(prev *appliedState, a *events.ComponentApplied) *appliedState {
	updated := map[string]bool{}
	for _, p := range a.Updated() {
		updated[p.PolicyID] = true
	}
	collection := a.Collection()
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
			UpdateID:    a.UpdateID,
			ConsulIndex: a.ConsulIndex,
			Generation:  a.Generation,
			AppliedAt:   a.AppliedAt,
		}
	}
	return st
}

func (v *appliedView) get(id string) (*appliedState, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	a, ok := v.byID[id]
	return a, ok
}

// stringOr is *p, or def when p is nil.
func stringOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}
