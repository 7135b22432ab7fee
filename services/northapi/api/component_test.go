package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
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
		Notify: NotifyRequest{Kind: "script", ScriptPath: "/opt/app/reconfigure.sh", TimeoutMs: 5000},
		Config: json.RawMessage(`{"a": {"b": 1}}`),
	}
}

func TestBuildComponentCarriesEverything(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	c, err := BuildComponent("comp-1", validRequest(), 3, now)
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
		Notify:     events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/opt/app/reconfigure.sh", TimeoutMs: 5000},
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
	c, err = BuildComponent("comp-2", ComponentRequest{DeploymentID: "d", ServiceComponentName: "s"}, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	if c.Notify.Kind != events.NotifyNone || c.Config != "{}" || c.PolicyIDs == nil || c.PolicyFilters == nil {
		t.Errorf("defaults: notify %q config %q ids %v filters %v", c.Notify.Kind, c.Config, c.PolicyIDs, c.PolicyFilters)
	}
	// Webhook, kind in any case.
	r := validRequest()
	r.Notify = NotifyRequest{Kind: "WebHook", WebhookURL: "https://app.example:8443/policies"}
	if c, err = BuildComponent("comp-3", r, 1, now); err != nil || c.Notify.Kind != events.NotifyWebhook {
		t.Errorf("webhook: %v %+v", err, c)
	}
}

func TestBuildComponentRefusesWithAReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   string
		edit func(*ComponentRequest)
		want []string
	}{
		{"uncompilable regex", "c", func(r *ComponentRequest) { r.PolicyFilters[0].PolicyName = "DCAE.(Config" },
			[]string{`policy_filters[0] (filter_id "f1")`, "missing closing )", "DCAE.(Config"}},
		{"lookahead", "c", func(r *ComponentRequest) { r.PolicyFilters[0].PolicyName = "(?!x)DCAE" },
			[]string{`filter_id "f1"`, "invalid or unsupported Perl syntax"}},
		{"filter without id", "c", func(r *ComponentRequest) { r.PolicyFilters[0].FilterID = "" },
			[]string{"policy_filters[0] has no filter_id"}},
		{"filter without policyName", "c", func(r *ComponentRequest) { r.PolicyFilters[0].PolicyName = "" },
			[]string{`filter_id "f1"`, "no policyName", "matches nothing"}},
		{"duplicate filter ids", "c", func(r *ComponentRequest) {
			r.PolicyFilters = append(r.PolicyFilters, FilterRequest{FilterID: "f1", PolicyName: "x"})
		}, []string{"policy_filters[0] and policy_filters[1] share filter_id \"f1\""}},
		{"configAttributes not an object", "c", func(r *ComponentRequest) { r.PolicyFilters[0].ConfigAttributes = json.RawMessage(`[1]`) },
			[]string{"configAttributes must be a JSON object"}},
		{"no deployment", "c", func(r *ComponentRequest) { r.DeploymentID = "" }, []string{"deployment_id is missing"}},
		{"no scn", "c", func(r *ComponentRequest) { r.ServiceComponentName = "" }, []string{"service_component_name is missing"}},
		{"scn with slash", "c", func(r *ComponentRequest) { r.ServiceComponentName = "a/b" }, []string{"contains '/'"}},
		{"id with space", "a b", func(*ComponentRequest) {}, []string{"component_id \"a b\" contains whitespace"}},
		{"body id differs", "c", func(r *ComponentRequest) { r.ComponentID = "other" }, []string{`"other" in the body differs from "c"`}},
		{"full name as policy id", "c", func(r *ComponentRequest) { r.PolicyIDs = []string{"DCAE.Config_VM_MEMORY.5.xml"} },
			[]string{"full policyName", `use "DCAE.Config_VM_MEMORY"`}},
		{"duplicate policy id", "c", func(r *ComponentRequest) { r.PolicyIDs = []string{"a", "a"} }, []string{"listed twice"}},
		{"empty policy id", "c", func(r *ComponentRequest) { r.PolicyIDs = []string{""} }, []string{"policy_ids[0] is empty"}},
		{"script without path", "c", func(r *ComponentRequest) { r.Notify.ScriptPath = "" }, []string{"script_path is missing"}},
		{"relative script", "c", func(r *ComponentRequest) { r.Notify.ScriptPath = "bin/x.sh" }, []string{"not an absolute path"}},
		{"script and webhook", "c", func(r *ComponentRequest) { r.Notify.WebhookURL = "http://h/x" }, []string{"one notify target"}},
		{"webhook without url", "c", func(r *ComponentRequest) { r.Notify = NotifyRequest{Kind: "webhook"} }, []string{"webhook_url is missing"}},
		{"webhook bad url", "c", func(r *ComponentRequest) { r.Notify = NotifyRequest{Kind: "webhook", WebhookURL: "ftp://h/x"} },
			[]string{"not an absolute http or https URL"}},
		{"none with script", "c", func(r *ComponentRequest) { r.Notify.Kind = "none" }, []string{"kind is none but script_path"}},
		{"unknown kind", "c", func(r *ComponentRequest) { r.Notify.Kind = "email" }, []string{`notify.kind "email" is unknown`}},
		{"negative timeout", "c", func(r *ComponentRequest) { r.Notify.TimeoutMs = -1 }, []string{"timeout_ms -1 is out of range"}},
		{"config not object", "c", func(r *ComponentRequest) { r.Config = json.RawMessage(`"x"`) }, []string{"config must be a JSON object", "a string"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRequest()
			tc.edit(&r)
			_, err := BuildComponent(tc.id, r, 1, time.Now())
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestFoldAppliedKeepsTheUpdateThatBroughtEachVersion(t *testing.T) {
	pol := func(id, v string) events.Policy { return events.Policy{PolicyID: id, PolicyVersion: v} }
	first := &events.ComponentApplied{
		ComponentID: "c", UpdateID: "u1", ConsulIndex: 10, Generation: 1,
		Policies: []events.Policy{pol("a", "1"), pol("b", "1")}, UpdatedPolicies: []events.Policy{pol("a", "1"), pol("b", "1")},
	}
	second := &events.ComponentApplied{
		ComponentID: "c", UpdateID: "u2", ConsulIndex: 20, Generation: 2,
		Policies: []events.Policy{pol("a", "1"), pol("b", "2"), pol("c", "7")}, UpdatedPolicies: []events.Policy{pol("b", "2"), pol("c", "7")},
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
		Policies: []events.Policy{pol("a", "1")}, UpdatedPolicies: []events.Policy{pol("a", "1")}}
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
	} {
		var r ComponentRequest
		e := decodeBytes([]byte(tc.body), &r, true, componentExample)
		if e == nil || e.status != 400 || !strings.Contains(e.msg, tc.want) {
			t.Errorf("decode %q: %v, want 400 with %q", tc.body, e, tc.want)
		}
	}
}
