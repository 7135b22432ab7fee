package policyapi

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
)

func validRequest() ComponentRequest {
	return ComponentRequest{
		DeploymentID:         "dep-1",
		ServiceComponentName: "scn-1",
		Tenant:               "t1",
		PolicyIDs:            []string{"DCAE.Config_VM_MEMORY"},
		PolicyFilters: []FilterRequest{{
			FilterID:         "f1",
			PolicyName:       "DCAE.Config_.*",
			OnapName:         "DCAE",
			ConfigAttributes: json.RawMessage(`{"key1": "value1", "n": 1.50}`),
		}},
		Notify: NotifyRequest{Kind: "script", ScriptPath: testScript, TimeoutMs: 5000},
		Config: json.RawMessage(`{"a": {"b": 1}}`),
	}
}

func TestBuildComponentCarriesEverything(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	rules := testRules(t)
	c, err := BuildComponent("comp-1", validRequest(), 3, now, rules)
	if err != nil {
		t.Fatal(err)
	}
	want := &events.Component{
		ComponentID:          "comp-1",
		DeploymentID:         "dep-1",
		ServiceComponentName: "scn-1",
		Tenant:               "t1",
		PolicyIDs:            []string{"DCAE.Config_VM_MEMORY"},
		PolicyFilters: []events.PolicyFilter{{
			FilterID: "f1", PolicyName: "DCAE.Config_.*", OnapName: "DCAE",
			ConfigAttributes: `{"key1":"value1","n":1.50}`,
		}},
		Notify:     events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: testScript, TimeoutMs: 5000},
		Config:     `{"a":{"b":1}}`,
		Generation: 3,
		UpdatedAt:  now,
	}
	gotJSON, _ := json.Marshal(c)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("component:\n got %s\nwant %s", gotJSON, wantJSON)
	}

	// Defaults: no filters, no notify, no config.
	c, err = BuildComponent("comp-2", ComponentRequest{DeploymentID: "d", ServiceComponentName: "s"}, 1, now, ComponentRules{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Notify.Kind != events.NotifyNone || c.Config != "{}" || c.PolicyIDs == nil || c.PolicyFilters == nil {
		t.Errorf("defaults: notify %q config %q ids %v filters %v", c.Notify.Kind, c.Config, c.PolicyIDs, c.PolicyFilters)
	}
	// Webhook, kind in any case.
	r := validRequest()
	r.Notify = NotifyRequest{Kind: "WebHook", WebhookURL: "https://app.example:8443/policies"}
	if c, err = BuildComponent("comp-3", r, 1, now, rules); err != nil || c.Notify.Kind != events.NotifyWebhook {
		t.Errorf("webhook: %v %+v", err, c)
	}
}

// componentRefusal is an edit of validRequest that BuildComponent
// refuses, under rules (nil: the test rules), and what its error says.
type componentRefusal struct {
	name  string
	id    string
	rules *ComponentRules
	edit  func(*ComponentRequest)
	want  []string
}

// componentRefusals are the cases of TestBuildComponentRefusesWithAReason;
// they also seed FuzzComponentRequest. plain is a script that is not
// executable and subdir a directory, both in the script directory;
// outside is a script outside it.
func componentRefusals(rules ComponentRules, plain, subdir, outside string) []componentRefusal {
	filters := func(n, size int) []FilterRequest {
		out := make([]FilterRequest, n)
		for i := range out {
			out[i] = FilterRequest{FilterID: fmt.Sprintf("f%d", i), PolicyName: "D" + strings.Repeat("x", size-1)}
		}
		return out
	}
	return []componentRefusal{
		{"uncompilable regex", "c", nil, func(r *ComponentRequest) { r.PolicyFilters[0].PolicyName = "DCAE.(Config" },
			[]string{`policy_filters[0] (filter_id "f1")`, "missing closing )", "DCAE.(Config"}},
		{"lookahead", "c", nil, func(r *ComponentRequest) { r.PolicyFilters[0].PolicyName = "(?!x)DCAE" },
			[]string{`filter_id "f1"`, "invalid or unsupported Perl syntax"}},
		{"filter without id", "c", nil, func(r *ComponentRequest) { r.PolicyFilters[0].FilterID = "" },
			[]string{"policy_filters[0] has no filter_id"}},
		{"filter without policyName", "c", nil, func(r *ComponentRequest) { r.PolicyFilters[0].PolicyName = "" },
			[]string{`filter_id "f1"`, "no policyName", "matches nothing"}},
		{"duplicate filter ids", "c", nil, func(r *ComponentRequest) {
			r.PolicyFilters = append(r.PolicyFilters, FilterRequest{FilterID: "f1", PolicyName: "x"})
		}, []string{"policy_filters[0] and policy_filters[1] share filter_id \"f1\""}},
		{"configAttributes not an object", "c", nil, func(r *ComponentRequest) { r.PolicyFilters[0].ConfigAttributes = json.RawMessage(`[1]`) },
			[]string{"configAttributes must be a JSON object"}},
		{"too many filters", "c", nil, func(r *ComponentRequest) { r.PolicyFilters = filters(DefaultMaxFilters+1, 3) },
			[]string{"policy_filters has 33 filters; at most 32 are allowed per component"}},
		{"regex too long", "c", nil, func(r *ComponentRequest) { r.PolicyFilters = filters(1, DefaultMaxFilterRegexBytes+1) },
			[]string{`policy_filters[0] (filter_id "f0"): policyName is 4097 bytes; at most 4096 are allowed`}},
		{"regexes too long together", "c", nil, func(r *ComponentRequest) { r.PolicyFilters = filters(5, 4000) },
			[]string{"are 20000 bytes together; at most 16384 are allowed per component"}},
		{"the operator's filter limits", "c", &ComponentRules{Targets: rules.Targets, MaxFilters: 1}, func(r *ComponentRequest) { r.PolicyFilters = filters(2, 3) },
			[]string{"policy_filters has 2 filters; at most 1 are allowed"}},
		{"no deployment", "c", nil, func(r *ComponentRequest) { r.DeploymentID = "" }, []string{"deployment_id is missing"}},
		{"no scn", "c", nil, func(r *ComponentRequest) { r.ServiceComponentName = "" }, []string{"service_component_name is missing"}},
		{"scn with slash", "c", nil, func(r *ComponentRequest) { r.ServiceComponentName = "a/b" }, []string{`service_component_name "a/b": character '/' at byte 1 is not allowed`}},
		{"scn with ..", "c", nil, func(r *ComponentRequest) { r.ServiceComponentName = "a..b" }, []string{`service_component_name "a..b": ".." is not allowed`}},
		{"deployment not UTF-8", "c", nil, func(r *ComponentRequest) { r.DeploymentID = "d\xff" }, []string{"deployment_id", "byte 1 (0xff) is not UTF-8"}},
		{"deployment with a letter outside ASCII", "c", nil, func(r *ComponentRequest) { r.DeploymentID = "dé" }, []string{`character 'é' at byte 1 is not allowed; use only ASCII letters, digits, '.', '_', '-' and ':'`}},
		{"id with space", "a b", nil, func(*ComponentRequest) {}, []string{`component_id "a b": character ' ' at byte 1 is not allowed`}},
		{"id too long", strings.Repeat("c", 256), nil, func(*ComponentRequest) {}, []string{"component_id is 256 bytes long; the limit is 255"}},
		{"body id differs", "c", nil, func(r *ComponentRequest) { r.ComponentID = "other" }, []string{`"other" in the body differs from "c"`}},
		{"full name as policy id", "c", nil, func(r *ComponentRequest) { r.PolicyIDs = []string{"DCAE.Config_VM_MEMORY.5.xml"} },
			[]string{"full policyName", `use "DCAE.Config_VM_MEMORY"`}},
		{"duplicate policy id", "c", nil, func(r *ComponentRequest) { r.PolicyIDs = []string{"a", "a"} }, []string{"listed twice"}},
		{"empty policy id", "c", nil, func(r *ComponentRequest) { r.PolicyIDs = []string{""} }, []string{"policy_ids[0]: the policy_id is empty"}},
		{"script without path", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = "" }, []string{"script_path is missing"}},
		{"relative script", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = "bin/x.sh" }, []string{"not an absolute path"}},
		{"script outside the allowed directories", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = "/usr/bin/touch" },
			[]string{`notify: script_path "/usr/bin/touch" is not in an allowed directory; scripts run only from ` + testScriptDir + " (--script-dir, env PF_SCRIPT_DIRS)"}},
		{"script in another directory", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = outside }, []string{"not in an allowed directory"}},
		{"script missing", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = filepath.Join(testScriptDir, "none.sh") }, []string{"does not exist"}},
		{"script not executable", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = plain }, []string{"is not executable"}},
		{"script is a directory", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = subdir }, []string{"is a directory"}},
		{"script not clean", "c", nil, func(r *ComponentRequest) { r.Notify.ScriptPath = testScriptDir + "/sub/../reconfigure.sh" }, []string{"is not clean"}},
		{"no script directory allowed", "c", &ComponentRules{}, func(*ComponentRequest) {}, []string{"no script may run here", "set --script-dir (env PF_SCRIPT_DIRS) on the North API and the agent-notifier"}},
		{"script and webhook", "c", nil, func(r *ComponentRequest) { r.Notify.WebhookURL = "http://h/x" }, []string{"one notify target"}},
		{"webhook without url", "c", nil, func(r *ComponentRequest) { r.Notify = NotifyRequest{Kind: "webhook"} }, []string{"webhook_url is missing"}},
		{"webhook bad url", "c", nil, func(r *ComponentRequest) { r.Notify = NotifyRequest{Kind: "webhook", WebhookURL: "ftp://h/x"} },
			[]string{"not an absolute http or https URL"}},
		{"webhook to a host not allowed", "c", nil, func(r *ComponentRequest) {
			r.Notify = NotifyRequest{Kind: "webhook", WebhookURL: "http://admin:hunter2@10.0.0.5:8500/v1/kv?token=s3cret"}
		}, []string{"notify: webhook_url http://***@10.0.0.5:8500/v1/kv?token=***: host 10.0.0.5:8500 is not allowed; webhooks go only to 127.0.0.1, app.example (--webhook-allow, env PF_WEBHOOK_ALLOW)"}},
		{"webhook to the metadata service", "c", nil, func(r *ComponentRequest) {
			r.Notify = NotifyRequest{Kind: "webhook", WebhookURL: "http://169.254.169.254/latest/meta-data/"}
		}, []string{"host 169.254.169.254:80 is not allowed"}},
		{"no webhook host allowed", "c", &ComponentRules{}, func(r *ComponentRequest) {
			r.Notify = NotifyRequest{Kind: "webhook", WebhookURL: "https://app.example/p"}
		}, []string{"no webhook may be called here", "set --webhook-allow (env PF_WEBHOOK_ALLOW)"}},
		{"none with script", "c", nil, func(r *ComponentRequest) { r.Notify.Kind = "none" }, []string{"kind is none but script_path"}},
		{"unknown kind", "c", nil, func(r *ComponentRequest) { r.Notify.Kind = "email" }, []string{`notify.kind "email" is unknown`}},
		{"negative timeout", "c", nil, func(r *ComponentRequest) { r.Notify.TimeoutMs = -1 }, []string{"timeout_ms -1 is out of range"}},
		{"config not object", "c", nil, func(r *ComponentRequest) { r.Config = json.RawMessage(`"x"`) }, []string{"config must be a JSON object", "a string"}},
	}
}

func TestBuildComponentRefusesWithAReason(t *testing.T) {
	rules := testRules(t)
	dir := t.TempDir()
	plain := filepath.Join(testScriptDir, "plain.sh")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(plain) })
	subdir := filepath.Join(testScriptDir, "sub")
	if err := os.MkdirAll(subdir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(dir, "x.sh")
	if err := os.WriteFile(outside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range componentRefusals(rules, plain, subdir, outside) {
		t.Run(tc.name, func(t *testing.T) {
			r := validRequest()
			tc.edit(&r)
			use := rules
			if tc.rules != nil {
				use = *tc.rules
			}
			_, err := BuildComponent(tc.id, r, 1, time.Now(), use)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, secret := range []string{"hunter2", "s3cret"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q shows %q", err, secret)
				}
			}
		})
	}
}

func TestFoldAppliedKeepsTheUpdateThatBroughtEachVersion(t *testing.T) {
	pol := func(id, v string) events.PolicyRef { return events.PolicyRef{PolicyID: id, PolicyVersion: v} }
	first := &events.ComponentApplied{
		ComponentID: "c", UpdateID: "u1", ConsulIndex: 10, Generation: 1,
		PolicyRefs: []events.PolicyRef{pol("a", "1"), pol("b", "1")}, UpdatedRefs: []events.PolicyRef{pol("a", "1"), pol("b", "1")},
	}
	second := &events.ComponentApplied{
		ComponentID: "c", UpdateID: "u2", ConsulIndex: 20, Generation: 2,
		PolicyRefs: []events.PolicyRef{pol("a", "1"), pol("b", "2"), pol("c", "7")}, UpdatedRefs: []events.PolicyRef{pol("b", "2"), pol("c", "7")},
	}
	st := foldApplied(foldApplied(nil, first), second)
	want := map[string]appliedPolicy{
		"a": {Version: "1", UpdateID: "u1", ConsulIndex: 10, Generation: 1},
		"b": {Version: "2", UpdateID: "u2", ConsulIndex: 20, Generation: 2},
		"c": {Version: "7", UpdateID: "u2", ConsulIndex: 20, Generation: 2},
	}
	if len(st.Policies) != len(want) {
		t.Fatalf("policies %v, want %v", st.Policies, want)
	}
	for id, w := range want {
		if st.Policies[id] != w {
			t.Errorf("policy %s: %+v, want %+v", id, st.Policies[id], w)
		}
	}
	if st.UpdateID != "u2" || st.ConsulIndex != 20 {
		t.Errorf("state %+v", st)
	}
	// A catch-up that re-sends a policy as updated takes the new update.
	third := &events.ComponentApplied{ComponentID: "c", UpdateID: "u3", ConsulIndex: 30, Generation: 3,
		PolicyRefs: []events.PolicyRef{pol("a", "1")}, UpdatedRefs: []events.PolicyRef{pol("a", "1")}}
	st = foldApplied(st, third)
	if len(st.Policies) != 1 || st.Policies["a"].UpdateID != "u3" {
		t.Errorf("after u3: %+v", st.Policies)
	}
}

func TestDecodeErrorsSayWhereAndWhat(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"deployment_id": "d",}`, "malformed JSON at line 1, column 23"},
		{"{\n \"deployment_id\": 5}", "deployment_id is a JSON number but must be a string"},
		{`{"deploymentid": "d"}`, `unknown field "deploymentid" is not a field of this request`},
		{`{"deployment_id": "d"`, "ends before the JSON value is complete"},
		{``, "request body is empty"},
		{`{} {}`, "more data after the first JSON value"},
		{`{"policy_filters": {"filter_id": "x"}}`, "policy_filters is a JSON object but must be an array"},
		{` null `, "the body is JSON null, not an object"},
		{"{\"deployment_id\": \"d\xff\"}", "byte 20 (0xff) is not UTF-8: JSON text must be UTF-8"},
		{`{"config": {"a": [{"b": 1, "b": 2}]}}`, `the key "b" appears twice in the object at config.a[0]`},
		{`{"config": {"n": 1e999, "k": 1, "k": 2}}`, `the key "k" appears twice in the object at config`},
		{`{"policy_ids": ["a"], "policy_ids": []}`, `the key "policy_ids" appears twice in the object at the top level`},
		{`{"config": {"a": ` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`, "objects and arrays nest more than 128 levels deep at config.a" + strings.Repeat("[0]", 126)},
		{`{"notify": {"timeout_ms": 1e300}}`, "number out of range: notify.timeout_ms is 1e300; give an integer from -2147483648 to 2147483647"},
	} {
		var r ComponentRequest
		e := web.DecodeBytes([]byte(tc.body), &r, true, componentExample)
		if e == nil || e.Status != 400 || !strings.Contains(e.Msg, tc.want) {
			t.Errorf("decode %q: %v, want 400 with %q", tc.body, e, tc.want)
		}
	}
}
