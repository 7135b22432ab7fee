package matcher

import (
	"github.com/policyflow/policyflow/events"
)

// Preview is what a policy change would do to the given components: the
// deltas OnChange returns, decided by the matcher's own code (by
// policy_id, by policy filter through the partition's index, who may hold
// what, version fencing) on a state built only for the question and then
// dropped. current is the policy's catalog entry before the change (nil
// when the catalog has none); has is what each component has of the
// policy (its latest collection, or just the policy's entry of it),
// missing for a component that has nothing. A component whose filters
// cannot be compiled is kept frozen, as the matcher keeps it: it neither
// gains nor loses anything. Nothing is kept or written.
func Preview(current *events.PolicyCatalogEntry, ch *events.PolicyChange, comps []*events.Component, has map[string]*events.ComponentPolicies) ([]events.ComponentDelta, error) {
	m := New()
	m.NewID = func() string { return "preview" }
	if current != nil {
		if err := m.ApplyCatalog(current.PolicyID, current, current.UpdatedAt); err != nil {
			return nil, err
		}
	}
	p := NewPartition()
	for _, c := range comps {
		_ = p.Restore(c.ComponentID, c) // a refused definition stays frozen, as on the stage
	}
	for id, cp := range has {
		p.RestoreHas(id, cp)
	}
	m.Assign(0, p)
	ms, err := m.OnChange(0, ch)
	if err != nil {
		return nil, err
	}
	var out []events.ComponentDelta
	for _, pm := range ms {
		out = append(out, pm.Components...)
	}
	return out, nil
}
