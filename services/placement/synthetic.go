package placement

import (
	"embed"
	"fmt"
)

// Examples holds the examples of the README: examples/datacenter.json
// (one room, 3 racks of 4 PMs and a storage box each), the seed's HA
// clusters (examples/ha-clusters.json) and Hadoop with direct attached
// storage (examples/hadoop.json).
//
//go:embed examples/*.json
var Examples embed.FS

// SyntheticDatacenter is a datacenter for measures: one room of racks of
// pms (capacity 16 vcpu, 64 GiB), the network a core switch over one
// switch per rack (40 GB/s up, 10 GB/s to each pm): racks*pms leaves.
func SyntheticDatacenter(racks, pms int) *Datacenter {
	dc := &Datacenter{ID: "synthetic", Dimensions: []string{"vcpu", "ram_gb"},
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
	return dc
}

// SyntheticClusters is a template for measures on a SyntheticDatacenter:
// groups of size VMs (2 vcpu, 4 GiB), each spread by a hard LLMN policy
// (rack, pm, 2), kept apart from the next group by a soft
// anti-collocation at pm and a soft bandwidth need, all under one root
// group. placed: each group on its own pair of racks (of racks), every
// policy met.
func SyntheticClusters(groups, size, racks int, placed bool) *Template {
	t := &Template{Datacenter: "synthetic"}
	if placed {
		t.Placement = map[string]string{}
	}
	root := Group{ID: "root"}
	n := 2
	for g := range groups {
		gid := fmt.Sprintf("g%d", g)
		grp := Group{ID: gid}
		for i := range size {
			id := fmt.Sprintf("%s-vm%d", gid, i)
			t.Resources = append(t.Resources, Resource{ID: id, Kind: "vm", Demand: []float64{2, 4}})
			grp.Members = append(grp.Members, id)
			if placed {
				t.Placement[id] = fmt.Sprintf("r%d-pm%d", (2*g+i%2)%racks, i/2)
			}
		}
		t.Groups = append(t.Groups, grp)
		root.Members = append(root.Members, gid)
		t.Policies = append(t.Policies, Policy{ID: "ha-" + gid, Type: LLMNAntiCollocation, Mode: Hard, AppliesTo: []string{gid},
			Properties: Properties{L1: "rack", L2: "pm", N: &n}})
		if g > 0 {
			prev := fmt.Sprintf("g%d", g-1)
			t.Policies = append(t.Policies,
				Policy{ID: "apart-" + gid, Type: AntiCollocation, Mode: Soft, AppliesTo: []string{prev, gid}, Properties: Properties{Level: "pm"}},
				Policy{ID: "bw-" + gid, Type: Bandwidth, Mode: Soft, AppliesTo: []string{prev, gid}, Properties: Properties{BytesPerSecond: 1e6}})
		}
	}
	t.Groups = append(t.Groups, root)
	return t
}
