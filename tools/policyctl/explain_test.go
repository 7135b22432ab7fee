package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// policyctlIn runs policyctl with stdin.
func policyctlIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	ctx = withCommandInput(withStreams(ctx, &out, &errOut), strings.NewReader(stdin))
	code := run(ctx, args)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

// stdoutJSON decodes stdout, which must be exactly one JSON value.
func stdoutJSON(t *testing.T, r result) map[string]any {
	t.Helper()
	var v map[string]any
	dec := json.NewDecoder(strings.NewReader(r.out))
	if err := dec.Decode(&v); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object (%v): %q; stderr %q", err, r.out, r.errOut)
	}
	return v
}

func TestExplainPolicyID(t *testing.T) {
	for name, want := range map[string]string{
		"DCAE.Config_VM_MEMORY.222.xml": "DCAE.Config_VM_MEMORY",
		"DCAE.Config_VM_MEMORY":         "DCAE.Config_VM_MEMORY",
		"a.b.10.json":                   "a.b",
	} {
		r := policyctl(t, "explain", "policy-id", name)
		if r.code != 0 {
			t.Errorf("%s: exit %d stderr %q", name, r.code, r.errOut)
			continue
		}
		if got := stdoutJSON(t, r); len(got) != 1 || got["policy_id"] != want {
			t.Errorf("%s: %v, want policy_id %s", name, got, want)
		}
	}
	r := policyctl(t, "explain", "policy-id", ".5.xml")
	if r.code != 1 || r.out != "" || !strings.Contains(r.errOut, "no policy_id") || !strings.Contains(r.errOut, "<policy_id>.<version>.<ext>") {
		t.Errorf("name with no policy_id: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	if r := policyctl(t, "explain", "policy-id"); r.code != 2 {
		t.Errorf("no name: exit %d, want 2", r.code)
	}
}

func TestExplainLatest(t *testing.T) {
	in := `[
	 {"policyName": "A.Config_X.9.xml", "policyVersion": "9", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"v": 9}},
	 {"policyName": "A.Config_X.10.xml", "policyVersion": "10", "policyConfigStatus": "CONFIG_RETRIEVED", "config": "{\"v\": 10.50}"},
	 {"policyName": "A.Config_X.beta.xml", "policyVersion": "beta", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"v": 11}},
	 {"policyName": "B.Config_Y.1.xml", "policyVersion": "1", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"ok": true}},
	 {"policyName": "B.Config_Y.2.xml", "policyVersion": "2", "policyConfigStatus": "CONFIG_NOT_FOUND", "config": {"ok": false}}
	]`
	r := policyctlIn(t, in, "explain", "latest")
	if r.code != 0 {
		t.Fatalf("exit %d stderr %q", r.code, r.errOut)
	}
	var got struct {
		Latest  map[string]map[string]any `json:"latest"`
		Errored map[string]map[string]any `json:"errored"`
	}
	dec := json.NewDecoder(strings.NewReader(r.out))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout: %v\n%s", err, r.out)
	}
	if len(got.Latest) != 1 || got.Latest["A.Config_X"]["policyVersion"] != "10" {
		t.Errorf("latest %v; want A.Config_X at version 10 only", got.Latest)
	}
	// The config string is carried parsed, the number exactly.
	if cfg, _ := got.Latest["A.Config_X"]["config"].(map[string]any); cfg["v"] != json.Number("10.50") {
		t.Errorf("config of A.Config_X %v, want {\"v\": 10.50}", got.Latest["A.Config_X"]["config"])
	}
	if len(got.Errored) != 1 || got.Errored["B.Config_Y"]["policyVersion"] != "2" {
		t.Errorf("errored %v; want B.Config_Y at version 2 (not replaced by version 1)", got.Errored)
	}
	for _, want := range []string{"errored B.Config_Y", "CONFIG_NOT_FOUND", "skipped body 2", `"beta" is not all digits`} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("stderr %q lacks %q", r.errOut, want)
		}
	}

	r = policyctlIn(t, `[]`, "explain", "latest")
	if got := stdoutJSON(t, r); r.code != 0 || len(got["latest"].(map[string]any)) != 0 || len(got["errored"].(map[string]any)) != 0 {
		t.Errorf("empty input: exit %d stdout %q", r.code, r.out)
	}
	for _, bad := range []string{`{"policyName": "x"}`, `[1]`, `[{"a":}]`, ``} {
		r := policyctlIn(t, bad, "explain", "latest")
		if r.code != 1 || r.out != "" || r.errOut == "" {
			t.Errorf("input %q: exit %d stdout %q stderr %q; want exit 1 with a message and no stdout", bad, r.code, r.out, r.errOut)
		}
	}
}

func TestExplainMatch(t *testing.T) {
	body := `{"policyName": "DCAE.Config_VM_MEMORY.222.xml", "policyVersion": "222",
	  "matchingConditions": {"ONAPName": "DCAE", "ConfigName": "alpha", "key1": "value1", "n": 1}}`
	for _, tc := range []struct {
		filter  string
		matches bool
		reason  string
	}{
		{`{"policyName": "DCAE.Config_.*"}`, true, `matches ^(?:DCAE.Config_.*)`},
		{`{"policyName": "DCAE.Config_VM_MEMORY", "filter_id": "f"}`, true, `policy_id "DCAE.Config_VM_MEMORY" equals the filter's policyName`},
		{`{"policyName": "Config_"}`, false, `does not match ^(?:Config_)`},
		{`{"policyName": "DCAE.*", "onapName": "DCAE", "configName": "beta"}`, false, `configName: want "beta" (string), have "alpha" (string)`},
		{`{"policyName": "DCAE.*", "configAttributes": {"n": 1.0, "key1": "value1"}}`, true, `configAttributes n: want 1.0 (number), have 1 (number)`},
		{`{"policyName": "DCAE.*", "configAttributes": {"n": "1"}}`, false, `configAttributes n: want "1" (string), have 1 (number)`},
		{`{"onapName": "DCAE"}`, false, "filter has no policyName: it matches nothing"},
	} {
		r := policyctlIn(t, `{"policy_filter": `+tc.filter+`, "policy_body": `+body+`}`, "explain", "match")
		if r.code != 0 {
			t.Errorf("%s: exit %d stderr %q", tc.filter, r.code, r.errOut)
			continue
		}
		got := stdoutJSON(t, r)
		reasons, _ := got["reasons"].([]any)
		var joined []string
		for _, x := range reasons {
			joined = append(joined, x.(string))
		}
		if got["matches"] != tc.matches || !strings.Contains(strings.Join(joined, "\n"), tc.reason) {
			t.Errorf("%s: %v; want matches=%v with reason %q", tc.filter, got, tc.matches, tc.reason)
		}
	}
	for _, tc := range []struct {
		in   string
		want string
	}{
		{`{"policy_filter": {"policyName": "DCAE.(x"}, "policy_body": ` + body + `}`, "missing closing )"},
		{`{"policy_filter": {"policyName": "x"}}`, "no policy_body"},
		{`{"policy_body": {}}`, "no policy_filter"},
		{`{"policy_filter": {"policy_name": "x"}, "policy_body": {}}`, `unknown field "policy_name"`},
		{`{"policy_filter": {"policyName": "x", "configAttributes": [1]}, "policy_body": {}}`, "configAttributes must be a JSON object"},
		{`{"policy_filter": {"policyName": "x"}, "policy_body": [1]}`, "want a JSON object"},
		{`{"policy_filter": `, "ends before the JSON value is complete"},
	} {
		r := policyctlIn(t, tc.in, "explain", "match")
		if r.code != 1 || r.out != "" || !strings.Contains(r.errOut, tc.want) {
			t.Errorf("input %s: exit %d stdout %q stderr %q; want exit 1 and %q", tc.in, r.code, r.out, r.errOut, tc.want)
		}
	}
}
