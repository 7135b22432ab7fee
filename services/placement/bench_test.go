package placement

import (
	"fmt"
	"testing"
)

func bigDatacenter(tb testing.TB, racks, pms int) *Model {
	m, err := Compile(SyntheticDatacenter(racks, pms))
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkCheck1000Resources100GroupsOn10000Leaves: checking the
// placement of 1,000 resources in 100 groups on a datacenter of 10,000
// leaves (the model is indexed once, as the stage does when it reads it).
func BenchmarkCheck1000Resources100GroupsOn10000Leaves(b *testing.B) {
	m := bigDatacenter(b, 100, 100)
	t := SyntheticClusters(100, 10, 100, true)
	if err := t.Validate(); err != nil {
		b.Fatal(err)
	}
	fs, err := Check(m, t)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range fs {
		if f.Hard {
			b.Fatalf("the benchmark's placement breaks %s: %s", f.PolicyID, f.Message)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Check(m, t); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileDatacenter10000Leaves: validating and indexing a
// datacenter of 10,000 leaves (done once per datacenter record).
func BenchmarkCompileDatacenter10000Leaves(b *testing.B) {
	dc := bigDatacenter(b, 100, 100).Datacenter()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(dc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProposeHA3x4: the seed's 3 clusters of 4 VMs on the example
// datacenter (3 racks of 4 pms).
func BenchmarkProposeHA3x4(b *testing.B) {
	m := exampleModel(b)
	t := exampleTemplate(b, "ha-clusters.json")
	t.Placement = nil
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Propose(m, t, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPropose500: 500 resources in 50 clusters of 10 (hard LLMN,
// soft anti-collocation and bandwidth between neighbouring clusters) on
// 10,000 leaves.
func BenchmarkPropose500(b *testing.B) {
	m := bigDatacenter(b, 100, 100)
	t := SyntheticClusters(50, 10, 100, false)
	if err := t.Validate(); err != nil {
		b.Fatal(err)
	}
	var steps int
	b.ReportAllocs()
	for b.Loop() {
		p, err := Propose(m, t, Options{})
		if err != nil {
			b.Fatal(err)
		}
		steps = p.Steps
	}
	b.ReportMetric(float64(steps), "leaves-tried")
}

// unkeepable is SyntheticClusters(50, 10, 100) with a soft
// anti-collocation at room between neighbouring clusters: the datacenter
// has one room, so no leaf keeps it and every resource's scan runs over
// all 10,000 leaves (the worst case of the best-leaf scan).
func unkeepable() *Template {
	t := SyntheticClusters(50, 10, 100, false)
	for g := 1; g < 50; g++ {
		t.Policies = append(t.Policies, Policy{ID: fmt.Sprintf("room-apart-g%d", g), Type: AntiCollocation, Mode: Soft,
			AppliesTo: []string{fmt.Sprintf("g%d", g-1), fmt.Sprintf("g%d", g)}, Properties: Properties{Level: "room"}})
	}
	return t
}

// BenchmarkPropose500Unkeepable: 500 resources whose soft policies cannot
// all be kept, so no scan stops early.
func BenchmarkPropose500Unkeepable(b *testing.B) {
	m := bigDatacenter(b, 100, 100)
	t := unkeepable()
	if err := t.Validate(); err != nil {
		b.Fatal(err)
	}
	var steps int
	b.ReportAllocs()
	for b.Loop() {
		p, err := Propose(m, t, Options{})
		if err != nil {
			b.Fatal(err)
		}
		steps = p.Steps
	}
	b.ReportMetric(float64(steps), "leaves-tried")
}
