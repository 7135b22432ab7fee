package segmenter

import (
	"context"
	"fmt"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// Catalog is where Fill finds policy bodies: policy.catalog as a table
// (runtime.FollowTable), the latest entry per policy_id.
type Catalog interface {
	// Get returns the latest entry of a policy_id; nil when there is
	// none or it was removed.
	Get(policyID string) (*events.PolicyCatalogEntry, bool)
	// WaitCaughtUp returns once every entry committed before the match
	// was read can be read (the stage's waits as of the match's poll, so
	// that the matches of one poll share one listing of the topic's
	// ends).
	WaitCaughtUp(ctx context.Context) error
}

// Filled says what Fill did other than fill a reference in as it named
// its body: a policy the catalog held another body of (Replaced), or no
// longer held at all (Dropped).
type Filled struct {
	ComponentID string
	PolicyID    string
	// Want is the version and body_hash the reference named.
	WantVersion, WantHash string
	// Got is what was filled in instead; empty when Dropped.
	GotVersion, GotHash string
	Dropped             bool
}

// Fill puts in place the body of every policy the match names by
// reference (an empty body; the matcher names policies by policy_id,
// version and body_hash), taken from the catalog. pdp-ingest commits a
// catalog entry in the transaction of its change, so the entry a
// reference names is in the catalog by the time the match is: when the
// catalog's entry of a policy has another body_hash (or none is there
// yet), Fill waits once for the catalog to catch up and then takes what
// it holds, the latest version (a newer version than the reference comes
// with a match of its own). A policy the catalog no longer holds is
// dropped from the delta: its removal follows. A match whose policy
// carries a body or no body_hash is not a reference and is refused
// (permanent). Any other error means the catalog could not be caught up
// with; retrying may succeed.
func Fill(ctx context.Context, cat Catalog, m *events.PolicyMatch) ([]Filled, error) {
	var refs []*events.Policy
	for c := range m.Components {
		d := &m.Components[c]
		for i := range d.UpdatedPolicies {
			refs = append(refs, &d.UpdatedPolicies[i])
		}
		for f := range d.AddedPolicies {
			for i := range d.AddedPolicies[f].Policies {
				refs = append(refs, &d.AddedPolicies[f].Policies[i])
			}
		}
	}
	for _, p := range refs {
		if p.Body != "" || p.BodyHash == "" {
			return nil, runtime.Permanentf("policy match %s of deployment %s names policy %s by no reference: a reference has a body_hash and no body",
				m.UpdateID, m.DeploymentID, p.PolicyID)
		}
	}
	missed := false
	for _, p := range refs {
		if e, ok := cat.Get(p.PolicyID); ok && e != nil && e.Body != "" && e.BodyHash == p.BodyHash {
			p.Body = e.Body
		} else if !fillPrevious(cat, p) {
			missed = true
		}
	}
	if !missed {
		return nil, nil
	}
	if err := cat.WaitCaughtUp(ctx); err != nil {
		return nil, fmt.Errorf("fill policy match %s of deployment %s from the catalog: %w", m.UpdateID, m.DeploymentID, err)
	}
	var notes []Filled
	gone := map[*events.Policy]bool{}
	for c := range m.Components {
		d := &m.Components[c]
		note := func(p *events.Policy) {
			if p.Body != "" || fillPrevious(cat, p) {
				return
			}
			n := Filled{ComponentID: d.ComponentID, PolicyID: p.PolicyID, WantVersion: p.PolicyVersion, WantHash: p.BodyHash}
			e, _ := cat.Get(p.PolicyID)
			if e == nil || e.Body == "" {
				n.Dropped, gone[p] = true, true
				notes = append(notes, n)
				return
			}
			if h := e.BodyHash; h != p.BodyHash {
				p.PolicyName, p.PolicyVersion, p.BodyHash, p.Revision = e.PolicyName, e.PolicyVersion, h, e.Revision
				n.GotVersion, n.GotHash = e.PolicyVersion, h
				notes = append(notes, n)
			}
			p.Body = e.Body
		}
		for i := range d.UpdatedPolicies {
			note(&d.UpdatedPolicies[i])
		}
		for f := range d.AddedPolicies {
			for i := range d.AddedPolicies[f].Policies {
				note(&d.AddedPolicies[f].Policies[i])
			}
		}
		if len(gone) > 0 {
			d.UpdatedPolicies = without(d.UpdatedPolicies, gone)
			for f := range d.AddedPolicies {
				d.AddedPolicies[f].Policies = without(d.AddedPolicies[f].Policies, gone)
			}
		}
	}
	return notes, nil
}

// without is ps less the policies in gone, in order.
func without(ps []events.Policy, gone map[*events.Policy]bool) []events.Policy {
	out := ps[:0:0]
	for i := range ps {
		if !gone[&ps[i]] {
			out = append(out, ps[i])
		}
	}
	return out
}

// Previous is what a Catalog may also offer: the body of an earlier
// version a staged rollout keeps components at, or brings them back to
// (policy.rollouts), by policy_id and body_hash. The matcher names such a
// version while the catalog's latest is the one rolled out.
type Previous interface {
	Previous(policyID, bodyHash string) (body string, ok bool)
}

// fillPrevious fills the reference p in from the catalog's Previous, when
// it has one and it holds that body.
func fillPrevious(cat Catalog, p *events.Policy) bool {
	prev, ok := cat.(Previous)
	if !ok {
		return false
	}
	if b, ok := prev.Previous(p.PolicyID, p.BodyHash); ok {
		p.Body = b
		return true
	}
	return false
}
