package placement

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSixHAClustersOntoTheExampleDatacenter is the case: the
// ha-clusters deployment six times onto the example datacenter, each one
// checked against what the earlier ones use. Each puts 4 vCPU on 12 of
// the 16-vCPU PMs: four fit, the fifth and sixth overload every PM they
// name, and the finding names the PM, its capacity and who uses it.
func TestSixHAClustersOntoTheExampleDatacenter(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "ha-clusters.json")
	var used Usage
	for i := 1; i <= 6; i++ {
		dep := fmt.Sprintf("ha-%d", i)
		fs, err := Check(m.Remaining(&used), tpl)
		if err != nil {
			t.Fatal(err)
		}
		hard := 0
		for _, f := range fs {
			if f.Hard {
				hard++
			}
		}
		if i <= 4 {
			if hard != 0 {
				t.Fatalf("%s: %d hard findings on a datacenter with room: %v", dep, hard, fs)
			}
			u, err := m.Use(tpl)
			if err != nil {
				t.Fatal(err)
			}
			used.Add(dep, u)
			continue
		}
		if hard != 12 {
			t.Fatalf("%s: %d hard findings, want one per PM the template uses (12): %v", dep, hard, fs)
		}
		want := "leaf r1-pm1 is overloaded in vcpu: M11 demand 4, its capacity is 16, of which 16 is in use by deployments ha-1, ha-2, ha-3, ha-4; non-overload"
		if fs[0].PolicyID != NonOverload || fs[0].Message != want {
			t.Errorf("%s: first finding %+v; want %q", dep, fs[0], want)
		}
	}
	if got := used.Users("r2-pm3"); strings.Join(got, ",") != "ha-1,ha-2,ha-3,ha-4" {
		t.Errorf("users of r2-pm3 = %v", got)
	}

	// A tenant's findings name its own deployments only: ha-1 and ha-2
	// are acme's, ha-3 and ha-4 globex's.
	for i := 1; i <= 4; i++ {
		used.Own(fmt.Sprintf("ha-%d", i), map[bool]string{true: "acme", false: "globex"}[i <= 2])
	}
	for tenant, want := range map[string]string{
		"acme":    "its capacity is 16, of which 16 is in use by deployments ha-1, ha-2 and deployments of other tenants; non-overload",
		"globex":  "its capacity is 16, of which 16 is in use by deployments ha-3, ha-4 and deployments of other tenants; non-overload",
		"initech": "its capacity is 16, of which 16 is in use by deployments of other tenants; non-overload",
	} {
		fs, err := Check(m.RemainingFor(&used, tenant), tpl)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			for _, other := range []string{"ha-1", "ha-2", "ha-3", "ha-4"} {
				if strings.Contains(f.Message, other) && !strings.Contains(want, other) {
					t.Errorf("%s's finding names another tenant's deployment %s: %s", tenant, other, f.Message)
				}
			}
		}
		if !strings.HasSuffix(fs[0].Message, want) {
			t.Errorf("%s's first finding %q; want it to end %q", tenant, fs[0].Message, want)
		}
	}
}

// TestProposeOnlyOntoFreeCapacity: with a deployment filling r1-pm1, a
// proposal never puts a resource there; with every PM full the proposal
// is infeasible.
func TestProposeOnlyOntoFreeCapacity(t *testing.T) {
	m := exampleModel(t)
	var used Usage
	used.Add("big", Use{Leaves: map[string][]float64{"r1-pm1": {16, 64, 0}}})
	tpl := exampleTemplate(t, "ha-clusters.json")
	tpl.Placement = nil
	p, err := Propose(m.Remaining(&used), tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for r, l := range p.Placement {
		if l == "r1-pm1" {
			t.Errorf("resource %s proposed onto r1-pm1, which deployment big fills", r)
		}
	}
	// The same request without the usage may take r1-pm1: the usage is
	// what keeps it off.
	if p, err := Propose(m, tpl, Options{}); err != nil || !strings.Contains(fmt.Sprint(p.Placement), "r1-pm1") {
		t.Errorf("proposal on the empty datacenter = %v, %v; want one using r1-pm1", p, err)
	}
	var full Usage
	for _, l := range m.leafID {
		full.Add("all", Use{Leaves: map[string][]float64{l: {16, 64, 0}}})
	}
	_, err = Propose(m.Remaining(&full), tpl, Options{})
	// The reason says the capacity is in use, not that the datacenter
	// has none.
	want := "the resources demand 48 vcpu in all; datacenter dc-example has 0 free (192, of which 192 is in use by deployment all)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a proposal on a datacenter whose every PM is full: %v; want %q", err, want)
	}
}

// TestBandwidthInUseCounts: what a deployment's bandwidth policy needs on
// a network edge is taken off that edge for the next one.
func TestBandwidthInUseCounts(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "ha-clusters.json")
	tpl.Policies = append(tpl.Policies, Policy{ID: "bw", Type: Bandwidth, Mode: Hard, AppliesTo: []string{"M11", "M21"}, Properties: Properties{BytesPerSecond: 6e8}})
	if err := tpl.Validate(); err != nil {
		t.Fatal(err)
	}
	u, err := m.Use(tpl)
	if err != nil {
		t.Fatal(err)
	}
	// M11 on r1-pm1, M21 on r2-pm3: r1-pm1-tor1, tor1-core, tor2-core,
	// r2-pm3-tor2.
	if len(u.Links) != 4 || u.Links["r1-pm1"] != 6e8 || u.Links["tor2"] != 6e8 {
		t.Fatalf("links used = %v", u.Links)
	}
	var used Usage
	used.Add("d1", u)
	fs, err := Check(m.Remaining(&used), tpl)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range fs {
		if f.Type == Bandwidth && f.Hard && strings.Contains(f.Message, "network edge r1-pm1-tor1 needs 600000000 bytes/s for M11-M21; its bandwidth is 1000000000, of which 600000000 is in use by deployment d1") {
			found = true
		}
	}
	if !found {
		t.Errorf("second deployment's findings %v; want the edge r1-pm1-tor1 short, naming d1", fs)
	}
	if fs, _ := Check(m, tpl); len(fs) != 0 {
		t.Errorf("alone, the template finds %v", fs)
	}
}

// TestRemainingLeavesTheModelAlone: the copy does not change the model,
// and nothing in use is the model itself.
func TestRemainingLeavesTheModelAlone(t *testing.T) {
	m := exampleModel(t)
	if m.Remaining(&Usage{}) != m || m.Remaining(nil) != m {
		t.Error("Remaining of nothing in use is a copy")
	}
	var used Usage
	used.Add("d", Use{Leaves: map[string][]float64{"r1-pm1": {20, 1, 0}, "nowhere": {1}}, Links: map[string]float64{"core": 5}})
	r := m.Remaining(&used)
	if got := r.capacity[m.leafNo["r1-pm1"]]; got[0] != 0 || got[1] != 63 {
		t.Errorf("remaining capacity of r1-pm1 = %v; want [0 63 2000]", got)
	}
	if got := m.capacity[m.leafNo["r1-pm1"]]; got[0] != 16 {
		t.Errorf("the model's own capacity changed: %v", got)
	}
}

// TestHoldsWhatIsInUse: a replacement model must keep the leaves in use
// and enough capacity for them.
func TestHoldsWhatIsInUse(t *testing.T) {
	m := exampleModel(t)
	var used Usage
	used.Add("d1", Use{Leaves: map[string][]float64{"r1-pm1": {12, 8, 0}}, Links: map[string]float64{"tor1": 5e9}})
	if ps := m.Holds(&used); len(ps) != 0 {
		t.Errorf("the model itself does not hold its usage: %v", ps)
	}
	dc := *m.Datacenter()
	dc.Location = slices.Clone(dc.Location)
	dc.Network = slices.Clone(dc.Network)
	for i := range dc.Location {
		if dc.Location[i].ID == "r1-pm1" {
			dc.Location[i].Capacity = []float64{8, 64, 2000}
		}
	}
	for i := range dc.Network {
		if dc.Network[i].ID == "tor1" {
			dc.Network[i].Bandwidth = 1e9
		}
	}
	smaller, err := Compile(&dc)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(smaller.Holds(&used), "\n")
	want := "leaf r1-pm1: 12 vcpu in use by deployment d1, its capacity would be 8\nnetwork edge tor1-core: 5000000000 bytes/s in use by deployment d1, its bandwidth would be 1000000000"
	if got != want {
		t.Errorf("Holds = %q\nwant %q", got, want)
	}
}

// A running total kept with Add and Remove is the sum of what remains,
// users included; Without leaves the total as it is.
func TestUsageRemoveKeepsARunningTotal(t *testing.T) {
	a := Use{Leaves: map[string][]float64{"pm1": {4, 8}, "pm2": {2, 2}}, Links: map[string]float64{"r1": 100}}
	b := Use{Leaves: map[string][]float64{"pm1": {1, 1}}, Links: map[string]float64{"r1": 50}}
	total := &Usage{}
	total.Add("a", a)
	total.Add("b", b)
	without := total.Without("a", a)
	if got := total.Users("pm1"); strings.Join(got, ",") != "a,b" || total.leaves["pm1"][0] != 5 || total.links["r1"] != 150 {
		t.Fatalf("total after Without: users %v, pm1 %v, r1 %v", got, total.leaves["pm1"], total.links["r1"])
	}
	total.Remove("a", a)
	only := &Usage{}
	only.Add("b", b)
	for _, u := range []*Usage{total, without} {
		if !reflect.DeepEqual(u.leaves, only.leaves) || !reflect.DeepEqual(u.links, only.links) || !reflect.DeepEqual(u.users, only.users) {
			t.Errorf("without a: %+v; want %+v", u, only)
		}
	}
	total.Remove("b", b)
	if !total.Empty() || len(total.users) != 0 {
		t.Errorf("nothing left: %+v", total)
	}
}
