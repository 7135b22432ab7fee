package admit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/admission/hooks"
)

// engine is an external policy engine: it denies requests of tenant
// "bad", admits others, and sleeps first when the request's environment
// is "slow".
func engine(t *testing.T) (*httptest.Server, *[]admit.ExternalQuery) {
	var seen []admit.ExternalQuery
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q admit.ExternalQuery
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&q) != nil {
			http.Error(w, "bad query", http.StatusBadRequest)
			return
		}
		seen = append(seen, q)
		switch {
		case q.Request.Environment == "slow":
			select {
			case <-time.After(3 * time.Second):
			case <-r.Context().Done():
			}
		case q.Request.Environment == "garbled":
			w.Write([]byte(`{"ok": 1}`))
			return
		}
		allowed := q.Request.Tenant != "bad"
		json.NewEncoder(w).Encode(map[string]any{"allowed": allowed, "message": "tenant " + q.Request.Tenant + " is on the engine's deny list"})
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func externalPolicy(t *testing.T, id, url, failurePolicy, mode string) *admit.Compiled {
	t.Helper()
	fp := ""
	if failurePolicy != "" {
		fp = `,"failurePolicy":"` + failurePolicy + `"`
	}
	c, err := admit.Compile(id, json.RawMessage(`{"url":"`+url+`","timeoutSeconds":1`+fp+`,"?":{"type":"io.policyflow.admission.External"}}`), mode, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// An External policy asks a real HTTP engine through the operator's
// rules: its answer allows or denies; an engine that does not answer in
// time denies (failurePolicy Fail, the default) or warns (Ignore).
func TestExternalEngine(t *testing.T) {
	srv, seen := engine(t)
	env := admit.Env{External: hooks.Config{Allow: []string{"127.0.0.1"}}.MustRules().Call}
	req := func(tenant, environment string) *admit.Request {
		r, err := admit.ParseRequest([]byte(`{"deployment_id":"d1","tenant":"` + tenant + `","environment":"` + environment + `","applications":[{"name":"web","class":"com.example.Web"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	closed := externalPolicy(t, "ext", srv.URL+"/decide", "", "")
	open := externalPolicy(t, "ext-open", srv.URL+"/decide", admit.FailOpen, "")
	for _, tc := range []struct {
		name               string
		policy             *admit.Compiled
		req                *admit.Request
		env                admit.Env
		admitted           bool
		violation, warning string
	}{
		{"allow", closed, req("good", "prod"), env, true, "", ""},
		{"deny", closed, req("bad", "prod"), env, false, "the external engine at " + srv.URL + "/decide denies: tenant bad is on the engine's deny list (rule external of policy ext)", ""},
		{"timeout fails closed", closed, req("good", "slow"), env, false, "could not decide: no answer within 1s", ""},
		{"timeout fails open", open, req("good", "slow"), env, true, "", "could not decide: no answer within 1s"},
		{"an answer without allowed fails closed", closed, req("good", "garbled"), env, false, `its answer is not {"allowed": true|false, "message": "..."}: {"ok": 1}`, ""},
		{"a host no longer allowed fails closed", closed, req("good", "prod"), admit.Env{External: hooks.Config{Allow: []string{"engine.example"}}.MustRules().Call}, false, "host 127.0.0.1:", ""},
		{"no caller fails closed", closed, req("good", "prod"), admit.Env{}, false, "no external engine may be called here", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			v, err := admit.EvaluateWith(context.Background(), tc.req, []*admit.Compiled{tc.policy}, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2500*time.Millisecond {
				t.Errorf("took %s; the policy's timeout is 1s", took)
			}
			if v.Admitted != tc.admitted {
				t.Errorf("admitted = %v, want %v: %+v", v.Admitted, tc.admitted, v)
			}
			check := func(what string, fs []admit.Finding, want string) {
				if want == "" {
					if len(fs) != 0 {
						t.Errorf("%s = %+v, want none", what, fs)
					}
					return
				}
				if len(fs) != 1 || !strings.Contains(fs[0].Text(tc.req.Tenant), want) {
					t.Errorf("%s = %+v, want one with %q", what, fs, want)
				}
			}
			check("violations", v.Violations, tc.violation)
			check("warnings", v.Warnings, tc.warning)
		})
	}
	if len(*seen) == 0 || (*seen)[0].PolicyID != "ext" || (*seen)[0].Request.Tenant != "good" {
		t.Errorf("the engine was sent %+v", *seen)
	}
	// An audit does not call the engine.
	n := len(*seen)
	if fs := admit.Audit(context.Background(), req("bad", "prod"), closed); len(fs) != 0 || len(*seen) != n {
		t.Errorf("audit: %+v, %d calls", fs, len(*seen)-n)
	}
}

func TestExternalRefusals(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{`{"?":{"type":"io.policyflow.admission.External"}}`, "objectModel.url: is missing"},
		{`{"url":"ftp://x/y","?":{"type":"io.policyflow.admission.External"}}`, "objectModel.url: ftp://x/y is not an absolute http or https URL"},
		{`{"url":"http://x/","failurePolicy":"open","?":{"type":"io.policyflow.admission.External"}}`, `objectModel.failurePolicy: "open" is not a failure policy`},
		{`{"url":"http://x/","timeoutSeconds":11,"?":{"type":"io.policyflow.admission.External"}}`, "objectModel.timeoutSeconds: 11 is out of range: give 1 to 10"},
		{`{"maxInstances":3,"webhook":"x","?":{"type":"io.policyflow.admission.InstanceNotice"}}`, "objectModel.webhook: x is not an absolute http or https URL"},
	} {
		if _, err := admit.Compile("p", json.RawMessage(tc.model), "", nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.model, err, tc.want)
		}
	}
	c, err := admit.Compile("p", json.RawMessage(`{"url":"https://engine.example/decide","?":{"type":"io.policyflow.admission.External"}}`), "", nil)
	if err != nil || len(c.Endpoints()) != 1 || c.Endpoints()[0].URL != "https://engine.example/decide" || c.Endpoints()[0].Field != "objectModel.url" {
		t.Errorf("endpoints: %+v, %v", c, err)
	}
}
