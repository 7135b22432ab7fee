package northapi

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/topology"
)

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// concrete fills a route's path parameters.
func concrete(path string) string { return pathParam.ReplaceAllString(path, "x") }

// bodyOf is a request body each route can parse, so a wrong answer is not
// a 400 in disguise.
func bodyOf(rt route) any {
	switch {
	case rt.method == http.MethodPut:
		return componentBody()
	case rt.path == "/policies_latest":
		return map[string]any{"policyName": ".*"}
	case rt.path == "/v1/pdp/notifications":
		return map[string]any{"loadedPolicies": []any{map[string]any{"policyName": "DCAE.Config_X.1.xml", "versionNo": "1"}}}
	case rt.path == "/v1/policies":
		return pdpBody("DCAE.Config_X.1.xml", "1", map[string]any{"x": 1})
	case rt.method == http.MethodPost:
		return map[string]any{}
	}
	return nil
}

func TestEveryRouteButHealthcheckNeedsAToken(t *testing.T) {
	// Two calls per route from one address, more than a burst: the rate
	// limit (tested on its own below) is off here.
	s := newStackWith(t, Options{RateLimit: RateLimit{Off: true}}, nil)
	var public []string
	for _, rt := range s.server.routeTable() {
		name := rt.method + " " + rt.path
		if rt.access.Public {
			public = append(public, name)
			continue
		}
		for _, tc := range []struct{ what, token, challenge string }{
			{"no token", "", `Bearer realm="policyflow-north-api"`},
			{"unknown token", "not-a-token", `Bearer realm="policyflow-north-api", error="invalid_token"`},
		} {
			code, body, _, h := s.callAs(t, tc.token, rt.method, concrete(rt.path), bodyOf(rt))
			wantError(t, name+" with "+tc.what, code, body, http.StatusUnauthorized, "token")
			if got := h.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("%s with %s: WWW-Authenticate %q, want %q", name, tc.what, got, tc.challenge)
			}
		}
	}
	// The status page holds no data: its script asks /v1/status, which
	// needs a token.
	if fmt.Sprint(public) != "[GET /healthcheck GET /ui/]" {
		t.Errorf("routes served without a token: %v, want only GET /healthcheck and the status page GET /ui/", public)
	}
	code, body, _, _ := s.callAs(t, "", http.MethodGet, "/healthcheck", nil)
	if code != http.StatusOK || body["status"] != "ok" {
		t.Errorf("healthcheck without a token: %d %v", code, body)
	}
	// Unknown paths and methods say nothing to a caller without a token.
	code, body, _, _ = s.callAs(t, "", http.MethodGet, "/v2/anything", nil)
	wantError(t, "unknown path without a token", code, body, http.StatusUnauthorized, "needs a bearer token")
	code, body, _, _ = s.callAs(t, "", http.MethodPost, "/v1/components/x", "{}")
	wantError(t, "wrong method without a token", code, body, http.StatusUnauthorized, "needs a bearer token")
	// Nothing refused was produced.
	if recs := s.records(t, topology.DeployComponents, 0); len(recs) != 0 {
		t.Errorf("refused requests produced %d component records", len(recs))
	}
	if recs := s.records(t, topology.PDPNotifications, 0); len(recs) != 0 {
		t.Errorf("refused requests produced %d notifications", len(recs))
	}
}

func TestRolesOutsideARouteAreForbidden(t *testing.T) {
	s := newStack(t, nil)
	reads := map[string]bool{
		"GET /v1/components/{component_id}/status":                            true,
		"GET /policy_latest/{policy_id}":                                      true,
		"POST /policies_latest":                                               true,
		"GET /service_component_all/{service_component_name}":                 true,
		"GET /v2/participants":                                                true,
		"GET /v2/participants/{participant_id}":                               true,
		"GET /v2/participants/{participant_id}/compositions/{composition_id}": true,
		"GET /v2/participants/{participant_id}/instances/{instance_id}":       true,
		"GET /onap/policy/clamp/acm/v2/participants":                          true,
		"GET /onap/policy/clamp/acm/v2/participants/{participantId}":          true,
		"GET /v1/policies/{policy_id}/rollout":                                true,
		"GET /openapi.json":                                                   true,
		"GET /v1/status":                                                      true,
		"GET /v1/orgs/{org}/nmps":                                             true,
		"GET /v1/orgs/{org}/nmps/{name}":                                      true,
		"GET /v1/orgs/{org}/nmps/{name}/nodes":                                true,
		"GET /v1/orgs/{org}/nmps/{name}/status":                               true,
		"GET /v1/orgs/{org}/nodes/{node}/status":                              true,
		"GET /v1/orgs/{org}/nodes":                                            true,
		"GET /v1/agentpackages":                                               true,
		"GET /v1/agentpackages/{version}":                                     true,
		"GET /v1/agentpackages/{version}/file":                                true,
		"GET /v1/deployments/{deployment_id}":                                 true,
		"GET /policies":                                                       true,
		"GET /policies/{policy_id}":                                           true,
		"GET /policies/{policy_id}/violations":                                true,
		"GET /policies/{policy_id}/report":                                    true,
		"GET /v1/datacenters":                                                 true,
		"GET /v1/datacenters/{datacenter_id}":                                 true,
	}
	// Agents register their node, read its directive, report its status
	// and download packages. The org token of the tokens file only
	// registers: the node routes but that one take the node's own token
	// (TestNodeTokensActForTheirOwnNodeOnly), and answer the org token 403.
	nodeOwn := map[string]bool{
		"DELETE /v1/orgs/{org}/nodes/{node}":        true,
		"GET /v1/orgs/{org}/nodes/{node}/directive": true,
		"PUT /v1/orgs/{org}/nodes/{node}/status":    true,
		"GET /v1/orgs/{org}/nodes/{node}/status":    true,
	}
	agents := map[string]bool{
		"PUT /v1/orgs/{org}/nodes/{node}":           true,
		"DELETE /v1/orgs/{org}/nodes/{node}":        true,
		"GET /v1/orgs/{org}/nodes/{node}/directive": true,
		"PUT /v1/orgs/{org}/nodes/{node}/status":    true,
		"GET /v1/orgs/{org}/nodes/{node}/status":    true,
		"GET /v1/agentpackages":                     true,
		"GET /v1/agentpackages/{version}":           true,
		"GET /v1/agentpackages/{version}/file":      true,
	}
	for _, rt := range s.server.routeTable() {
		if rt.access.Public {
			continue
		}
		name := rt.method + " " + rt.path
		for _, tc := range []struct {
			role, token string
			allowed     bool
		}{
			{"read-only", readOnlyToken, reads[name]},
			{"agent", agentToken, agents[name]},
			{"participant", participantToken, false},
		} {
			code, body, raw, _ := s.callAs(t, tc.token, rt.method, concrete(rt.path), bodyOf(rt))
			if tc.token == agentToken && nodeOwn[name] {
				wantError(t, name+" with an org token", code, body, http.StatusForbidden, "org token", "own token")
				continue
			}
			if tc.allowed {
				if code == http.StatusUnauthorized || code == http.StatusForbidden {
					t.Errorf("%s as %s: %d %s, want it allowed", name, tc.role, code, raw)
				}
				continue
			}
			wantError(t, name+" as "+tc.role, code, body, http.StatusForbidden, "has role "+tc.role, "may not call")
		}
	}
	if recs := s.records(t, topology.DeployComponents, 0); len(recs) != 0 {
		t.Errorf("forbidden requests produced %d component records", len(recs))
	}
	if recs := s.records(t, topology.PDPNotifications, 0); len(recs) != 0 {
		t.Errorf("forbidden requests produced %d notifications", len(recs))
	}
	// An operator may do what an admin may.
	code, _, raw, _ := s.callAs(t, operatorToken, http.MethodPost, "/v1/policies", pdpBody("DCAE.Config_OP.1.xml", "1", map[string]any{"x": 1}))
	if code != http.StatusAccepted {
		t.Errorf("push as operator: %d %s", code, raw)
	}
}

func TestTenantTokensAreScopedToTheirComponents(t *testing.T) {
	s := newStack(t, nil)
	scn := "scn-tenant-" + fmt.Sprint(time.Now().UnixNano())
	own := componentBody() // tenant t1
	own["service_component_name"] = scn + "-own"
	other := componentBody()
	other["tenant"] = "t2"
	other["service_component_name"] = scn + "-other"
	other["deployment_id"] = "dep-t2" // dep-1 is t1's

	code, _, raw, _ := s.callAs(t, tenantToken, http.MethodPut, "/v1/components/c-own", own)
	if code != http.StatusAccepted {
		t.Fatalf("tenant t1 PUT of its own component: %d %s", code, raw)
	}
	code, _, raw, _ = s.callAs(t, otherTenantToken, http.MethodPut, "/v1/components/c-other", other)
	if code != http.StatusAccepted {
		t.Fatalf("tenant t2 PUT of its own component: %d %s", code, raw)
	}

	// t1 may not register for t2, take over t2's component, or move its
	// own component to t2.
	code, body, _, _ := s.callAs(t, tenantToken, http.MethodPut, "/v1/components/c-new", other)
	wantError(t, "PUT for another tenant", code, body, http.StatusForbidden, `scoped to tenant "t1"`, `the body says "t2"`)
	takeover := componentBody()
	takeover["service_component_name"] = scn + "-other"
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodPut, "/v1/components/c-other", takeover)
	wantError(t, "PUT of another tenant's component", code, body, http.StatusForbidden, `component c-other belongs to tenant "t2"`)
	moved := componentBody()
	moved["tenant"] = "t2"
	moved["service_component_name"] = scn + "-own"
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodPut, "/v1/components/c-own", moved)
	wantError(t, "changing the tenant", code, body, http.StatusForbidden, `the body says "t2"`)
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodDelete, "/v1/components/c-other", nil)
	wantError(t, "DELETE of another tenant's component", code, body, http.StatusForbidden, `belongs to tenant "t2"`)
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/v1/components/c-other/status", nil)
	wantError(t, "status of another tenant's component", code, body, http.StatusForbidden, `belongs to tenant "t2"`)
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/service_component_all/"+scn+"-other", nil)
	wantError(t, "folder of another tenant's component", code, body, http.StatusForbidden, `no registered component of tenant "t1"`)
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodPost, "/v1/catchup", "{}")
	wantError(t, "catch-up as tenant", code, body, http.StatusForbidden, "has role tenant")
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/catch_up", nil)
	wantError(t, "seed catch-up as tenant", code, body, http.StatusForbidden, "has role tenant")

	// Its own: status, folder, policies (not tenant-scoped), delete.
	code, body, raw, _ = s.callAs(t, tenantToken, http.MethodGet, "/v1/components/c-own/status", nil)
	if code != http.StatusOK || body["component_id"] != "c-own" {
		t.Errorf("status of its own component: %d %s", code, raw)
	}
	code, _, raw, _ = s.callAs(t, tenantToken, http.MethodGet, "/service_component_all/"+scn+"-own", nil)
	if code != http.StatusOK {
		t.Errorf("folder of its own component: %d %s", code, raw)
	}
	code, _, raw, _ = s.callAs(t, tenantToken, http.MethodPost, "/policies_latest", `{"policyName": ".*"}`)
	if code != http.StatusOK {
		t.Errorf("policies_latest as tenant: %d %s", code, raw)
	}
	code, body, raw, _ = s.callAs(t, tenantToken, http.MethodDelete, "/v1/components/c-own", nil)
	if code != http.StatusAccepted || body["deleted"] != true {
		t.Errorf("DELETE of its own component: %d %s", code, raw)
	}

	// deploy.components holds the two registrations and the one delete.
	recs := s.records(t, topology.DeployComponents, 3)
	var got []string
	for _, rec := range recs {
		if rec.Value == nil {
			got = append(got, "delete "+string(rec.Key))
			continue
		}
		c := stagetest.Decode[*events.Component](t, rec)
		got = append(got, fmt.Sprintf("put %s tenant %s", c.ComponentID, c.Tenant))
	}
	sort.Strings(got) // records of different keys may be read in any order
	if strings.Join(got, ", ") != "delete c-own, put c-other tenant t2, put c-own tenant t1" {
		t.Errorf("deploy.components: %v", got)
	}
}

func TestAServiceComponentNameBelongsToOneComponent(t *testing.T) {
	s := newStack(t, nil)
	scn := "scn-claim-" + fmt.Sprint(time.Now().UnixNano())
	a := componentBody()
	a["service_component_name"] = scn
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/comp-a", a); code != http.StatusAccepted {
		t.Fatalf("PUT A: %d %s", code, raw)
	}
	// B naming A's folder is refused, naming A.
	code, body, _ := s.call(t, http.MethodPut, "/v1/components/comp-b", a)
	wantError(t, "PUT B with A's folder", code, body, http.StatusConflict, "service_component_name "+scn, "component comp-a")
	// So B does not exist, and deleting it cannot touch A's folder.
	code, body, _ = s.call(t, http.MethodDelete, "/v1/components/comp-b", nil)
	wantError(t, "DELETE B", code, body, http.StatusNotFound, "comp-b is not registered")
	// A itself may be written again with its folder.
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/comp-a", a); code != http.StatusAccepted {
		t.Fatalf("PUT A again: %d %s", code, raw)
	}
	recs := s.records(t, topology.DeployComponents, 2)
	for _, rec := range recs {
		if string(rec.Key) != "comp-a" || rec.Value == nil {
			t.Errorf("deploy.components holds %q (tombstone %v); want only comp-a's two registrations", rec.Key, rec.Value == nil)
		}
	}
	if len(recs) != 2 {
		t.Errorf("deploy.components holds %d records, want 2", len(recs))
	}

	// Once A is deleted, the folder is free for B.
	if code, _, raw := s.call(t, http.MethodDelete, "/v1/components/comp-a", nil); code != http.StatusAccepted {
		t.Fatalf("DELETE A: %d %s", code, raw)
	}
	if code, _, raw := s.call(t, http.MethodPut, "/v1/components/comp-b", a); code != http.StatusAccepted {
		t.Fatalf("PUT B after A was deleted: %d %s", code, raw)
	}
}

func TestOpsEndpointsAreNotOnTheAPI(t *testing.T) {
	s := newStack(t, nil)
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline", "/readyz", "/healthz"} {
		code, body, _ := s.call(t, http.MethodGet, path, nil)
		wantError(t, path+" on the API", code, body, http.StatusNotFound, "no endpoint at "+path)
	}
	// The ops listener has metrics, and no profiles unless asked for.
	if code, _, _ := s.opsGet(t, "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics on the ops listener: %d", code)
	}
	if code, _, raw := s.opsGet(t, "/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline on the ops listener without --pprof: %d %s", code, raw)
	}
}

func TestInsecureNoAuthServesEveryone(t *testing.T) {
	s := newStackWith(t, Options{InsecureNoAuth: true}, nil)
	code, _, raw, _ := s.callAs(t, "", http.MethodPut, "/v1/components/open", componentBody())
	if code != http.StatusAccepted {
		t.Errorf("PUT without a token and without authentication: %d %s", code, raw)
	}
}

func TestNewRefusesToRunWithoutTokens(t *testing.T) {
	c := stagetest.NewCluster(t, 1)
	consulCfg, _ := stagetest.SharedConsul(t)
	_, err := New(stagetest.Env(c.Kafka), Options{Consul: consulCfg})
	if err == nil || !strings.Contains(err.Error(), "--insecure-no-auth") {
		t.Errorf("New without tokens: %v, want a refusal naming --tokens-file and --insecure-no-auth", err)
	}
	var cfg Config
	if err := cfg.Check(); err == nil || !strings.Contains(err.Error(), "--tokens-file") {
		t.Errorf("Config without --tokens-file: %v", err)
	}
}

func TestTooManyRequestsAnswer429(t *testing.T) {
	s := newStackWith(t, Options{RateLimit: RateLimit{PerSecond: 0.001, Burst: 3}}, nil)
	for i := range 3 {
		if code, _, raw := s.call(t, http.MethodGet, "/policy_latest/none", nil); code != http.StatusNotFound {
			t.Fatalf("request %d within the burst: %d %s", i+1, code, raw)
		}
	}
	code, body, _, h := s.callAs(t, adminToken, http.MethodGet, "/policy_latest/none", nil)
	wantError(t, "request over the limit", code, body, http.StatusTooManyRequests, "token admin", "retry after")
	if ra := h.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("429 without a Retry-After: %q", ra)
	}
	// Another token has its own bucket.
	if code, _, raw, _ := s.callAs(t, readOnlyToken, http.MethodGet, "/policy_latest/none", nil); code != http.StatusNotFound {
		t.Errorf("another token: %d %s", code, raw)
	}
}
