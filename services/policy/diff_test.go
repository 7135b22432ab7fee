package policy

import (
	"encoding/json"
	"testing"
)

func TestDiff(t *testing.T) {
	for _, tc := range []struct{ from, to, want string }{
		{`{"a": 1}`, `{"a": 1}`, `[]`},
		{`{"a": 1, "b": {"c": [1, 2], "d": "x"}, "gone": true}`, `{"a": 1.0, "b": {"c": [1, 3], "d": "x", "e/f~": null}}`,
			`[{"op":"replace","path":"/a","value":1.0},{"op":"replace","path":"/b/c","value":[1,3]},{"op":"add","path":"/b/e~1f~0","value":null},{"op":"remove","path":"/gone"}]`},
		{`{"a": {"b": 1}}`, `{"a": "s"}`, `[{"op":"replace","path":"/a","value":"s"}]`},
	} {
		ops, err := Diff([]byte(tc.from), []byte(tc.to))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(ops)
		if string(got) != tc.want {
			t.Errorf("Diff(%s, %s) = %s, want %s", tc.from, tc.to, got, tc.want)
		}
	}
	if _, err := Diff([]byte(`{`), []byte(`{}`)); err == nil {
		t.Error("Diff of a value that is not JSON: no error")
	}
}

func TestDiffBodiesLeavesOutWhatThePDPAdds(t *testing.T) {
	served := `{"policyName":"A.2.xml","policyVersion":"2","policyConfigStatus":"CONFIG_RETRIEVED","policyConfigMessage":"Config Retrieved! ",` +
		`"responseAttributes":{},"property":null,"type":"JSON","config":{"a":1}}`
	pushed := `{"policyName":"A.3.xml","policyVersion":"3","policyConfigStatus":"CONFIG_RETRIEVED","type":"JSON","config":{"a":1}}`
	ops, err := DiffBodies([]byte(served), []byte(pushed))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op == "remove" {
			t.Fatalf("diff %+v reports %s removed: the PDP adds it", ops, op.Path)
		}
	}
	if len(ops) != 2 {
		t.Fatalf("diff %+v, want the name and version replaced", ops)
	}
	// A field the pushed body carries is compared.
	ops, _ = DiffBodies([]byte(served), []byte(`{"policyName":"A.2.xml","policyVersion":"2","policyConfigStatus":"CONFIG_RETRIEVED","policyConfigMessage":"other",`+
		`"responseAttributes":{},"property":null,"type":"JSON","config":{"a":1}}`))
	if len(ops) != 1 || ops[0].Path != "/policyConfigMessage" {
		t.Fatalf("diff %+v, want policyConfigMessage replaced", ops)
	}
}
