package placement

import (
	"fmt"
	"testing"
)

// TestProposeKeepsSoftRackAntiCollocation: three VMs with only a soft
// anti-collocation at rack go to three racks (r3 is empty), with no
// warning.
func TestProposeKeepsSoftRackAntiCollocation(t *testing.T) {
	m := exampleModel(t)
	for _, demand := range []string{``, `,"demand":[4,8,0]`} {
		tpl, err := ParseTemplate([]byte(`{"datacenter":"dc-example",
	 "resources":[{"id":"a","kind":"vm"` + demand + `},{"id":"b","kind":"vm"` + demand + `},{"id":"c","kind":"vm"` + demand + `}],
	 "groups":[{"id":"g","members":["a","b","c"]}],
	 "placement_policies":[{"id":"apart","type":"anti-collocation","mode":"soft","applies_to":["g"],"properties":{"level":"rack"}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		threeRacks(t, m, tpl)
	}
}

func threeRacks(t *testing.T, m *Model, tpl *Template) {
	t.Helper()
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Fatalf("placement %v breaks soft policies:\n%s", p.Placement, messages(p.Warnings))
	}
	racks := map[int32]bool{}
	for _, id := range []string{"a", "b", "c"} {
		racks[m.ancestorAt(m.leafNo[p.Placement[id]], m.level("rack"))] = true
	}
	if len(racks) != 3 {
		t.Fatalf("placement %v uses %d racks, want 3", p.Placement, len(racks))
	}
}

// TestPropose500KeepsEverySoftPolicy: 500 VMs in 50 clusters of 10 on
// 10,000 leaves: each cluster spread by a hard LLMN policy, kept apart
// from the next cluster at pm and, softly, at rack. A placement keeping
// every policy exists (cluster g on racks 2g and 2g+1: 100 racks, 50
// clusters), so the proposal breaks none.
func TestPropose500KeepsEverySoftPolicy(t *testing.T) {
	m := bigDatacenter(t, 100, 100)
	tpl := SyntheticClusters(50, 10, 100, false)
	for g := 1; g < 50; g++ {
		tpl.Policies = append(tpl.Policies, Policy{ID: fmt.Sprintf("rack-apart-g%d", g), Type: AntiCollocation, Mode: Soft,
			AppliesTo: []string{fmt.Sprintf("g%d", g-1), fmt.Sprintf("g%d", g)}, Properties: Properties{Level: "rack"}})
	}
	if err := tpl.Validate(); err != nil {
		t.Fatal(err)
	}
	// The placement the comment promises keeps every policy.
	given := SyntheticClusters(50, 10, 100, true)
	given.Policies = tpl.Policies
	if fs, err := Check(m, given); err != nil || len(fs) != 0 {
		t.Fatalf("the all-kept placement: %v\n%s", err, messages(fs))
	}
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Fatalf("%d soft policies broken:\n%s", len(p.Warnings), messages(p.Warnings))
	}
	tpl.Placement = p.Placement
	if fs, err := Check(m, tpl); err != nil || len(fs) != 0 {
		t.Fatalf("check of the proposal: %v\n%s", err, messages(fs))
	}
}

// TestProposeUnkeepableStaysBounded: when no leaf keeps a soft policy
// (anti-collocation at room, in a datacenter of one room), the scan does
// not score all 10,000 leaves for each of the 500 resources: leaves that
// break the same policies are scored once.
func TestProposeUnkeepableStaysBounded(t *testing.T) {
	m := bigDatacenter(t, 100, 100)
	tpl := unkeepable()
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Steps > 100000 {
		t.Fatalf("%d leaves scored for 500 resources", p.Steps)
	}
	for _, w := range p.Warnings {
		if w.Type != AntiCollocation {
			t.Fatalf("warning %s: %s", w.PolicyID, w.Message)
		}
	}
}

// TestProposeOnACopiedModel: a model copied without the leaf classes
// (as a copy with other capacities may be) is searched leaf by leaf,
// with the same result.
func TestProposeOnACopiedModel(t *testing.T) {
	m := exampleModel(t)
	c := *m
	c.leafClass, c.classMask, c.nClasses = nil, nil, 0
	c.leafType, c.licensed = nil, nil
	tpl := exampleTemplate(t, "ha-clusters.json")
	tpl.Placement = nil
	tpl.Policies = append(tpl.Policies, Policy{ID: "lic", Type: LicensedProduct, Mode: Hard, AppliesTo: []string{"G1"}, Properties: Properties{Catalog: "ibm", Product: "websphere"}})
	a, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Propose(&c, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for id, leaf := range a.Placement {
		if b.Placement[id] != leaf {
			t.Fatalf("%s on %s, on the copy %s", id, leaf, b.Placement[id])
		}
	}
}
