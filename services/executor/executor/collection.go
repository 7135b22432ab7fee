package executor

import (
	"fmt"
	"time"

	"github.com/policyflow/policyflow/events"
)

// Delta is one component's share of a whole update: what Next applies.
type Delta struct {
	events.ComponentDelta
	UpdateID     string
	DeploymentID string // the deployment the update is for
	CatchUp      bool
	// At is when the update is applied: the collection's updated_at.
	At time.Time
}

// check says why the delta cannot be applied to any collection. The
// executor checks a delta before it looks its component up, so a
// malformed delta is refused at once, whether or not its component is
// registered yet.
func (d Delta) check() error {
	if d.ComponentID == "" {
		return fmt.Errorf("update %s of deployment %s: a component delta has no component_id", d.UpdateID, d.DeploymentID)
	}
	if err := checkDelta(d.ComponentDelta); err != nil {
		return fmt.Errorf("apply update %s to component %s: %w", d.UpdateID, d.ComponentID, err)
	}
	return nil
}

// Next is the component's collection after the delta d, given its
// current collection cur (nil when it has none) and its registration in
// deploy.components comp (nil when the component is tombstoned). It
// returns nil when the delta changes nothing, so nothing is written.
//
// The rules:
//   - Uninstall: a delta marked uninstall, or a tombstoned component,
//     ends an installed collection with an empty one marked uninstalled,
//     which removes every policy it had and keeps the deployment,
//     service_component_name and notify target it was installed with. A
//     component with nothing installed gets nothing.
//   - First gather: a component with no collection, or an uninstalled
//     one registered again, gets its whole collection from the delta,
//     even when it is empty, and every policy in it counts as updated.
//   - Update: otherwise the delta is applied to the installed policies
//     (Apply, with its version fencing); a delta that neither updates
//     nor removes a policy writes nothing, also when the registration
//     changed since.
//   - Updated policies are listed by reference (the body left empty): the
//     body is in the collection beside them, and the readers of
//     component.policies need only to know which policies changed.
//     Removed policies keep their last bodies, which nothing else holds.
//   - The collection carries the registration's deployment,
//     service_component_name and notify target, the update's update_id
//     and catch_up flag, and the generation after cur's (1 for the
//     first collection ever).
//
// A delta check refuses is an error.
func Next(cur *events.ComponentPolicies, comp *events.Component, d Delta) (*events.ComponentPolicies, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	installed := cur != nil && !cur.Uninstalled
	var gen int64
	if cur != nil {
		gen = cur.Generation
	}
	if d.Uninstall || comp == nil {
		if !installed {
			return nil, nil
		}
		return &events.ComponentPolicies{
			ComponentID:          d.ComponentID,
			DeploymentID:         cur.DeploymentID,
			ServiceComponentName: cur.ServiceComponentName,
			UpdateID:             d.UpdateID,
			CatchUp:              d.CatchUp,
			Generation:           gen + 1,
			Policies:             []events.Policy{},
			UpdatedPolicies:      []events.Policy{},
			RemovedPolicies:      cur.Policies,
			Notify:               cur.Notify,
			Uninstalled:          true,
			UpdatedAt:            d.At,
		}, nil
	}
	var have []events.Policy
	if installed {
		have = cur.Policies
	}
	coll, updated, removed := Apply(have, d.ComponentDelta)
	if installed && len(updated) == 0 && len(removed) == 0 {
		return nil, nil
	}
	return &events.ComponentPolicies{
		ComponentID:          d.ComponentID,
		DeploymentID:         comp.DeploymentID,
		ServiceComponentName: comp.ServiceComponentName,
		UpdateID:             d.UpdateID,
		CatchUp:              d.CatchUp,
		Generation:           gen + 1,
		Policies:             coll,
		UpdatedPolicies:      refsOnly(updated),
		RemovedPolicies:      orEmpty(removed),
		Notify:               comp.Notify,
		UpdatedAt:            d.At,
	}, nil
}

// refsOnly is ps without their bodies; never nil.
func refsOnly(ps []events.Policy) []events.Policy {
	out := make([]events.Policy, len(ps))
	for i, p := range ps {
		p.Body = ""
		out[i] = p
	}
	return out
}

func orEmpty(ps []events.Policy) []events.Policy {
	if ps == nil {
		return []events.Policy{}
	}
	return ps
}
