package placement

import (
	"fmt"
	"testing"
)

// bigDatacenter is one room of racks of pms, the network a core switch
// over one switch per rack: racks*pms leaves.
func bigDatacenter(tb testing.TB, racks, pms int) *Model {
	dc := &Datacenter{ID: "big", Dimensions: []string{"vcpu", "ram_gb"},
		Levels: []Level{{Name: "room"}, {Name: "rack", Within: []string{"room"}}, {Name: "pm", Within: []string{"rack"}}}}
	dc.Location = append(dc.Location, Location{ID: "room", Level: "room"})
	dc.Network = append(dc.Network, NetVertex{ID: "core"})
	for r := range racks {
		rack := fmt.Sprintf("r%d", r)
		dc.Location = append(dc.Location, Location{ID: rack, Level: "rack", Parent: "room"})
		dc.Network = append(dc.Network, NetVertex{ID: "tor-" + rack, Parent: "core", Bandwidth: 40e9})
		for p := range pms {
			pm := fmt.Sprintf("%s-pm%d", rack, p)
			dc.Location = append(dc.Location, Location{ID: pm, Level: "pm", Parent: rack, Capacity: []float64{16, 64}})
			dc.Network = append(dc.Network, NetVertex{ID: pm, Parent: "tor-" + rack, Bandwidth: 10e9})
		}
	}
	m, err := Compile(dc)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// clusters is groups of size members, each spread by a hard LLMN policy
// (rack, pm, 2) and kept apart from the next group by a soft
// anti-collocation at pm, with a bandwidth need between neighbours.
// placed: each group on its own pair of racks.
func clusters(groups, size int, placed bool) *Template {
	t := &Template{Datacenter: "big"}
	if placed {
		t.Placement = map[string]string{}
	}
	root := Group{ID: "root"}
	for g := range groups {
		gid := fmt.Sprintf("g%d", g)
		grp := Group{ID: gid}
		for i := range size {
			id := fmt.Sprintf("%s-vm%d", gid, i)
			t.Resources = append(t.Resources, Resource{ID: id, Kind: "vm", Demand: []float64{2, 4}})
			grp.Members = append(grp.Members, id)
			if placed {
				t.Placement[id] = fmt.Sprintf("r%d-pm%d", (2*g+i%2)%100, i/2)
			}
		}
		t.Groups = append(t.Groups, grp)
		root.Members = append(root.Members, gid)
		n := 2
		t.Policies = append(t.Policies, Policy{ID: "ha-" + gid, Type: LLMNAntiCollocation, Mode: Hard, AppliesTo: []string{gid},
			Properties: Properties{L1: "rack", L2: "pm", N: &n}})
		if g > 0 {
			prev := fmt.Sprintf("g%d", g-1)
			t.Policies = append(t.Policies, Policy{ID: "apart-" + gid, Type: AntiCollocation, Mode: Soft, AppliesTo: []string{prev, gid},
				Properties: Properties{Level: "pm"}},
				Policy{ID: "bw-" + gid, Type: Bandwidth, Mode: Soft, AppliesTo: []string{prev, gid},
					Properties: Properties{BytesPerSecond: 1e6}})
		}
	}
	t.Groups = append(t.Groups, root)
	return t
}

// BenchmarkCheck1000Resources100GroupsOn10000Leaves: checking the
// placement of 1,000 resources in 100 groups on a datacenter of 10,000
// leaves (the model is indexed once, as the stage does when it reads it).
func BenchmarkCheck1000Resources100GroupsOn10000Leaves(b *testing.B) {
	m := bigDatacenter(b, 100, 100)
	t := clusters(100, 10, true)
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
	t := clusters(50, 10, false)
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
