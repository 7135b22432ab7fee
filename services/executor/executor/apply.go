package executor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// Apply applies one component's delta to its current collection and
// returns the new collection (sorted by policy_id), the policies it added
// or changed, and the policies it took away (with their last bodies).
//
// Removals are applied first, then updated policies, then policies added
// by filters, so a delta that removes and re-adds a policy_id ends with
// the policy. Fencing: a policy is never replaced by one of a lower
// catalog revision, and a removal is skipped when the component holds a
// greater revision than the one removed; a withdrawn newest version comes
// back as the remaining one at a greater revision, so it replaces it.
// Records from before revisions (revision 0) are fenced by integer
// policyVersion; a version that is not an integer is not compared: the
// incoming policy wins. Updated and removed are computed against current, so a policy
// that ends as it started is in neither (see same).
func Apply(current []events.Policy, delta events.ComponentDelta) (collection, updated, removed []events.Policy) {
	before := make(map[string]events.Policy, len(current))
	after := make(map[string]events.Policy, len(current))
	for _, p := range current {
		before[p.PolicyID] = p
		after[p.PolicyID] = p
	}
	for _, r := range delta.RemovedPolicies {
		have, ok := after[r.PolicyID]
		if !ok {
			continue
		}
		if have.Revision != 0 && r.Revision != 0 {
			if have.Revision > r.Revision {
				continue // the component has moved past the removed revision
			}
		} else if r.PolicyVersion != nil && newer(have.PolicyVersion, *r.PolicyVersion) {
			continue // the component has moved past the removed version
		}
		delete(after, r.PolicyID)
	}
	put := func(p events.Policy) {
		if have, ok := after[p.PolicyID]; ok && fenced(have, p) {
			return // never backwards
		}
		after[p.PolicyID] = p
	}
	for _, p := range delta.UpdatedPolicies {
		put(p)
	}
	for _, fm := range delta.AddedPolicies {
		for _, p := range fm.Policies {
			put(p)
		}
	}

	collection = make([]events.Policy, 0, len(after))
	for id, p := range after {
		collection = append(collection, p)
		if old, ok := before[id]; !ok || !same(old, p) {
			updated = append(updated, p)
		}
	}
	for id, p := range before {
		if _, ok := after[id]; !ok {
			removed = append(removed, p)
		}
	}
	sortPolicies(collection)
	sortPolicies(updated)
	sortPolicies(removed)
	return collection, updated, removed
}

// same reports whether two policies are the same version with the same
// body: bodies compare by body_hash, which every policy a delta carries
// has (checkDelta).
func same(a, b events.Policy) bool {
	return a.PolicyID == b.PolicyID && a.PolicyName == b.PolicyName && a.PolicyVersion == b.PolicyVersion &&
		a.BodyHash == b.BodyHash
}

// fenced reports whether incoming must not replace have: by catalog
// revision when both carry one (a lower revision is an older decision,
// whatever its version number), otherwise by integer policyVersion.
func fenced(have, incoming events.Policy) bool {
	if have.Revision != 0 && incoming.Revision != 0 {
		return have.Revision > incoming.Revision
	}
	return newer(have.PolicyVersion, incoming.PolicyVersion)
}

// newer reports whether version have is a greater integer than other.
func newer(have, other string) bool {
	h, ok1 := policy.ParseVersion(have)
	o, ok2 := policy.ParseVersion(other)
	return ok1 && ok2 && h > o
}

// sortPolicies sorts ps by policy_id; without allocating, unlike
// sort.Slice, since Apply sorts three lists for every collection written.
func sortPolicies(ps []events.Policy) {
	slices.SortFunc(ps, func(a, b events.Policy) int { return strings.Compare(a.PolicyID, b.PolicyID) })
}

// checkDelta says what makes a delta impossible to apply.
func checkDelta(d events.ComponentDelta) error {
	check := func(p events.Policy, where string) error {
		if p.PolicyID == "" {
			return fmt.Errorf("%s policy %q has no policy_id", where, p.PolicyName)
		}
		if p.Body == "" {
			return fmt.Errorf("%s policy %s has an empty body", where, p.PolicyID)
		}
		if p.BodyHash == "" {
			return fmt.Errorf("%s policy %s has no body_hash", where, p.PolicyID)
		}
		return nil
	}
	for _, p := range d.UpdatedPolicies {
		if err := check(p, "updated"); err != nil {
			return err
		}
	}
	for _, fm := range d.AddedPolicies {
		for _, p := range fm.Policies {
			if err := check(p, "added (filter "+fm.FilterID+")"); err != nil {
				return err
			}
		}
	}
	for _, r := range d.RemovedPolicies {
		if r.PolicyID == "" {
			return fmt.Errorf("a removed policy has no policy_id")
		}
	}
	return nil
}
