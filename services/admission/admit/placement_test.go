package admit

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/placement"
)

// haRequest is a deployment request carrying the seed's HA clusters
// template (services/placement/examples), with edit applied to it.
func haRequest(t *testing.T, edit func(tpl map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile("../../placement/examples/ha-clusters.json")
	if err != nil {
		t.Fatal(err)
	}
	var req map[string]any
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	req["deployment_id"], req["tenant"] = "ha", "t1"
	req["applications"] = []any{map[string]any{"name": "appserver", "class": "com.example.AppServer", "instances": 12}}
	out, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func exampleDatacenters(t *testing.T) Datacenters {
	b, err := os.ReadFile("../../placement/examples/datacenter.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := placement.ParseDatacenter(b)
	if err != nil {
		t.Fatal(err)
	}
	return func(id string) (*placement.Model, bool) {
		if id == m.ID() {
			return m, true
		}
		return nil, false
	}
}

func TestCheckPlacement(t *testing.T) {
	dcs := exampleDatacenters(t)
	for _, tc := range []struct {
		name       string
		edit       func(map[string]any)
		violations []string
		warnings   []string
	}{
		{name: "compliant"},
		{name: "two members of a cluster on one pm",
			edit:       func(r map[string]any) { r["placement"].(map[string]any)["M12"] = "r1-pm1" },
			violations: []string{`tenant "t1": resources M11, M12: M11 and M12 share pm r1-pm1; LLMN anti-collocation (L1=rack, L2=pm, N=2) of group G1 allows no two members in one pm (rule placement.llmn-anti-collocation of policy ha-G1)`}},
		{name: "soft policy warns",
			edit: func(r map[string]any) {
				r["placement_policies"] = append(r["placement_policies"].([]any), map[string]any{"id": "racks-apart", "type": "anti-collocation", "mode": "soft", "applies_to": []any{"M11", "M13"}, "properties": map[string]any{"level": "room"}})
			},
			warnings: []string{`tenant "t1": resources M11, M13: M11 and M13 share room room1; anti-collocation at room (rule placement.anti-collocation of policy racks-apart)`}},
		{name: "unknown datacenter",
			edit:       func(r map[string]any) { r["datacenter"] = "dc-9" },
			violations: []string{`tenant "t1": datacenter "dc-9": unknown datacenter "dc-9": store its model first (PUT /v1/datacenters/dc-9, policyctl dc apply FILE) or name another (rule placement.datacenter of policy placement)`}},
		{name: "unknown leaf",
			edit:       func(r map[string]any) { r["placement"].(map[string]any)["M12"] = "r7-pm1" },
			violations: []string{`placement.M12: unknown leaf "r7-pm1"; datacenter "dc-example" has no such host (rule placement.template of policy placement)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mustRequest(t, haRequest(t, tc.edit))
			v, _ := Evaluate(context.Background(), req, nil)
			CheckPlacement(&v, dcs, nil)
			if v.Admitted != (len(tc.violations) == 0) {
				t.Errorf("admitted = %v", v.Admitted)
			}
			check := func(what string, got []Finding, want []string) {
				texts := Texts("t1", got)
				if len(texts) != len(want) {
					t.Fatalf("%s = %q, want %q", what, texts, want)
				}
				for i := range want {
					if !strings.Contains(texts[i], want[i]) {
						t.Errorf("%s[%d] = %q, want it to contain %q", what, i, texts[i], want[i])
					}
				}
			}
			check("violations", v.Violations, tc.violations)
			check("warnings", v.Warnings, tc.warnings)
		})
	}
}

func TestPlacementRequestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, field, msg string
		edit             func(map[string]any)
	}{
		{"no datacenter", "datacenter", "is missing: resources, groups, placement policies and a placement are checked against a datacenter model", func(r map[string]any) { delete(r, "datacenter") }},
		{"group cycle", "groups[0]", `group "G1" is on a cycle of groups`, func(r map[string]any) {
			g := r["groups"].([]any)[0].(map[string]any)
			g["members"] = append(g["members"].([]any), "GRoot")
		}},
		{"n zero", "placement_policies[1].properties.n", "is 0", func(r map[string]any) {
			r["placement_policies"].([]any)[1].(map[string]any)["properties"].(map[string]any)["n"] = 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(haRequest(t, tc.edit)))
			var re *RequestError
			if !errors.As(err, &re) || re.Field != tc.field || !strings.Contains(re.Msg, tc.msg) {
				t.Fatalf("error %v, want field %s: %s", err, tc.field, tc.msg)
			}
		})
	}
}

// A request without placement reads and travels as it did before.
func TestRequestWithoutPlacementUnchanged(t *testing.T) {
	js := `{"deployment_id":"d1","tenant":"t1","environment":"prod","applications":[{"name":"web","class":"com.example.Web","instances":1}]}`
	r := mustRequest(t, js)
	b, err := r.JSON()
	if err != nil || string(b) != js {
		t.Fatalf("JSON = %s, %v", b, err)
	}
	v, _ := Evaluate(context.Background(), r, nil)
	CheckPlacement(&v, func(string) (*placement.Model, bool) { t.Fatal("looked a datacenter up"); return nil, false }, nil)
	if !v.Admitted {
		t.Fatal(v.Violations)
	}
}

// TestSeedHadoopRequest: a deployment request carrying the seed's Hadoop
// template as written (Proposal A), plus a datacenter and a placement, is
// read, travels as JSON and is read again, and is checked: admitted as
// placed, denied naming the seed's policy when two volumes share a host.
func TestSeedHadoopRequest(t *testing.T) {
	b, err := os.ReadFile("../../placement/examples/heat-hadoop.json")
	if err != nil {
		t.Fatal(err)
	}
	var req map[string]any
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	req["deployment_id"], req["tenant"], req["datacenter"] = "hadoop", "t1", "dc-heat"
	req["applications"] = []any{map[string]any{"name": "hadoop", "class": "org.apache.Hadoop", "instances": 5}}
	vol := func(n int) string { return "Storage volume used by datanode server_" + itoa(n) }
	placed := map[string]any{"WCA4-hadoop-namenode_1": "rack3-node4"}
	for i, host := range []string{"rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"} {
		placed["WCA4-hadoop-datanode-"+itoa(i+1)] = host
		placed[vol(3-i)] = host
	}
	req["placement"] = placed
	js, _ := json.Marshal(req)
	r := mustRequest(t, string(js))
	canon, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseRequest(canon); err != nil {
		t.Fatalf("the canonical form %s does not read again: %v", canon, err)
	}
	mb, err := os.ReadFile("../../placement/examples/heat-datacenter.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := placement.ParseDatacenter(mb)
	if err != nil {
		t.Fatal(err)
	}
	dcs := func(id string) (*placement.Model, bool) { return m, id == m.ID() }
	v, _ := Evaluate(context.Background(), r, nil)
	CheckPlacement(&v, dcs, nil)
	if !v.Admitted || len(v.Warnings) != 0 {
		t.Fatalf("admitted %v: %q %q", v.Admitted, Texts("t1", v.Violations), Texts("t1", v.Warnings))
	}
	r.Placement[vol(2)] = "rack1-node1"
	r.Placement["WCA4-hadoop-datanode-2"] = "rack1-node1"
	v, _ = Evaluate(context.Background(), r, nil)
	CheckPlacement(&v, dcs, nil)
	texts := strings.Join(Texts("t1", v.Violations), "\n")
	if v.Admitted || !strings.Contains(texts, "Storage volume used by datanode server_3 shares host rack1-node1 with volume Storage volume used by datanode server_2; volume-exclusive") {
		t.Fatalf("admitted %v: %s", v.Admitted, texts)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
