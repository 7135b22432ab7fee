package matcher

import (
	"strconv"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/rollout"
)

// Rollouts is where the matcher finds the staged rollout of a policy_id
// (policy.rollouts as a runtime table).
type Rollouts interface {
	Value(policyID string) (*events.PolicyRollout, bool)
}

// SetRollouts makes the matcher follow staged rollouts: while one runs, a
// component outside its current step's cohort gets the previous version,
// and once it was aborted every component gets the previous version back
// at the abort's revision (rollout.Gate).
func (m *Matcher) SetRollouts(r Rollouts) { m.rollouts = r }

// gated is the entry componentID should get of the policy whose catalog
// latest is e: e itself, or the previous version a rollout keeps it at
// (nil when there was none: the component gets nothing).
func (m *Matcher) gated(componentID string, e *entry) *entry {
	if e == nil || m.rollouts == nil {
		return e
	}
	r, ok := m.rollouts.Value(e.id)
	if !ok || r == nil {
		return e
	}
	switch rollout.Gate(r, componentID, e.version, e.hash.Value()) {
	case rollout.Previous:
		return m.previous(r, r.PreviousRevision, e)
	case rollout.Restored:
		return m.previous(r, r.AbortRevision, e)
	}
	return e
}

// previous is the entry of a rollout's previous version at revision rev,
// built once per rollout and revision.
func (m *Matcher) previous(r *events.PolicyRollout, rev int64, latest *entry) *entry {
	if r.PreviousBody == "" {
		return nil
	}
	key := r.RolloutID + "/" + strconv.FormatInt(rev, 10)
	if pe, ok := m.prevEntries[key]; ok {
		return pe
	}
	var pe *entry
	if h, err := policy.HeaderOf(r.PreviousBody); err == nil {
		pe, _ = newEntry(r.PolicyID, h, rev, latest.owner)
	}
	if pe == nil {
		// A previous body that cannot be read keeps the latest version:
		// the North API checked it when the rollout started.
		pe = latest
	}
	if len(m.prevEntries) > 1024 {
		clear(m.prevEntries)
	}
	m.prevEntries[key] = pe
	return pe
}
