package apicheck

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// doc is a small document in the North API's manner: a bearer scheme, a
// read with an enum in its answer, a write with a required body.
const doc = `{
  "openapi": "3.0.3",
  "info": {"title": "t", "version": "1"},
  "servers": [{"url": "http://127.0.0.1:8080"}],
  "security": [{"bearer": []}],
  "paths": {
    "/v1/things/{id}": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string", "maxLength": 8}}],
      "get": {
        "responses": {
          "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
          "401": {"$ref": "#/components/responses/Error"}
        }
      },
      "put": {
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
        "responses": {
          "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Thing"}}}},
          "400": {"$ref": "#/components/responses/Error"},
          "401": {"$ref": "#/components/responses/Error"}
        }
      }
    }
  },
  "components": {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    "responses": {"Error": {"description": "e", "content": {"application/json": {"schema": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}}}}}},
    "schemas": {"Thing": {"type": "object", "required": ["scope"], "properties": {"scope": {"type": "string", "enum": ["all", "deployment"]}}}}
  }
}`

// answer is what the test server says: status, content type, body.
type answer struct {
	code  int
	ctype string
	body  string
}

func exchange(t *testing.T, a answer, method, path, token, body string) []string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if a.ctype != "" {
			w.Header().Set("Content-Type", a.ctype)
		}
		w.WriteHeader(a.code)
		_, _ = io.WriteString(w, a.body)
	}))
	defer srv.Close()
	spec, err := Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rec := &Recorder{}
	client := &http.Client{Transport: spec.Transport(nil, rec)}
	// A body "untyped:..." is sent without a Content-Type.
	untyped, isUntyped := strings.CutPrefix(body, "untyped:")
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(untyped)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	if body != "" && !isUntyped {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != a.body || resp.StatusCode != a.code {
		t.Errorf("the checked client changed the answer: %d %q, want %d %q", resp.StatusCode, got, a.code, a.body)
	}
	if rec.Exchanges() != 1 {
		t.Errorf("%d exchanges counted, want 1", rec.Exchanges())
	}
	return rec.Failures()
}

func TestExchangesAgainstTheDocument(t *testing.T) {
	const js = "application/json"
	for _, c := range []struct {
		name                string
		a                   answer
		method, path, token string
		body                string
		want                string // a fragment of the one failure, or "" for none
	}{
		{"a documented answer", answer{200, js, `{"scope":"all"}`}, "GET", "/v1/things/a", "tok", "", ""},
		{"a value outside the enum", answer{200, js, `{"scope":"ALL"}`}, "GET", "/v1/things/a", "tok", "", "doesn't match schema"},
		{"a missing required field", answer{200, js, `{}`}, "GET", "/v1/things/a", "tok", "", "doesn't match schema"},
		{"an undocumented status", answer{418, js, `{"error":"x"}`}, "GET", "/v1/things/a", "tok", "", "status is not supported"},
		{"another content type", answer{200, "text/plain", `{"scope":"all"}`}, "GET", "/v1/things/a", "tok", "", "Content-Type"},
		{"a documented refusal without a token", answer{401, js, `{"error":"no token"}`}, "GET", "/v1/things/a", "", "", ""},
		// Whether a token is needed is the server's setting (--insecure-no-auth).
		{"an answer without a token", answer{200, js, `{"scope":"all"}`}, "GET", "/v1/things/a", "", "", ""},
		{"an undocumented refusal without a token", answer{403, js, `{"error":"no"}`}, "GET", "/v1/things/a", "", "", "status is not supported"},
		{"a bad body refused", answer{400, js, `{"error":"scope"}`}, "PUT", "/v1/things/a", "tok", `{"scope":"some"}`, ""},
		{"a bad body accepted", answer{200, js, `{"scope":"all"}`}, "PUT", "/v1/things/a", "tok", `{"scope":"some"}`, "refuses"},
		// A body without a Content-Type is checked as the one the route takes.
		{"a good body without a content type", answer{200, js, `{"scope":"all"}`}, "PUT", "/v1/things/a", "tok", `untyped:{"scope":"all"}`, ""},
		{"a bad body without a content type", answer{200, js, `{"scope":"all"}`}, "PUT", "/v1/things/a", "tok", `untyped:{"scope":"any"}`, "refuses"},
		{"a too long parameter accepted", answer{200, js, `{"scope":"all"}`}, "GET", "/v1/things/abcdefghij", "tok", "", "refuses"},
		{"an undocumented route refused", answer{404, js, `{"error":"no route"}`}, "GET", "/v1/other", "tok", "", ""},
		{"an undocumented route refused without a reason", answer{404, "text/plain", `404 page not found`}, "GET", "/v1/other", "tok", "", "application/json"},
		{"an undocumented route served", answer{200, js, `{}`}, "GET", "/v1/other", "tok", "", "no such route"},
		{"an undocumented method served", answer{200, js, `{}`}, "DELETE", "/v1/things/a", "tok", "", "no such route"},
	} {
		t.Run(c.name, func(t *testing.T) {
			failures := exchange(t, c.a, c.method, c.path, c.token, c.body)
			switch {
			case c.want == "" && len(failures) > 0:
				t.Errorf("want no failure, got %q", failures)
			case c.want != "" && (len(failures) != 1 || !strings.Contains(failures[0], c.want)):
				t.Errorf("want one failure with %q, got %q", c.want, failures)
			}
		})
	}
}

// TestClientFailsTheTest checks that Client's test fails when an exchange
// did not fit, and only then.
func TestClientFailsTheTest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"scope":"`+r.URL.Query().Get("scope")+`"}`)
	}))
	defer srv.Close()
	for scope, wantFail := range map[string]bool{"all": false, "ALL": true} {
		ft := &fakeT{TB: t}
		func() {
			defer ft.cleanup()
			req, _ := http.NewRequest("GET", srv.URL+"/v1/things/a?scope="+scope, nil)
			req.Header.Set("Authorization", "Bearer tok")
			resp, err := Client(ft, []byte(doc)).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}()
		if ft.failed != wantFail {
			t.Errorf("scope %q: test failed %v, want %v (%q)", scope, ft.failed, wantFail, ft.msgs)
		}
	}
}

// fakeT is a testing.TB whose failures and cleanups are its own.
type fakeT struct {
	testing.TB
	failed   bool
	msgs     []string
	cleanups []func()
}

func (f *fakeT) Helper()          {}
func (f *fakeT) Cleanup(g func()) { f.cleanups = append(f.cleanups, g) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.failed = true
	f.msgs = append(f.msgs, format)
}
func (f *fakeT) cleanup() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}
