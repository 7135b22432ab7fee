package matcher

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// randomPolicy is a catalog policy with varied names and matchingConditions.
func randomPolicy(r *rand.Rand, i int) *events.PolicyCatalogEntry {
	scopes := []string{"DCAE.Config_", "DCAE.Config_svc1_", "DCAE.Config_svc2_", "ONAP.Config_", "DCAE.Config_svc10_"}
	id := fmt.Sprintf("%sp%d", scopes[r.IntN(len(scopes))], i)
	mc := map[string]any{}
	if r.IntN(4) > 0 {
		mc["ONAPName"] = []string{"DCAE", "ONAP"}[r.IntN(2)]
	}
	if r.IntN(3) == 0 {
		mc["ConfigName"] = []string{"alex_config_name", "other"}[r.IntN(2)]
	}
	switch r.IntN(4) {
	case 0:
		mc["key1"] = "value1"
	case 1:
		mc["key1"] = "value2"
	case 2:
		mc["key1"] = 1
	}
	if r.IntN(5) == 0 {
		mc = nil
	}
	version := fmt.Sprint(1 + r.IntN(30))
	return &events.PolicyCatalogEntry{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version,
		Body: policyBody(id, version, mc, nil), Status: events.StatusValid}
}

func randomFilter(r *rand.Rand, i int, ids []string) events.PolicyFilter {
	names := []string{"DCAE.Config_.*", "DCAE.Config_svc1", "DCAE\\.Config_svc[12]_.*", ".*", "ONAP", "DCAE.Config_svc1_p\\d+\\.", "(?i)dcae.config_SVC2"}
	f := events.PolicyFilter{FilterID: fmt.Sprintf("f%d", i), ConfigAttributes: "{}"}
	if r.IntN(4) == 0 && len(ids) > 0 {
		f.PolicyName = ids[r.IntN(len(ids))] // the policy_id literally
	} else {
		f.PolicyName = names[r.IntN(len(names))]
	}
	if r.IntN(3) == 0 {
		f.OnapName = "DCAE"
	}
	if r.IntN(5) == 0 {
		f.ConfigName = "alex_config_name"
	}
	switch r.IntN(4) {
	case 0:
		f.ConfigAttributes = `{"key1": "value1"}`
	case 1:
		f.ConfigAttributes = `{"key1": 1.0}`
	}
	return f
}

// bruteWanted is what a component wants, decided by matching every filter
// against every full policy body (bodies, by policy_id) with
// CompiledFilter.Match.
func bruteWanted(t *testing.T, m *Matcher, bodies map[string]string, c *events.Component) map[string]string {
	t.Helper()
	w := map[string]string{}
	for _, id := range c.PolicyIDs {
		if _, ok := m.Catalog().Lookup(id); ok {
			w[id] = ByIDFilterID
		}
	}
	var cfs []*policy.CompiledFilter
	for _, f := range c.PolicyFilters {
		attrs, err := policy.DecodeConfigAttributes(f.ConfigAttributes)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := policy.CompileFilter(policy.Filter{PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName, ConfigAttributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		cfs = append(cfs, cf)
	}
	for id := range m.Catalog().entries {
		if _, ok := w[id]; ok {
			continue
		}
		b, err := policy.DecodeBody([]byte(bodies[id]))
		if err != nil {
			t.Fatal(err)
		}
		for i, cf := range cfs {
			if ok, _ := cf.Match(b); ok {
				w[id] = c.PolicyFilters[i].FilterID
				break
			}
		}
	}
	return w
}

// TestWantedSetsAgree checks that the indexed computations of what
// components want (one component against the catalog, and every component
// through the partition's index) agree with matching every filter against
// every policy.
func TestWantedSetsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2018))
	for round := 0; round < 10; round++ {
		m := New()
		var ids []string
		bodies := map[string]string{}
		for i := 0; i < 150; i++ {
			e := randomPolicy(r, i)
			ids = append(ids, e.PolicyID)
			bodies[e.PolicyID] = e.Body
			if err := m.ApplyCatalog(e.PolicyID, e, t0); err != nil {
				t.Fatal(err)
			}
		}
		p := NewPartition()
		m.Assign(0, p)
		var defs []*events.Component
		for i := 0; i < 60; i++ {
			c := comp(fmt.Sprintf("c%d", i), fmt.Sprintf("d%d", i%7), nil)
			for j := r.IntN(3); j > 0; j-- {
				c.PolicyIDs = append(c.PolicyIDs, ids[r.IntN(len(ids))])
			}
			for j := r.IntN(4); j > 0; j-- {
				c.PolicyFilters = append(c.PolicyFilters, randomFilter(r, j, ids))
			}
			if err := p.Restore(c.ComponentID, c); err != nil {
				t.Fatal(err)
			}
			defs = append(defs, c)
		}
		var sel []*component
		for _, c := range defs {
			sel = append(sel, p.comps[c.ComponentID])
		}
		many := m.wantedMany(p, sel, nil)
		total := 0
		brute := map[string]map[string]string{}
		for _, c := range defs {
			want := bruteWanted(t, m, bodies, c)
			brute[c.ComponentID] = want
			total += len(want)
			one := m.wantedOne(p, p.comps[c.ComponentID])
			if !maps.Equal(one, want) {
				t.Fatalf("round %d, %s: one-component computation %v, want %v", round, c.ComponentID, one, want)
			}
			if got := many[p.comps[c.ComponentID]]; !maps.Equal(got, want) {
				t.Fatalf("round %d, %s: indexed computation %v, want %v", round, c.ComponentID, got, want)
			}
		}
		if total == 0 {
			t.Fatalf("round %d: no component wants anything; the comparison proves nothing", round)
		}
		// Changes reach exactly the components that want the policy (its
		// new version keeps its name and matchingConditions).
		for _, id := range ids[:30] {
			e := m.catalog.entries[id]
			next := fmt.Sprint(e.ver + 1)
			h := headerOf(policyBody(id, next, decodedMC(t, bodies[id]), nil))
			want := map[string]bool{}
			for _, c := range defs {
				if _, ok := brute[c.ComponentID][id]; ok {
					want[c.ComponentID] = true
				}
			}
			ms, err := m.OnChange(0, &events.PolicyChange{ChangeID: "x", PolicyID: id, Action: events.ActionUpdated,
				OldVersion: &e.version, NewVersion: &next, PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, pm := range ms {
				for _, d := range pm.Components {
					got[d.ComponentID] = true
				}
			}
			if !maps.Equal(got, want) {
				t.Fatalf("round %d: change of %s reached %v, want %v", round, id, got, want)
			}
		}
	}
}

func decodedMC(t *testing.T, raw string) map[string]any {
	b, err := policy.DecodeBody([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	mc, _ := b["matchingConditions"].(map[string]any)
	return mc
}
