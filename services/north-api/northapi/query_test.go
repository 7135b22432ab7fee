package northapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// queryServer is a North API on no reachable Kafka or Consul, with the
// tests' tokens: enough for what is decided before a handler runs.
func queryServer(t *testing.T) http.Handler {
	t.Helper()
	return queryAPI(t).routes()
}

// queryAPI is the server of queryServer.
func queryAPI(t *testing.T) *Server {
	t.Helper()
	env := runtime.NewEnv(runtime.Kafka{Brokers: []string{"127.0.0.1:1"}}, runtime.NewLogger(io.Discard, "error", false))
	s, err := New(env, Options{Tokens: testTokenSet(t), Consul: consulkv.Config{Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatalf("build a server: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func queryCall(t *testing.T, h http.Handler, token, method, target, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// TestUnknownQueryParametersRefused: a parameter a route does not take is
// refused with 400 naming it and the ones the route takes, on write
// routes of every subsystem (POST /v1/policies?dry_run=true once
// published), before anything is read or written.
func TestUnknownQueryParametersRefused(t *testing.T) {
	h := queryServer(t)
	for _, tc := range []struct{ method, target, want string }{
		{http.MethodPost, "/v1/policies?dryrun=true", `unknown query parameter \"dryrun\": POST /v1/policies takes only dry_run`},
		{http.MethodPost, "/v1/pdp/notifications?force=1", `\"force\": POST /v1/pdp/notifications takes only dry_run`},
		{http.MethodPut, "/v1/components/c1?dry_run=true", `\"dry_run\": PUT /v1/components/c1 takes no query parameter`},
		{http.MethodDelete, "/v1/components/c1?cascade=true", `\"cascade\"`},
		{http.MethodPost, "/v1/catchup?deployment_id=d", `\"deployment_id\"`},
		{http.MethodPut, "/v1/orgs/o/nmps/n?dry_run=true", `takes only dryRun`},
		{http.MethodPost, "/v1/deployments?dryRun=true", `takes only dry_run`},
		{http.MethodPut, "/v1/datacenters/dc1?x=1", `\"x\"`},
		{http.MethodPost, "/policies?x=1", `\"x\"`},
		{http.MethodPut, "/onap/policy/clamp/acm/v2/participants?x=1", `\"x\"`},
		{http.MethodGet, "/v1/policies/p/rollout?limt=5", `takes only limit, version`},
		{http.MethodGet, "/catch_up?scope=all", `\"scope\"`},
	} {
		code, body := queryCall(t, h, operatorToken, tc.method, tc.target, "{}")
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s: %d %s, want 400 with %s", tc.method, tc.target, code, body, tc.want)
		}
	}
	// The status page and /healthcheck take what browsers and probes add.
	if code, body := queryCall(t, h, "", http.MethodGet, "/healthcheck?probe=1", ""); code != http.StatusOK {
		t.Errorf("GET /healthcheck?probe=1: %d %s", code, body)
	}
}

// TestDryRunAccess: a tenant may ask POST /v1/policies for a dry run
// (the handler is reached: it waits for its views here) but may not
// publish; a bad dry_run value is refused.
func TestDryRunAccess(t *testing.T) {
	h := queryServer(t)
	body := `{"policyName": "DCAE.Config_X.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"a": 1}}`
	if code, out := queryCall(t, h, tenantToken, http.MethodPost, "/v1/policies", body); code != http.StatusForbidden || !strings.Contains(out, "dry_run=true") {
		t.Errorf("a tenant's publish: %d %s, want 403", code, out)
	}
	if code, out := queryCall(t, h, tenantToken, http.MethodPost, "/v1/policies?dry_run=true", body); code != http.StatusServiceUnavailable {
		t.Errorf("a tenant's dry run: %d %s, want the handler's 503 (no views here)", code, out)
	}
	if code, out := queryCall(t, h, readOnlyToken, http.MethodPost, "/v1/policies?dry_run=maybe", body); code != http.StatusBadRequest || !strings.Contains(out, "give true or false") {
		t.Errorf("dry_run=maybe: %d %s, want 400", code, out)
	}
	if code, out := queryCall(t, h, agentToken, http.MethodPost, "/v1/policies?dry_run=true", body); code != http.StatusForbidden {
		t.Errorf("an agent's dry run: %d %s, want 403", code, out)
	}
}

// TestQueryParametersDocumented: the query parameters each route takes
// are the ones openapi.json describes for it.
func TestQueryParametersDocumented(t *testing.T) {
	doc := loadOpenAPI(t)
	queries := routeQueries()
	for _, p := range registeredRoutes(t) {
		method, path, _ := strings.Cut(p, " ")
		item := doc.Paths.Find(openAPIPath(path))
		if item == nil {
			continue // TestOpenAPIMatchesRoutes says so
		}
		op := item.GetOperation(method)
		if op == nil {
			continue
		}
		var documented []string
		for _, prm := range op.Parameters {
			if prm.Value != nil && prm.Value.In == "query" {
				documented = append(documented, prm.Value.Name)
			}
		}
		q := queries[p]
		if q.Lenient {
			continue
		}
		declared := slices.Clone(q.Params)
		slices.Sort(declared)
		slices.Sort(documented)
		if !slices.Equal(declared, documented) {
			t.Errorf("%s takes the query parameters %v (%s, routeQueries) but %s describes %v", p, declared, routesFile, openAPIFile, documented)
		}
	}
	for p := range queries {
		if !slices.Contains(registeredRoutes(t), p) {
			t.Errorf("routeQueries names %q, which is not a route", p)
		}
	}
}

// TestUnknownBodyFieldsRefused: a body field a write route does not take
// is refused with 400 naming it, before anything is read or written; a
// route that takes no body refuses one with fields.
func TestUnknownBodyFieldsRefused(t *testing.T) {
	h := queryServer(t)
	for _, tc := range []struct{ method, target, body, want string }{
		{http.MethodPost, "/v1/pdp/notifications", `{"loadedPolicies": [], "dryRun": true}`, `unknown field \"dryRun\"`},
		{http.MethodPost, "/v1/pdp/notifications?dry_run=true", `{"loadedPolicies": [{"policyName": "DCAE.Config_X.1.xml", "versionNo": "1", "extra": 1}]}`, `unknown field \"extra\"`},
		{http.MethodPut, "/v1/components/c1", `{"deployment_id": "d", "service_component_name": "s", "policy_idz": []}`, `unknown field \"policy_idz\"`},
		{http.MethodPost, "/v1/catchup", `{"deployment": "d"}`, `unknown field \"deployment\"`},
		{http.MethodPost, "/v1/deployments", `{"deployment_id": "d", "force": true}`, `unknown field \"force\"`},
		{http.MethodDelete, "/v1/components/c1", `{"cascade": true}`, `unknown field \"cascade\"`},
		{http.MethodPost, "/v1/components/c1/renotify", `{"all": true}`, `unknown field \"all\"`},
		{http.MethodDelete, "/policies/p1", `{"force": true}`, `unknown field \"force\"`},
	} {
		code, body := queryCall(t, h, operatorToken, tc.method, tc.target, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s %s: %d %s, want 400 with %s", tc.method, tc.target, tc.body, code, body, tc.want)
		}
	}
}

// TestEveryWriteRouteRefusesUnknownBodyFields: every route of the table
// but GET answers 400 naming a body field it does not take, before
// anything is written; a route added without a strict decoding (or a
// bodiless declaration) fails here.
func TestEveryWriteRouteRefusesUnknownBodyFields(t *testing.T) {
	s := queryAPI(t)
	h := s.routes()
	// Routes that cannot show it here, and why.
	elsewhere := map[string]string{
		"POST /v1/agentpackages":                   "the body is the package's tar.gz, checked by nmp.ReadPackage",
		"POST /v1/orgs/{org}/nmps/{name}/enable":   "decodes strictly (DecodeOptionalJSON) once nmp.policies is read, which it is not here",
		"POST /v1/orgs/{org}/nmps/{name}/disable":  "as enable",
		"POST /v1/orgs/{org}/nmps/{name}/resume":   "as enable",
		"POST /v1/orgs/{org}/nmps/{name}/rollback": "as enable",
		"PUT /policies/{policy_id}":                "decodes strictly (DecodeJSON) once app.policies is read, which it is not here",
	}
	// A concrete path the route serves, where "x" is not one.
	paths := map[string]string{"PUT /v2/participants/{participant_id}": "/v2/participants/sync"}
	for _, rt := range s.routeTable() {
		name := rt.method + " " + rt.path
		if rt.method == http.MethodGet || elsewhere[name] != "" {
			continue
		}
		path := concrete(rt.path)
		if p, ok := paths[name]; ok {
			path = p
		}
		code, body := queryCall(t, h, adminToken, rt.method, path, `{"zz_unknown_field": 1}`)
		switch {
		case name == "POST /v1/policies":
			// A policy_body's fields are the policy's own (policy.Check).
			if code != http.StatusBadRequest {
				t.Errorf("%s with no policyName: %d %s, want 400", name, code, body)
			}
		case code != http.StatusBadRequest || !strings.Contains(body, `unknown field \"zz_unknown_field\"`):
			t.Errorf("%s with an unknown body field: %d %s, want 400 naming it (decode the body strictly, or declare the route in bodiless)", name, code, body)
		}
	}
}
