package northapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// TestRegistrationFollowsTheOperatorsRules: what the rules refuse is
// answered 400 with what to fix, and nothing is produced.
func TestRegistrationFollowsTheOperatorsRules(t *testing.T) {
	s := newStack(t, nil)
	put := func(id string, edit func(map[string]any)) (int, map[string]any) {
		b := componentBody()
		edit(b)
		code, body, _ := s.call(t, http.MethodPut, "/v1/components/"+id, b)
		return code, body
	}
	code, body := put("c1", func(b map[string]any) {
		b["notify"] = map[string]any{"kind": "script", "script_path": "/usr/bin/touch"}
	})
	wantError(t, "script outside the allowed directories", code, body, http.StatusBadRequest,
		`script_path "/usr/bin/touch" is not in an allowed directory; scripts run only from `+testScriptDir)
	sub := filepath.Join(testScriptDir, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	code, body = put("c1", func(b map[string]any) { b["notify"] = map[string]any{"kind": "script", "script_path": sub} })
	wantError(t, "script that is a directory", code, body, http.StatusBadRequest, "is a directory")
	code, body = put("c1", func(b map[string]any) {
		b["notify"] = map[string]any{"kind": "webhook", "webhook_url": "http://u:hunter2@169.254.169.254/latest/?sig=s3cret"}
	})
	wantError(t, "webhook to a host not allowed", code, body, http.StatusBadRequest,
		"webhook_url http://***@169.254.169.254/latest/?sig=***: host 169.254.169.254:80 is not allowed; webhooks go only to 127.0.0.1, app.example")
	if msg, _ := body["error"].(string); strings.Contains(msg, "hunter2") || strings.Contains(msg, "s3cret") {
		t.Errorf("the refusal shows a secret: %s", msg)
	}
	// 38 regular expressions of 100 KB each: refused by count and size
	// before any is compiled.
	code, body = put("c1", func(b map[string]any) {
		var fs []map[string]any
		for i := range 38 {
			fs = append(fs, map[string]any{"filter_id": fmt.Sprintf("f%d", i), "policyName": "DCAE" + strings.Repeat("a", 100_000)})
		}
		b["policy_filters"] = fs
	})
	wantError(t, "many big regular expressions", code, body, http.StatusBadRequest, "policy_filters has 38 filters; at most 32 are allowed")
	code, body = put("c1", func(b map[string]any) {
		b["policy_filters"] = []map[string]any{{"filter_id": "f", "policyName": "DCAE" + strings.Repeat("a", 100_000)}}
	})
	wantError(t, "one big regular expression", code, body, http.StatusBadRequest, "policyName is 100004 bytes; at most 4096 are allowed")
	code, body = put("c1", func(b map[string]any) { b["service_component_name"] = "../consul/acl" })
	wantError(t, "scn with a traversal", code, body, http.StatusBadRequest, `service_component_name "../consul/acl": character '/' at byte 2 is not allowed`)
	code, body, _ = s.call(t, http.MethodPut, "/v1/components/a%09b", componentBody())
	wantError(t, "id with a tab", code, body, http.StatusBadRequest, `component_id "a\tb": character '\t' at byte 1 is not allowed`)

	if recs := s.records(t, topology.DeployComponents, 0); len(recs) != 0 {
		t.Errorf("refused registrations produced %d component records", len(recs))
	}
}

// TestScriptRegistrationKnowsTheArgumentLimit: a component whose policies,
// as the catalog has them, already make every notification too big for a
// script's argument cannot register a script; a webhook it can.
func TestScriptRegistrationKnowsTheArgumentLimit(t *testing.T) {
	big := func(name string) map[string]any {
		return pdpBody(name, "1", map[string]any{"blob": strings.Repeat("b", 70_000)})
	}
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_BIG_A", catalogRecord("DCAE.Config_BIG_A.1.xml", "1", big("DCAE.Config_BIG_A.1.xml")))
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_BIG_B", catalogRecord("DCAE.Config_BIG_B.1.xml", "1", big("DCAE.Config_BIG_B.1.xml")))
	})
	reg := func(ids []string, filters []map[string]any, notify map[string]any) (int, map[string]any, []byte) {
		return s.call(t, http.MethodPut, "/v1/components/big", map[string]any{
			"deployment_id": "dep-big", "service_component_name": "scn-big",
			"policy_ids": ids, "policy_filters": filters, "notify": notify,
		})
	}
	script := map[string]any{"kind": "script", "script_path": testScript}
	if code, _, raw := reg([]string{"DCAE.Config_BIG_A"}, nil, script); code != http.StatusAccepted {
		t.Fatalf("one 70 KB policy by script: %d %s", code, raw)
	}
	code, body, _ := reg([]string{"DCAE.Config_BIG_A", "DCAE.Config_BIG_B"}, nil, script)
	wantError(t, "two 70 KB policies by script", code, body, http.StatusBadRequest,
		"the 2 policies this component gets now make every notification at least", "128 KiB", "notify this component by webhook instead")
	code, body, _ = reg(nil, []map[string]any{{"filter_id": "big", "policyName": "DCAE.Config_BIG_.*", "onapName": "DCAE"}}, script)
	wantError(t, "a filter matching both by script", code, body, http.StatusBadRequest, "the 2 policies this component gets now")
	if code, _, raw := reg([]string{"DCAE.Config_BIG_A", "DCAE.Config_BIG_B"}, nil,
		map[string]any{"kind": "webhook", "webhook_url": "http://127.0.0.1:9/policies"}); code != http.StatusAccepted {
		t.Fatalf("two 70 KB policies by webhook: %d %s", code, raw)
	}
}

// TestStatusShowsAFailedNotificationAsNotNotified: a claim that recorded a
// failure is not "notified", and the status masks URLs in the claim
// (also one written before the notifier masked them).
func TestStatusShowsAFailedNotificationAsNotNotified(t *testing.T) {
	s := newStack(t, nil)
	scn := "scn-failed-" + fmt.Sprint(time.Now().UnixNano())
	reg := componentBody()
	reg["service_component_name"] = scn
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c-failed", reg); code != http.StatusAccepted {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	s.Produce(t, topology.ComponentApplied, "c-failed", &events.ComponentApplied{
		ComponentID: "c-failed", ServiceComponentName: scn, UpdateID: "u-1", Action: "gathered", ConsulIndex: 100, PoliciesCount: 1, Generation: 1,
		PolicyRefs:  []events.PolicyRef{{PolicyID: "A", PolicyName: "A.1.xml", PolicyVersion: "1"}},
		UpdatedRefs: []events.PolicyRef{{PolicyID: "A", PolicyName: "A.1.xml", PolicyVersion: "1"}},
		Notify:      events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://127.0.0.1:9/p"}, AppliedAt: time.Now().UTC(),
	})
	status := func() policyapi.ComponentStatus {
		t.Helper()
		var st policyapi.ComponentStatus
		testkit.Eventually(t, 30*time.Second, func() error {
			code, _, raw := s.call(t, http.MethodGet, "/v1/components/c-failed/status", nil)
			st = policyapi.ComponentStatus{}
			if err := json.Unmarshal(raw, &st); err != nil || code != http.StatusOK {
				t.Fatalf("status: %d %s", code, raw)
			}
			if st.Applied == nil {
				return fmt.Errorf("status does not show the applied update: %s", raw)
			}
			return nil
		})
		return st
	}
	for _, tc := range []struct {
		claim    string
		notified bool
	}{
		{`{"update_id":"u-1","generation":1,"exit_code":null,"stderr":"","at":"2024-05-01T10:00:00Z"}`, false},
		{`{"update_id":"u-1","generation":1,"exit_code":-1,"stderr":"cannot run /x: argument list too long","at":"2024-05-01T10:00:00Z"}`, false},
		{`{"update_id":"u-1","generation":1,"exit_code":1,"stderr":"POST http://u:hunter2@h/p?token=s3cret\u0026x=1: 500","at":"2024-05-01T10:00:00Z","http_status":500}`, false},
		{`{"update_id":"u-1","generation":1,"exit_code":0,"stderr":"","at":"2024-05-01T10:00:00Z","http_status":200}`, true},
	} {
		putKV(t, s.consul, scn+":policies/notified", tc.claim)
		st := status()
		if st.Notified != tc.notified || len(st.Policies) != 1 || st.Policies[0].Notified != tc.notified {
			t.Errorf("claim %s: notified %v, policies %+v; want %v", tc.claim, st.Notified, st.Policies, tc.notified)
		}
		if strings.Contains(string(st.Notification), "hunter2") || strings.Contains(string(st.Notification), "s3cret") {
			t.Errorf("claim %s is shown with its secrets: %s", tc.claim, st.Notification)
		}
		var claim map[string]any
		if err := json.Unmarshal(st.Notification, &claim); err != nil || claim["update_id"] != "u-1" {
			t.Errorf("notification %s (%v)", st.Notification, err)
		}
		if strings.Contains(tc.claim, "hunter2") && claim["stderr"] != "POST http://***@h/p?token=***&x=1: 500" {
			t.Errorf("masked stderr %q", claim["stderr"])
		}
	}
}

// TestRegistrationSettingsAreChecked: settings the North API cannot follow
// are refused before it starts.
func TestRegistrationSettingsAreChecked(t *testing.T) {
	for _, r := range []Registration{
		{Targets: notifytarget.Config{ScriptDirs: []string{"relative"}}},
		{Targets: notifytarget.Config{WebhookAllow: []string{"http://h/"}}},
		{MaxFilters: -1},
	} {
		if _, err := r.Rules(); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
}
