package placement

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseDatacenter: any bytes as a datacenter are refused with an
// *Invalid or accepted as a model whose canonical JSON parses again.
func FuzzParseDatacenter(f *testing.F) {
	f.Add(readExample(f, "datacenter.json"))
	f.Add(readExample(f, "heat-datacenter.json"))
	for _, s := range []string{
		`{"id":"d","levels":[{"name":"a"}],"dimensions":["c"],"location":[{"id":"x","level":"a","capacity":[1]}],"network":[{"id":"x"}]}`,
		`{"id":"d","levels":[{"name":"a","within":["a"]}],"dimensions":["c"],"location":[{"id":"x","level":"a","parent":"x"}],"network":[{"id":"x","parent":"x"}]}`,
		`{}`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 8<<10 {
			return
		}
		m, err := ParseDatacenter(data)
		if err != nil {
			var inv *Invalid
			if !errors.As(err, &inv) || len(inv.Problems) == 0 {
				t.Fatalf("error %v is not a list of problems", err)
			}
			return
		}
		b, err := m.Datacenter().JSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseDatacenter(b); err != nil {
			t.Fatalf("canonical form %s does not parse: %v", b, err)
		}
	})
}

// FuzzCheckTemplate: any bytes as a template are refused with an *Invalid,
// or checked against the example datacenter and proposed a placement
// without panicking, within the step limit.
func FuzzCheckTemplate(f *testing.F) {
	m := exampleModel(f)
	f.Add(readExample(f, "ha-clusters.json"))
	f.Add(readExample(f, "hadoop.json"))
	f.Add(readExample(f, "heat-hadoop.json"))
	f.Add(readExample(f, "heat-ha-clusters.json"))
	f.Add([]byte(`{"resources":{"v":{"type":"OS::Cinder::Volume","policies":[{"type":"OS::VolExclusive"},{"type":"OS::VolNotMoved"}]},"s":{"type":"OS::Nova::Server"},"x":{"type":"OS::Cinder::VolumeAttachment","properties":{"instance_uuid":{"get_resource":"s"},"volume_id":{"get_resource":"v"}},"policies":[{"type":"OS::NetMaxHops","properties":{"hops":0}}]}},"groups":{"id":"g","members":[{"get_resource":"s"},{"get_resource":"v"},{"get_resource":"x"}],"relationships":[{"related":{"get_resource":"s"},"policies":[{"type":"OS::LicensedProduct","properties":{"catalog":"ibm","product":"websphere"}}]}]},"current_placement":{"v":"r1-pm1"}}`))
	f.Add([]byte(`{"resources":[{"id":"A"},{"id":"B"}],"groups":[{"id":"G","members":["A","G"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 8<<10 {
			return
		}
		tpl, err := ParseTemplate(data)
		var inv *Invalid
		if err != nil {
			if !errors.As(err, &inv) {
				t.Fatalf("error %v is not *Invalid", err)
			}
			return
		}
		if _, err := Check(m, tpl); err != nil && !errors.As(err, &inv) {
			t.Fatalf("check: %v", err)
		}
		p, err := Propose(m, tpl, Options{MaxSteps: 10000})
		var inf *Infeasible
		if err != nil && !errors.As(err, &inv) && !errors.As(err, &inf) {
			t.Fatalf("propose: %v", err)
		}
		if err == nil && p.Steps > 10000 {
			t.Fatalf("%d steps", p.Steps)
		}
		// The canonical form reads back to the same flat policies.
		b, err := json.Marshal(tpl)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseTemplate(b)
		if err != nil {
			t.Fatalf("canonical form %s: %v", b, err)
		}
		if x, y := len(tpl.Flat().Policies), len(again.Flat().Policies); x != y {
			t.Fatalf("%d policies, %d after the canonical form %s", x, y, b)
		}
	})
}
