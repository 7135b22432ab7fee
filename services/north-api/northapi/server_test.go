package northapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

func componentBody() map[string]any {
	return map[string]any{
		"deployment_id":          "dep-1",
		"service_component_name": "scn-comp",
		"tenant":                 "t1",
		"policy_ids":             []string{"DCAE.Config_VM_MEMORY"},
		"policy_filters": []map[string]any{{
			"filter_id": "f1", "policyName": "DCAE.Config_.*", "onapName": "DCAE",
			"configAttributes": map[string]any{"key1": "value1"},
		}},
		"notify": map[string]any{"kind": "script", "script_path": testScript, "timeout_ms": 5000},
		"config": map[string]any{"threshold": 7},
	}
}

func TestComponentPutAndDeleteProduceToDeployComponents(t *testing.T) {
	s := newStack(t, nil)

	code, body, raw := s.call(t, http.MethodPut, "/v1/components/comp-1", componentBody())
	if code != http.StatusAccepted || body["component_id"] != "comp-1" || body["generation"] != 1.0 {
		t.Fatalf("first PUT: %d %s", code, raw)
	}
	code, body, raw = s.call(t, http.MethodPut, "/v1/components/comp-1", componentBody())
	if code != http.StatusAccepted || body["generation"] != 2.0 {
		t.Fatalf("second PUT: %d %s; want generation 2", code, raw)
	}

	recs := s.records(t, topology.DeployComponents, 2)
	if len(recs) != 2 {
		t.Fatalf("deploy.components holds %d records, want 2", len(recs))
	}
	for i, rec := range recs {
		c := stagetest.Decode[*events.Component](t, rec)
		if string(rec.Key) != "comp-1" || c.Generation != int64(i+1) {
			t.Errorf("record %d: key %q generation %d", i, rec.Key, c.Generation)
		}
		if c.ComponentID != "comp-1" || c.DeploymentID != "dep-1" || c.ServiceComponentName != "scn-comp" || c.Tenant != "t1" {
			t.Errorf("record %d: %+v", i, c)
		}
		if len(c.PolicyIDs) != 1 || c.PolicyIDs[0] != "DCAE.Config_VM_MEMORY" {
			t.Errorf("policy_ids %v", c.PolicyIDs)
		}
		if len(c.PolicyFilters) != 1 || c.PolicyFilters[0].FilterID != "f1" || c.PolicyFilters[0].PolicyName != "DCAE.Config_.*" ||
			c.PolicyFilters[0].OnapName != "DCAE" || c.PolicyFilters[0].ConfigAttributes != `{"key1":"value1"}` {
			t.Errorf("policy_filters %+v", c.PolicyFilters)
		}
		if c.Notify != (events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: testScript, TimeoutMs: 5000}) {
			t.Errorf("notify %+v", c.Notify)
		}
		if c.Config != `{"threshold":7}` {
			t.Errorf("config %q", c.Config)
		}
	}

	code, body, raw = s.call(t, http.MethodDelete, "/v1/components/comp-1", nil)
	if code != http.StatusAccepted || body["deleted"] != true {
		t.Fatalf("DELETE: %d %s", code, raw)
	}
	recs = s.records(t, topology.DeployComponents, 3)
	if len(recs) != 3 || recs[2].Value != nil || string(recs[2].Key) != "comp-1" {
		t.Fatalf("after DELETE: %d records, last %+v; want a tombstone for comp-1", len(recs), recs[len(recs)-1])
	}
	code, body, _ = s.call(t, http.MethodDelete, "/v1/components/comp-1", nil)
	wantError(t, "second DELETE", code, body, http.StatusNotFound, "comp-1 is not registered")
	code, body, _ = s.call(t, http.MethodDelete, "/v1/components/never", nil)
	wantError(t, "DELETE unknown", code, body, http.StatusNotFound, "never is not registered")

	// Registered again, it keeps counting.
	code, body, raw = s.call(t, http.MethodPut, "/v1/components/comp-1", componentBody())
	if code != http.StatusAccepted || body["generation"] != 3.0 {
		t.Fatalf("PUT after DELETE: %d %s; want generation 3", code, raw)
	}
}

func TestComponentWritesSeeGenerationsWrittenBeforeStart(t *testing.T) {
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.DeployComponents, "old", &events.Component{
			ComponentID: "old", DeploymentID: "d", ServiceComponentName: "scn-old", Generation: 41, Config: "{}",
			Notify:    events.NotifyTarget{Kind: events.NotifyNone},
			UpdatedAt: time.Now().UTC(),
		})
	})
	code, body, raw := s.call(t, http.MethodPut, "/v1/components/old", componentBody())
	if code != http.StatusAccepted || body["generation"] != 42.0 {
		t.Fatalf("PUT: %d %s; want generation 42", code, raw)
	}
}

func TestBadInputIsRefusedWithAReason(t *testing.T) {
	s := newStack(t, nil)
	bad := componentBody()
	bad["policy_filters"] = []map[string]any{{"filter_id": "by-name", "policyName": "DCAE.Config_(VM"}}
	code, body, _ := s.call(t, http.MethodPut, "/v1/components/c1", bad)
	wantError(t, "uncompilable regex", code, body, http.StatusBadRequest, `filter_id "by-name"`, "missing closing )", "DCAE.Config_(VM")

	code, body, _ = s.call(t, http.MethodPut, "/v1/components/c1", `{"deployment_id": `)
	wantError(t, "malformed JSON", code, body, http.StatusBadRequest, "malformed JSON")
	code, body, _ = s.call(t, http.MethodPut, "/v1/components/c1", `{"deployment_id": "d", "service_component_name": "s", "notfy": {}}`)
	wantError(t, "unknown field", code, body, http.StatusBadRequest, `unknown field "notfy"`)
	dup := componentBody()
	dup["policy_filters"] = []map[string]any{{"filter_id": "x", "policyName": "a"}, {"filter_id": "x", "policyName": "b"}}
	code, body, _ = s.call(t, http.MethodPut, "/v1/components/c1", dup)
	wantError(t, "duplicate filter ids", code, body, http.StatusBadRequest, `share filter_id "x"`)
	inconsistent := componentBody()
	inconsistent["notify"] = map[string]any{"kind": "webhook", "script_path": "/x"}
	code, body, _ = s.call(t, http.MethodPut, "/v1/components/c1", inconsistent)
	wantError(t, "webhook without url", code, body, http.StatusBadRequest, "webhook_url is missing")

	code, body, _ = s.call(t, http.MethodGet, "/v1/components/c1/status", nil)
	wantError(t, "status of unknown", code, body, http.StatusNotFound, "component c1 is unknown")
	code, body, _ = s.call(t, http.MethodPost, "/v1/components/c1", "{}")
	wantError(t, "wrong method", code, body, http.StatusMethodNotAllowed, "use DELETE or PUT")
	code, body, _ = s.call(t, http.MethodGet, "/v2/nothing", nil)
	wantError(t, "unknown path", code, body, http.StatusNotFound, "no endpoint at /v2/nothing")
	code, body, _ = s.call(t, http.MethodPost, "/v1/pdp/notifications", `[1,2]`)
	wantError(t, "notification not an object", code, body, http.StatusBadRequest, "must be an object")
	code, body, _ = s.call(t, http.MethodPost, "/v1/pdp/notifications", `{"loadedPolicies": []}`)
	wantError(t, "empty notification", code, body, http.StatusBadRequest, "names no policy")
	code, body, _ = s.call(t, http.MethodPost, "/v1/pdp/notifications", `{"loadedPolicies": [{"policyName": "", "versionNo": "1"}]}`)
	wantError(t, "notification without name", code, body, http.StatusBadRequest, "loadedPolicies[0]", "policyName is empty")
	code, body, _ = s.call(t, http.MethodPost, "/v1/pdp/notifications", `{"loadedPolicies": [{"policyName": "DCAE.Config_A.1.xml", "versionNo": "1"}], "removedPolicies": [{"policyName": "DCAE.Config_/../x.1.xml", "versionNo": "1"}]}`)
	wantError(t, "notification with a traversal", code, body, http.StatusBadRequest, "removedPolicies[0]", "character '/' at byte 12 is not allowed")
	code, body, _ = s.call(t, http.MethodPost, "/v1/catchup", `{"deployment_id": "nobody"}`)
	wantError(t, "catch-up of unknown deployment", code, body, http.StatusNotFound, "no registered component belongs to deployment nobody")
	code, body, _ = s.call(t, http.MethodPost, "/v1/catchup", `{"deployment": "x"}`)
	wantError(t, "catch-up typo", code, body, http.StatusBadRequest, `unknown field "deployment"`)

	// Nothing was produced by any refused request.
	if recs := s.records(t, topology.DeployComponents, 0); len(recs) != 0 {
		t.Errorf("refused requests produced %d component records", len(recs))
	}
	if recs := s.records(t, topology.PDPNotifications, 0); len(recs) != 0 {
		t.Errorf("refused requests produced %d notifications", len(recs))
	}
}

func TestPdpNotificationIsSplitByPolicyID(t *testing.T) {
	s := newStack(t, nil)
	code, body, raw := s.call(t, http.MethodPost, "/v1/pdp/notifications", `{
		"loadedPolicies": [
			{"policyName": "DCAE.Config_A.5.xml", "versionNo": "5", "matches": {"ONAPName": "DCAE", "ConfigName": "cfg"}, "updateType": "UPDATE"},
			{"policyName": "DCAE.Config_B.2.xml", "versionNo": 2}
		],
		"removedPolicies": [{"policyName": "DCAE.Config_A.4.xml", "versionNo": "4"}],
		"notificationType": "Both"}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d %s", code, raw)
	}
	if n, _ := body["notifications"].([]any); len(n) != 2 {
		t.Errorf("answer lists %v, want 2 notifications", body["notifications"])
	}
	recs := s.records(t, topology.PDPNotifications, 2)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	got := map[string]*events.PdpNotification{}
	for _, rec := range recs {
		got[string(rec.Key)] = stagetest.Decode[*events.PdpNotification](t, rec)
	}
	a, b := got["DCAE.Config_A"], got["DCAE.Config_B"]
	if a == nil || b == nil {
		t.Fatalf("records keyed %v, want DCAE.Config_A and DCAE.Config_B", got)
	}
	if len(a.LoadedPolicies) != 1 || a.LoadedPolicies[0].PolicyName != "DCAE.Config_A.5.xml" || a.LoadedPolicies[0].VersionNo != "5" ||
		a.LoadedPolicies[0].Matches["ONAPName"] != "DCAE" || a.LoadedPolicies[0].Matches["ConfigName"] != "cfg" {
		t.Errorf("A loaded %+v", a.LoadedPolicies)
	}
	if len(a.RemovedPolicies) != 1 || a.RemovedPolicies[0] != (events.UnloadedPolicy{PolicyName: "DCAE.Config_A.4.xml", VersionNo: "4"}) {
		t.Errorf("A removed %+v", a.RemovedPolicies)
	}
	if len(b.LoadedPolicies) != 1 || b.LoadedPolicies[0].VersionNo != "2" || len(b.RemovedPolicies) != 0 {
		t.Errorf("B %+v", b)
	}
	if a.Source != policyapi.Source || a.NotificationID == "" || a.NotificationID == b.NotificationID || a.ReceivedAt.IsZero() {
		t.Errorf("A header: source %q id %q (B %q) at %v", a.Source, a.NotificationID, b.NotificationID, a.ReceivedAt)
	}
}

func pdpBody(name, version string, config any) map[string]any {
	return map[string]any{
		"policyName": name, "policyVersion": version, "policyConfigStatus": "CONFIG_RETRIEVED",
		"policyConfigMessage": "Config Retrieved! ", "type": "JSON",
		"matchingConditions": map[string]any{"ONAPName": "DCAE", "ConfigName": "alpha"},
		"config":             config,
	}
}

func TestPushedPoliciesAreValidatedAndKeyedByPolicyID(t *testing.T) {
	s := newStack(t, nil)
	push := []any{
		pdpBody("DCAE.Config_A.1.xml", "1", `{"k": 1}`),
		pdpBody("DCAE.Config_A.2.xml", "2", map[string]any{"k": 2}),
		pdpBody("DCAE.Config_B.7.xml", "7", map[string]any{"k": 3}),
	}
	code, _, raw := s.call(t, http.MethodPost, "/v1/policies", push)
	if code != http.StatusAccepted {
		t.Fatalf("push: %d %s", code, raw)
	}
	recs := s.records(t, topology.PDPNotifications, 2)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2 (one per policy_id)", len(recs))
	}
	for _, rec := range recs {
		n := stagetest.Decode[*events.PdpNotification](t, rec)
		var names []string
		for _, b := range n.PushedBodies {
			var m map[string]any
			if err := json.Unmarshal([]byte(b), &m); err != nil {
				t.Fatalf("pushed body is not JSON: %v", err)
			}
			names = append(names, m["policyName"].(string))
		}
		switch string(rec.Key) {
		case "DCAE.Config_A":
			if strings.Join(names, ",") != "DCAE.Config_A.1.xml,DCAE.Config_A.2.xml" {
				t.Errorf("A carries %v", names)
			}
		case "DCAE.Config_B":
			if strings.Join(names, ",") != "DCAE.Config_B.7.xml" {
				t.Errorf("B carries %v", names)
			}
		default:
			t.Errorf("unexpected key %q", rec.Key)
		}
	}

	// One object instead of an array is accepted too.
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies", pdpBody("DCAE.Config_C.1.xml", "1", map[string]any{"x": 1}))
	if code != http.StatusAccepted {
		t.Fatalf("push one: %d %s", code, raw)
	}

	notFound := pdpBody("DCAE.Config_D.1.xml", "1", map[string]any{"x": 1})
	notFound["policyConfigStatus"] = "CONFIG_NOT_FOUND"
	big := pdpBody("DCAE.Config_E.1.xml", "1", map[string]any{"blob": strings.Repeat("x", 600<<10)})
	for _, tc := range []struct {
		name string
		body any
		want []string
	}{
		{"invalid status", []any{pdpBody("DCAE.Config_OK.1.xml", "1", map[string]any{"x": 1}), notFound},
			[]string{`policies[1] is refused`, `"DCAE.Config_D.1.xml"`, "CONFIG_NOT_FOUND", "nothing of this request was published"}},
		{"empty config", pdpBody("DCAE.Config_F.1.xml", "1", "{}"), []string{"DCAE.Config_F.1.xml", "config is empty"}},
		{"oversize", big, []string{"DCAE.Config_E.1.xml", "over the limit of 524288 bytes"}},
		{"no policy id", pdpBody(".1.xml", "1", map[string]any{"x": 1}), []string{"nothing is left before its .<version>.<ext>"}},
		{"version not digits", pdpBody("DCAE.Config_G.2.xml", "v2", map[string]any{"x": 1}), []string{`policyVersion "v2" (string) is not a string of digits`}},
		{"empty array", []any{}, []string{"holds no policy"}},
		{"not a body", `[1]`, []string{"element 0 is number"}},
	} {
		code, body, _ := s.call(t, http.MethodPost, "/v1/policies", tc.body)
		wantError(t, tc.name, code, body, http.StatusBadRequest, tc.want...)
	}
	if recs := s.records(t, topology.PDPNotifications, 3); len(recs) != 3 {
		t.Errorf("%d records after the refused pushes, want the 3 accepted ones only", len(recs))
	}
}

// Each hostile body is refused with 400 and what to fix, and nothing of
// it reaches Kafka; what is accepted is published as canonical JSON that
// every reader can decode.
func TestPushRefusesHostileBodies(t *testing.T) {
	s := newStack(t, nil)
	poisoned := pdpBody("DCAE.Config_P.2.xml", "999999", map[string]any{"x": 1})
	twice := `{"policyName": "DCAE.Config_T.2.xml", "policyVersion": "2", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"x": 1}, "policyVersion": "999999"}`
	big := pdpBody("DCAE.Config_BIG.1.xml", "1", map[string]any{"blob": strings.Repeat("x", 3900<<10)})
	for _, tc := range []struct {
		name string
		body any
		want []string
	}{
		{"traversal", pdpBody("DCAE.Config_VM_/../../../evil.2.xml", "2", map[string]any{"x": 1}),
			[]string{`policies[0] is refused`, `policyName "DCAE.Config_VM_/../../../evil.2.xml"`, "character '/' at byte 15 is not allowed", "letters, digits"}},
		{"space", pdpBody("DCAE.Config VM.2.xml", "2", map[string]any{"x": 1}), []string{"character ' ' at byte 11 is not allowed"}},
		{"control character", pdpBody("DCAE.Config\u0001.2.xml", "2", map[string]any{"x": 1}), []string{`character '\x01' at byte 11 is not allowed`}},
		{"no version in the name", pdpBody("DCAE.Config_VM", "2", map[string]any{"x": 1}), []string{"does not end in .<version>.<ext>"}},
		{"version mismatch", poisoned, []string{`policyVersion "999999" is not the version 2 in its policyName; give policyVersion "2" or leave it out`}},
		{"duplicate key", twice, []string{`the key "policyVersion" appears twice in the object at the top level`}},
		{"matchingConditions a list", `{"policyName": "DCAE.Config_M.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": 1, "matchingConditions": ["DCAE"]}`,
			[]string{"matchingConditions is [\"DCAE\"] (array), want a JSON object"}},
		{"oversize config", big, []string{`"DCAE.Config_BIG.1.xml"`, "over the limit of 524288 bytes (512 KiB"}},
	} {
		code, body, _ := s.call(t, http.MethodPost, "/v1/policies", tc.body)
		wantError(t, tc.name, code, body, http.StatusBadRequest, tc.want...)
	}
	if recs := s.records(t, topology.PDPNotifications, 0); len(recs) != 0 {
		t.Fatalf("refused pushes produced %d notifications", len(recs))
	}

	// 3.9 MB of JSON whose content is small is accepted: the limit is on
	// the canonical body, which is what is published.
	padded := pdpBody("DCAE.Config_PAD.1.xml", "", `{"k": "v"`+strings.Repeat(" ", 3900<<10)+`}`)
	delete(padded, "policyVersion")
	code, _, raw := s.call(t, http.MethodPost, "/v1/policies", padded)
	if code != http.StatusAccepted {
		t.Fatalf("padded push: %d %s", code, raw)
	}
	recs := s.records(t, topology.PDPNotifications, 1)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	n := stagetest.Decode[*events.PdpNotification](t, recs[0])
	want := `{"config":{"k":"v"},"matchingConditions":{"ConfigName":"alpha","ONAPName":"DCAE"},"policyConfigMessage":"Config Retrieved! ","policyConfigStatus":"CONFIG_RETRIEVED","policyName":"DCAE.Config_PAD.1.xml","policyVersion":"1","type":"JSON"}`
	if len(n.PushedBodies) != 1 || n.PushedBodies[0] != want {
		t.Fatalf("published %q, want the canonical body %s", n.PushedBodies, want)
	}
}

func TestCatchupGoesToEveryPartition(t *testing.T) {
	s := newStack(t, nil)
	code, body, raw := s.call(t, http.MethodPost, "/v1/catchup", "")
	if code != http.StatusAccepted || body["scope"] != events.ScopeAll || body["partitions"] != float64(testPartitions) {
		t.Fatalf("catch-up all: %d %s", code, raw)
	}
	recs := s.records(t, topology.CatchupRequests, testPartitions)
	if len(recs) != testPartitions {
		t.Fatalf("%d records, want one per partition (%d)", len(recs), testPartitions)
	}
	parts := map[int32]bool{}
	for _, rec := range recs {
		r := stagetest.Decode[*events.CatchupRequest](t, rec)
		parts[rec.Partition] = true
		if r.RequestID != body["request_id"] || r.Scope != events.ScopeAll || r.DeploymentID != nil {
			t.Errorf("partition %d: %+v", rec.Partition, r)
		}
	}
	if len(parts) != testPartitions {
		t.Errorf("records landed on partitions %v, want all %d", parts, testPartitions)
	}

	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c-dep", componentBody()); code != http.StatusAccepted {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	code, body, raw = s.call(t, http.MethodPost, "/v1/catchup", map[string]any{"deployment_id": "dep-1", "reason": "operator"})
	if code != http.StatusAccepted || body["scope"] != events.ScopeDeployment {
		t.Fatalf("catch-up of dep-1: %d %s", code, raw)
	}
	recs = s.records(t, topology.CatchupRequests, 2*testPartitions)
	var dep int
	for _, rec := range recs {
		r := stagetest.Decode[*events.CatchupRequest](t, rec)
		if r.Scope == events.ScopeDeployment {
			dep++
			if r.DeploymentID == nil || *r.DeploymentID != "dep-1" || r.Reason != "operator" {
				t.Errorf("deployment catch-up %+v", r)
			}
		}
	}
	if dep != testPartitions {
		t.Errorf("%d deployment catch-up records, want %d", dep, testPartitions)
	}
}

// POST /v1/components/{id}/renotify is a catch-up of the component's
// deployment that names it, on every partition, for the agent-notifier to
// notify it again.
func TestRenotifyIsACatchupNamingTheComponent(t *testing.T) {
	s := newStack(t, nil)
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c-renotify", componentBody()); code != http.StatusAccepted {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	var code int
	var body map[string]any
	var raw []byte
	testkit.Eventually(t, 30*time.Second, func() error {
		if code, body, raw = s.call(t, http.MethodPost, "/v1/components/c-renotify/renotify", ""); code == http.StatusNotFound {
			return fmt.Errorf("renotify answers 404 until the component view catches up: %s", raw)
		}
		return nil
	})
	if code != http.StatusAccepted || body["component_id"] != "c-renotify" || body["deployment_id"] != "dep-1" || body["partitions"] != float64(testPartitions) {
		t.Fatalf("renotify: %d %s", code, raw)
	}
	recs := s.records(t, topology.CatchupRequests, testPartitions)
	for _, rec := range recs {
		r := stagetest.Decode[*events.CatchupRequest](t, rec)
		if r.RequestID != body["request_id"] || r.Scope != events.ScopeDeployment || r.DeploymentID == nil || *r.DeploymentID != "dep-1" ||
			r.ComponentID == nil || *r.ComponentID != "c-renotify" {
			t.Errorf("partition %d: %+v", rec.Partition, r)
		}
	}
	if code, _, raw := s.call(t, http.MethodPost, "/v1/components/nobody/renotify", ""); code != http.StatusNotFound {
		t.Errorf("renotify of an unknown component: %d %s; want 404", code, raw)
	}
	if code, _, raw, _ := s.callAs(t, readOnlyToken, http.MethodPost, "/v1/components/c-renotify/renotify", nil); code != http.StatusForbidden {
		t.Errorf("renotify as read-only: %d %s; want 403", code, raw)
	}
}

func catalogRecord(name, version string, body map[string]any) *events.PolicyCatalogEntry {
	data, _ := json.Marshal(body)
	id := strings.TrimSuffix(name, "."+version+".xml")
	return &events.PolicyCatalogEntry{PolicyID: id, PolicyName: name, PolicyVersion: version, Body: string(data),
		Status: events.StatusValid, UpdatedAt: time.Now().UTC()}
}

func TestLatestPoliciesComeFromTheCatalog(t *testing.T) {
	onap := func(onapName, configName string, extra map[string]any) map[string]any {
		m := map[string]any{"ONAPName": onapName, "ConfigName": configName}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	mem := pdpBody("DCAE.Config_VM_MEMORY.222.xml", "222", map[string]any{"mem": 1})
	mem["matchingConditions"] = onap("DCAE", "alpha", map[string]any{"key1": "value1"})
	cpu := pdpBody("DCAE.Config_VM_CPU.3.xml", "3", map[string]any{"cpu": 2})
	cpu["matchingConditions"] = onap("DCAE", "beta", nil)
	other := pdpBody("SDNC.Config_X.1.xml", "1", map[string]any{"x": 1})
	gone := pdpBody("DCAE.Config_GONE.1.xml", "1", map[string]any{"x": 1})
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_VM_MEMORY", catalogRecord("DCAE.Config_VM_MEMORY.222.xml", "222", mem))
		errored := catalogRecord("DCAE.Config_VM_CPU.3.xml", "3", cpu)
		reason := "latest version 4 of DCAE.Config_VM_CPU from the PDP is invalid: its config is empty"
		errored.Status, errored.Error = events.StatusErrored, &reason
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_VM_CPU", errored)
		s.ProduceCommitted(t, s.Record(t, topology.PolicyCatalog, "SDNC.Config_X", catalogRecord("SDNC.Config_X.1.xml", "1", other)))
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_GONE", catalogRecord("DCAE.Config_GONE.1.xml", "1", gone))
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_GONE", nil)
	})

	code, body, raw := s.call(t, http.MethodGet, "/policy_latest/DCAE.Config_VM_MEMORY", nil)
	if code != http.StatusOK || body["policy_id"] != "DCAE.Config_VM_MEMORY" {
		t.Fatalf("policy_latest: %d %s", code, raw)
	}
	pb, _ := body["policy_body"].(map[string]any)
	if pb["policyVersion"] != "222" || pb["policyName"] != "DCAE.Config_VM_MEMORY.222.xml" {
		t.Errorf("policy_body %v", pb)
	}
	code, body, _ = s.call(t, http.MethodGet, "/policy_latest/DCAE.Config_GONE", nil)
	wantError(t, "removed policy", code, body, http.StatusNotFound, "no policy DCAE.Config_GONE")
	// The PDP's latest version is invalid: the last valid one is served,
	// and the answer says the latest is errored.
	code, body, raw = s.call(t, http.MethodGet, "/policy_latest/DCAE.Config_VM_CPU", nil)
	if pb, _ := body["policy_body"].(map[string]any); code != http.StatusOK || pb["policyVersion"] != "3" || body["status"] != events.StatusErrored ||
		!strings.Contains(fmt.Sprint(body["error"]), "latest version 4") {
		t.Errorf("policy_latest of an errored policy: %d %s", code, raw)
	}
	if _, has := mustCall(t, s, "/policy_latest/DCAE.Config_VM_MEMORY")["status"]; has {
		t.Error("a valid latest policy's answer has a status")
	}
	code, body, _ = s.call(t, http.MethodGet, "/policy_latest/DCAE.Config_VM_MEMORY.222.xml", nil)
	wantError(t, "full name", code, body, http.StatusNotFound, `ask for its policy_id "DCAE.Config_VM_MEMORY"`)

	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{`{"policyName": "DCAE.Config_.*"}`, []string{"DCAE.Config_VM_CPU", "DCAE.Config_VM_MEMORY"}},
		{`{"policy_filter": {"policyName": "DCAE.Config_.*", "configName": "beta"}}`, []string{"DCAE.Config_VM_CPU"}},
		{`{"policyName": "DCAE", "configAttributes": {"key1": "value1"}}`, []string{"DCAE.Config_VM_MEMORY"}},
		{`{"policyName": "SDNC.Config_X"}`, []string{"SDNC.Config_X"}},
		{`{"policyName": "Config_"}`, nil},
	} {
		code, body, raw := s.call(t, http.MethodPost, "/policies_latest", tc.filter)
		if code != http.StatusOK {
			t.Errorf("policies_latest %s: %d %s", tc.filter, code, raw)
			continue
		}
		var got []string
		for id, v := range body {
			got = append(got, id)
			entry, _ := v.(map[string]any)
			if entry["policy_id"] != id || entry["policy_body"] == nil {
				t.Errorf("policies_latest %s: entry %s = %v", tc.filter, id, v)
			}
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("policies_latest %s: %v, want %v", tc.filter, got, tc.want)
		}
	}
	code, body, _ = s.call(t, http.MethodPost, "/policies_latest", `{"policyName": "DCAE.(Config"}`)
	wantError(t, "bad regex", code, body, http.StatusBadRequest, "missing closing )")
	code, body, _ = s.call(t, http.MethodPost, "/policies_latest", `{"onapName": "DCAE"}`)
	wantError(t, "no policyName", code, body, http.StatusBadRequest, "policyName is missing")
}

func TestServiceComponentAllReadsConsul(t *testing.T) {
	s := newStack(t, nil)
	scn := "scn-all-" + fmt.Sprint(time.Now().UnixNano())
	bodyA := `{"policyName":"DCAE.Config_A.1.xml","policyVersion":"1","config":{"a":1}}`
	bodyB := `{"policyName":"DCAE.Config_B.3.xml","policyVersion":"3","config":{"b":2}}`
	event := `{"action":"gathered","timestamp":"2024-05-01T10:00:00Z","update_id":"u-1","policies_count":2,"generation":1}`
	putKV(t, s.consul, consulkv.ConfigKey(scn), `{"app":"config"}`)
	putKV(t, s.consul, consulkv.ItemKey(scn, "DCAE.Config_A"), bodyA)
	putKV(t, s.consul, consulkv.ItemKey(scn, "DCAE.Config_B"), bodyB)
	putKV(t, s.consul, consulkv.EventKey(scn), event)
	putKV(t, s.consul, consulkv.ClaimKey(scn), `{"update_id":"u-1"}`)
	putKV(t, s.consul, scn+":dmaap", `{"topic":"x"}`)
	putKV(t, s.consul, consulkv.ItemKey(scn+"x", "OTHER"), `{"policyName":"OTHER.1.xml"}`)

	code, _, raw := s.call(t, http.MethodGet, "/service_component_all/"+scn, nil)
	if code != http.StatusOK {
		t.Fatalf("service_component_all: %d %s", code, raw)
	}
	var got struct {
		Config   json.RawMessage `json:"config"`
		Dmaap    json.RawMessage `json:"dmaap"`
		Policies struct {
			Items []json.RawMessage `json:"items"`
			Event json.RawMessage   `json:"event"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	compact := func(r json.RawMessage) string {
		var v any
		_ = json.Unmarshal(r, &v)
		b, _ := json.Marshal(v)
		return string(b)
	}
	if compact(got.Config) != `{"app":"config"}` || compact(got.Dmaap) != `{"topic":"x"}` {
		t.Errorf("config %s dmaap %s", got.Config, got.Dmaap)
	}
	if len(got.Policies.Items) != 2 || compact(got.Policies.Items[0]) != compact([]byte(bodyA)) || compact(got.Policies.Items[1]) != compact([]byte(bodyB)) {
		t.Errorf("items %s", raw)
	}
	if compact(got.Policies.Event) != compact([]byte(event)) {
		t.Errorf("event %s", got.Policies.Event)
	}
	// The seed's answer names when it was made and the request: the
	// caller's X-ONAP-RequestID, echoed, or a new UUID.
	var stamp struct {
		Timestamp time.Time `json:"timestamp"`
		RequestID string    `json:"requestID"`
	}
	if err := json.Unmarshal(raw, &stamp); err != nil || time.Since(stamp.Timestamp) > time.Minute ||
		!regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(stamp.RequestID) {
		t.Errorf("timestamp and requestID of %s: %+v %v", raw, stamp, err)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/service_component_all/"+scn, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set(policyapi.HeaderRequestID, "3914b74f-a09e-4186-b5a6-fbe934c59c24")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&stamp); err != nil || stamp.RequestID != "3914b74f-a09e-4186-b5a6-fbe934c59c24" ||
		resp.Header.Get(policyapi.HeaderRequestID) != stamp.RequestID {
		t.Errorf("the caller's request id: %+v %v, header %q", stamp, err, resp.Header.Get(policyapi.HeaderRequestID))
	}

	// A registered component with no Consul folder yet: its config, no items.
	reg := componentBody()
	reg["service_component_name"] = scn + "-new"
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c-new", reg); code != http.StatusAccepted {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	code, body, raw := s.call(t, http.MethodGet, "/service_component_all/"+scn+"-new", nil)
	if code != http.StatusOK || fmt.Sprint(body["config"]) != "map[threshold:7]" || fmt.Sprint(body["policies"]) != "map[event:<nil> items:[]]" {
		t.Errorf("registered, not written: %d %s", code, raw)
	}

	code, body, _ = s.call(t, http.MethodGet, "/service_component_all/nobody-"+scn, nil)
	wantError(t, "unknown scn", code, body, http.StatusNotFound, "no service component nobody-"+scn)
}

func TestComponentStatusJoinsAppliedAndNotified(t *testing.T) {
	s := newStack(t, nil)
	scn := "scn-status-" + fmt.Sprint(time.Now().UnixNano())
	reg := componentBody()
	reg["service_component_name"] = scn
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/c-st", reg); code != http.StatusAccepted {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	code, body, raw := s.call(t, http.MethodGet, "/v1/components/c-st/status", nil)
	if code != http.StatusOK || body["applied"] != nil || body["registered"] != true || len(body["policies"].([]any)) != 0 {
		t.Fatalf("status before any write: %d %s", code, raw)
	}

	pol := func(id, v string) events.PolicyRef {
		return events.PolicyRef{PolicyID: id, PolicyName: id + "." + v + ".xml", PolicyVersion: v}
	}
	s.Produce(t, topology.ComponentApplied, "c-st", &events.ComponentApplied{
		ComponentID: "c-st", ServiceComponentName: scn, UpdateID: "u-1", Action: "gathered", ConsulIndex: 100, PoliciesCount: 2, Generation: 1,
		PolicyRefs: []events.PolicyRef{pol("A", "1"), pol("B", "1")}, UpdatedRefs: []events.PolicyRef{pol("A", "1"), pol("B", "1")},
		Notify: events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/x"}, AppliedAt: time.Now().UTC(),
	})
	s.Produce(t, topology.ComponentApplied, "c-st", &events.ComponentApplied{
		ComponentID: "c-st", ServiceComponentName: scn, UpdateID: "u-2", Action: "updated", ConsulIndex: 200, PoliciesCount: 2, Generation: 2,
		PolicyRefs: []events.PolicyRef{pol("A", "1"), pol("B", "2")}, UpdatedRefs: []events.PolicyRef{pol("B", "2")},
		Notify: events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/x"}, AppliedAt: time.Now().UTC(),
	})
	// The notifier has notified u-1 but not yet u-2.
	putKV(t, s.consul, consulkv.ClaimKey(scn), `{"update_id":"u-1","generation":1,"exit_code":0,"stderr":"","at":"2024-05-01T10:00:00Z"}`)

	var st policyapi.ComponentStatus
	testkit.Eventually(t, 30*time.Second, func() error {
		code, _, raw = s.call(t, http.MethodGet, "/v1/components/c-st/status", nil)
		if code != http.StatusOK {
			t.Fatalf("status: %d %s", code, raw)
		}
		st = policyapi.ComponentStatus{}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		if st.Applied != nil && st.Applied.UpdateID == "u-2" {
			return nil
		}
		return fmt.Errorf("status does not show update u-2: %s", raw)
	})
	if st.ServiceComponentName != scn || st.DeploymentID != "dep-1" || st.Applied.ConsulIndex != 200 || st.Applied.Generation != 2 || st.Notified {
		t.Errorf("status %s", raw)
	}
	want := []policyapi.PolicyStatus{
		{PolicyID: "A", PolicyVersion: "1", UpdateID: "u-1", Generation: 1, ConsulIndex: 100, Notified: true},
		{PolicyID: "B", PolicyVersion: "2", UpdateID: "u-2", Generation: 2, ConsulIndex: 200, Notified: false},
	}
	if fmt.Sprint(st.Policies) != fmt.Sprint(want) {
		t.Errorf("policies %+v\nwant %+v", st.Policies, want)
	}
	var claim map[string]any
	if err := json.Unmarshal(st.Notification, &claim); err != nil || claim["update_id"] != "u-1" {
		t.Errorf("notification %s", st.Notification)
	}

	putKV(t, s.consul, consulkv.ClaimKey(scn), `{"update_id":"u-2","generation":2,"exit_code":0}`)
	code, body, raw = s.call(t, http.MethodGet, "/v1/components/c-st/status", nil)
	if code != http.StatusOK || body["notified"] != true {
		t.Errorf("after u-2 was notified: %d %s", code, raw)
	}
	for _, p := range body["policies"].([]any) {
		if p.(map[string]any)["notified"] != true {
			t.Errorf("policy not notified after u-2: %v", p)
		}
	}
}

func TestHealthEndpoints(t *testing.T) {
	s := newStack(t, nil)
	code, body, raw := s.call(t, http.MethodGet, "/healthcheck", nil)
	if code != http.StatusOK || body["status"] != "ok" {
		t.Errorf("healthcheck: %d %s", code, raw)
	}
	code, body, raw = s.opsGet(t, "/readyz")
	if code != http.StatusOK || body["status"] != "ready" {
		t.Errorf("readyz on the ops listener: %d %s", code, raw)
	}
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/m", componentBody()); code != http.StatusAccepted {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	code, _, metrics := s.opsGet(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("metrics on the ops listener: %d", code)
	}
	for _, want := range []string{
		`policyflow_north_api_requests_total{code="202",route="PUT /v1/components/{component_id}"} 1`,
		`policyflow_north_api_records_produced_total{topic="` + s.Kafka.Topic(topology.DeployComponents) + `"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestNotReadyUntilEveryViewTopicExists(t *testing.T) {
	s := newStack(t, nil, topology.ComponentApplied)
	applied := s.Kafka.Topic(topology.ComponentApplied)
	var body map[string]any
	testkit.Eventually(t, 30*time.Second, func() error {
		var code int
		code, body, _ = s.opsGet(t, "/readyz")
		stages, _ := body["stages"].(map[string]any)
		why, _ := stages["north-api view component.applied"].(string)
		if code == http.StatusServiceUnavailable && strings.Contains(why, applied+" does not exist") {
			return nil
		}
		return fmt.Errorf("readyz: %d %v; want 503 saying %s does not exist", code, body, applied)
	})
	code, body, raw := s.call(t, http.MethodGet, "/healthcheck", nil)
	if code != http.StatusOK || body["status"] != "starting" {
		t.Errorf("healthcheck while starting: %d %s", code, raw)
	}
	// Components can be registered; their status needs the missing view.
	testkit.Eventually(t, 30*time.Second, func() error {
		code, _, raw = s.call(t, http.MethodPut, "/v1/components/early", componentBody())
		switch code {
		case http.StatusAccepted:
			return nil
		case http.StatusServiceUnavailable:
			return fmt.Errorf("PUT while component.applied is missing: %d %s", code, raw)
		}
		t.Fatalf("PUT while component.applied is missing: %d %s", code, raw)
		return nil
	})
	code, body, _ = s.call(t, http.MethodGet, "/v1/components/early/status", nil)
	wantError(t, "status while not ready", code, body, http.StatusServiceUnavailable, "still reading "+applied, "retry")

	s.CreateTopics(t, nil, topology.ComponentApplied)
	s.waitReady(t)
	code, body, raw = s.call(t, http.MethodGet, "/v1/components/early/status", nil)
	if code != http.StatusOK || body["registered"] != true {
		t.Errorf("status once ready: %d %s", code, raw)
	}
}

// The seed's policy-handler endpoint GET /catch_up asks for a catch-up of
// everything, like POST /v1/catchup with no body; only operators may.
func TestSeedCatchUpEndpoint(t *testing.T) {
	s := newStack(t, nil)
	code, body, raw := s.call(t, http.MethodGet, "/catch_up", "")
	if code != http.StatusAccepted || body["scope"] != events.ScopeAll || body["partitions"] != float64(testPartitions) {
		t.Fatalf("GET /catch_up: %d %s", code, raw)
	}
	for _, rec := range s.records(t, topology.CatchupRequests, testPartitions) {
		if r := stagetest.Decode[*events.CatchupRequest](t, rec); r.RequestID != body["request_id"] || r.Scope != events.ScopeAll {
			t.Errorf("partition %d: %+v", rec.Partition, r)
		}
	}
	code, _, raw = s.call(t, http.MethodGet, "/no/such/path", "")
	if code != http.StatusNotFound || !strings.Contains(string(raw), "/catch_up") || !strings.Contains(string(raw), "/v1/catchup") {
		t.Fatalf("404 does not list the served paths: %d %s", code, raw)
	}
}

// GET /v1/catchup/{request_id} sums what the matcher and the
// consul-writer reported per partition, and is done once both reported
// from every partition.
func TestCatchupStatusSumsTheStagesReports(t *testing.T) {
	s := newStack(t, nil)
	report := func(stage string, p int32, compared, differed, keys int64) {
		s.Produce(t, topology.CatchupProgress, "0123456789abcdef0123456789abcdef", &events.CatchupProgress{RequestID: "0123456789abcdef0123456789abcdef", Stage: stage, Partition: p,
			Compared: compared, Differed: differed, KeysWritten: keys, DoneAt: time.Now().UTC()})
	}
	status := func(want func(api.CatchupStatus) bool) api.CatchupStatus {
		t.Helper()
		var st api.CatchupStatus
		testkit.Eventually(t, 30*time.Second, func() error {
			code, _, raw := s.call(t, http.MethodGet, "/v1/catchup/0123456789abcdef0123456789abcdef", nil)
			st = api.CatchupStatus{}
			if err := json.Unmarshal(raw, &st); code != http.StatusOK || err != nil {
				t.Fatalf("status: %d %s", code, raw)
			}
			if want(st) {
				return nil
			}
			return fmt.Errorf("status not there yet: %s", raw)
		})
		return st
	}
	if st := status(func(api.CatchupStatus) bool { return true }); st.Done || st.Partitions != testPartitions || st.Matcher.PartitionsDone != 0 {
		t.Fatalf("before any report: %+v", st)
	}
	for p := int32(0); p < testPartitions; p++ {
		report(events.ProgressMatcher, p, 10, 1, 0)
	}
	report(events.ProgressConsulWriter, 0, 10, 2, 5)
	st := status(func(st api.CatchupStatus) bool {
		return st.Matcher.PartitionsDone == testPartitions && st.ConsulWriter.PartitionsDone == 1
	})
	if st.Done || st.Matcher.Compared != 10*testPartitions || st.Matcher.Differed != testPartitions || st.ConsulWriter.KeysWritten != 5 {
		t.Fatalf("partly done: %+v", st)
	}
	for p := int32(1); p < testPartitions; p++ {
		report(events.ProgressConsulWriter, p, 10, 0, 0)
	}
	if st := status(func(st api.CatchupStatus) bool { return st.Done }); st.ConsulWriter.Compared != 10*testPartitions || st.ConsulWriter.Differed != 2 {
		t.Fatalf("done: %+v", st)
	}
	code, body, _, _ := s.callAs(t, readOnlyToken, http.MethodGet, "/v1/catchup/0123456789abcdef0123456789abcdef", nil)
	wantError(t, "catch-up status as read-only", code, body, http.StatusForbidden, "has role read-only")
	// An id no catch-up could have been given is none.
	code, body, _ = s.call(t, http.MethodGet, "/v1/catchup/zzz", nil)
	wantError(t, "catch-up status of an id never given", code, body, http.StatusNotFound, "no catch-up has request_id")
}

// mustCall GETs path as the admin and returns the decoded answer.
func mustCall(t *testing.T, s *stack, path string) map[string]any {
	t.Helper()
	code, body, raw := s.call(t, http.MethodGet, path, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, raw)
	}
	return body
}

// A pushed version older than the one loaded is answered 409 with what
// stays in force, and nothing is published; the same or a newer version
// is accepted.
func TestPushingAnOlderVersionSaysWhatHappens(t *testing.T) {
	loaded := pdpBody("DCAE.Config_OLD.5.xml", "5", map[string]any{"k": 5})
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.PolicyCatalog, "DCAE.Config_OLD", catalogRecord("DCAE.Config_OLD.5.xml", "5", loaded))
	})
	mustCall(t, s, "/policy_latest/DCAE.Config_OLD") // the catalog is read
	code, body, _ := s.call(t, http.MethodPost, "/v1/policies", []any{
		pdpBody("DCAE.Config_NEW.1.xml", "1", map[string]any{"k": 1}), pdpBody("DCAE.Config_OLD.3.xml", "3", map[string]any{"k": 3})})
	wantError(t, "an older version", code, body, http.StatusConflict, "version 3 of DCAE.Config_OLD is older than the loaded version 5")
	if code, _, raw := s.call(t, http.MethodPost, "/v1/policies", pdpBody("DCAE.Config_OLD.6.xml", "6", map[string]any{"k": 6})); code != http.StatusAccepted {
		t.Fatalf("a newer version: %d %s", code, raw)
	}
	recs := s.records(t, topology.PDPNotifications, 1)
	if len(recs) != 1 || string(recs[0].Key) != "DCAE.Config_OLD" {
		t.Fatalf("%d records on pdp.notifications, want only the newer version's", len(recs))
	}
}
