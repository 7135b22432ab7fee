package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/north-api/auth"
)

// asNode calls the North API with a node's own token and returns the
// status code.
func asNode(t *testing.T, url, token, method, path string, body any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, url+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	auth.SetBearer(req, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestNodeTokenCommands(t *testing.T) {
	url, _ := northAPI(t)
	t.Setenv("PF_API", url)
	tok, err := os.ReadFile(defaultTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	code, body := asNode(t, url, strings.TrimSpace(string(tok)), http.MethodPut, "/v1/orgs/acme/nodes/n1", map[string]any{"softwareVersion": "1.0.0"})
	first, _ := body["token"].(string)
	if code != 200 || first == "" {
		t.Fatalf("register: %d %v", code, body)
	}
	out := filepath.Join(t.TempDir(), "n1.token")
	r := policyctl(t, "node", "token", "rotate", "--out", out, "acme/n1")
	if r.code != 0 || strings.Contains(r.out, "pfn_") {
		t.Fatalf("rotate: exit %d %q %q", r.code, r.out, r.errOut)
	}
	info, err := os.Stat(out)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", info, err)
	}
	data, _ := os.ReadFile(out)
	second := strings.TrimSpace(string(data))
	if code, _ := asNode(t, url, first, http.MethodPut, "/v1/orgs/acme/nodes/n1/status", map[string]any{"status": "successful"}); code != http.StatusUnauthorized {
		t.Fatalf("the old token after rotate: %d, want 401", code)
	}
	if code, body := asNode(t, url, second, http.MethodPut, "/v1/orgs/acme/nodes/n1/status", map[string]any{"status": "successful"}); code != 200 {
		t.Fatalf("the rotated token: %d %v", code, body)
	}
	if r := policyctl(t, "node", "token", "revoke", "acme/n1"); r.code != 0 || !strings.Contains(r.out, "revoked") {
		t.Fatalf("revoke: exit %d %q %q", r.code, r.out, r.errOut)
	}
	if code, _ := asNode(t, url, second, http.MethodPut, "/v1/orgs/acme/nodes/n1/status", map[string]any{"status": "successful"}); code != http.StatusUnauthorized {
		t.Fatalf("the token after revoke: %d, want 401", code)
	}
	if r := policyctl(t, "node", "token", "rotate", "acme/nobody"); r.code != 1 || !strings.Contains(r.errOut, "not registered") {
		t.Fatalf("rotate an unknown node: exit %d %q", r.code, r.errOut)
	}
	if r := policyctl(t, "node", "token", "revoke", "acme"); r.code != 2 {
		t.Fatalf("no node: exit %d %q", r.code, r.errOut)
	}
}
