package matcher

import (
	"strconv"
	"strings"
	"unique"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// filterSpec is what makes two policy filters match alike; components
// registered from one blueprint share their filters, so a partition
// compiles and indexes each distinct filter once.
type filterSpec struct {
	policyName, configName, onapName, attrs string
}

// sharedFilter is one distinct compiled filter of a partition and the
// components using it.
type sharedFilter struct {
	key   string // its key in the partition's policy.Index
	spec  filterSpec
	cf    *policy.CompiledFilter
	users map[*component]int // how many of the component's filters it is
}

// compFilter is one of a component's filters, in declared order.
type compFilter struct {
	id string
	sf *sharedFilter
}

// component is a registered component: what it wants.
type component struct {
	id         string
	deployment string
	// tenant decides which policies it may hold (policy.MayHold).
	tenant  string
	ids     []string
	filters []compFilter
	// frozen is a component whose only definition on record has a filter
	// that cannot be compiled: what it wants is unknown, so it is left as
	// it is (never matched, never stripped) until a valid definition or a
	// tombstone arrives.
	frozen bool
}

// held is one policy a component has: its version and the body's
// policy.BodyHash.
type held struct {
	version string
	hash    unique.Handle[string]
	// rev is the catalog revision of the version held; 0 when the record
	// it was restored from predates revisions.
	rev int64
}

// holding is what a component has, as last written to component.policies
// or sent since.
type holding struct {
	component  string
	deployment string
	policies   heldSet
}

// Partition is the matcher's state for one partition: the components keyed
// to it, what each has, and an index over their filters. Build one with
// NewPartition and Restore/RestoreHas, then hand it to Matcher.Assign.
type Partition struct {
	comps    map[string]*component
	holdings map[string]*holding
	byID     map[string]map[*component]struct{} // policy_id -> components wanting it by id
	holders  map[string]map[*holding]struct{}   // policy_id -> holdings with it
	index    *policy.Index                      // over sharedFilter keys
	filters  map[filterSpec]*sharedFilter
	byKey    map[string]*sharedFilter
	seq      uint64
}

// NewPartition returns an empty partition state.
func NewPartition() *Partition {
	return &Partition{
		comps:    map[string]*component{},
		holdings: map[string]*holding{},
		byID:     map[string]map[*component]struct{}{},
		holders:  map[string]map[*holding]struct{}{},
		index:    policy.NewIndex(),
		filters:  map[filterSpec]*sharedFilter{},
		byKey:    map[string]*sharedFilter{},
	}
}

// Components is the number of registered components.
func (p *Partition) Components() int { return len(p.comps) }

// Filters is the number of distinct filters indexed.
func (p *Partition) Filters() int { return p.index.Len() }

// Has returns the policy versions the partition believes a component has
// (policy_id -> policyVersion); nil when it knows of no collection.
func (p *Partition) Has(componentID string) map[string]string {
	h := p.holdings[componentID]
	if h == nil {
		return nil
	}
	out := make(map[string]string, len(h.policies))
	for _, e := range h.policies {
		out[e.id] = e.version
	}
	return out
}

// Restore registers a component read from deploy.components without
// computing any delta; c nil is the tombstone of componentID. A component
// whose filters cannot be compiled keeps the last valid definition read
// before it, or is kept frozen (never matched, never stripped) when there
// is none; the error says why it was refused.
func (p *Partition) Restore(componentID string, c *events.Component) error {
	if c == nil {
		p.unregister(componentID)
		return nil
	}
	if _, err := p.register(componentID, c); err != nil {
		if p.comps[componentID] == nil {
			p.comps[componentID] = &component{id: componentID, deployment: keep(c.DeploymentID), frozen: true}
		}
		return err
	}
	return nil
}

// RestoreHas records what a component has from its latest
// component.policies record; cp nil (a tombstone) or an uninstalled
// collection means it has nothing.
func (p *Partition) RestoreHas(componentID string, cp *events.ComponentPolicies) {
	p.dropHolding(componentID)
	if cp == nil || cp.Uninstalled {
		return
	}
	h := p.holding(componentID, keep(cp.DeploymentID))
	// Exactly the room the collection needs: growing by appends would
	// leave up to twice the entries' room per component.
	h.policies = make(heldSet, 0, len(cp.Policies))
	for _, pol := range cp.Policies {
		p.setHeld(h, keep(pol.PolicyID), held{version: keep(pol.PolicyVersion), hash: unique.Make(pol.BodyHash), rev: pol.Revision})
	}
}

// holding returns the component's holding, creating an empty one.
func (p *Partition) holding(componentID, deployment string) *holding {
	h := p.holdings[componentID]
	if h == nil {
		h = &holding{component: componentID}
		p.holdings[componentID] = h
	}
	if deployment != "" {
		h.deployment = deployment
	}
	return h
}

func (p *Partition) setHeld(h *holding, policyID string, v held) {
	h.policies.set(policyID, v)
	set := p.holders[policyID]
	if set == nil {
		set = map[*holding]struct{}{}
		p.holders[policyID] = set
	}
	set[h] = struct{}{}
}

func (p *Partition) unsetHeld(h *holding, policyID string) {
	h.policies.del(policyID)
	if set := p.holders[policyID]; set != nil {
		delete(set, h)
		if len(set) == 0 {
			delete(p.holders, policyID)
		}
	}
}

func (p *Partition) dropHolding(componentID string) {
	h := p.holdings[componentID]
	if h == nil {
		return
	}
	for _, id := range h.policies.ids() {
		p.unsetHeld(h, id)
	}
	delete(p.holdings, componentID)
}

// prepared is a filter compiled for registration, before it is committed.
type prepared struct {
	id   string
	spec filterSpec
	cf   *policy.CompiledFilter
}

// compile checks every filter of c; nothing is changed when one fails.
func (p *Partition) compile(c *events.Component) ([]prepared, error) {
	out := make([]prepared, 0, len(c.PolicyFilters))
	for i, f := range c.PolicyFilters {
		attrs, err := policy.DecodeConfigAttributes(f.ConfigAttributes)
		if err != nil {
			return nil, badInput("component %s: policy_filters[%d] (filter_id %q): %v", c.ComponentID, i, f.FilterID, err)
		}
		spec := filterSpec{policyName: f.PolicyName, configName: f.ConfigName, onapName: f.OnapName}
		if len(attrs) > 0 {
			spec.attrs = strings.TrimSpace(f.ConfigAttributes)
		}
		pr := prepared{id: f.FilterID, spec: spec}
		if sf, ok := p.filters[spec]; ok {
			pr.cf = sf.cf
		} else {
			cf, err := policy.CompileFilter(policy.Filter{
				PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName,
				ConfigAttributes: attrs, Unique: f.Unique,
			})
			if err != nil {
				return nil, badInput("component %s: policy_filters[%d] (filter_id %q): %v", c.ComponentID, i, f.FilterID, err)
			}
			pr.cf = cf
		}
		out = append(out, pr)
	}
	return out, nil
}

// register replaces the component's definition; on error nothing changes.
func (p *Partition) register(componentID string, c *events.Component) (*component, error) {
	prep, err := p.compile(c)
	if err != nil {
		return nil, err
	}
	p.unregister(componentID)
	comp := &component{id: componentID, deployment: keep(c.DeploymentID), tenant: keep(c.Tenant)}
	seen := make(map[string]bool, len(c.PolicyIDs))
	for _, id := range c.PolicyIDs {
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		id = keep(id)
		comp.ids = append(comp.ids, id)
		set := p.byID[id]
		if set == nil {
			set = map[*component]struct{}{}
			p.byID[id] = set
		}
		set[comp] = struct{}{}
	}
	for _, pr := range prep {
		sf := p.filters[pr.spec]
		if sf == nil {
			p.seq++
			sf = &sharedFilter{key: "f" + strconv.FormatUint(p.seq, 36), spec: pr.spec, cf: pr.cf, users: map[*component]int{}}
			p.filters[pr.spec] = sf
			p.byKey[sf.key] = sf
			p.index.Add(sf.key, sf.cf)
		}
		sf.users[comp]++
		comp.filters = append(comp.filters, compFilter{id: keep(pr.id), sf: sf})
	}
	p.comps[componentID] = comp
	return comp, nil
}

// unregister forgets a component's definition (not what it has).
func (p *Partition) unregister(componentID string) {
	comp := p.comps[componentID]
	if comp == nil {
		return
	}
	delete(p.comps, componentID)
	for _, id := range comp.ids {
		if set := p.byID[id]; set != nil {
			delete(set, comp)
			if len(set) == 0 {
				delete(p.byID, id)
			}
		}
	}
	for _, f := range comp.filters {
		sf := f.sf
		if sf.users[comp]--; sf.users[comp] <= 0 {
			delete(sf.users, comp)
		}
		if len(sf.users) == 0 {
			delete(p.filters, sf.spec)
			delete(p.byKey, sf.key)
			p.index.Remove(sf.key)
		}
	}
}

// keep is the canonical copy of a string decoded from a record, for state
// that outlives the record. The Avro decoder carves short strings out of
// a shared 1 KiB slab, so keeping the decoded string itself would keep
// the slab, and with it the rest of the record (a body's first bytes
// among them): about 3 KiB per component at 100,000 components. The
// strings kept (ids, versions, deployments) repeat across components, so
// they are interned.
func keep(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// Holding is what the matcher has sent a component of an owned partition,
// as the record of its changelog (matcher.holdings): its policies by
// reference (policy_id, version, body_hash, revision; no name, no body).
// It is nil when the matcher holds nothing for the component (never sent,
// or uninstalled): the changelog's tombstone.
func (m *Matcher) Holding(partition int32, componentID string) *events.ComponentPolicies {
	p := m.parts[partition]
	if p == nil {
		return nil
	}
	h := p.holdings[componentID]
	if h == nil {
		return nil
	}
	cp := &events.ComponentPolicies{ComponentID: componentID, DeploymentID: h.deployment, Policies: make([]events.Policy, len(h.policies)),
		Notify: events.NotifyTarget{Kind: events.NotifyNone}}
	for i, e := range h.policies {
		cp.Policies[i] = events.Policy{PolicyID: e.id, PolicyVersion: e.version, BodyHash: e.hash.Value(), Revision: e.rev}
	}
	return cp
}
