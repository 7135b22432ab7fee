package northapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/admission/admissionapi"
	"github.com/policyflow/policyflow/services/nmp/nmpapi"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/topology"
)

// TestBodiesAreRefusedWithWhatToFix sends every route that reads a JSON
// body, or may, what encoding/json would let through: a body that is not
// JSON, is not UTF-8, nests 100,000 levels deep, is null, gives a key
// twice, or has a field the route does not know. Each is refused with 400
// saying what to fix, and nothing reaches a topic.
func TestBodiesAreRefusedWithWhatToFix(t *testing.T) {
	s := newStack(t, nil)
	if code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/p", `{"constraints": ["arch == amd64"]}`); code != http.StatusOK {
		t.Fatalf("PUT NMP: %d %s", code, raw)
	}
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	notification := func(entry string) string {
		return `{"loadedPolicies": [` + entry + `]}`
	}
	for _, tc := range []struct {
		name, method, path, body string
		wants                    []string
	}{
		{"sync: malformed", http.MethodPut, "/v2/participants/sync", `{"a":`, []string{"malformed JSON"}},
		{"sync: a stray brace after the value", http.MethodPut, "/v2/participants/sync", `{}}`, []string{"more data after the first JSON value at byte 2"}},
		{"NMP PUT: a stray bracket after the value", http.MethodPut, "/v1/orgs/acme/nmps/every", `{"constraints": ["arch == amd64"]}]`, []string{"more data after the first JSON value"}},
		{"sync: not UTF-8", http.MethodPut, "/v2/participants/sync", "{\"a\": \"\xff\"}", []string{"byte 7 (0xff) is not UTF-8: JSON text must be UTF-8"}},
		{"sync: deep", http.MethodPut, "/v2/participants/sync", deep, []string{"nest more than 128 levels deep"}},
		{"sync: null", http.MethodPut, "/v2/participants/sync", "null", []string{"the body is JSON null, not an object"}},
		{"sync: a field", http.MethodPut, "/v2/participants/sync", `{"all": true}`, []string{`unknown field "all"`}},
		{"NMP PUT: null", http.MethodPut, "/v1/orgs/acme/nmps/every", "null", []string{"JSON null"}},
		{"NMP PUT: key twice", http.MethodPut, "/v1/orgs/acme/nmps/every", `{"constraints": ["arch == amd64"], "constraints": []}`,
			[]string{`the key "constraints" appears twice in the object at the top level`}},
		{"NMP enable: null", http.MethodPost, "/v1/orgs/acme/nmps/p/enable", " null ", []string{"JSON null", `{"confirmAllNodes": true}, or no body`}},
		{"NMP enable: a field", http.MethodPost, "/v1/orgs/acme/nmps/p/enable", `{"confirm": true}`, []string{`unknown field "confirm"`}},
		{"node PUT: null", http.MethodPut, "/v1/orgs/acme/nodes/n1", "null", []string{"JSON null"}},
		{"catch-up: null", http.MethodPost, "/v1/catchup", "null", []string{"JSON null"}},
		{"notification: key twice", http.MethodPost, "/v1/pdp/notifications",
			notification(`{"policyName": "DCAE.Config_A.5.xml", "versionNo": "5", "matches": {"ONAPName": "DCAE", "ONAPName": "x"}}`),
			[]string{`the key "ONAPName" appears twice in the object at loadedPolicies[0].matches`}},
		{"notification: unknown field", http.MethodPost, "/v1/pdp/notifications", `{"loadedPolicies": [], "removed": []}`,
			[]string{`unknown field "removed"`}},
		{"notification: unknown entry field", http.MethodPost, "/v1/pdp/notifications",
			notification(`{"policyName": "DCAE.Config_A.5.xml", "versionNo": "5", "version": "7"}`),
			[]string{"loadedPolicies entry", `unknown field "version"`}},
		{"notification: version differs", http.MethodPost, "/v1/pdp/notifications",
			notification(`{"policyName": "DCAE.Config_A.5.xml", "versionNo": "5"}, {"policyName": "X.5.xml", "versionNo": 7}`),
			[]string{`loadedPolicies[1]: versionNo "7" is not the version 5 in policyName "X.5.xml"; give versionNo "5" or leave it out`}},
		{"notification: removed version differs", http.MethodPost, "/v1/pdp/notifications",
			`{"removedPolicies": [{"policyName": "X.5.xml", "versionNo": "five"}]}`,
			[]string{`removedPolicies[0]: versionNo "five" is not the version 5`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := s.call(t, tc.method, tc.path, tc.body)
			wantError(t, tc.name, code, body, http.StatusBadRequest, tc.wants...)
		})
	}
	for _, topic := range []string{topology.ACMRuntime, topology.AgentNodes, topology.CatchupRequests, topology.PDPNotifications} {
		if recs := s.Read(t, topic, 0, time.Second); len(recs) != 0 {
			t.Errorf("refused requests wrote %d records to %s", len(recs), topic)
		}
	}
	if recs := s.Read(t, topology.NMPPolicies, 1, time.Second); len(recs) != 1 {
		t.Errorf("%s has %d records; want only the NMP stored before the refused requests", topology.NMPPolicies, len(recs))
	}

	// What the routes take without a body, or with a matching version,
	// still passes.
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPut, "/v2/participants/sync", ""},
		{http.MethodPut, "/v2/participants/sync", "{}"},
		{http.MethodPost, "/v1/catchup", ""},
		{http.MethodPost, "/v1/pdp/notifications", notification(`{"policyName": "DCAE.Config_A.5.xml", "versionNo": 5, "updateType": "NEW"}`)},
		{http.MethodPost, "/v1/pdp/notifications", notification(`{"policyName": "DCAE.Config_A.6.xml"}`)},
	} {
		if code, _, raw := s.call(t, tc.method, tc.path, tc.body); code != http.StatusAccepted {
			t.Errorf("%s %s %s: %d %s; want 202", tc.method, tc.path, tc.body, code, raw)
		}
	}
}

// TestComponentPolicyIDsFollowThePolicyIDRule registers components whose
// policy_ids the policy_id rule refuses, or too many of them.
func TestComponentPolicyIDsFollowThePolicyIDRule(t *testing.T) {
	s := newStack(t, nil)
	many := make([]string, policyapi.MaxPolicyIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("DCAE.Config_%d", i)
	}
	for _, tc := range []struct {
		name  string
		ids   []string
		wants []string
	}{
		{"traversal", []string{"ok", "../../x"}, []string{`policy_ids[1]: policy_id "../../x": character '/' at byte 2 is not allowed`}},
		{"space", []string{"a b"}, []string{`policy_ids[0]: policy_id "a b": character ' ' at byte 1 is not allowed`}},
		{"control character", []string{"a\x01b"}, []string{`policy_ids[0]: policy_id "a\x01b": character '\x01' at byte 1 is not allowed`}},
		{"not starting with a letter or digit", []string{"-x"}, []string{`policy_ids[0]: policy_id "-x" does not start with a letter or a digit`}},
		{"too long", []string{strings.Repeat("p", 256)}, []string{"policy_ids[0]: policy_id", "is 256 bytes, over the limit of 255"}},
		{"too many", many, []string{fmt.Sprintf("policy_ids has %d ids; at most %d are allowed per component", policyapi.MaxPolicyIDs+1, policyapi.MaxPolicyIDs)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := componentBody()
			b["policy_ids"] = tc.ids
			code, body, _ := s.call(t, http.MethodPut, "/v1/components/c1", b)
			wantError(t, tc.name, code, body, http.StatusBadRequest, tc.wants...)
		})
	}
	if recs := s.records(t, topology.DeployComponents, 0); len(recs) != 0 {
		t.Errorf("refused components wrote %d records", len(recs))
	}
	b := componentBody()
	b["policy_ids"] = many[:policyapi.MaxPolicyIDs]
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c1", b); code != http.StatusAccepted {
		t.Errorf("%d policy_ids: %d %s; want 202", policyapi.MaxPolicyIDs, code, raw)
	}
}

// TestPoliciesLatestBoundsTheRegex asks /policies_latest with a policyName
// over the filter regex limit.
func TestPoliciesLatestBoundsTheRegex(t *testing.T) {
	s := newStack(t, nil)
	long := strings.Repeat("a", 100<<10)
	for _, body := range []map[string]any{{"policyName": long}, {"policy_filter": map[string]any{"policyName": long}}} {
		code, out, _ := s.call(t, http.MethodPost, "/policies_latest", body)
		wantError(t, "100 KiB regex", code, out, http.StatusBadRequest,
			fmt.Sprintf("policyName is %d bytes; at most %d are allowed (--max-filter-regex-bytes)", len(long), policyapi.DefaultMaxFilterRegexBytes))
	}
	at := strings.Repeat("a", policyapi.DefaultMaxFilterRegexBytes)
	if code, _, raw := s.call(t, http.MethodPost, "/policies_latest", map[string]any{"policyName": at}); code != http.StatusOK {
		t.Errorf("a policyName at the limit: %d %s; want 200", code, raw)
	}
}

// TestErrorsNameTheRightPlace checks errors that used to name the wrong
// index, the wrong reason or the wrong cause.
func TestErrorsNameTheRightPlace(t *testing.T) {
	s := newStack(t, nil)
	if code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/p", `{"constraints": ["arch == amd64"]}`); code != http.StatusOK {
		t.Fatalf("PUT NMP: %d %s", code, raw)
	}
	code, body, _ := s.call(t, http.MethodPost, "/policies", seedFlavorPolicy("", "ok", ""))
	wantError(t, "empty tenant id", code, body, http.StatusBadRequest, "tenantIds[1]: tenant id is missing")

	dep := strings.Replace(admissionapi.DeploymentExample, `"instances": 2`, `"instances": 1e300`, 1)
	code, body, _ = s.call(t, http.MethodPost, "/v1/deployments?dry_run=true", dep)
	wantError(t, "instances 1e300", code, body, http.StatusBadRequest, "number out of range: applications.instances is 1e300; give an integer from")
	code, body, _ = s.call(t, http.MethodPost, "/v1/deployments?dry_run=true", strings.Replace(admissionapi.DeploymentExample, `"instances": 2`, `"instances": 2.5`, 1))
	wantError(t, "instances 2.5", code, body, http.StatusBadRequest, "applications.instances is 2.5; give an integer")

	big := `{"confirmAllNodes": true, "pad": "` + strings.Repeat("x", 200<<10) + `"}`
	code, body, _ = s.call(t, http.MethodPost, "/v1/orgs/acme/nmps/p/enable", big)
	wantError(t, "200 KB enable body", code, body, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is over the limit of %d bytes", nmpapi.MaxActionBytes))
}

// TestWebhooksToRefusedPortsAreRefused registers components whose webhook
// points at a refused port (a stack's Consul) that the allow list covers.
func TestWebhooksToRefusedPortsAreRefused(t *testing.T) {
	reg := Registration{Targets: notifytarget.Config{ScriptDirs: []string{testScriptDir},
		WebhookAllow: []string{"127.0.0.1", "::1"}, WebhookRefuse: []string{"127.0.0.0/8:8500", "[::1]:8500"}}}
	s := newStackWith(t, Options{Registration: reg}, nil)
	for _, u := range []string{"http://127.0.0.1:8500/v1/kv/x", "http://[::1]:8500/v1/acl/bootstrap"} {
		b := componentBody()
		b["notify"] = map[string]any{"kind": "webhook", "webhook_url": u}
		code, body, _ := s.call(t, http.MethodPut, "/v1/components/c1", b)
		wantError(t, u, code, body, http.StatusBadRequest, "serves this stack itself, which no webhook may reach")
	}
	b := componentBody()
	b["notify"] = map[string]any{"kind": "webhook", "webhook_url": "http://127.0.0.1:9999/hook"}
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c1", b); code != http.StatusAccepted {
		t.Errorf("a webhook to another loopback port: %d %s; want 202", code, raw)
	}
}

// TestUncleanPathsAreRefused: a path with '.' or '..' segments or doubled
// slashes is refused with 400 naming the clean path, with or without a
// token, instead of being redirected to another route than the one named.
func TestUncleanPathsAreRefused(t *testing.T) {
	s := newStack(t, nil)
	for _, tc := range []struct{ method, path, token, clean string }{
		{http.MethodGet, "/v1/components/../../healthcheck", "", "/healthcheck"},
		{http.MethodGet, "/v1/components/c1/../../status", adminToken, "/v1/status"},
		{http.MethodPut, "/v1/components/./c1", tenantToken, "/v1/components/c1"},
		{http.MethodDelete, "/v1/orgs/acme/nodes/..", adminToken, "/v1/orgs/acme"},
		{http.MethodGet, "//v1/deployments/d1", adminToken, "/v1/deployments/d1"},
	} {
		var body any
		if tc.method == http.MethodPut {
			body = componentBody()
		}
		code, out, raw, _ := s.callAs(t, tc.token, tc.method, tc.path, body)
		if msg, _ := out["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "is not clean: send it as "+tc.clean+" (") {
			t.Errorf("%s %s: %d %s, want 400 naming %s", tc.method, tc.path, code, raw, tc.clean)
		}
	}
	if code, _, raw := s.call(t, http.MethodGet, "/v1/components/c1/status", nil); code == http.StatusBadRequest {
		t.Errorf("a clean path is refused: %d %s", code, raw)
	}
}
