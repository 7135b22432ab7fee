package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// explain policy shows the version in force and, when the PDP's latest
// version is errored, which one and why.
func TestExplainPolicyShowsAnErroredLatestVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/policy_latest/DCAE.Config_VM":
			_, _ = w.Write([]byte(`{"policy_id": "DCAE.Config_VM", "policy_body": {"policyName": "DCAE.Config_VM.1.xml", "policyVersion": "1", "config": {"k": 1}},
				"status": "ERRORED", "error": "latest version 2 of DCAE.Config_VM from the PDP is invalid: policyConfigStatus is CONFIG_NOT_FOUND"}`))
		case "/policy_latest/DCAE.Config_OK":
			_, _ = w.Write([]byte(`{"policy_id": "DCAE.Config_OK", "policy_body": {"policyName": "DCAE.Config_OK.3.xml", "policyVersion": "3", "config": {}}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error": "no policy DCAE.Config_None in the policy catalog"}`))
		}
	}))
	defer srv.Close()

	r := policyctl(t, "explain", "policy", "--api", srv.URL, "DCAE.Config_VM")
	v := stdoutJSON(t, r)
	if r.code != 0 || v["status"] != "ERRORED" || v["in_force_version"] != "1" || !strings.Contains(v["error"].(string), "latest version 2") {
		t.Errorf("errored: exit %d %v", r.code, v)
	}
	if !strings.Contains(r.errOut, "ERRORED DCAE.Config_VM: latest version 2 of DCAE.Config_VM from the PDP is invalid") || !strings.Contains(r.errOut, "version 1, the last valid one, stays in force") {
		t.Errorf("stderr %q does not say which version is errored and which stays", r.errOut)
	}

	r = policyctl(t, "explain", "policy", "--api", srv.URL, "DCAE.Config_OK")
	if v := stdoutJSON(t, r); r.code != 0 || v["status"] != nil || v["in_force_version"] != "3" || r.errOut != "" {
		t.Errorf("valid: exit %d %v %q", r.code, v, r.errOut)
	}

	if r := policyctl(t, "explain", "policy", "--api", srv.URL, "DCAE.Config_None"); r.code != exitFailure || !strings.Contains(r.errOut, "no policy DCAE.Config_None") {
		t.Errorf("unknown: exit %d %q", r.code, r.errOut)
	}
	if r := policyctl(t, "explain", "policy", "--api", srv.URL); r.code != exitUsage || !strings.Contains(r.errOut, "takes one POLICY_ID") {
		t.Errorf("no id: exit %d %q", r.code, r.errOut)
	}
}
