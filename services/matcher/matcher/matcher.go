package matcher

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// ByIDFilterID is the filter_id under which added_policies lists the
// policies a component wants by policy_id (the Component field's name).
const ByIDFilterID = "policy_ids"

// smallCatchup is the number of components up to which a deployment's
// catch-up computes each component's wanted set on its own; above it one
// pass over the catalog through the partition's index is cheaper.
const smallCatchup = 32

// ErrNotOwned is returned for an input of a partition the matcher holds no
// state for (it was revoked while the record was in hand).
var ErrNotOwned = errors.New("partition is not owned by this matcher")

// Matcher decides, for the partitions it owns, which components must get,
// update or lose which policies. It is not safe for concurrent use.
type Matcher struct {
	catalog *Catalog
	parts   map[int32]*Partition
	// NewID returns a fresh update_id (default: 16 random bytes in hex).
	NewID func() string
	// Now stamps PolicyMatch.CreatedAt (default time.Now).
	Now func() time.Time
	// rollouts and prevEntries: see rollout.go.
	rollouts    Rollouts
	prevEntries map[string]*entry
}

// New returns a matcher with an empty catalog view that owns no partition.
func New() *Matcher {
	return &Matcher{catalog: NewCatalog(), parts: map[int32]*Partition{}, prevEntries: map[string]*entry{}}
}

// NewUpdateID returns 16 random bytes in hex.
func NewUpdateID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (m *Matcher) newID() string {
	if m.NewID != nil {
		return m.NewID()
	}
	return NewUpdateID()
}

func (m *Matcher) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Catalog is the matcher's catalog view.
func (m *Matcher) Catalog() *Catalog { return m.catalog }

// SetCatalog replaces the catalog view, e.g. with one freshly read from
// policy.catalog (which is never older than any change already processed).
func (m *Matcher) SetCatalog(c *Catalog) { m.catalog = c }

// ApplyCatalog applies one policy.catalog record to the view (see
// Catalog.Apply).
func (m *Matcher) ApplyCatalog(policyID string, e *events.PolicyCatalogEntry, at time.Time) error {
	return m.catalog.Apply(policyID, e, at)
}

// Assign makes the matcher own a partition with the given restored state.
func (m *Matcher) Assign(partition int32, p *Partition) { m.parts[partition] = p }

// Partition returns the state of an owned partition, nil when not owned.
func (m *Matcher) Partition(partition int32) *Partition { return m.parts[partition] }

// Owned lists the owned partitions in ascending order.
func (m *Matcher) Owned() []int32 {
	out := make([]int32, 0, len(m.parts))
	for p := range m.parts {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Drop forgets the state of partitions (revoked or lost).
func (m *Matcher) Drop(partitions ...int32) {
	for _, p := range partitions {
		delete(m.parts, p)
	}
}

// OnChange applies a policy change to the catalog view and returns the
// deltas of the partition's components that want the policy (by id or by a
// filter matching its new body) or have it. Applying the same change again
// returns nothing: deltas are computed against what components have.
func (m *Matcher) OnChange(partition int32, ch *events.PolicyChange) ([]events.PolicyMatch, error) {
	if ch == nil || ch.PolicyID == "" {
		return nil, badInput("policy change has no policy_id")
	}
	if _, err := m.catalog.change(ch); err != nil {
		return nil, err
	}
	p := m.parts[partition]
	if p == nil {
		return nil, ErrNotOwned
	}
	return m.emit(m.evaluate(p, ch.PolicyID), false), nil
}

// OnComponent registers (c non-nil) or uninstalls (c nil: the tombstone of
// componentID) a component. A registration returns the delta between
// everything the component now wants and what it has; the first one is
// returned even when empty. A tombstone returns one delta removing
// everything it has and forgets it. A component whose filters cannot be
// compiled is refused (ErrBadInput, with the reason) and its previous
// definition stays in force.
func (m *Matcher) OnComponent(partition int32, componentID string, c *events.Component) ([]events.PolicyMatch, error) {
	if componentID == "" {
		return nil, badInput("component record has no component_id key")
	}
	if c != nil {
		if c.ComponentID != componentID {
			return nil, badInput("component record keyed %q holds component_id %q", componentID, c.ComponentID)
		}
		if c.DeploymentID == "" {
			return nil, badInput("component %s has no deployment_id", componentID)
		}
	}
	p := m.parts[partition]
	if p == nil {
		return nil, ErrNotOwned
	}
	if c == nil {
		return m.uninstall(p, componentID), nil
	}
	comp, err := p.register(componentID, c)
	if err != nil {
		return nil, err
	}
	d, send := m.reconcileAll(p, comp, m.wantedOne(p, comp))
	if !send {
		return nil, nil
	}
	return m.emit([]outDelta{{comp.deployment, d}}, false), nil
}

// OnCatchup compares what every owned component in scope (all of the
// partition's, or one deployment's) wants with what it has, and returns
// catch_up deltas only for components that differ (or whose collection was
// never written).
func (m *Matcher) OnCatchup(partition int32, req *events.CatchupRequest) ([]events.PolicyMatch, error) {
	ms, _, err := m.OnCatchupCounted(partition, req)
	return ms, err
}

// CatchupCount is what a catch-up did on one partition: the components it
// compared and those that differed (each sent a delta).
type CatchupCount struct {
	Compared, Differed int
}

// OnCatchupCounted is OnCatchup, with what it compared.
func (m *Matcher) OnCatchupCounted(partition int32, req *events.CatchupRequest) ([]events.PolicyMatch, CatchupCount, error) {
	var count CatchupCount
	if req == nil {
		return nil, count, badInput("empty catch-up request")
	}
	dep := ""
	switch req.Scope {
	case events.ScopeAll:
	case events.ScopeDeployment:
		if req.DeploymentID == nil || *req.DeploymentID == "" {
			return nil, count, badInput("catch-up request %s has scope DEPLOYMENT but no deployment_id", req.RequestID)
		}
		dep = *req.DeploymentID
	default:
		return nil, count, badInput("catch-up request %s has unknown scope %q", req.RequestID, req.Scope)
	}
	p := m.parts[partition]
	if p == nil {
		return nil, count, ErrNotOwned
	}
	var sel []*component
	for _, comp := range p.comps {
		if !comp.frozen && (dep == "" || comp.deployment == dep) {
			sel = append(sel, comp)
		}
	}
	sort.Slice(sel, func(i, j int) bool { return sel[i].id < sel[j].id })
	var wants map[*component]map[string]string
	if dep != "" && len(sel) <= smallCatchup {
		wants = make(map[*component]map[string]string, len(sel))
		for _, comp := range sel {
			wants[comp] = m.wantedOne(p, comp)
		}
	} else {
		var only map[*component]bool
		if dep != "" {
			only = make(map[*component]bool, len(sel))
			for _, comp := range sel {
				only[comp] = true
			}
		}
		wants = m.wantedMany(p, sel, only)
	}
	var out []outDelta
	for _, comp := range sel {
		if d, send := m.reconcileAll(p, comp, wants[comp]); send {
			out = append(out, outDelta{comp.deployment, d})
		}
	}
	count.Compared, count.Differed = len(sel), len(out)
	return m.emit(out, true), count, nil
}

// uninstall is the tombstone of a component.
func (m *Matcher) uninstall(p *Partition, componentID string) []events.PolicyMatch {
	comp, h := p.comps[componentID], p.holdings[componentID]
	if comp == nil && h == nil {
		return nil
	}
	dep := ""
	if comp != nil {
		dep = comp.deployment
	} else {
		dep = h.deployment
	}
	d := events.ComponentDelta{ComponentID: componentID, Uninstall: true}
	if h != nil {
		for _, hv := range h.policies { // sorted by id
			v := hv.version
			d.RemovedPolicies = append(d.RemovedPolicies, events.RemovedPolicy{PolicyID: hv.id, PolicyVersion: &v, Revision: hv.rev})
		}
	}
	p.unregister(componentID)
	p.dropHolding(componentID)
	if dep == "" {
		return nil
	}
	return m.emit([]outDelta{{dep, d}}, false)
}

// evaluate computes, for one policy, the deltas of the partition's
// components that want it or have it.
func (m *Matcher) evaluate(p *Partition, policyID string) []outDelta {
	e := m.catalog.entries[policyID]
	want := map[*component]string{}
	if e != nil {
		for comp := range p.byID[policyID] {
			if !comp.frozen && e.mayGo(comp) {
				want[comp] = ByIDFilterID
			}
		}
		if p.index.Len() > 0 {
			keys := p.index.Matches(e.header)
			matched := make(map[*sharedFilter]bool, len(keys))
			for _, k := range keys {
				matched[p.byKey[k]] = true
			}
			for _, k := range keys {
				for comp := range p.byKey[k].users {
					if _, done := want[comp]; done || comp.frozen || !e.mayGo(comp) {
						continue
					}
					if group, ok := firstFilter(comp, matched); ok {
						want[comp] = group
					}
				}
			}
		}
	}
	cands := make([]*component, 0, len(want)+len(p.holders[policyID]))
	for comp := range want {
		cands = append(cands, comp)
	}
	for h := range p.holders[policyID] {
		comp := p.comps[h.component]
		if comp == nil || comp.frozen {
			continue // an orphan waits for its tombstone
		}
		if _, ok := want[comp]; !ok {
			cands = append(cands, comp)
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].id < cands[j].id })
	var out []outDelta
	for _, comp := range cands {
		h, created := p.holdingFor(comp)
		var b builder
		group, wanted := want[comp]
		m.reconcileOne(p, h, policyID, e, group, wanted, &b)
		if b.empty() {
			if created {
				delete(p.holdings, comp.id)
			}
			continue
		}
		out = append(out, outDelta{comp.deployment, b.delta(comp)})
	}
	return out
}

// holdingFor returns the component's holding, creating an empty one; created
// reports that it did not exist.
func (p *Partition) holdingFor(comp *component) (h *holding, created bool) {
	h = p.holdings[comp.id]
	created = h == nil
	return p.holding(comp.id, comp.deployment), created
}

// reconcileAll compares everything the component wants with everything it
// has and records the outcome as what it has. send is true when the delta
// is not empty or the component had no collection yet.
func (m *Matcher) reconcileAll(p *Partition, comp *component, want map[string]string) (events.ComponentDelta, bool) {
	h, created := p.holdingFor(comp)
	ids := make([]string, 0, len(want)+len(h.policies))
	for id := range want {
		ids = append(ids, id)
	}
	for _, e := range h.policies {
		if _, ok := want[e.id]; !ok {
			ids = append(ids, e.id)
		}
	}
	sort.Strings(ids)
	var b builder
	for _, id := range ids {
		group, wanted := want[id]
		m.reconcileOne(p, h, id, m.catalog.entries[id], group, wanted, &b)
	}
	return b.delta(comp), created || !b.empty()
}

// reconcileOne decides one policy for one component: add it (wanted, in
// the catalog, not had), update it (had at an older version or with another
// body), or remove it (had, and no longer wanted or no longer in the
// catalog). The holding is updated to match.
func (m *Matcher) reconcileOne(p *Partition, h *holding, id string, e *entry, group string, wanted bool, b *builder) {
	e = m.gated(h.component, e)
	hv, has := h.policies.get(id)
	switch {
	case wanted && e != nil && !has:
		b.add(group, e.policy())
		p.setHeld(h, id, e.held())
	case wanted && e != nil:
		if newer(e, hv) {
			b.updated = append(b.updated, e.policy())
			p.setHeld(h, id, e.held())
		}
	case has:
		v := hv.version
		b.removed = append(b.removed, events.RemovedPolicy{PolicyID: id, PolicyVersion: &v, Revision: hv.rev})
		p.unsetHeld(h, id)
	}
}

// newer reports whether the catalog's policy should replace the version the
// component has. When both carry a catalog revision, a greater revision
// with another version or body replaces it, whatever the version numbers
// say: a withdrawn newest version makes an older one the latest at a
// greater revision. Without revisions (records from before them): a
// greater integer version, or the same version with a different body; a
// lower version never replaces a greater one.
func newer(e *entry, hv held) bool {
	if e.rev != 0 && hv.rev != 0 {
		return e.rev > hv.rev && (e.version != hv.version || e.hash != hv.hash)
	}
	if hver, ok := policy.ParseVersion(hv.version); ok && e.verOK {
		if e.ver != hver {
			return e.ver > hver
		}
		return e.hash != hv.hash
	}
	return e.version != hv.version || e.hash != hv.hash
}

// firstFilter is the id of the component's first filter, in declared order,
// among the matched ones.
func firstFilter(comp *component, matched map[*sharedFilter]bool) (string, bool) {
	for _, f := range comp.filters {
		if matched[f.sf] {
			return f.id, true
		}
	}
	return "", false
}

// wantedOne is the set of policies one component wants (policy_id -> the
// filter id it is listed under when added). Its filters are matched against
// the whole catalog, with a cheap name pre-check before the exact match.
func (m *Matcher) wantedOne(p *Partition, comp *component) map[string]string {
	w := map[string]string{}
	if comp.frozen {
		return w
	}
	for _, id := range comp.ids {
		if e, ok := m.catalog.entries[id]; ok && e.mayGo(comp) {
			w[id] = ByIDFilterID
		}
	}
	type probe struct {
		name string
		re   *regexp.Regexp
	}
	var probes []probe
	ix := policy.NewIndex()
	seen := map[*sharedFilter]bool{}
	for _, f := range comp.filters {
		if seen[f.sf] || f.sf.cf.Pattern() == "" {
			continue
		}
		seen[f.sf] = true
		ix.Add(f.sf.key, f.sf.cf)
		probes = append(probes, probe{name: f.sf.spec.policyName, re: f.sf.prefilter()})
	}
	if len(probes) == 0 {
		return w
	}
	matched := map[*sharedFilter]bool{}
	for id, e := range m.catalog.entries {
		if _, ok := w[id]; ok || !e.mayGo(comp) {
			continue
		}
		candidate := false
		for _, pr := range probes {
			if pr.name == e.id || pr.name == e.name || pr.re == nil || pr.re.MatchString(e.name) {
				candidate = true
				break
			}
		}
		if !candidate {
			continue
		}
		keys := ix.Matches(e.header)
		if len(keys) == 0 {
			continue
		}
		clear(matched)
		for _, k := range keys {
			matched[p.byKey[k]] = true
		}
		if group, ok := firstFilter(comp, matched); ok {
			w[id] = group
		}
	}
	return w
}

// prefilter is the filter's anchored policyName expression: a name it
// does not match (and that is not the policyName literally) cannot match
// the filter. It is the compiled filter's own, shared by every filter with
// the same policyName; nil when the filter has none (then every name is a
// candidate).
func (sf *sharedFilter) prefilter() *regexp.Regexp {
	return sf.cf.NameRegexp()
}

// wantedMany computes the wanted sets of the given components in one pass
// over the catalog through the partition's index. only, when not nil,
// restricts filter matches to its components.
func (m *Matcher) wantedMany(p *Partition, sel []*component, only map[*component]bool) map[*component]map[string]string {
	out := make(map[*component]map[string]string, len(sel))
	for _, comp := range sel {
		w := map[string]string{}
		for _, id := range comp.ids {
			if e, ok := m.catalog.entries[id]; ok && e.mayGo(comp) {
				w[id] = ByIDFilterID
			}
		}
		out[comp] = w
	}
	if p.index.Len() == 0 {
		return out
	}
	matched := map[*sharedFilter]bool{}
	for id, e := range m.catalog.entries {
		keys := p.index.Matches(e.header)
		if len(keys) == 0 {
			continue
		}
		clear(matched)
		for _, k := range keys {
			matched[p.byKey[k]] = true
		}
		for _, k := range keys {
			for comp := range p.byKey[k].users {
				if comp.frozen || (only != nil && !only[comp]) || !e.mayGo(comp) {
					continue
				}
				w := out[comp]
				if w == nil {
					continue
				}
				if _, done := w[id]; done {
					continue
				}
				if group, ok := firstFilter(comp, matched); ok {
					w[id] = group
				}
			}
		}
	}
	return out
}

// builder collects one component's delta.
type builder struct {
	removed []events.RemovedPolicy
	updated []events.Policy
	added   []events.FilterMatch
}

func (b *builder) empty() bool {
	return len(b.removed) == 0 && len(b.updated) == 0 && len(b.added) == 0
}

func (b *builder) add(group string, pol events.Policy) {
	for i := range b.added {
		if b.added[i].FilterID == group {
			b.added[i].Policies = append(b.added[i].Policies, pol)
			return
		}
	}
	b.added = append(b.added, events.FilterMatch{FilterID: group, Policies: []events.Policy{pol}})
}

// delta finishes the component's delta: added groups by-id first, then in
// the component's filter order.
func (b *builder) delta(comp *component) events.ComponentDelta {
	if len(b.added) > 1 {
		rank := func(id string) int {
			if id == ByIDFilterID {
				return -1
			}
			for i, f := range comp.filters {
				if f.id == id {
					return i
				}
			}
			return len(comp.filters)
		}
		sort.SliceStable(b.added, func(i, j int) bool { return rank(b.added[i].FilterID) < rank(b.added[j].FilterID) })
	}
	return events.ComponentDelta{
		ComponentID:     comp.id,
		UpdatedPolicies: b.updated,
		AddedPolicies:   b.added,
		RemovedPolicies: b.removed,
	}
}

// outDelta is a component delta and the deployment it goes to.
type outDelta struct {
	deployment string
	delta      events.ComponentDelta
}

// emit groups deltas into one PolicyMatch per deployment, deployments in
// order and components in order within each. The policies in them are
// references (no body); the segmenter fills the bodies in and cuts what
// is too large for one record.
func (m *Matcher) emit(deltas []outDelta, catchUp bool) []events.PolicyMatch {
	if len(deltas) == 0 {
		return nil
	}
	sort.SliceStable(deltas, func(i, j int) bool {
		if deltas[i].deployment != deltas[j].deployment {
			return deltas[i].deployment < deltas[j].deployment
		}
		return deltas[i].delta.ComponentID < deltas[j].delta.ComponentID
	})
	now := m.now().UTC().Truncate(time.Millisecond)
	var out []events.PolicyMatch
	for start := 0; start < len(deltas); {
		dep := deltas[start].deployment
		end := start
		for end < len(deltas) && deltas[end].deployment == dep {
			end++
		}
		run := make([]events.ComponentDelta, end-start)
		for i := range run {
			run[i] = deltas[start+i].delta
		}
		out = append(out, events.PolicyMatch{UpdateID: m.newID(), DeploymentID: dep, CatchUp: catchUp, Components: run, CreatedAt: now})
		start = end
	}
	return out
}
