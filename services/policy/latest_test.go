package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func pdpBody(id, version, config string) Body {
	return Body{
		"policyName":          id + "." + version + ".xml",
		"policyVersion":       version,
		"policyConfigStatus":  "CONFIG_RETRIEVED",
		"policyConfigMessage": "Config Retrieved! ",
		"type":                "JSON",
		"matchingConditions":  map[string]any{"ONAPName": "DCAE", "ConfigName": "alex_config_name"},
		"responseAttributes":  map[string]any{},
		"property":            nil,
		"config":              config,
	}
}

func versionsOf(m map[string]Body) map[string]string {
	out := make(map[string]string, len(m))
	for id, b := range m {
		out[id] = b.VersionString()
	}
	return out
}

func TestLatest(t *testing.T) {
	notFound := func(b Body) Body {
		b["policyConfigStatus"] = "CONFIG_NOT_FOUND"
		return b
	}
	withVersion := func(b Body, v any) Body {
		b["policyVersion"] = v
		return b
	}
	tests := []struct {
		name        string
		bodies      []Body
		wantLatest  map[string]string
		wantErrored map[string]string
		wantSkipped int
	}{
		{
			name:       "numeric, not lexical: 10 beats 9",
			bodies:     []Body{pdpBody("DCAE.Config_a", "9", `{"v":9}`), pdpBody("DCAE.Config_a", "10", `{"v":10}`), pdpBody("DCAE.Config_a", "2", `{"v":2}`)},
			wantLatest: map[string]string{"DCAE.Config_a": "10"},
		},
		{
			name: "several policy_ids",
			bodies: []Body{
				pdpBody("DCAE.Config_VM_MEMORY", "5", `{"min_memory":"2GB"}`),
				pdpBody("DCAE.Config_VM_STORAGE", "1", `{"s":1}`),
				pdpBody("DCAE.Config_VM_MEMORY", "222", `{"min_memory":"8GB"}`),
			},
			wantLatest: map[string]string{"DCAE.Config_VM_MEMORY": "222", "DCAE.Config_VM_STORAGE": "1"},
		},
		{
			name:        "non-digit versions are skipped",
			bodies:      []Body{pdpBody("DCAE.Config_a", "3", `{"v":3}`), withVersion(pdpBody("DCAE.Config_a", "4", `{"v":4}`), "4a"), withVersion(pdpBody("DCAE.Config_a", "99", `{}`), "v99")},
			wantLatest:  map[string]string{"DCAE.Config_a": "3"},
			wantSkipped: 2,
		},
		{
			name:        "numeric JSON version is skipped",
			bodies:      []Body{pdpBody("DCAE.Config_a", "3", `{"v":3}`), withVersion(pdpBody("DCAE.Config_a", "4", `{"v":4}`), json.Number("4"))},
			wantLatest:  map[string]string{"DCAE.Config_a": "3"},
			wantSkipped: 1,
		},
		{
			name:        "invalid latest is errored, not replaced by the older valid one",
			bodies:      []Body{pdpBody("DCAE.Config_a", "1", `{"v":1}`), notFound(pdpBody("DCAE.Config_a", "2", `{"v":2}`)), pdpBody("DCAE.Config_b", "1", `{"v":1}`)},
			wantLatest:  map[string]string{"DCAE.Config_b": "1"},
			wantErrored: map[string]string{"DCAE.Config_a": "2"},
		},
		{
			name:        "empty config on the latest is errored",
			bodies:      []Body{pdpBody("DCAE.Config_a", "1", `{"v":1}`), pdpBody("DCAE.Config_a", "2", `{}`)},
			wantErrored: map[string]string{"DCAE.Config_a": "2"},
		},
		{
			name:       "an invalid older version does not matter",
			bodies:     []Body{notFound(pdpBody("DCAE.Config_a", "1", `{"v":1}`)), pdpBody("DCAE.Config_a", "2", `{"v":2}`)},
			wantLatest: map[string]string{"DCAE.Config_a": "2"},
		},
		{
			name: "no name, no version, no policy_id: skipped",
			bodies: []Body{
				{"policyVersion": "1", "config": "x", "policyConfigStatus": "CONFIG_RETRIEVED"},
				{"policyName": "DCAE.Config_a", "config": "x", "policyConfigStatus": "CONFIG_RETRIEVED"},
				{"policyName": ".1.xml", "policyVersion": "1", "config": "x", "policyConfigStatus": "CONFIG_RETRIEVED"},
				nil,
			},
			wantSkipped: 4,
		},
		{
			name: "without policyVersion, the version in the name counts",
			bodies: []Body{
				pdpBody("DCAE.Config_a", "3", `{"v":3}`),
				{"policyName": "DCAE.Config_a.4.xml", "config": "x", "policyConfigStatus": "CONFIG_RETRIEVED"},
			},
			wantLatest: map[string]string{"DCAE.Config_a": "4"},
		},
		{
			name: "version comes from policyVersion, and one other than the name's makes the latest errored",
			bodies: []Body{
				withVersion(pdpBody("DCAE.Config_a", "50", `{"v":"named 50"}`), "1"),
				withVersion(pdpBody("DCAE.Config_a", "3", `{"v":"named 3"}`), "7"),
			},
			wantErrored: map[string]string{"DCAE.Config_a": "7"},
		},
		{
			name:       "leading zeros compare numerically",
			bodies:     []Body{pdpBody("DCAE.Config_a", "010", `{"v":10}`), pdpBody("DCAE.Config_a", "9", `{"v":9}`)},
			wantLatest: map[string]string{"DCAE.Config_a": "010"},
		},
		{
			name:   "nothing in, nothing out",
			bodies: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			latest, errored := Latest(tt.bodies)
			if got := versionsOf(latest); !reflect.DeepEqual(got, orEmpty(tt.wantLatest)) {
				t.Errorf("latest = %v; want %v", got, tt.wantLatest)
			}
			if got := versionsOf(errored); !reflect.DeepEqual(got, orEmpty(tt.wantErrored)) {
				t.Errorf("errored = %v; want %v", got, tt.wantErrored)
			}
			sel := SelectLatest(tt.bodies)
			if len(sel.Skipped) != tt.wantSkipped {
				t.Errorf("skipped = %+v; want %d", sel.Skipped, tt.wantSkipped)
			}
			for id := range errored {
				if sel.Reasons[id] == nil {
					t.Errorf("no reason for errored %s", id)
				}
			}
		})
	}
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func TestLatestTieKeepsFirst(t *testing.T) {
	first := pdpBody("DCAE.Config_a", "3", `{"which":"first"}`)
	second := pdpBody("DCAE.Config_a", "3", `{"which":"second"}`)
	latest, _ := Latest([]Body{first, second})
	cfg := latest["DCAE.Config_a"]["config"].(map[string]any)
	if cfg["which"] != "first" {
		t.Fatalf("tie picked %v; want the first", cfg["which"])
	}
}

func TestLatestNormalizesAndKeepsInput(t *testing.T) {
	in := pdpBody("DCAE.Config_host_capacity_policy_id_value", "69", `{"hello":"world"}`)
	in["someFutureField"] = []any{"x"}
	latest, _ := Latest([]Body{in})
	got := latest["DCAE.Config_host_capacity_policy_id_value"]
	if !reflect.DeepEqual(got["config"], map[string]any{"hello": "world"}) {
		t.Fatalf("config = %#v; want parsed", got["config"])
	}
	if !reflect.DeepEqual(got["someFutureField"], []any{"x"}) {
		t.Fatalf("unknown field lost: %#v", got)
	}
	if _, ok := in["config"].(string); !ok {
		t.Fatalf("input body was modified: %#v", in["config"])
	}
}

func TestSelectLatestExplains(t *testing.T) {
	bad := pdpBody("DCAE.Config_a", "12", `{"v":12}`)
	bad["policyConfigStatus"] = "CONFIG_NOT_FOUND"
	bodies := []Body{
		pdpBody("DCAE.Config_a", "9", `{"v":9}`),
		bad,
		pdpBody("DCAE.Config_a", "10", `{"v":10}`),
		pdpBody("DCAE.Config_a", "10", `{"v":"10 again"}`),
		{"policyName": "DCAE.Config_a.x.xml", "policyVersion": "x"},
	}
	sel := SelectLatest(bodies)
	if got, want := sel.Versions["DCAE.Config_a"], []string{"9", "10", "12"}; !reflect.DeepEqual(got, want) {
		t.Errorf("versions = %v; want %v", got, want)
	}
	if len(sel.Skipped) != 1 || sel.Skipped[0].Index != 4 || !strings.Contains(sel.Skipped[0].Reason, `"x" is not all digits`) {
		t.Errorf("skipped = %+v", sel.Skipped)
	}
	if err := sel.Reasons["DCAE.Config_a"]; err == nil || !strings.Contains(err.Error(), "CONFIG_NOT_FOUND") {
		t.Errorf("reason = %v", err)
	}
	if _, ok := sel.Latest["DCAE.Config_a"]; ok {
		t.Errorf("errored policy is also in latest")
	}
}

// TestLatestMatchesReference checks Latest against a direct transcription of
// the reference selection (max int(policyVersion) per policy_id, first wins
// on ties, non-digit versions skipped, then validation) on generated input.
func TestLatestMatchesReference(t *testing.T) {
	var bodies []Body
	for i := 0; i < 400; i++ {
		id := fmt.Sprintf("DCAE.Config_p%d", i%37)
		v := fmt.Sprintf("%d", (i*7919)%23)
		if i%11 == 0 {
			v = "v" + v
		}
		b := pdpBody(id, v, fmt.Sprintf(`{"i":%d}`, i))
		if i%5 == 0 {
			b["policyConfigStatus"] = "CONFIG_NOT_FOUND"
		}
		if i%13 == 0 {
			b["config"] = ""
		}
		bodies = append(bodies, b)
	}
	type ref struct {
		idx int
		v   int64
	}
	best := map[string]ref{}
	for i, b := range bodies {
		id, _ := b.PolicyID()
		v, ok := b.Version()
		if !ok {
			continue
		}
		if cur, seen := best[id]; !seen || v > cur.v {
			best[id] = ref{i, v}
		}
	}
	latest, errored := Latest(bodies)
	var ids []string
	for id := range best {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(latest)+len(errored) != len(ids) {
		t.Fatalf("latest %d + errored %d != %d policy_ids", len(latest), len(errored), len(ids))
	}
	for _, id := range ids {
		want := bodies[best[id].idx]
		got, isLatest := latest[id]
		if !isLatest {
			got = errored[id]
		}
		if got["policyName"] != want["policyName"] || !reflect.DeepEqual(got["config"], Normalize(want)["config"]) {
			t.Errorf("%s: got %v; want %v", id, got, want)
		}
		if (Validate(want) == nil) != isLatest {
			t.Errorf("%s: in latest = %v, but Validate = %v", id, isLatest, Validate(want))
		}
	}
}
