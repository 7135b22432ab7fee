package placement

import (
	"encoding/json"
	"strings"
	"testing"
)

func heatModel(t testing.TB) *Model {
	t.Helper()
	m, err := ParseDatacenter(readExample(t, "heat-datacenter.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSeedHadoopAsWritten: the seed's Hadoop example (Proposal A: groups
// as an object, policies in groups, volumes and volume attachments,
// hardConstraint, OS:: types, names with spaces and '$') is read as
// written, lowered to what it means, and placed: each volume on its
// datanode's host (OS::NetMaxHops 0), the only volume there
// (OS::VolExclusive), the datanodes on distinct compute nodes.
func TestSeedHadoopAsWritten(t *testing.T) {
	tpl := exampleTemplate(t, "heat-hadoop.json")
	flat := tpl.Flat()
	if len(flat.Resources) != 9 || len(flat.Relationships) != 4 {
		t.Fatalf("%d resources, %d relationships; want 9 (5 servers, 4 volumes) and 4 (the attachments)", len(flat.Resources), len(flat.Relationships))
	}
	kinds := map[string]int{}
	for _, r := range flat.Resources {
		kinds[r.Kind]++
	}
	if kinds["vm"] != 5 || kinds["volume"] != 4 {
		t.Fatalf("kinds %v", kinds)
	}
	byID := map[string]Policy{}
	for _, p := range flat.Policies {
		byID[p.ID] = p
	}
	want := map[string]string{
		"WCA4-hadoop-datanode-0.policies[0]":                   "anti-collocation soft [WCA4-hadoop-datanode-0]",
		"$vtid_15.policies[0]":                                 "hop-count-limit hard [WCA4-hadoop-datanode-4 Storage volume used by datanode server_0]",
		"Storage volume used by datanode server_3.policies[0]": "volume-exclusive hard [Storage volume used by datanode server_3]",
		"Storage volume used by datanode server_3.policies[1]": "volume-not-moved hard [Storage volume used by datanode server_3]",
	}
	for id, w := range want {
		p, ok := byID[id]
		got := p.Type + " " + p.Mode + " [" + strings.Join(p.AppliesTo, " ") + "]"
		if !ok || got != w {
			t.Errorf("policy %s: %q, want %q", id, got, w)
		}
	}
	if len(flat.Policies) != 13 {
		t.Errorf("%d policies, want 13 (1 anti-collocation, 4 hop limits, 4 exclusive, 4 not moved)", len(flat.Policies))
	}

	m := heatModel(t)
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 0 {
		t.Fatalf("warnings:\n%s", messages(p.Warnings))
	}
	if len(p.Placement) != 9 {
		t.Fatalf("placement %v", p.Placement)
	}
	hosts := map[string]bool{}
	for vm, vol := range map[string]string{"WCA4-hadoop-datanode-1": "server_3", "WCA4-hadoop-datanode-2": "server_2", "WCA4-hadoop-datanode-3": "server_1", "WCA4-hadoop-datanode-4": "server_0"} {
		h := p.Placement[vm]
		if got := p.Placement["Storage volume used by datanode "+vol]; got != h {
			t.Errorf("%s on %s, its volume on %s", vm, h, got)
		}
		if hosts[h] {
			t.Errorf("two datanodes on %s", h)
		}
		hosts[h] = true
	}
	placed := tpl.Clone()
	placed.Placement = p.Placement
	if fs, err := Check(m, &placed); err != nil || len(fs) != 0 {
		t.Fatalf("check: %v\n%s", err, messages(fs))
	}

	// It round-trips through its canonical JSON (the flat list form).
	b, err := json.Marshal(tpl)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseTemplate(b)
	if err != nil {
		t.Fatalf("canonical form %s: %v", b, err)
	}
	if len(again.Flat().Policies) != 13 {
		t.Fatalf("canonical form lowers to %d policies", len(again.Flat().Policies))
	}
}

// TestHeatSectionsCarried: a Heat template's other sections and resource
// keys are accepted and carried, not read.
func TestHeatSectionsCarried(t *testing.T) {
	tpl, err := ParseTemplate([]byte(`{"heat_template_version":"2013-05-23","parameters":{"key":{"type":"string"}},"outputs":{"ip":{"value":{"get_attr":["a","first_address"]}}},
	 "resources":{"a":{"type":"OS::Nova::Server","depends_on":["b"],"deletion_policy":"Retain","update_policy":{"x":1},"properties":{"key_name":{"get_param":"key"}}},
	              "b":{"type":"OS::Cinder::Volume"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := tpl.Clone()
	b1, _ := json.Marshal(tpl)
	b2, _ := json.Marshal(c)
	if string(b1) != string(b2) || !strings.Contains(string(b1), `"depends_on":["b"]`) || !strings.Contains(string(b1), `"parameters":{"key"`) {
		t.Fatalf("canonical %s, clone %s", b1, b2)
	}
}

// TestVolumeNotMoved: a volume that exists (current_placement) stays on
// its host: Propose keeps it there (and its server with it, hop limit 0),
// Check finds it moved.
func TestVolumeNotMoved(t *testing.T) {
	m := heatModel(t)
	tpl := exampleTemplate(t, "heat-hadoop.json")
	vol := "Storage volume used by datanode server_3"
	tpl.CurrentPlacement = map[string]string{vol: "rack3-node2"}
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Placement[vol] != "rack3-node2" || p.Placement["WCA4-hadoop-datanode-1"] != "rack3-node2" {
		t.Fatalf("volume on %s, its server on %s; want both on rack3-node2", p.Placement[vol], p.Placement["WCA4-hadoop-datanode-1"])
	}
	p.Placement[vol], p.Placement["WCA4-hadoop-datanode-1"] = "rack1-node4", "rack1-node4"
	placed := tpl.Clone()
	placed.Placement = p.Placement
	fs, err := Check(m, &placed)
	if err != nil {
		t.Fatal(err)
	}
	want := "hard Storage volume used by datanode server_3.policies[1]: Storage volume used by datanode server_3 is on rack3-node2 now and placed on rack1-node4; volume-not-moved keeps it where it is (its storage backend cannot move it)\n"
	if got := messages(fs); !strings.Contains(got, want) {
		t.Fatalf("got\n%swant it to contain\n%s", got, want)
	}
}

// TestVolumeExclusive: a volume-exclusive volume shares its host with no
// other volume; Propose keeps them apart, Check finds them together.
func TestVolumeExclusive(t *testing.T) {
	m := heatModel(t)
	tpl, err := ParseTemplate([]byte(`{"resources":{
	  "v1":{"type":"OS::Cinder::Volume","policies":[{"type":"OS::VolExclusive"}]},
	  "v2":{"type":"OS::Cinder::Volume"},
	  "s":{"type":"OS::Nova::Server"}},
	 "placement_policies":[{"id":"near","type":"hop-count-limit","mode":"soft","applies_to":["v1","v2"],"properties":{"hops":0}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Placement["v1"] == p.Placement["v2"] {
		t.Fatalf("v1 and v2 both on %s", p.Placement["v1"])
	}
	if got := messages(p.Warnings); !strings.HasPrefix(got, "soft near:") {
		t.Fatalf("warnings %s", got)
	}
	tpl.Placement = map[string]string{"v1": "rack1-node1", "v2": "rack1-node1", "s": "rack1-node1"}
	fs, err := Check(m, tpl)
	if err != nil {
		t.Fatal(err)
	}
	want := "hard v1.policies[0]: v1 shares host rack1-node1 with volume v2; volume-exclusive keeps it the only volume on its host's storage\n"
	if got := messages(fs); got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
}

// TestLicensedProductPlacesOnLicensedHosts: a hard licensed-product
// policy keeps its VMs off hosts whose type does not license it.
func TestLicensedProductPlacesOnLicensedHosts(t *testing.T) {
	m := heatModel(t)
	tpl, err := ParseTemplate([]byte(`{"resources":{"a":{"type":"OS::Nova::Server"},"b":{"type":"OS::Nova::Server"},"c":{"type":"OS::Nova::Server"}},
	 "groups":{"id":"g","members":[{"get_resource":"a"},{"get_resource":"b"},{"get_resource":"c"}],
	   "policies":[{"type":"OS::LicensedProduct","properties":{"catalog":"ibm","product":"websphere"}},
	               {"type":"OS::AntiCoLocation","properties":{"level":"rack","hardConstraint":false}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if strings.HasPrefix(p.Placement[id], "rack3") {
			t.Errorf("%s on %s, whose type does not license websphere", id, p.Placement[id])
		}
	}
	// Racks 1 and 2 only: one soft anti-collocation pair must break.
	if len(p.Warnings) != 1 {
		t.Errorf("warnings:\n%s", messages(p.Warnings))
	}
}

// TestSeedHAClustersAsWritten: the seed's HA use case in Proposal A
// syntax: three groups of four servers under GRoot, each spread by an
// LLMN policy (rack, compute node, 2).
func TestSeedHAClustersAsWritten(t *testing.T) {
	m := heatModel(t)
	tpl := exampleTemplate(t, "heat-ha-clusters.json")
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	placed := tpl.Clone()
	placed.Placement = p.Placement
	if fs, err := Check(m, &placed); err != nil || len(fs) != 0 {
		t.Fatalf("check: %v\n%s", err, messages(fs))
	}
	placed.Placement["M12"] = placed.Placement["M11"]
	fs, _ := Check(m, &placed)
	if got := messages(fs); !strings.Contains(got, "hard G1.policies[0]: M11 and M12 share compute_node") {
		t.Fatalf("got\n%s", got)
	}
}

// TestSeedSyntaxProblems: each mistake in the seed's syntax is named
// with its path.
func TestSeedSyntaxProblems(t *testing.T) {
	for _, tc := range []struct{ name, template, want string }{
		{"external resource", `{"resources":{"a":{"type":"OS::Nova::Server","relationships":[{"related":"5b2c-rid","policies":[{"type":"OS::AntiCoLocation","properties":{"level":"rack"}}]}]}}}`,
			`resources[0].relationships[0].related: "5b2c-rid" is a resource outside the template; policies with resources outside it are not supported`},
		{"unknown related", `{"resources":{"a":{"type":"OS::Nova::Server","relationships":[{"related":{"get_group":"G9"},"policies":[{"type":"OS::AntiCoLocation","properties":{"level":"rack"}}]}]}}}`,
			`resources[0].relationships[0].related: unknown resource or group "G9"`},
		{"unknown field in a resource", `{"resources":{"a":{"type":"OS::Nova::Server","propertys":{}}}}`, `resources["a"]: json: unknown field "propertys"`},
		{"resource named twice", `{"resources":{"a":{"type":"OS::Nova::Server"},"a":{"type":"OS::Nova::Server"}}}`, `resources: "a" is given twice`},
		{"unplaceable type", `{"resources":{"n":{"type":"OS::Neutron::Net"}}}`, `resources[0].type: resource "n": "OS::Neutron::Net" is not placed on a host`},
		{"attachment without server", `{"resources":{"v":{"type":"OS::Cinder::Volume"},"x":{"type":"AWS::EC2::VolumeAttachment","properties":{"VolumeID":{"get_resource":"v"}}}}}`,
			`resources[1].properties.InstanceID: volume attachment "x": give the vm it attaches as {"get_resource": name}`},
		{"attachment to a server", `{"resources":{"s":{"type":"OS::Nova::Server"},"x":{"type":"AWS::EC2::VolumeAttachment","properties":{"InstanceID":{"get_resource":"s"},"VolumeID":{"get_resource":"s"}}}}}`,
			`resources[1].properties.VolumeID: volume attachment "x": "s" is a vm, not a volume`},
		{"reachability refused", `{"resources":{"a":{"type":"OS::Nova::Server"},"b":{"type":"OS::Nova::Server"}},"groups":{"id":"g","members":[{"get_resource":"a"},{"get_resource":"b"}],"policies":[{"type":"OS::NetReachability"}]}}`,
			`groups[0].policies[0].type: a reachability policy cannot be checked`},
		{"applies_to inside a group", `{"resources":{"a":{"type":"OS::Nova::Server"}},"groups":{"id":"g","members":[{"get_resource":"a"}],"policies":[{"type":"OS::VolExclusive","applies_to":["a"]}]}}`,
			`groups[0].policies[0].applies_to: a policy given inside a resource, group or relationship applies to it; leave applies_to out`},
		{"member both ways", `{"resources":{"a":{"type":"OS::Nova::Server"}},"groups":{"id":"g","members":[{"get_resource":"a","id":"x"}]}}`,
			`a resource member is {"get_resource": name} alone`},
		{"unknown group member", `{"resources":{"a":{"type":"OS::Nova::Server"}},"groups":{"id":"g","members":[{"get_resource":"a"},{"get_resource":"b"}]}}`,
			`groups[0].members[1]: unknown member "b" of group "g"`},
		{"attachment placed", `{"resources":{"s":{"type":"OS::Nova::Server"},"v":{"type":"OS::Cinder::Volume"},"x":{"type":"OS::Cinder::VolumeAttachment","properties":{"instance_uuid":{"get_resource":"s"},"volume_id":{"get_resource":"v"}}}},"current_placement":{"x":"r1-pm1"}}`,
			`current_placement.x: "x" is a volume attachment; it is not placed`},
		{"get_resource not a name", `{"resources":{"a":{"type":"OS::Nova::Server"}},"groups":{"id":"g","members":[{"get_resource":5}]}}`,
			`groups: member {"get_resource": 5}: give the name of a resource of the template`},
		{"unknown seed type", `{"resources":{"a":{"type":"OS::Nova::Server","policies":[{"type":"OS::Spread"}]}}}`,
			`resources[0].policies[0].type: unknown type "OS::Spread"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(tc.template))
			if got := problemsOf(t, err); !strings.Contains(got, tc.want) {
				t.Fatalf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}
