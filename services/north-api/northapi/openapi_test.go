package northapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/apicheck"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
)

// Where a route and its description live, for the failure messages.
const (
	routesFile  = "services/north-api/northapi/routes.go"
	openAPIFile = "services/north-api/northapi/openapi.json"
)

// registeredRoutes are the "METHOD /path" patterns the API's mux
// registers (the catch-alls without a method, which answer 404 and 405,
// left out), as the mux was given them.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	env := runtime.NewEnv(runtime.Kafka{Brokers: []string{"127.0.0.1:1"}}, runtime.NewLogger(io.Discard, "error", false))
	s, err := New(env, Options{InsecureNoAuth: true, Consul: consulkv.Config{Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatalf("build a server: %v", err)
	}
	defer s.Close()
	var out []string
	for _, p := range s.mux().patterns {
		if method, _, ok := strings.Cut(p, " "); ok && method != "" && !strings.HasPrefix(method, "/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// wildcard is a path segment wildcard of a ServeMux pattern:
// {name}, {name...} or {$}.
var wildcard = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)(\.\.\.)?\}|\{\$\}`)

// openAPIPath is the OpenAPI path of a ServeMux pattern's path:
// {name...} is {name}, {$} is dropped.
func openAPIPath(p string) string {
	return wildcard.ReplaceAllStringFunc(p, func(w string) string {
		if w == "{$}" {
			return ""
		}
		return "{" + strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(w, "{"), "}"), "...") + "}"
	})
}

// documentedRoutes are the "METHOD /path" operations of the document.
func documentedRoutes(t *testing.T, doc *openapi3.T) []string {
	t.Helper()
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	if err != nil {
		t.Fatalf("%s is not an OpenAPI document: %v", openAPIFile, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not valid OpenAPI 3: %v", openAPIFile, err)
	}
	return doc
}

// TestOpenAPIIsValid checks the document as OpenAPI 3 (kin-openapi's
// validation: structure, references, path parameters declared).
func TestOpenAPIIsValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("%s says openapi %q; want 3.x", openAPIFile, doc.OpenAPI)
	}
}

// TestOpenAPIMatchesRoutes fails when a route the mux registers is not in
// the document, or the document describes a route the mux does not
// register, saying what to add or remove where.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := map[string]bool{}
	for _, r := range documentedRoutes(t, doc) {
		documented[r] = true
	}
	registered := map[string]bool{}
	for _, p := range registeredRoutes(t) {
		method, path, _ := strings.Cut(p, " ")
		r := method + " " + openAPIPath(path)
		registered[r] = true
		if !documented[r] {
			t.Errorf("route %q is registered in %s but not described in %s: add under \"paths\" -> %q the operation %q "+
				"(tags, operationId, summary, description with the roles that may call it, parameters, requestBody, and responses "+
				"with the Error schema for each 4xx/5xx; copy a neighbour such as \"/v1/catchup\")",
				p, routesFile, openAPIFile, openAPIPath(path), strings.ToLower(method))
		}
	}
	for r := range documented {
		if !registered[r] {
			method, path, _ := strings.Cut(r, " ")
			t.Errorf("%s describes %s, which %s does not register: remove \"paths\" -> %q -> %q from %s, or register the route in %s",
				openAPIFile, r, routesFile, path, strings.ToLower(method), openAPIFile, routesFile)
		}
	}
}

// TestOpenAPIServed fetches the document as a client would: with a
// token, as JSON, the same bytes; without one, 401.
func TestOpenAPIServed(t *testing.T) {
	env := runtime.NewEnv(runtime.Kafka{Brokers: []string{"127.0.0.1:1"}}, runtime.NewLogger(io.Discard, "error", false))
	s, err := New(env, Options{Tokens: testTokenSet(t), Consul: consulkv.Config{Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	get := func(token string) (int, string, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/openapi.json", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := checkedClient(t).Do(req) // checked against openapi.json
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	if code, _, body := get(""); code != http.StatusUnauthorized {
		t.Errorf("GET /openapi.json without a token: %d %s; want 401", code, body)
	}
	code, ctype, body := get(readOnlyToken)
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GET /openapi.json with a read-only token: %d %s", code, ctype)
	}
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil || v["openapi"] == nil {
		t.Fatalf("GET /openapi.json is not the document: %v %s", err, fmt.Sprint(v["openapi"]))
	}
	// The status page, public, through the same checked client.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ui/", nil)
	resp, err := checkedClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET /ui/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

func TestOpenAPIPathOfPatterns(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/components/{component_id}": "/v1/components/{component_id}",
		"/v1/orgs/{org}/nmps/{name}":    "/v1/orgs/{org}/nmps/{name}",
		"/files/{path...}":              "/files/{path}",
		"/ui/":                          "/ui/",
		"/v1/deployments/{$}":           "/v1/deployments/",
	} {
		if got := openAPIPath(in); got != want {
			t.Errorf("openAPIPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenAPIDocumentsWhatCatchupAnswers pins the document to the scope
// POST /v1/catchup really answers (the events' ALL and DEPLOYMENT), through
// the same check every test's calls go through (apicheck, in
// apicheck_test.go): an answer the document does not allow fails it.
func TestOpenAPIDocumentsWhatCatchupAnswers(t *testing.T) {
	for scope, fits := range map[string]bool{events.ScopeAll: true, events.ScopeDeployment: true, "all": false, "everything": false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			web.WriteJSON(w, http.StatusAccepted, api.CatchupAccepted{RequestID: "r-1", Scope: scope, Partitions: 3})
		}))
		spec, err := apicheck.Load(openAPIDocument)
		if err != nil {
			t.Fatal(err)
		}
		rec := &apicheck.Recorder{}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/catchup", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		auth.SetBearer(req, adminToken)
		resp, err := (&http.Client{Transport: spec.Transport(nil, rec)}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		if got := len(rec.Failures()) == 0; got != fits {
			t.Errorf("POST /v1/catchup answering scope %q: fits the document %v, want %v (%q)", scope, got, fits, rec.Failures())
		}
	}
}
