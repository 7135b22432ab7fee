package northapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/topology"
)

// TestNewRoutesAgainstAHostileCaller tries the routes added for
// deployments, audit reports, what-if and staged rollouts as a hostile
// caller would: the other tenant, no token, a name with "..", a name
// another tenant holds, a malformed, null, huge or unknown-field body.
// Each gets a 4xx with a reason, and the owner's deployment is still
// there afterwards.
func TestNewRoutesAgainstAHostileCaller(t *testing.T) {
	const pol = "DCAE.Config_HOSTILE"
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.AdmissionVerdicts, "mine", &events.AdmissionVerdict{RequestID: "r1", DeploymentID: "mine", Tenant: "t1", Admitted: true,
			Request: `{"deployment_id":"mine","tenant":"t1","applications":[{"name":"db","class":"com.example.Db","instances":1}]}`, Components: []string{"mine.db"}, DecidedAt: time.Now()})
		s.Produce(t, topology.PolicyCatalog, pol, catalogRecord(pol+".1.xml", "1", pdpBody(pol+".1.xml", "1", map[string]any{"v": 1})))
	})
	v2 := pdpBody(pol+".2.xml", "2", map[string]any{"v": 2})
	huge := `{"policy":` + `"` + strings.Repeat("x", 64<<20) + `"}`
	for _, tc := range []struct {
		name, token, method, path string
		body                      any
		want                      int
		says                      string
	}{
		{"other tenant deletes t1's deployment", otherTenantToken, http.MethodDelete, "/v1/deployments/mine", nil, http.StatusForbidden, "t1"},
		{"other tenant reads t1's deployment", otherTenantToken, http.MethodGet, "/v1/deployments/mine", nil, http.StatusForbidden, "t1"},
		{"no token deletes", "", http.MethodDelete, "/v1/deployments/mine", nil, http.StatusUnauthorized, ""},
		{"a deployment id with ..", tenantToken, http.MethodDelete, "/v1/deployments/a..b", nil, http.StatusBadRequest, "deployment_id"},
		{"a body on a delete", tenantToken, http.MethodDelete, "/v1/deployments/mine", map[string]any{"force": true}, http.StatusBadRequest, "force"},
		{"an unknown parameter on a delete", tenantToken, http.MethodDelete, "/v1/deployments/mine?cascade=false", nil, http.StatusBadRequest, "cascade"},
		{"other tenant deploys under t1's deployment id", otherTenantToken, http.MethodPost, "/v1/deployments",
			map[string]any{"deployment_id": "mine", "tenant": "t2", "applications": []any{map[string]any{"name": "db", "class": "com.example.Db"}}}, http.StatusForbidden, "mine"},
		{"a report with no token", "", http.MethodGet, "/policies/p-1/report", nil, http.StatusUnauthorized, ""},
		{"a tenant promotes a rollout", tenantToken, http.MethodPost, "/v1/policies/" + pol + "/rollout/promote", nil, http.StatusForbidden, ""},
		{"a tenant aborts a rollout", otherTenantToken, http.MethodPost, "/v1/policies/" + pol + "/rollout/abort", nil, http.StatusForbidden, ""},
		{"a rollout action with an unknown field", adminToken, http.MethodPost, "/v1/policies/" + pol + "/rollout/pause", map[string]any{"why": "x"}, http.StatusBadRequest, "why"},
		{"a policy id with ..", adminToken, http.MethodPost, "/v1/policies/a..b/rollout/pause", nil, http.StatusBadRequest, "policy_id"},
		{"a plan with a null policy", adminToken, http.MethodPost, "/v1/policies", `{"policy": null, "rollout": {"steps": [1]}}`, http.StatusBadRequest, "policy"},
		{"a plan that is null", adminToken, http.MethodPost, "/v1/policies", map[string]any{"policy": v2, "rollout": nil}, http.StatusBadRequest, "rollout"},
		{"a dry run of a null plan by a tenant", tenantToken, http.MethodPost, "/v1/policies?dry_run=true", map[string]any{"policy": v2, "rollout": nil}, http.StatusBadRequest, "rollout"},
		{"a tenant publishes with a plan", tenantToken, http.MethodPost, "/v1/policies", map[string]any{"policy": v2, "rollout": map[string]any{"steps": []float64{1}}}, http.StatusForbidden, ""},
		{"a truncated plan", adminToken, http.MethodPost, "/v1/policies?dry_run=true", `{"policy": {"policyName": `, http.StatusBadRequest, ""},
		{"a null body", adminToken, http.MethodPost, "/v1/policies?dry_run=true", `null`, http.StatusBadRequest, "null"},
		{"a dry run given twice", adminToken, http.MethodPost, "/v1/policies?dry_run=true&dry_run=false", v2, http.StatusBadRequest, "dry_run"},
		{"a huge body", adminToken, http.MethodPost, "/v1/policies?dry_run=true", huge, http.StatusRequestEntityTooLarge, ""},
	} {
		code, out, raw, _ := s.callAs(t, tc.token, tc.method, tc.path, tc.body)
		msg, _ := out["error"].(string)
		if code != tc.want || msg == "" || !strings.Contains(msg, tc.says) {
			t.Errorf("%s: %s %s: %d %.300s; want %d with a reason naming %q", tc.name, tc.method, tc.path, code, raw, tc.want, tc.says)
		}
	}
	// The owner's deployment is untouched: no deletion was queued.
	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodGet, "/v1/deployments/mine", nil); code != http.StatusOK {
		t.Fatalf("t1's deployment after the attempts: %d %s", code, raw)
	}
	if n := len(s.records(t, topology.DeployRequests, 0)); n != 0 {
		t.Errorf("%d records on deploy.requests after refused attempts, want 0", n)
	}
}
