package northapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// A policy's priority is written, shown and replaced with it; an
// External policy or a notice webhook may name only a host the operator
// allows (400 otherwise), and a dry run asks the engine.
func TestAppPolicyPriorityAndEndpoints(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q struct {
			Request struct{ Tenant string } `json:"request"`
		}
		json.NewDecoder(r.Body).Decode(&q)
		json.NewEncoder(w).Encode(map[string]any{"allowed": q.Request.Tenant != "t2", "message": "t2 is frozen"})
	}))
	defer engine.Close()
	s := newStackWith(t, Options{Hooks: hooks.Config{Allow: []string{"127.0.0.1"}}}, nil)

	code, out, raw := s.call(t, http.MethodPost, "/policies", map[string]any{"priority": 5, "objectModel": map[string]any{
		"field": "image", "value": "ubuntu-promoted", "?": map[string]any{"type": "io.policyflow.admission.DefaultOverride"}}})
	if code != http.StatusOK || out["priority"] != float64(5) {
		t.Fatalf("create with priority: %d %s", code, raw)
	}
	id := out["id"].(string)
	if code, out, raw = s.call(t, http.MethodGet, "/policies/"+id, nil); code != http.StatusOK || out["priority"] != float64(5) {
		t.Errorf("get: %d %s", code, raw)
	}
	code, out, raw = s.call(t, http.MethodPut, "/policies/"+id, map[string]any{"objectModel": map[string]any{
		"field": "image", "value": "ubuntu-promoted", "?": map[string]any{"type": "io.policyflow.admission.DefaultOverride"}}})
	if code != http.StatusOK || out["priority"] != float64(0) {
		t.Errorf("replace without priority: %d %s", code, raw)
	}

	external := func(url string) map[string]any {
		return map[string]any{"objectModel": map[string]any{"url": url, "?": map[string]any{"type": "io.policyflow.admission.External"}}}
	}
	code, out, _ = s.call(t, http.MethodPost, "/policies", external("https://engine.example/decide"))
	wantError(t, "external engine on a host not allowed", code, out, http.StatusBadRequest,
		"objectModel.url: https://engine.example/decide: host engine.example:443 is not allowed", "--admission-hook-allow")
	code, out, _ = s.call(t, http.MethodPost, "/policies", map[string]any{"objectModel": map[string]any{
		"maxInstances": 4, "webhook": "http://hooks.example/n", "?": map[string]any{"type": "io.policyflow.admission.InstanceNotice"}}})
	wantError(t, "notice webhook on a host not allowed", code, out, http.StatusBadRequest, "objectModel.webhook: http://hooks.example/n: host hooks.example:80 is not allowed")

	code, out, raw = s.call(t, http.MethodPost, "/policies", external(engine.URL+"/decide"))
	if code != http.StatusOK || out["type"] != "io.policyflow.admission.External" {
		t.Fatalf("external engine on an allowed host: %d %s", code, raw)
	}
	extID := out["id"].(string)
	dep := func(id, tenant string) map[string]any {
		return map[string]any{"deployment_id": id, "tenant": tenant, "applications": []any{map[string]any{"name": "web", "class": "com.example.Web"}}}
	}
	if code, out, raw = s.callAs2(t, tenantToken, http.MethodPost, "/v1/deployments?dry_run=true", dep("d1", "t1")); code != http.StatusOK || out["admitted"] != true {
		t.Errorf("dry run the engine allows: %d %s", code, raw)
	}
	code, out, raw = s.callAs2(t, otherTenantToken, http.MethodPost, "/v1/deployments?dry_run=true", dep("d2", "t2"))
	v, _ := out["violations"].([]any)
	if code != http.StatusOK || out["admitted"] != false || len(v) != 1 || v[0].(map[string]any)["policy_id"] != extID ||
		!strings.Contains(v[0].(map[string]any)["message"].(string), "denies: t2 is frozen") {
		t.Errorf("dry run the engine denies: %d %s", code, raw)
	}
}

// Without --admission-hook-allow no policy may name an endpoint.
func TestAppPolicyEndpointsNeedAllowedHosts(t *testing.T) {
	s := newStack(t, nil)
	code, out, _ := s.call(t, http.MethodPost, "/policies", map[string]any{"objectModel": map[string]any{
		"url": "https://engine.example/decide", "?": map[string]any{"type": "io.policyflow.admission.External"}}})
	wantError(t, "external engine with no host allowed", code, out, http.StatusBadRequest, "objectModel.url: no host is allowed", "--admission-hook-allow")
}

// The persisted audit report: each tenant reads its own deployments only,
// a tenant the policy is not assigned to reads nothing, and a deployment
// whose verdict was deleted drops out at once.
func TestAppPolicyReport(t *testing.T) {
	s := newStack(t, nil)
	code, out, raw := s.call(t, http.MethodPost, "/policies", map[string]any{"mode": "audit", "objectModel": seedFlavorPolicy("")["objectModel"]})
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, raw)
	}
	global := out["id"].(string)
	code, out, raw = s.call(t, http.MethodPost, "/policies", seedFlavorPolicy("t1-only", "t1"))
	if code != http.StatusOK {
		t.Fatalf("create for t1: %d %s", code, raw)
	}
	t1Only := out["id"].(string)
	for _, d := range []struct{ dep, tenant string }{{"d1", "t1"}, {"d2", "t2"}, {"d3", "t1"}} {
		s.Produce(t, topology.AdmissionVerdicts, d.dep, &events.AdmissionVerdict{RequestID: "r-" + d.dep, DeploymentID: d.dep, Tenant: d.tenant, Admitted: true,
			Request: `{}`, DecidedAt: time.Now()})
		s.Produce(t, topology.AdmissionAudit, events.AuditKey(global, d.dep), &events.AuditEntry{PolicyID: global, DeploymentID: d.dep, RequestID: "r-" + d.dep,
			Tenant: d.tenant, Findings: []events.AuditFinding{{Rule: "flavor-limit", Object: "application \"web\"", Message: "too large"}}, CheckedAt: time.Now()})
	}
	s.ProduceRecords(t, &kgo.Record{Topic: s.Kafka.Topic(topology.AdmissionVerdicts), Key: []byte("d3")})
	deps := func(out map[string]any) string {
		var ds []string
		vs, _ := out["violations"].([]any)
		for _, v := range vs {
			ds = append(ds, v.(map[string]any)["deployment_id"].(string))
		}
		return strings.Join(ds, " ")
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if code, out, raw = s.call(t, http.MethodGet, "/policies/"+global+"/report", nil); code != http.StatusOK || deps(out) != "d1 d2" {
			return fmt.Errorf("report as admin: %d %s", code, raw)
		}
		return nil
	})
	if v := out["violations"].([]any)[0].(map[string]any); out["mode"] != "audit" || v["tenant"] != "t1" || v["request_id"] != "r-d1" ||
		v["findings"].([]any)[0].(map[string]any)["policy_id"] != global {
		t.Errorf("report as admin: %s", raw)
	}
	if code, out, raw = s.callAs2(t, tenantToken, http.MethodGet, "/policies/"+global+"/report", nil); code != http.StatusOK || deps(out) != "d1" {
		t.Errorf("report as t1: %d %s", code, raw)
	}
	if code, out, raw = s.callAs2(t, otherTenantToken, http.MethodGet, "/policies/"+global+"/report", nil); code != http.StatusOK || deps(out) != "d2" {
		t.Errorf("report as t2: %d %s", code, raw)
	}
	code, out, _ = s.callAs2(t, otherTenantToken, http.MethodGet, "/policies/"+t1Only+"/report", nil)
	wantError(t, "report of t1's policy as t2", code, out, http.StatusForbidden)
	code, out, _ = s.call(t, http.MethodGet, "/policies/nope/report", nil)
	wantError(t, "report of an unknown policy", code, out, http.StatusNotFound)
}
