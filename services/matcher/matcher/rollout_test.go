package matcher

import (
	"fmt"
	"slices"
	"testing"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/rollout"
)

// rolloutTable is a fixed Rollouts.
type rolloutTable map[string]*events.PolicyRollout

func (t rolloutTable) Value(id string) (*events.PolicyRollout, bool) { r, ok := t[id]; return r, ok }

// TestRolloutGatesVersions: while version 2 rolls out at step 0.5, only
// the components of that cohort get it, on the change, on a registration
// and on a catch-up; the next step brings it to the rest; an abort brings
// every component back to version 1 at a greater revision.
func TestRolloutGatesVersions(t *testing.T) {
	steps := []float64{0.5, 1}
	var ids, inside []string
	for i := 0; len(ids) < 8; i++ {
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		if rollout.InCohort(id, steps, 0) {
			inside = append(inside, id)
		}
	}
	if len(inside) == 0 || len(inside) == len(ids) {
		t.Fatalf("cohorts %v of %v: want some in and some out", inside, ids)
	}
	v1 := entryAt(catalogEntry(memID, "1", nil), 10)
	var s setup
	s.catalog = []*events.PolicyCatalogEntry{v1}
	for _, id := range ids[:6] { // c6, c7 register during the rollout
		s.comps = append(s.comps, comp(id, "d", []string{memID}))
		p := pol(memID, "1", nil)
		p.Revision = 10
		s.has = append(s.has, collection(id, "d", p))
	}
	m := newMatcher(t, s)
	b2 := policyBody(memID, "2", nil, nil)
	r := rollout.Start(memID, "r1", "2", policy.BodyHash(b2), v1, rollout.Plan{Steps: steps}, "op", t0)
	table := rolloutTable{memID: r}
	m.SetRollouts(table)

	got := map[string]string{} // component -> version last sent
	apply := func(ms []events.PolicyMatch, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, pm := range ms {
			for _, d := range pm.Components {
				for _, u := range d.UpdatedPolicies {
					got[d.ComponentID] = u.PolicyVersion + fmt.Sprintf("@%d", u.Revision)
				}
				for _, a := range d.AddedPolicies {
					for _, p := range a.Policies {
						got[d.ComponentID] = p.PolicyVersion + fmt.Sprintf("@%d", p.Revision)
					}
				}
				for range d.RemovedPolicies {
					got[d.ComponentID] = "removed"
				}
			}
		}
	}
	want := func(step string, version func(id string) string) {
		t.Helper()
		for _, id := range ids {
			if g, w := got[id], version(id); g != w {
				t.Errorf("%s: %s got %q, want %q", step, id, g, w)
			}
		}
	}
	apply(m.OnChange(0, atRev(updated(memID, "1", "2", nil), 20)))
	apply(m.OnComponent(0, "c6", comp("c6", "d", []string{memID})))
	apply(m.OnComponent(0, "c7", comp("c7", "d", []string{memID})))
	apply(m.OnCatchup(0, &events.CatchupRequest{RequestID: "cu1", Scope: events.ScopeAll, RequestedAt: t0}))
	want("step 1", func(id string) string {
		switch {
		case slices.Contains(inside, id):
			return "2@20"
		case id == "c6" || id == "c7":
			return "1@10" // registered outside the cohort: the previous version
		}
		return "" // told nothing
	})

	r2, err := rollout.Promote(r, "op", t0)
	if err != nil {
		t.Fatal(err)
	}
	table[memID] = r2
	apply(m.OnCatchup(0, &events.CatchupRequest{RequestID: "cu2", Scope: events.ScopeAll, RequestedAt: t0}))
	want("step 2", func(string) string { return "2@20" })

	a, err := rollout.Abort(r2, 30, "op", t0)
	if err != nil {
		t.Fatal(err)
	}
	table[memID] = a
	apply(m.OnCatchup(0, &events.CatchupRequest{RequestID: "cu3", Scope: events.ScopeAll, RequestedAt: t0}))
	want("abort", func(string) string { return "1@30" })
	// A newer version supersedes the aborted rollout.
	apply(m.OnChange(0, atRev(updated(memID, "2", "3", nil), 40)))
	want("version 3", func(string) string { return "3@40" })
}

// BenchmarkCatchupAll100kDuringRollout is BenchmarkCatchupAll100k with a
// rollout running on one of the policies, its version the catalog's:
// what the gate costs a catch-up (one lookup per component and policy).
func BenchmarkCatchupAll100kDuringRollout(b *testing.B) {
	m := benchMatcher(b, false)
	req := &events.CatchupRequest{RequestID: "cu", Scope: events.ScopeAll}
	if _, err := m.OnCatchup(0, req); err != nil {
		b.Fatal(err)
	}
	id := "DCAE.Config_svc0_p0"
	e, _ := m.Catalog().Lookup(id)
	r := rollout.Start(id, "r1", e.PolicyVersion, e.BodyHash, nil, rollout.Plan{Steps: []float64{1}}, "bench", t0)
	m.SetRollouts(rolloutTable{id: r})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if ms, err := m.OnCatchup(0, req); err != nil || len(ms) != 0 {
			b.Fatalf("catch-up of an up-to-date partition: %d matches, %v", len(ms), err)
		}
	}
}
