package placement

import (
	"errors"
	"strings"
	"testing"
)

// TestDatacenterReportsEveryProblem: a model with six mistakes in six
// parts (id, levels, location ids, capacities, types, network) is refused
// once, naming each with its path.
func TestDatacenterReportsEveryProblem(t *testing.T) {
	base := readExample(t, "datacenter.json")
	bad := edit(t, base, func(v map[string]any) {
		v["id"] = "dc/1"
		v["levels"].([]any)[1].(map[string]any)["within"] = []any{"site"}
		loc := v["location"].([]any)
		loc[3].(map[string]any)["id"] = "r1-pm1"
		loc[8].(map[string]any)["capacity"] = []any{16, -64, 2000}
		loc[9].(map[string]any)["type"] = "x86-2s"
		v["network"].([]any)[14].(map[string]any)["bandwidth"] = 0
	})
	_, err := ParseDatacenter(bad)
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("error %v", err)
	}
	want := []string{
		`id: "dc/1": character '/'`,
		`levels[1].within[0]: unknown level "site"`,
		`location[3].id: "r1-pm1" is also the id of location[2]`,
		`location[8].capacity[1]: leaf "r2-pm1" has capacity -64 for ram_gb`,
		`location[9].type: unknown type "x86-2s" of leaf "r2-pm2"`,
		`network[14].bandwidth: edge "r3-pm1"-"tor3" has bandwidth 0`,
	}
	got := inv.Error()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in\n%s", w, got)
		}
	}
	if len(inv.Problems) > len(want)+1 {
		t.Errorf("%d problems for %d mistakes:\n%s", len(inv.Problems), len(want), strings.ReplaceAll(got, "; ", "\n"))
	}
}
