package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestScanBestIsExact: for random templates (every policy type but
// bandwidth, hard and soft) and random partial placements, the leaf
// scanBest chooses breaks exactly as few soft policies as the best of all
// candidates scored one by one: passing over leaves that break the same
// policies as one already scored loses nothing.
func TestScanBestIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 2))
	irregular, err := ParseDatacenter([]byte(`{"id":"irregular",
	 "levels":[{"name":"room"},{"name":"rack","within":["room"]},{"name":"chassis","within":["rack"]},{"name":"pm","within":["chassis","rack","room"]}],
	 "types":[{"id":"lic","licensed_products":[{"catalog":"ibm","product":"websphere"}]}],
	 "dimensions":["vcpu","ram_gb","disk_gb"],
	 "location":[{"id":"room","level":"room"},
	  {"id":"ra","level":"rack","parent":"room"},{"id":"ca","level":"chassis","parent":"ra"},
	  {"id":"a1","level":"pm","parent":"ca","capacity":[16,64,2000],"type":"lic"},{"id":"a2","level":"pm","parent":"ca","capacity":[16,64,2000]},
	  {"id":"a3","level":"pm","parent":"ra","capacity":[16,64,2000],"type":"lic"},
	  {"id":"rb","level":"rack","parent":"room"},{"id":"b1","level":"pm","parent":"rb","capacity":[8,32,1000]},{"id":"b2","level":"pm","parent":"rb","capacity":[16,64,2000],"type":"lic"},
	  {"id":"c1","level":"pm","parent":"room","capacity":[16,64,2000]},{"id":"c2","level":"pm","parent":"room","capacity":[16,64,2000],"type":"lic"}],
	 "network":[{"id":"core"},{"id":"agg","parent":"core","bandwidth":1e10},{"id":"tora","parent":"agg","bandwidth":1e10},
	  {"id":"a1","parent":"tora","bandwidth":1e9},{"id":"a2","parent":"tora","bandwidth":1e9},{"id":"a3","parent":"agg","bandwidth":1e9},
	  {"id":"torb","parent":"core","bandwidth":1e10},{"id":"b1","parent":"torb","bandwidth":1e9},{"id":"b2","parent":"torb","bandwidth":1e9},
	  {"id":"c1","parent":"core","bandwidth":1e9},{"id":"c2","parent":"agg","bandwidth":1e9}]}`))
	if err != nil {
		t.Fatal(err)
	}
	models := []*Model{exampleModel(t), heatModel(t), irregular}
	checked, iterations := 0, 4000
	if testing.Short() {
		iterations = 1000
	}
	for iter := 0; iter < iterations; iter++ {
		m := models[iter%len(models)]
		tpl := randomTemplate(rng, m)
		l, lps := tpl.lower()
		if len(lps) > 0 || tpl.Validate() != nil || l.validateFor(m, false) != nil {
			continue
		}
		s, err := newSearcher(m, l.Template, Options{MaxSteps: 1 << 30})
		if err != nil {
			continue
		}
		order := s.order()
		k := rng.IntN(len(order))
		placed := 0
		for _, r := range order[:k] {
			cands, _ := s.candidates(r)
			var ok []int32
			for _, c := range cands {
				if f, _, _ := s.feasible(r, c); f {
					ok = append(ok, c)
				}
			}
			if len(ok) == 0 {
				break
			}
			s.place(r, ok[rng.IntN(len(ok))], 1)
			placed++
		}
		if placed < k {
			continue
		}
		r := order[k]
		cands, _ := s.candidates(r)
		best := -1
		for _, c := range cands {
			if f, cost, _ := s.feasible(r, c); f && (best < 0 || cost < best) {
				best = cost
			}
		}
		f := &frame{r: r, cands: cands}
		if err := s.scanBest(f, DefaultLookahead); err != nil {
			t.Fatal(err)
		}
		switch {
		case best < 0 && len(f.choices) > 0:
			t.Fatalf("iteration %d: no feasible leaf, scanBest chose %v", iter, f.choices)
		case best >= 0 && (len(f.choices) == 0 || f.choices[0].cost != best):
			for o, lo := range s.assign {
				if lo >= 0 {
					t.Logf("%s on %s", l.Resources[o].ID, m.leafID[lo])
				}
			}
			for _, c := range cands {
				fe, cost, rule := s.feasible(r, c)
				t.Logf("leaf %s class %d feasible %v cost %d %s key %+v", m.leafID[c], m.leafClass[c], fe, cost, rule, s.keyOf(c))
			}
			t.Fatalf("iteration %d: the best leaf for %s breaks %d soft policies, scanBest chose %v\ntemplate %+v", iter, l.Resources[r].ID, best, f.choices, l.Template)
		}
		checked++
	}
	t.Logf("%d cases checked", checked)
	if checked < 500 {
		t.Fatalf("only %d cases checked", checked)
	}
}

func randomTemplate(rng *rand.Rand, m *Model) *Template {
	t := &Template{}
	n := 3 + rng.IntN(6)
	levels := m.LevelNames()
	var vols []string
	for i := range n {
		r := Resource{ID: fmt.Sprintf("r%d", i), Kind: kindVM}
		if rng.IntN(3) == 0 {
			r.Kind = kindVolume
			vols = append(vols, r.ID)
		}
		if rng.IntN(2) == 0 {
			r.Demand = []float64{float64(rng.IntN(9)), float64(rng.IntN(40)), float64(rng.IntN(1500))}
		}
		t.Resources = append(t.Resources, r)
	}
	mode := func() string { return []string{Hard, Soft, Soft}[rng.IntN(3)] }
	pick := func() string { return fmt.Sprintf("r%d", rng.IntN(n)) }
	g := Group{ID: "g"}
	for i := range n {
		if rng.IntN(2) == 0 {
			g.Members = append(g.Members, fmt.Sprintf("r%d", i))
		}
	}
	if len(g.Members) >= 2 {
		t.Groups = append(t.Groups, g)
		rest := Group{ID: "rest"}
		for i := range n {
			id := fmt.Sprintf("r%d", i)
			if !contains(g.Members, id) {
				rest.Members = append(rest.Members, id)
			}
		}
		if len(rest.Members) > 0 {
			t.Groups = append(t.Groups, rest)
		}
		if rng.IntN(2) == 0 {
			nn := 1 + rng.IntN(2)
			t.Policies = append(t.Policies, Policy{ID: "llmn", Type: LLMNAntiCollocation, Mode: mode(), AppliesTo: []string{"g"},
				Properties: Properties{L1: levels[rng.IntN(len(levels))], L2: levels[rng.IntN(len(levels))], N: &nn}})
		}
	}
	for i := range rng.IntN(6) {
		a, b := pick(), pick()
		if a == b {
			continue
		}
		p := Policy{ID: fmt.Sprintf("p%d", i), Mode: mode(), AppliesTo: []string{a, b}}
		switch rng.IntN(3) {
		case 0:
			p.Type, p.Properties.Level = Collocation, levels[rng.IntN(len(levels))]
		case 1:
			p.Type, p.Properties.Level = AntiCollocation, levels[rng.IntN(len(levels))]
		case 2:
			h := rng.IntN(5)
			p.Type, p.Properties.Hops = HopCountLimit, &h
		}
		t.Policies = append(t.Policies, p)
	}
	if rng.IntN(2) == 0 {
		t.Policies = append(t.Policies, Policy{ID: "lic", Type: LicensedProduct, Mode: mode(), AppliesTo: []string{pick()},
			Properties: Properties{Catalog: "ibm", Product: "websphere"}})
	}
	for i, v := range vols {
		if rng.IntN(2) == 0 {
			t.Policies = append(t.Policies, Policy{ID: fmt.Sprintf("x%d", i), Type: VolumeExclusive, Mode: mode(), AppliesTo: []string{v}})
		}
		if rng.IntN(3) == 0 {
			t.Policies = append(t.Policies, Policy{ID: fmt.Sprintf("nm%d", i), Type: VolumeNotMoved, Mode: mode(), AppliesTo: []string{v}})
			if t.CurrentPlacement == nil {
				t.CurrentPlacement = map[string]string{}
			}
			t.CurrentPlacement[v] = m.leafID[rng.IntN(len(m.leafID))]
		}
	}
	return t
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
