package northapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/topology"
)

// TestEveryRouteKeepsATenantToItsOwn acts as tenant t2 on tenant t1's
// things through every route of the route table, as each route's owner
// check (routeOwners) declares: a route naming t1's thing in its path, or
// a body naming t1's names, answers t2 403 or 404, and t1 itself is let
// through on the reads. A route without a declaration fails here, so a
// route added later is covered by declaring it.
func TestEveryRouteKeepsATenantToItsOwn(t *testing.T) {
	scn := fmt.Sprintf("a-scn-%d", time.Now().UnixNano())
	tenants := []string{"t1"}
	s := newStackWith(t, Options{RateLimit: RateLimit{Off: true}}, func(s *stack) {
		s.Produce(t, topology.DeployComponents, "a-comp", &events.Component{ComponentID: "a-comp", DeploymentID: "a-dep", ServiceComponentName: scn, Tenant: "t1",
			PolicyIDs: []string{}, PolicyFilters: []events.PolicyFilter{}, Notify: events.NotifyTarget{Kind: events.NotifyNone}, Config: "{}", Generation: 1})
		s.Produce(t, topology.AdmissionVerdicts, "a-dep", &events.AdmissionVerdict{RequestID: "r-a", DeploymentID: "a-dep", Tenant: "t1", Admitted: true,
			Violations: []events.AdmissionFinding{}, Warnings: []events.AdmissionFinding{}, Mutations: []events.AdmissionMutation{}, Request: "{}",
			Components: []string{"a-comp"}, Policies: []string{}})
		s.Produce(t, topology.AppPolicies, "pol-a", &events.AppPolicy{PolicyID: "pol-a", Name: "t1-only", TenantIDs: &tenants, Mode: "enforce",
			ObjectModel: `{"maxInstances": 4, "?": {"type": "io.policyflow.admission.InstanceQuota"}}`})
		settings := catalogRecord("admission.a-comp.1.xml", "1", map[string]any{"db_password": "t1-secret"})
		settings.Tenant = "t1"
		s.Produce(t, topology.PolicyCatalog, settings.PolicyID, settings)
	})
	// t1's thing of each kind.
	ownedByT1 := map[web.Owned]string{web.OwnedComponent: "a-comp", web.OwnedDeployment: "a-dep", web.OwnedFolder: scn, web.OwnedAppPolicy: "pol-a", web.OwnedOrg: "t1",
		web.OwnedPolicy: "admission.a-comp"}
	// What t2 sends to a route whose body names the owner: its own tenant
	// with t1's names, and t1's tenant.
	app := func(name, folder string) map[string]any {
		return map[string]any{"name": name, "class": "a.b.C", "component": map[string]any{"service_component_name": folder, "notify": map[string]any{"kind": "none"}}}
	}
	ownedBodies := map[string][]any{
		"POST /v1/deployments": {
			map[string]any{"deployment_id": "a-dep", "tenant": "t2", "applications": []any{app("x", "b-scn")}},
			map[string]any{"deployment_id": "b-dep", "tenant": "t2", "applications": []any{app("x", scn)}},
			map[string]any{"deployment_id": "b-dep", "tenant": "t1", "applications": []any{app("x", "b-scn")}},
		},
	}
	// A write of t2's own that would reach t1's thing only by its path.
	t2Body := func(rt route) any {
		if rt.method == http.MethodPut && rt.path == "/v1/components/{component_id}" {
			b := componentBody()
			b["tenant"], b["deployment_id"], b["service_component_name"] = "t2", "b-dep", "b-scn"
			return b
		}
		return bodyOf(rt)
	}

	routes := map[string]bool{}
	for _, rt := range s.server.routeTable() {
		name := rt.method + " " + rt.path
		routes[name] = true
		o := rt.owner()
		tenantsMay := rt.access.Allows(auth.RoleTenant) && !rt.access.Public
		switch {
		case !o.Declared():
			t.Errorf("%s declares no owner check: add it to routeOwners (owners.go)", name)
		case o.Public:
			if !rt.access.Public {
				t.Errorf("%s is declared public but needs a token", name)
			}
		case rt.access.Public:
			t.Errorf("%s is served without a token but not declared public", name)
		case o.NotTenants:
			if tenantsMay {
				t.Errorf("%s is declared not for tenants, but its access lets tenants call it", name)
				continue
			}
			code, body, _, _ := s.callAs(t, otherTenantToken, rt.method, concrete(rt.path), t2Body(rt))
			wantError(t, name+" as tenant t2", code, body, http.StatusForbidden, "has role tenant")
		case !tenantsMay:
			t.Errorf("%s refuses tenants: declare it notTenants", name)
		case o.Global:
			if o.Why == "" {
				t.Errorf("%s is declared global without saying why", name)
			}
		case o.Body:
			bodies := ownedBodies[name]
			if len(bodies) == 0 {
				t.Errorf("%s names its owner in the body: give this test bodies naming tenant t1's things", name)
			}
			for _, b := range bodies {
				code, body, raw, _ := s.callAs(t, otherTenantToken, rt.method, rt.path, b)
				if code != http.StatusForbidden {
					t.Errorf("%s as tenant t2 with %v: %d %s; want 403", name, b, code, raw)
				} else if msg, _ := body["error"].(string); !strings.Contains(msg, "t1") {
					t.Errorf("%s as tenant t2 with %v: %q does not name the owner t1", name, b, msg)
				}
			}
		default:
			thing, ok := ownedByT1[o.Kind]
			if !strings.Contains(rt.path, "{"+o.Param+"}") || !ok {
				t.Errorf("%s: owner check %+v names no path parameter of a known kind", name, o)
				continue
			}
			path := strings.Replace(rt.path, "{"+o.Param+"}", thing, 1)
			path = concrete(path)
			code, _, raw, _ := s.callAs(t, otherTenantToken, rt.method, path, t2Body(rt))
			if code != http.StatusForbidden && code != http.StatusNotFound {
				t.Errorf("%s %s as tenant t2 on t1's %s: %d %s; want 403 or 404", rt.method, path, o.Kind, code, raw)
			}
			if rt.method == http.MethodGet {
				code, _, raw, _ := s.callAs(t, tenantToken, rt.method, path, nil)
				if code == http.StatusForbidden || code == http.StatusUnauthorized {
					t.Errorf("%s %s as its owner t1: %d %s; want it let through", rt.method, path, code, raw)
				}
			}
		}
	}
	for name := range routeOwners {
		if !routes[name] {
			t.Errorf("routeOwners declares %s, which is no route", name)
		}
	}
	// Nothing t2 sent reached t1's things.
	if recs := s.records(t, topology.DeployComponents, 1); len(recs) != 1 {
		t.Errorf("deploy.components holds %d records; want t1's one component", len(recs))
	}
	if recs := s.records(t, topology.DeployRequests, 0); len(recs) != 0 {
		t.Errorf("deploy.requests holds %d requests; want none", len(recs))
	}
}
