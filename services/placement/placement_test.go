package placement

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func readExample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func exampleModel(t testing.TB) *Model {
	t.Helper()
	m, err := ParseDatacenter(readExample(t, "datacenter.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func exampleTemplate(t testing.TB, name string) *Template {
	t.Helper()
	tpl, err := ParseTemplate(readExample(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// edit decodes JSON into a generic value, applies fn, and encodes it back.
func edit(t *testing.T, data []byte, fn func(map[string]any)) []byte {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	fn(v)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func problemsOf(t *testing.T, err error) string {
	t.Helper()
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("error %v is not *Invalid", err)
	}
	return inv.Error()
}

func TestDatacenterExampleIsValid(t *testing.T) {
	m := exampleModel(t)
	if m.Leaves() != 15 || m.ID() != "dc-example" {
		t.Fatalf("leaves %d id %s", m.Leaves(), m.ID())
	}
	if h := m.hops(m.leafNo["r1-pm1"], m.leafNo["r2-pm1"]); h != 4 {
		t.Errorf("hops r1-pm1 to r2-pm1 = %d, want 4", h)
	}
	if h := m.hops(m.leafNo["r1-pm1"], m.leafNo["r1-sb1"]); h != 2 {
		t.Errorf("hops r1-pm1 to r1-sb1 = %d, want 2", h)
	}
}

func TestDatacenterProblems(t *testing.T) {
	base := readExample(t, "datacenter.json")
	loc := func(v map[string]any, i int) map[string]any { return v["location"].([]any)[i].(map[string]any) }
	net := func(v map[string]any, i int) map[string]any { return v["network"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name string
		fn   func(map[string]any)
		want string
	}{
		{"two roots", func(v map[string]any) { delete(loc(v, 1), "parent") }, `location[1].parent: is missing, and location[0] ("room1") is already the root`},
		{"no root", func(v map[string]any) { loc(v, 0)["parent"] = "r1" }, `location: has no root: exactly one vertex names no parent; location[0].parent: vertex "room1" is on a cycle of parents`},
		{"unknown parent", func(v map[string]any) { loc(v, 2)["parent"] = "r9" }, `location[2].parent: unknown vertex "r9"`},
		{"unknown level", func(v map[string]any) { loc(v, 1)["level"] = "row" }, `location[1].level: unknown level "row" of vertex "r1"`},
		{"level not coarser", func(v map[string]any) { loc(v, 1)["level"] = "pm" }, `vertex "r1-pm1" at level pm is inside "r1" at level pm, which is not coarser`},
		{"level cycle", func(v map[string]any) {
			v["levels"].([]any)[0].(map[string]any)["within"] = []any{"pm"}
		}, `level "room" lies within itself through a cycle`},
		{"unknown within", func(v map[string]any) {
			v["levels"].([]any)[0].(map[string]any)["within"] = []any{"site"}
		}, `levels[0].within[0]: unknown level "site"`},
		{"duplicate id", func(v map[string]any) { loc(v, 3)["id"] = "r1-pm1" }, `location[3].id: "r1-pm1" is also the id of location[2]`},
		{"capacity length", func(v map[string]any) { loc(v, 2)["capacity"] = []any{1, 2} }, `location[2].capacity: leaf "r1-pm1" has 2 numbers; give one per dimension (3`},
		{"negative capacity", func(v map[string]any) { loc(v, 2)["capacity"] = []any{1, -2, 3} }, `location[2].capacity[1]: leaf "r1-pm1" has capacity -2 for ram_gb`},
		{"capacity on inner", func(v map[string]any) { loc(v, 1)["capacity"] = []any{1, 2, 3} }, `location[1].capacity: vertex "r1" has children`},
		{"location leaf not in network", func(v map[string]any) { net(v, 2)["id"] = "x-pm1" }, `location leaf "r1-pm1" is not in the network tree`},
		{"network leaf not in location", func(v map[string]any) {
			v["network"] = append(v["network"].([]any), map[string]any{"id": "stray", "parent": "core", "bandwidth": 1})
		}, `network leaf "stray" is not a leaf of the location tree`},
		{"zero bandwidth", func(v map[string]any) { delete(net(v, 2), "bandwidth") }, `network[2].bandwidth: edge "r1-pm1"-"tor1" has bandwidth 0`},
		{"root bandwidth", func(v map[string]any) { net(v, 0)["bandwidth"] = 5 }, `the root "core" has no edge to a parent`},
		{"no dimensions", func(v map[string]any) { v["dimensions"] = []any{} }, `dimensions: is empty`},
		{"bad id", func(v map[string]any) { v["id"] = "a/b" }, `id: "a/b": character '/'`},
		{"unknown field", func(v map[string]any) { v["racks"] = 3 }, `unknown field "racks"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDatacenter(edit(t, base, tc.fn))
			if got := problemsOf(t, err); !strings.Contains(got, tc.want) {
				t.Fatalf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

// TestDatacenterProblemsAreTheRealOnes: one mistake is one problem, not
// a cascade of what follows from it.
func TestDatacenterProblemsAreTheRealOnes(t *testing.T) {
	base := readExample(t, "datacenter.json")
	for name, fn := range map[string]func(map[string]any){
		"unknown level of a rack": func(v map[string]any) { v["location"].([]any)[1].(map[string]any)["level"] = "row" },
		"unknown parent":          func(v map[string]any) { v["location"].([]any)[1].(map[string]any)["parent"] = "room9" },
	} {
		_, err := ParseDatacenter(edit(t, base, fn))
		var inv *Invalid
		if !errors.As(err, &inv) || len(inv.Problems) != 1 {
			t.Errorf("%s: %v, want one problem", name, err)
		}
	}
}

func TestDatacenterTooDeep(t *testing.T) {
	// A chain of 70 vertices: l0 ... l63, the last ones all at l63 below
	// each other, which is both too deep and not finer than the parent.
	var levels []Level
	var loc []Location
	var net []NetVertex
	for i := range 70 {
		lv := "l" + itoa(min(i, 63))
		if i < 64 {
			l := Level{Name: lv}
			if i > 0 {
				l.Within = []string{"l" + itoa(i-1)}
			}
			levels = append(levels, l)
		}
		v := Location{ID: "v" + itoa(i), Level: lv}
		nv := NetVertex{ID: "v" + itoa(i)}
		if i > 0 {
			v.Parent = "v" + itoa(i-1)
			nv.Parent, nv.Bandwidth = v.Parent, 1
		}
		loc = append(loc, v)
		net = append(net, nv)
	}
	loc[69].Capacity = []float64{1}
	_, err := Compile(&Datacenter{ID: "deep", Levels: levels, Dimensions: []string{"cpu"}, Location: loc, Network: net})
	if got := problemsOf(t, err); !strings.Contains(got, `location[65]: vertex "v65" is 65 edges below the root; trees are at most 64 deep`) {
		t.Fatal(got)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestTemplateProblems(t *testing.T) {
	base := readExample(t, "ha-clusters.json")
	pol := func(v map[string]any, i int) map[string]any {
		return v["placement_policies"].([]any)[i].(map[string]any)
	}
	group := func(v map[string]any, i int) map[string]any { return v["groups"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name string
		fn   func(map[string]any)
		want string
	}{
		{"group cycle", func(v map[string]any) {
			group(v, 0)["members"] = append(group(v, 0)["members"].([]any), "GRoot")
		}, `group "G1" is on a cycle of groups`},
		{"resource in two groups", func(v map[string]any) {
			group(v, 1)["members"] = append(group(v, 1)["members"].([]any), "M11")
		}, `resource "M11" is in group "G1" and in group "G2"; each is in exactly one group`},
		{"resource in no group", func(v map[string]any) {
			group(v, 0)["members"] = []any{"M11", "M12", "M13"}
		}, `resource "M14" is in no group`},
		{"unknown member", func(v map[string]any) {
			group(v, 0)["members"] = append(group(v, 0)["members"].([]any), "M99")
		}, `unknown member "M99" of group "G1"`},
		{"n zero", func(v map[string]any) { pol(v, 0)["properties"].(map[string]any)["n"] = 0 }, `placement_policies[0].properties.n: is 0; N is the least number of level-rack vertices`},
		{"n negative", func(v map[string]any) { pol(v, 0)["properties"].(map[string]any)["n"] = -2 }, `properties.n: is -2`},
		{"n missing", func(v map[string]any) { delete(pol(v, 0)["properties"].(map[string]any), "n") }, `placement_policies[0].properties.n: is missing`},
		{"unknown type", func(v map[string]any) { pol(v, 0)["type"] = "spread" }, `placement_policies[0].type: unknown type "spread"`},
		{"bad mode", func(v map[string]any) { pol(v, 0)["mode"] = "must" }, `placement_policies[0].mode: is "must"`},
		{"monadic on a pair", func(v map[string]any) { pol(v, 0)["applies_to"] = []any{"G1", "G2"} }, `is about one resource; apply it to a resource or a group, not a pair`},
		{"llmn on a resource", func(v map[string]any) { pol(v, 0)["applies_to"] = []any{"M11"} }, `apply it to a group, not to the resource "M11"`},
		{"wrong parameter", func(v map[string]any) { pol(v, 0)["properties"].(map[string]any)["hops"] = 1 }, `properties.hops: a llmn-anti-collocation policy does not take hops`},
		{"negative hops", func(v map[string]any) {
			v["placement_policies"] = append(v["placement_policies"].([]any), map[string]any{"id": "h", "type": "hop-count-limit", "mode": "hard", "applies_to": []any{"M11", "M12"}, "properties": map[string]any{"hops": -1}})
		}, `properties.hops: is -1`},
		{"dyadic on a resource", func(v map[string]any) {
			v["placement_policies"] = append(v["placement_policies"].([]any), map[string]any{"id": "a", "type": "anti-collocation", "mode": "hard", "applies_to": []any{"M11"}, "properties": map[string]any{"level": "pm"}})
		}, `apply it to a group or a pair, not to the resource "M11"`},
		{"endpoint accessibility refused", func(v map[string]any) {
			v["placement_policies"] = append(v["placement_policies"].([]any), map[string]any{"id": "e", "type": "endpoint-accessibility", "mode": "soft", "applies_to": []any{"G1", "G2"}, "properties": map[string]any{"protocols": []any{"tcp"}}})
		}, `placement_policies[3].type: a endpoint-accessibility policy cannot be checked: the datacenter model describes no firewalls`},
		{"reachability refused", func(v map[string]any) {
			v["placement_policies"] = append(v["placement_policies"].([]any), map[string]any{"id": "r", "type": "OS::NetReachability", "mode": "hard", "applies_to": []any{"G1"}})
		}, `placement_policies[3].type: a reachability policy cannot be checked: the datacenter model describes no connectivity`},
		{"volume policy on a vm", func(v map[string]any) {
			v["placement_policies"] = append(v["placement_policies"].([]any), map[string]any{"id": "x", "type": "volume-exclusive", "mode": "hard", "applies_to": []any{"M11"}})
		}, `placement_policies[3].applies_to: a volume-exclusive policy is about [volume] resources; "M11" is a "vm"`},
		{"hardConstraint against mode", func(v map[string]any) {
			pol(v, 0)["properties"].(map[string]any)["hardConstraint"] = false
		}, `placement_policies[0].mode: is "hard" and properties.hardConstraint is false; give one of them`},
		{"control character in a name", func(v map[string]any) { pol(v, 0)["id"] = "a\tb" }, `placement_policies[0].id: "a\tb" holds the control character U+0009`},
		{"placement of unknown resource", func(v map[string]any) { v["placement"].(map[string]any)["M99"] = "r1-pm1" }, `placement.M99: unknown resource "M99"`},
		{"unknown field", func(v map[string]any) { pol(v, 0)["propertys"] = 1 }, `unknown field "propertys"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTemplate(edit(t, base, tc.fn))
			if got := problemsOf(t, err); !strings.Contains(got, tc.want) {
				t.Fatalf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

func TestTemplateAgainstDatacenter(t *testing.T) {
	m := exampleModel(t)
	base := readExample(t, "ha-clusters.json")
	for _, tc := range []struct {
		name string
		fn   func(map[string]any)
		want string
	}{
		{"unknown level", func(v map[string]any) {
			v["placement_policies"].([]any)[0].(map[string]any)["properties"].(map[string]any)["l1"] = "row"
		}, `placement_policies[0].properties.l1: unknown level "row"; datacenter "dc-example" has levels [room rack pm storagebox]`},
		{"unknown leaf", func(v map[string]any) { v["placement"].(map[string]any)["M11"] = "r9-pm1" }, `placement.M11: unknown leaf "r9-pm1"`},
		{"inner vertex", func(v map[string]any) { v["placement"].(map[string]any)["M11"] = "r1" }, `placement.M11: "r1" is not a leaf`},
		{"unplaced", func(v map[string]any) { delete(v["placement"].(map[string]any), "M11") }, `placement.M11: resource "M11" is not placed`},
		{"demand length", func(v map[string]any) {
			v["resources"].([]any)[0].(map[string]any)["demand"] = []any{1}
		}, `resources[0].demand: resource "M11" has 1 numbers; datacenter "dc-example" has 3 dimensions`},
		{"other datacenter", func(v map[string]any) { v["datacenter"] = "dc-2" }, `datacenter: names "dc-2", not "dc-example"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := ParseTemplate(edit(t, base, tc.fn))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Check(m, tpl)
			if got := problemsOf(t, err); !strings.Contains(got, tc.want) {
				t.Fatalf("got\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

func messages(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		kind := "soft"
		if f.Hard {
			kind = "hard"
		}
		if f.Note {
			kind = "note"
		}
		b.WriteString(kind + " " + f.PolicyID + ": " + f.Message + "\n")
	}
	return b.String()
}

func TestCheckHAClusters(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "ha-clusters.json")
	fs, err := Check(m, tpl)
	if err != nil || len(fs) != 0 {
		t.Fatalf("compliant placement: %v\n%s", err, messages(fs))
	}
	tpl.Placement["M12"] = "r1-pm1"
	fs, err = Check(m, tpl)
	if err != nil {
		t.Fatal(err)
	}
	want := "hard ha-G1: M11 and M12 share pm r1-pm1; LLMN anti-collocation (L1=rack, L2=pm, N=2) of group G1 allows no two members in one pm\n"
	if got := messages(fs); got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
	if fs[0].Type != LLMNAntiCollocation || strings.Join(fs[0].Resources, ",") != "M11,M12" {
		t.Fatalf("finding %+v", fs[0])
	}
}

func TestCheckPolicies(t *testing.T) {
	m := exampleModel(t)
	ha := readExample(t, "ha-clusters.json")
	with := func(policies []any, placement map[string]any) func(map[string]any) {
		return func(v map[string]any) {
			v["placement_policies"] = policies
			for k, l := range placement {
				v["placement"].(map[string]any)[k] = l
			}
		}
	}
	p := func(id, typ, mode string, to []any, props map[string]any) map[string]any {
		return map[string]any{"id": id, "type": typ, "mode": mode, "applies_to": to, "properties": props}
	}
	for _, tc := range []struct {
		name string
		fn   func(map[string]any)
		want string
	}{
		{"llmn per rack bound", with([]any{p("l", "llmn-anti-collocation", "hard", []any{"G1"}, map[string]any{"l1": "rack", "l2": "pm", "n": 2})},
			map[string]any{"M13": "r1-pm3"}),
			"hard l: rack r1 holds 3 members (M11, M12, M13); LLMN anti-collocation (L1=rack, L2=pm, N=2) of group G1 allows at most ceil(4/2)=2 per rack\n"},
		{"llmn too few racks", with([]any{p("l", "llmn-anti-collocation", "soft", []any{"G1"}, map[string]any{"l1": "rack", "l2": "pm", "n": 1})},
			map[string]any{"M13": "r1-pm3", "M14": "r1-pm4"}), ""},
		{"llmn spans", with([]any{p("l", "llmn-anti-collocation", "soft", []any{"G1"}, map[string]any{"l1": "room", "l2": "pm", "n": 2})}, nil),
			"soft l: room room1 holds 4 members (M11, M12, M13, M14); LLMN anti-collocation (L1=room, L2=pm, N=2) of group G1 allows at most ceil(4/2)=2 per room\nsoft l: the 4 members span 1 room (room1); LLMN anti-collocation (L1=room, L2=pm, N=2) of group G1 needs at least 2\n"},
		{"anti-collocation at rack", with([]any{p("a", "anti-collocation", "hard", []any{"M11", "M12"}, map[string]any{"level": "rack"})}, nil),
			"hard a: M11 and M12 share rack r1; anti-collocation at rack\n"},
		{"collocation at rack", with([]any{p("c", "collocation", "soft", []any{"M11", "M13"}, map[string]any{"level": "rack"})}, nil),
			"soft c: M11 is in rack r1 and M13 in rack r2; collocation at rack\n"},
		{"collocation on a group's direct members", with([]any{p("c", "collocation", "hard", []any{"GRoot"}, map[string]any{"level": "room"})}, nil), ""},
		{"hop count", with([]any{p("h", "hop-count-limit", "hard", []any{"M11", "M13"}, map[string]any{"hops": 2})}, nil),
			"hard h: M11 and M13 are 4 network hops apart (r1-pm1 to r2-pm1); hop-count limit 2\n"},
		{"bandwidth", with([]any{p("b", "bandwidth", "hard", []any{"M11", "G2"}, map[string]any{"bytes_per_second": 3e8})}, nil),
			"hard b: network edge r1-pm1-tor1 needs 1200000000 bytes/s for M11-M21, M11-M22, M11-M23, M11-M24; its bandwidth is 1000000000\n"},
		{"non-overload", with(nil, map[string]any{"M21": "r1-pm1", "M31": "r1-pm1", "M22": "r1-pm1", "M32": "r1-pm1"}),
			"hard non-overload: leaf r1-pm1 is overloaded in vcpu: M11, M21, M22, M31, M32 demand 20, its capacity is 16; non-overload\n"},
		{"licensed product on licensed hosts", with([]any{p("lic", "licensed-product", "hard", []any{"G1"}, map[string]any{"catalog": "ibm", "product": "websphere"})}, nil), ""},
		{"licensed product", with([]any{p("lic", "licensed-product", "hard", []any{"G1"}, map[string]any{"catalog": "ibm", "product": "websphere"})},
			map[string]any{"M13": "r3-pm1", "M14": "r1-sb1"}),
			"hard lic: M13 is on r3-pm1, of type x86-1s16c, which does not license product websphere of catalog ibm\n" +
				"hard lic: M14 is on r1-sb1, which has no host type; licensed product websphere of catalog ibm needs a host whose type licenses it (types[].licensed_products)\n" +
				"hard non-overload: leaf r1-sb1 is overloaded in vcpu: M14 demand 4, its capacity is 0; non-overload\n" +
				"hard non-overload: leaf r1-sb1 is overloaded in ram_gb: M14 demand 8, its capacity is 0; non-overload\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := ParseTemplate(edit(t, ha, tc.fn))
			if err != nil {
				t.Fatal(err)
			}
			fs, err := Check(m, tpl)
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(fs); got != tc.want {
				t.Fatalf("got\n%swant\n%s", got, tc.want)
			}
		})
	}
}

// TestExpansion follows the seed's example: GP has members GL {R1, R2}
// and GR {R3, R4}; a dyadic policy on GP applies to the pair {GL, GR},
// that is to (R1,R3), (R1,R4), (R2,R3), (R2,R4), and not within GL or GR.
func TestExpansion(t *testing.T) {
	m := exampleModel(t)
	tpl, err := ParseTemplate([]byte(`{"resources":[{"id":"R1"},{"id":"R2"},{"id":"R3"},{"id":"R4"}],
	 "groups":[{"id":"GP","members":["GL","GR"]},{"id":"GL","members":["R1","R2"]},{"id":"GR","members":["R3","R4"]}],
	 "placement_policies":[{"id":"a","type":"anti-collocation","mode":"hard","applies_to":["GP"],"properties":{"level":"pm"}},
	                       {"id":"p","type":"anti-collocation","mode":"soft","applies_to":["R1","GR"],"properties":{"level":"pm"}}],
	 "placement":{"R1":"r1-pm1","R2":"r1-pm1","R3":"r1-pm1","R4":"r1-pm1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	fs, err := Check(m, tpl)
	if err != nil {
		t.Fatal(err)
	}
	want := `hard a: R1 and R3 share pm r1-pm1; anti-collocation at pm
hard a: R1 and R4 share pm r1-pm1; anti-collocation at pm
hard a: R2 and R3 share pm r1-pm1; anti-collocation at pm
hard a: R2 and R4 share pm r1-pm1; anti-collocation at pm
soft p: R1 and R3 share pm r1-pm1; anti-collocation at pm
soft p: R1 and R4 share pm r1-pm1; anti-collocation at pm
`
	if got := messages(fs); got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
}

func TestCheckHadoopDirectAttached(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "hadoop.json")
	fs, err := Check(m, tpl)
	if err != nil || len(fs) != 0 {
		t.Fatalf("%v\n%s", err, messages(fs))
	}
	tpl.Placement["volume-2"] = "r2-sb1"
	fs, _ = Check(m, tpl)
	want := "hard das-2: datanode-2 and volume-2 are 2 network hops apart (r2-pm1 to r2-sb1); hop-count limit 0 (the same host: direct attached)\n"
	if got := messages(fs); got != want {
		t.Fatalf("got\n%swant\n%s", got, want)
	}
}

func TestProposeHA(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "ha-clusters.json")
	tpl.Placement = nil
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tpl.Placement = p.Placement
	fs, err := Check(m, tpl)
	if err != nil || len(fs) != 0 {
		t.Fatalf("proposal %v: %v\n%s", p.Placement, err, messages(fs))
	}
}

func TestProposeHadoopKeepsGivenPlacement(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "hadoop.json")
	tpl.Placement = map[string]string{"namenode": "r3-pm4"}
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Placement["namenode"] != "r3-pm4" {
		t.Fatalf("namenode moved to %s", p.Placement["namenode"])
	}
	for i := 1; i <= 4; i++ {
		vm, vol := p.Placement["datanode-"+itoa(i)], p.Placement["volume-"+itoa(i)]
		if vm != vol {
			t.Errorf("datanode-%d on %s, its volume on %s", i, vm, vol)
		}
	}
	if len(p.Warnings) != 0 {
		t.Errorf("soft anti-collocation of the datanodes not met: %s", messages(p.Warnings))
	}
}

func TestProposeSoftWhenItMust(t *testing.T) {
	m := exampleModel(t)
	// Two VMs that would fill one pm each must share a rack (hard); soft:
	// in different racks. The hard one wins and the soft one is reported.
	tpl, err := ParseTemplate([]byte(`{"resources":[{"id":"A","demand":[16,1,0]},{"id":"B","demand":[16,1,0]}],
	 "placement_policies":[{"id":"same-rack","type":"collocation","mode":"hard","applies_to":["A","B"],"properties":{"level":"rack"}},
	                       {"id":"apart","type":"anti-collocation","mode":"soft","applies_to":["A","B"],"properties":{"level":"rack"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Propose(m, tpl, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := messages(p.Warnings); !strings.HasPrefix(got, "soft apart: A and B share rack r1; anti-collocation at rack") {
		t.Fatalf("warnings %s", got)
	}
}

func TestProposeInfeasible(t *testing.T) {
	m := exampleModel(t)
	for _, tc := range []struct {
		name, template string
		policies       []string
		reason         string
	}{
		{"llmn needs more racks", `{"resources":[{"id":"A"},{"id":"B"}],"groups":[{"id":"G","members":["A","B"]}],
		  "placement_policies":[{"id":"spread","type":"llmn-anti-collocation","mode":"hard","applies_to":["G"],"properties":{"l1":"rack","l2":"pm","n":4}}]}`,
			[]string{"spread"}, "spreads group G over at least 4 rack, and datacenter dc-example has 3"},
		{"collocated and apart", `{"resources":[{"id":"A"},{"id":"B"}],
		  "placement_policies":[{"id":"same","type":"collocation","mode":"hard","applies_to":["A","B"],"properties":{"level":"rack"}},
		                        {"id":"apart","type":"anti-collocation","mode":"hard","applies_to":["A","B"],"properties":{"level":"rack"}}]}`,
			[]string{"apart", "same"}, "no leaf is left for resource B"},
		{"too much demand", `{"resources":[{"id":"A","demand":[100,1,1]}]}`, []string{"non-overload"}, "(non-overload ruled out 15 leaves)"},
		{"total demand", `{"resources":[{"id":"A","demand":[1,1000,1]}]}`, []string{"non-overload"}, "the resources demand 1000 ram_gb in all; datacenter dc-example has 768"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := ParseTemplate([]byte(tc.template))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Propose(m, tpl, Options{})
			var inf *Infeasible
			if !errors.As(err, &inf) {
				t.Fatalf("error %v", err)
			}
			if strings.Join(inf.Policies, ",") != strings.Join(tc.policies, ",") || !strings.Contains(inf.Reason, tc.reason) {
				t.Fatalf("got %v: %s", inf.Policies, inf.Reason)
			}
		})
	}
}

func TestProposeTimeLimit(t *testing.T) {
	m := bigDatacenter(t, 20, 20)
	// 400 VMs that each fill a pm, pairwise in one rack: no rack holds
	// them, and the search thrashes until the time limit.
	tpl := &Template{}
	g := Group{ID: "g"}
	for i := range 400 {
		id := "vm" + itoa(i)
		tpl.Resources = append(tpl.Resources, Resource{ID: id, Demand: []float64{16, 1}})
		g.Members = append(g.Members, id)
	}
	tpl.Groups = []Group{g}
	tpl.Policies = []Policy{{ID: "one-rack", Type: Collocation, Mode: Hard, AppliesTo: []string{"g"}, Properties: Properties{Level: "rack"}}}
	_, err := Propose(m, tpl, Options{Timeout: 200 * time.Millisecond, MaxSteps: 1 << 40})
	var inf *Infeasible
	if !errors.As(err, &inf) || !strings.Contains(inf.Reason, "(the time limit)") || !slices.Contains(inf.Policies, "one-rack") {
		t.Fatalf("error %v", err)
	}
}

func TestProposeStepLimit(t *testing.T) {
	m := exampleModel(t)
	tpl := exampleTemplate(t, "ha-clusters.json")
	tpl.Placement = nil
	_, err := Propose(m, tpl, Options{MaxSteps: 5})
	var inf *Infeasible
	if !errors.As(err, &inf) || !strings.Contains(inf.Reason, "the search stopped after trying 5 leaves (the step limit)") {
		t.Fatalf("error %v", err)
	}
}
