package northapi

import (
	"net/http"
	"testing"

	"github.com/policyflow/policyflow/topology"
)

// TestATenantCannotTakeAnotherTenantsNames: tenant t2 can neither deploy
// onto, nor register, a component id, Consul folder or deployment of
// tenant t1's, and the dry run says so too.
func TestATenantCannotTakeAnotherTenantsNames(t *testing.T) {
	s := newStack(t, nil)
	owned := componentBody() // tenant t1
	owned["deployment_id"] = "gx.prod"
	owned["service_component_name"] = "gx.prod.web"
	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodPut, "/v1/components/gx.prod.web", owned); code != http.StatusAccepted {
		t.Fatalf("t1 registers gx.prod.web: %d %s", code, raw)
	}
	app := func(name, scn string) map[string]any {
		return map[string]any{"name": name, "package": "a.b", "class": "a.b.C", "properties": map[string]any{"db_password": "attacker"},
			"component": map[string]any{"service_component_name": scn, "notify": map[string]any{"kind": "none"}}}
	}
	deploy := func(dep string, a map[string]any) map[string]any {
		return map[string]any{"deployment_id": dep, "tenant": "t2", "applications": []any{a}}
	}

	code, body, _, _ := s.callAs(t, otherTenantToken, http.MethodPost, "/v1/deployments", deploy("gx", app("prod.web", "gx.prod.web")))
	wantError(t, "a name that derives t1's component id", code, body, http.StatusBadRequest, `applications[0].name: "prod.web" holds a '.'`)
	code, body, _, _ = s.callAs(t, otherTenantToken, http.MethodPost, "/v1/deployments", deploy("gx", app("web", "gx.prod.web")))
	wantError(t, "t1's folder", code, body, http.StatusForbidden, `service_component_name gx.prod.web is the Consul folder of component gx.prod.web of tenant "t1"`)
	code, body, _, _ = s.callAs(t, otherTenantToken, http.MethodPost, "/v1/deployments", deploy("gx.prod", app("db", "t2-db")))
	wantError(t, "t1's deployment", code, body, http.StatusForbidden, `deployment gx.prod belongs to tenant "t1"`)
	code, body, raw, _ := s.callAs(t, otherTenantToken, http.MethodPost, "/v1/deployments?dry_run=true", deploy("gx", app("web", "gx.prod.web")))
	if v, _ := body["violations"].([]any); code != http.StatusOK || body["admitted"] != false || len(v) != 1 {
		t.Errorf("dry run of the folder takeover: %d %s; want denied", code, raw)
	} else if f, _ := v[0].(map[string]any); f["rule"] != "names" || f["message"] != `tenant "t2": application "web": service_component_name gx.prod.web is the Consul folder of component gx.prod.web of tenant "t1", not of tenant "t2" (rule names of policy names)` {
		t.Errorf("dry run violation %v", f)
	}

	theirs := componentBody()
	theirs["tenant"] = "t2"
	theirs["deployment_id"] = "gx.prod"
	theirs["service_component_name"] = "t2-a"
	code, body, _, _ = s.callAs(t, otherTenantToken, http.MethodPut, "/v1/components/t2-a", theirs)
	wantError(t, "a component in t1's deployment", code, body, http.StatusForbidden, `deployment gx.prod belongs to tenant "t1"`)
	theirs["deployment_id"] = "t2-dep"
	theirs["service_component_name"] = "t2-b"
	code, body, _, _ = s.callAs(t, otherTenantToken, http.MethodPut, "/v1/components/gx.prod.db", theirs)
	wantError(t, "an id of t1's deployment", code, body, http.StatusForbidden, `component id gx.prod.db is the name of an application of deployment gx.prod, which belongs to tenant "t1"`)
	// An operator cannot move the names to another tenant either.
	code, body, _, _ = s.callAs(t, operatorToken, http.MethodPost, "/v1/deployments", deploy("gx", app("web", "gx.prod.web")))
	wantError(t, "an operator's request for t2 with t1's folder", code, body, http.StatusForbidden, `of tenant "t1"`)

	if recs := s.records(t, topology.DeployRequests, 0); len(recs) != 0 {
		t.Errorf("refused deployments produced %d requests", len(recs))
	}
	if recs := s.records(t, topology.DeployComponents, 1); len(recs) != 1 {
		t.Errorf("deploy.components holds %d records; want t1's one registration", len(recs))
	}
}
