package northapi

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// seedFlavorPolicy is the seed's create body with a known kind.
func seedFlavorPolicy(name string, tenants ...string) map[string]any {
	b := map[string]any{
		"description": "Policy to limit possible flavor",
		"objectModel": map[string]any{
			"maxFlavor": "m1.medium",
			"?":         map[string]any{"type": "io.policyflow.admission.FlavorLimit", "id": "446373ef-03b5-4925-b095-6c56568fa518"},
		},
	}
	if name != "" {
		b["name"] = name
	}
	if tenants != nil {
		b["tenantIds"] = tenants
	}
	return b
}

func TestAppPoliciesAPIAnswersEverySeedCode(t *testing.T) {
	s := newStack(t, nil)

	// 200 on create, with the seed's fields.
	code, out, raw := s.call(t, http.MethodPost, "/policies", seedFlavorPolicy("flavor-t1", "t1"))
	if code != http.StatusOK || out["id"] == "" || out["created"] == "" || out["updated"] == "" || out["description"] != "Policy to limit possible flavor" {
		t.Fatalf("create: %d %s", code, raw)
	}
	id := out["id"].(string)
	if om, _ := out["objectModel"].(map[string]any); om["maxFlavor"] != "m1.medium" {
		t.Errorf("create: objectModel %v", out["objectModel"])
	}
	if ts, _ := out["tenant_ids"].([]any); len(ts) != 1 || ts[0] != "t1" {
		t.Errorf("create: tenant_ids %v", out["tenant_ids"])
	}
	code, out, _ = s.call(t, http.MethodPost, "/policies", map[string]any{"description": "global", "objectModel": map[string]any{"maxInstances": 10, "?": map[string]any{"type": "io.policyflow.admission.InstanceQuota"}}})
	if code != http.StatusOK {
		t.Fatalf("create global: %d %v", code, out)
	}
	global := out["id"].(string)
	code, out, _ = s.call(t, http.MethodPost, "/policies", seedFlavorPolicy("flavor-t2", "t2"))
	if code != http.StatusOK {
		t.Fatalf("create for t2: %d %v", code, out)
	}
	t2Policy := out["id"].(string)

	// 400: the body's format, then parameters against the contract, each naming the field.
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"malformed JSON", `{"objectModel": `, "malformed JSON"},
		{"unknown field", `{"objectModel": {}, "tenants": []}`, `unknown field "tenants"`},
		{"no objectModel", map[string]any{"description": "x"}, "objectModel is missing"},
		{"tenantIds not an array", map[string]any{"objectModel": seedFlavorPolicy("")["objectModel"], "tenantIds": "t1"}, "tenantIds must be an array"},
		{"parameter of the wrong type", map[string]any{"objectModel": map[string]any{"maxFlavor": 3, "?": map[string]any{"type": "io.policyflow.admission.FlavorLimit"}}}, "objectModel.maxFlavor: must be a string"},
		{"unknown parameter", map[string]any{"objectModel": map[string]any{"maxFlavour": "m1.small", "?": map[string]any{"type": "io.policyflow.admission.FlavorLimit"}}}, "objectModel.maxFlavour: is not a parameter"},
		{"CEL that does not compile", map[string]any{"objectModel": map[string]any{"validations": []any{map[string]any{"expression": "app.flavor ==", "message": "m"}}, "?": map[string]any{"type": "io.policyflow.admission.CEL"}}}, "objectModel.validations[0].expression: does not compile: ERROR: line:1:14"},
		{"bad mode", map[string]any{"objectModel": seedFlavorPolicy("")["objectModel"], "mode": "maybe"}, "mode: \"maybe\" is not a mode"},
		{"CEL over the cost limit", costlyCEL, "objectModel.validations[0].expression: its worst-case cost is estimated at "},
		{"priority out of range", map[string]any{"objectModel": seedFlavorPolicy("")["objectModel"], "priority": 1 << 40}, "priority: 1099511627776 is out of range"},
		{"instances override without from", map[string]any{"objectModel": map[string]any{"field": "instances", "value": 3, "?": map[string]any{"type": "io.policyflow.admission.DefaultOverride"}}}, `objectModel.from: is missing: instances always has a value`},
	} {
		code, out, _ := s.call(t, http.MethodPost, "/policies", tc.body)
		wantError(t, "create with "+tc.name, code, out, http.StatusBadRequest, tc.want)
	}
	code, out, _ = s.call(t, http.MethodPut, "/policies/"+id, costlyCEL)
	wantError(t, "update to CEL over the cost limit", code, out, http.StatusBadRequest, "over the limit of 1000000 for one evaluation")

	// 404: a kind that does not exist (the seed's "class doesn't exist or it is not an Aspect").
	code, out, _ = s.call(t, http.MethodPost, "/policies", map[string]any{"objectModel": map[string]any{"maxFlavor": "m1.medium", "?": map[string]any{"type": "com.example.MyAspect"}}})
	wantError(t, "create of an unknown kind", code, out, http.StatusNotFound, `"com.example.MyAspect" is not a known policy kind`, "io.policyflow.admission.FlavorLimit")

	// 409: a name taken, on create and on update.
	code, out, _ = s.call(t, http.MethodPost, "/policies", seedFlavorPolicy("flavor-t1"))
	wantError(t, "create with a taken name", code, out, http.StatusConflict, `a policy named "flavor-t1" exists already (`+id+")")
	code, out, _ = s.call(t, http.MethodPut, "/policies/"+t2Policy, seedFlavorPolicy("flavor-t1", "t2"))
	wantError(t, "rename to a taken name", code, out, http.StatusConflict, "flavor-t1")

	// 403: roles that may not, and tenants outside their policies.
	for _, tc := range []struct{ token, method, path string }{
		{tenantToken, http.MethodPost, "/policies"},
		{readOnlyToken, http.MethodPost, "/policies"},
		{tenantToken, http.MethodPut, "/policies/" + id},
		{tenantToken, http.MethodDelete, "/policies/" + id},
		{agentToken, http.MethodGet, "/policies"},
		{otherTenantToken, http.MethodGet, "/policies/" + id},
	} {
		code, out, _, _ := s.callAs(t, tc.token, tc.method, tc.path, seedFlavorPolicy(""))
		wantError(t, tc.method+" "+tc.path+" by "+tc.token, code, out, http.StatusForbidden)
	}

	// 200 on list: a tenant sees its policies and the global ones.
	code, out, raw = s.call(t, http.MethodGet, "/policies", nil)
	if list, _ := out["policies"].([]any); code != http.StatusOK || len(list) != 3 {
		t.Errorf("list as admin: %d %s", code, raw)
	}
	code, out, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/policies", nil)
	seen := map[string]bool{}
	list, _ := out["policies"].([]any)
	for _, p := range list {
		seen[p.(map[string]any)["id"].(string)] = true
	}
	if code != http.StatusOK || len(seen) != 2 || !seen[id] || !seen[global] {
		t.Errorf("list as tenant t1: %d %v, want %s and %s", code, seen, id, global)
	}

	// 200 on get, 404 for an unknown id.
	code, out, _ = s.call(t, http.MethodGet, "/policies/"+id, nil)
	if code != http.StatusOK || out["id"] != id {
		t.Errorf("get: %d %v", code, out)
	}
	code, out, _ = s.call(t, http.MethodGet, "/policies/nope", nil)
	wantError(t, "get of an unknown policy", code, out, http.StatusNotFound, "policy nope does not exist")

	// 200 on update: created kept, updated moved on, the new body shown.
	time.Sleep(5 * time.Millisecond) // a later millisecond for "updated"
	upd := seedFlavorPolicy("flavor-t1", "726ed856965f43cc8e565bc991fa76d8")
	upd["description"] = "Changed description"
	upd["objectModel"].(map[string]any)["maxFlavor"] = "m1.large"
	code, out, raw = s.call(t, http.MethodPut, "/policies/"+id, upd)
	if code != http.StatusOK || out["description"] != "Changed description" || out["objectModel"].(map[string]any)["maxFlavor"] != "m1.large" {
		t.Fatalf("update: %d %s", code, raw)
	}
	if ts, _ := out["tenant_ids"].([]any); len(ts) != 1 || ts[0] != "726ed856965f43cc8e565bc991fa76d8" {
		t.Errorf("update: tenant_ids %v", out["tenant_ids"])
	}
	code, out, _ = s.call(t, http.MethodPut, "/policies/nope", upd)
	wantError(t, "update of an unknown policy", code, out, http.StatusNotFound)
	code, out, _ = s.call(t, http.MethodPut, "/policies/"+id, map[string]any{"objectModel": map[string]any{"maxFlavor": "m9", "?": map[string]any{"type": "io.policyflow.admission.FlavorLimit"}}})
	wantError(t, "update against the contract", code, out, http.StatusBadRequest, "objectModel.maxFlavor")

	// The record on app.policies is what a user would read back.
	var last *events.AppPolicy
	for _, r := range s.records(t, topology.AppPolicies, 4) {
		if string(r.Key) == id {
			last = decodeAppPolicy(t, s, r.Value)
		}
	}
	if last.PolicyID != id || last.Description != "Changed description" || last.TenantIDs == nil || (*last.TenantIDs)[0] != "726ed856965f43cc8e565bc991fa76d8" {
		t.Errorf("last app.policies record = %+v", last)
	}

	// 200 on delete, then 404.
	code, out, _ = s.call(t, http.MethodDelete, "/policies/"+id, nil)
	if code != http.StatusOK || out["id"] != id {
		t.Errorf("delete: %d %v", code, out)
	}
	code, out, _ = s.call(t, http.MethodDelete, "/policies/"+id, nil)
	wantError(t, "delete again", code, out, http.StatusNotFound)
	code, out, _ = s.call(t, http.MethodGet, "/policies/"+id, nil)
	wantError(t, "get after delete", code, out, http.StatusNotFound)
}

func decodeAppPolicy(t *testing.T, s *stack, value []byte) *events.AppPolicy {
	t.Helper()
	var p events.AppPolicy
	if err := s.env.Codec.DecodeInto(t.Context(), value, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestDeploymentsAPI(t *testing.T) {
	s := newStack(t, nil)
	code, out, _ := s.call(t, http.MethodPost, "/policies", map[string]any{"objectModel": map[string]any{
		"field": "image", "value": "ubuntu-promoted", "?": map[string]any{"type": "io.policyflow.admission.DefaultOverride"}}})
	if code != http.StatusOK {
		t.Fatalf("create override: %d %v", code, out)
	}
	code, out, _ = s.call(t, http.MethodPost, "/policies", seedFlavorPolicy("", "t1"))
	if code != http.StatusOK {
		t.Fatalf("create flavor limit: %d %v", code, out)
	}
	flavorID := out["id"].(string)
	dep := func(id, tenant, flavor string) map[string]any {
		return map[string]any{"deployment_id": id, "tenant": tenant, "environment": "prod", "applications": []any{
			map[string]any{"name": "web", "class": "com.example.Web", "flavor": flavor}}}
	}

	// Dry run: the verdict and the mutated request, nothing written.
	code, out, raw := s.callAs2(t, tenantToken, http.MethodPost, "/v1/deployments?dry_run=true", dep("d1", "t1", "m1.small"))
	req, _ := out["request"].(map[string]any)
	if code != http.StatusOK || out["admitted"] != true || out["dry_run"] != true || req == nil ||
		req["applications"].([]any)[0].(map[string]any)["image"] != "ubuntu-promoted" {
		t.Fatalf("dry run: %d %s", code, raw)
	}
	code, out, raw = s.call(t, http.MethodPost, "/v1/deployments?dry_run=true", dep("d2", "t1", "m1.large"))
	if v, _ := out["violations"].([]any); code != http.StatusOK || out["admitted"] != false || len(v) != 1 ||
		v[0].(map[string]any)["policy_id"] != flavorID {
		t.Fatalf("dry run of a denied request: %d %s", code, raw)
	}

	// 202 and the record on deploy.requests, keyed as every request is.
	code, out, raw = s.callAs2(t, tenantToken, http.MethodPost, "/v1/deployments", dep("d1", "", "m1.small"))
	if code != http.StatusAccepted || out["status"] != "pending" || out["tenant"] != "t1" {
		t.Fatalf("submit: %d %s", code, raw)
	}
	recs := s.records(t, topology.DeployRequests, 1)
	var dr events.DeploymentRequest
	if err := s.env.Codec.DecodeInto(t.Context(), recs[0].Value, &dr); err != nil {
		t.Fatal(err)
	}
	if string(recs[0].Key) != topology.DeployRequestsKey || dr.DeploymentID != "d1" || dr.Action != events.ActionDeploy || dr.Tenant != "t1" || dr.RequestID != out["request_id"] || dr.SubmittedBy != "deployer-t1" {
		t.Errorf("deploy.requests record %q = %+v", recs[0].Key, dr)
	}

	// Refusals.
	code, out, _ = s.callAs2(t, tenantToken, http.MethodPost, "/v1/deployments", dep("d3", "t2", "m1.small"))
	wantError(t, "deploy for another tenant", code, out, http.StatusForbidden, `scoped to tenant "t1"`)
	code, out, _ = s.call(t, http.MethodPost, "/v1/deployments", dep("d3", "", "m1.small"))
	wantError(t, "deploy without tenant", code, out, http.StatusBadRequest, "tenant: is missing")
	bad := dep("d3", "t1", "m1.small")
	bad["applications"].([]any)[0].(map[string]any)["class"] = "not a class"
	code, out, _ = s.call(t, http.MethodPost, "/v1/deployments", bad)
	wantError(t, "deploy of a bad class", code, out, http.StatusBadRequest, "applications[0].class")
	withScript := dep("d3", "t1", "m1.small")
	withScript["applications"].([]any)[0].(map[string]any)["component"] = map[string]any{"notify": map[string]any{"kind": "script", "script_path": "/tmp/elsewhere.sh"}}
	code, out, _ = s.call(t, http.MethodPost, "/v1/deployments", withScript)
	wantError(t, "deploy with a script outside the allowed directories", code, out, http.StatusBadRequest, "applications[0].component")
	code, out, _ = s.call(t, http.MethodPost, "/v1/deployments?dry_run=perhaps", dep("d3", "t1", "m1.small"))
	wantError(t, "dry_run not a boolean", code, out, http.StatusBadRequest, "dry_run")
	code, out, _, _ = s.callAs(t, readOnlyToken, http.MethodPost, "/v1/deployments", dep("d3", "t1", "m1.small"))
	wantError(t, "deploy by read-only", code, out, http.StatusForbidden)

	// GET: 404 before a verdict, the verdict once there, 403 to another tenant.
	code, out, _ = s.call(t, http.MethodGet, "/v1/deployments/d9", nil)
	wantError(t, "verdict of an unknown deployment", code, out, http.StatusNotFound)
	s.Produce(t, topology.AdmissionVerdicts, "d9", &events.AdmissionVerdict{
		RequestID: "r9", DeploymentID: "d9", Tenant: "t1", Admitted: true,
		Request:    `{"deployment_id":"d9","tenant":"t1","environment":"","applications":[{"name":"web","class":"com.example.Web","instances":1,"flavor":"m1.xlarge"}]}`,
		Components: []string{"d9.web"}, DecidedAt: time.Now(),
	})
	testkit.Eventually(t, 30*time.Second, func() error {
		if code, out, raw = s.callAs2(t, tenantToken, http.MethodGet, "/v1/deployments/d9", nil); code != http.StatusOK {
			return fmt.Errorf("verdict: %d %s", code, raw)
		}
		return nil
	})
	if code != http.StatusOK || out["admitted"] != true || out["request_id"] != "r9" {
		t.Fatalf("verdict: %d %s", code, raw)
	}
	code, out, _, _ = s.callAs(t, otherTenantToken, http.MethodGet, "/v1/deployments/d9", nil)
	wantError(t, "verdict of another tenant's deployment", code, out, http.StatusForbidden)

	// The admitted deployment runs m1.xlarge, which the flavor limit
	// created before it would deny: the audit lists it.
	code, out, raw = s.call(t, http.MethodGet, "/policies/"+flavorID+"/violations", nil)
	v, _ := out["violations"].([]any)
	if code != http.StatusOK || out["checked"] != float64(1) || len(v) != 1 || v[0].(map[string]any)["deployment_id"] != "d9" {
		t.Fatalf("violations: %d %s", code, raw)
	}
	code, out, _ = s.call(t, http.MethodGet, "/policies/nope/violations", nil)
	wantError(t, "violations of an unknown policy", code, out, http.StatusNotFound)
	code, out, raw, _ = s.callAs(t, otherTenantToken, http.MethodGet, "/policies/"+flavorID+"/violations", nil)
	wantError(t, fmt.Sprintf("violations as another tenant (%s)", raw), code, out, http.StatusForbidden)
}

// callAs2 is callAs without the headers.
func (s *stack) callAs2(t *testing.T, token, method, path string, body any) (int, map[string]any, []byte) {
	t.Helper()
	code, out, raw, _ := s.callAs(t, token, method, path, body)
	return code, out, raw
}

// costlyCEL is a CEL policy whose one rule, six comprehensions nested over
// ten items, costs more than one evaluation may.
var costlyCEL = map[string]any{"objectModel": map[string]any{"validations": []any{map[string]any{
	"expression": "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))",
	"message":    "costly"}}, "?": map[string]any{"type": "io.policyflow.admission.CEL"}}}
