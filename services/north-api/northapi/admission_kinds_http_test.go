package northapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/admission/hooks"
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
