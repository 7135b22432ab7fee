package northapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

func TestNMPsAreCheckedStoredAndReported(t *testing.T) {
	s := newStack(t, nil)
	// Refusals, each with what to fix; nothing is stored.
	for _, tc := range []struct {
		body  any
		code  int
		wants []string
	}{
		{map[string]any{"constraints": []string{"arch = amd64"}}, 400, []string{"constraints[0]", "at position 5", "use == or !="}},
		{map[string]any{"agentUpgradePolicy": map[string]any{"atLeastVersion": "1.2"}}, 400, []string{"semantic version"}},
		{map[string]any{"agentUpgradePolicy": map[string]any{"start": "soon"}}, 400, []string{"RFC3339"}},
		{map[string]any{"enabled": true, "agentUpgradePolicy": map[string]any{}}, 409, []string{"no constraints", "confirmAllNodes"}},
		{map[string]any{"enabled": true, "constraints": []string{"a == 1"}, "patterns": []string{"*"}}, 409, []string{`pattern "*"`}},
		{map[string]any{"enable": true}, 400, []string{"unknown field"}},
	} {
		code, body, _ := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/p1", tc.body)
		wantError(t, "PUT NMP", code, body, tc.code, tc.wants...)
	}
	code, body, _ := s.call(t, http.MethodPut, "/v1/orgs/bad%20org/nmps/p1", map[string]any{})
	wantError(t, "bad org", code, body, 400, "org")
	if recs := s.Read(t, topology.NMPPolicies, 0, time.Second); len(recs) != 0 {
		t.Fatalf("refused NMPs stored %d records", len(recs))
	}

	// Two nodes, one of which enacted another NMP.
	for _, n := range []string{"n1", "n2"} {
		code, body, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/"+n, map[string]any{"properties": []any{map[string]any{"name": "arch", "value": "amd64"}}, "softwareVersion": "1.0.0"})
		if code != 200 {
			t.Fatalf("register %s: %d %v %s", n, code, body, raw)
		}
	}
	code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/old", map[string]any{"enabled": true, "constraints": []string{"arch == amd64"}, "agentUpgradePolicy": map[string]any{"atLeastVersion": "1.1.0"}})
	if code != 200 {
		t.Fatalf("publish old: %d %s", code, raw)
	}
	code, body, raw = s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n1/status", map[string]any{"policy": "acme/old", "status": "successful", "softwareVersion": "1.1.0", "agentVersion": map[string]any{"package": map[string]any{"version": "1.1.0"}}})
	if code != 200 {
		t.Fatalf("status: %d %v %s", code, body, raw)
	}
	code, body, _ = s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n1/status", map[string]any{"status": "exploded"})
	wantError(t, "bad status", code, body, 400, "want one of")
	code, body, _ = s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n3", map[string]any{"constraints": []string{"(a == 1"}, "softwareVersion": "1.0.0"})
	wantError(t, "bad node constraint", code, body, 400, "never closed")
	code, body, _ = s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n3", map[string]any{"pattern": "web", "constraints": []string{"a == 1"}, "softwareVersion": "1.0.0"})
	wantError(t, "pattern and policy", code, body, 400, "not both")
	code, body, _ = s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n3", map[string]any{"softwareVersion": "1.0"})
	wantError(t, "bad version", code, body, 400, "semantic version")
	code, body, _ = s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n3/status", map[string]any{"status": "successful", "softwareVersion": "x"})
	wantError(t, "bad status version", code, body, 400, "softwareVersion")
	// The refused reports above stored nothing; the accepted one is in the
	// view once the view has read agent.status to its end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.server.nmp.World().WaitCaughtUp(ctx, topology.AgentStatus); err != nil {
		t.Fatalf("the view did not read agent.status: %v", err)
	}
	if st := s.server.nmp.World().Status("acme/n1"); st == nil || st.Status != "successful" || st.Policy != "acme/old" {
		t.Fatalf("after the accepted report the view has status %+v of acme/n1, want successful about acme/old", st)
	}

	// A dry run lists the nodes and the conflict, and stores nothing.
	newer := map[string]any{"enabled": true, "constraints": []string{"arch == amd64"}, "agentUpgradePolicy": map[string]any{"atLeastVersion": "1.2.0", "duration": 600}}
	code, body, raw = s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/new?dryRun=true", newer)
	if code != 200 || !strings.Contains(compact(raw), `"nodes":["acme/n1","acme/n2"]`) || !strings.Contains(compact(raw), `"conflicts":{"acme/n1":"acme/old"}`) || body["dryRun"] != true {
		t.Fatalf("dry run: %d %s", code, raw)
	}
	code, _, raw = s.call(t, http.MethodGet, "/v1/orgs/acme/nmps/new", nil)
	if code != 404 {
		t.Fatalf("the dry run stored the NMP: %d %s", code, raw)
	}
	code, _, raw = s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/new", newer)
	if code != 200 || !strings.Contains(compact(raw), `"conflicts":{"acme/n1":"acme/old"}`) {
		t.Fatalf("publish: %d %s", code, raw)
	}
	recs := s.Read(t, topology.NMPPolicies, 2, 10*time.Second)
	rec := recs[0]
	if string(rec.Key) != "acme/new" {
		rec = recs[1]
	}
	p := stagetest.Decode[*events.NodeManagementPolicy](t, rec)
	if string(rec.Key) != "acme/new" || p.AgentUpgrade.AtLeastVersion != "1.2.0" || p.AgentUpgrade.DurationS != 600 || p.Owner != "admin" {
		t.Fatalf("stored %s: %+v", rec.Key, p)
	}
	code, _, raw = s.call(t, http.MethodGet, "/v1/orgs/acme/nmps/new/status", nil)
	if code != 200 || !strings.Contains(compact(raw), `"states":{"ignored (conflict with acme/old)":1,"waiting":1}`) {
		t.Fatalf("status: %d %s", code, raw)
	}
	code, _, raw = s.call(t, http.MethodGet, "/v1/orgs/acme/nmps/old/status", nil)
	if code != 200 || !strings.Contains(compact(raw), `"states":{"ignored (conflict with acme/new)":1,"successful":1}`) {
		t.Fatalf("status of old: %d %s", code, raw)
	}
	// Disable, then enable again; remove.
	for _, act := range []string{"disable", "enable", "resume", "rollback"} {
		if code, _, raw := s.call(t, http.MethodPost, "/v1/orgs/acme/nmps/new/"+act, nil); code != 200 {
			t.Fatalf("%s: %d %s", act, code, raw)
		}
	}
	code, _, raw = s.call(t, http.MethodGet, "/v1/orgs/acme/nmps/new", nil)
	if code != 200 || !strings.Contains(compact(raw), `"rollback":true`) || !strings.Contains(compact(raw), `"resumedAt"`) {
		t.Fatalf("after actions: %d %s", code, raw)
	}
	if code, _, raw := s.call(t, http.MethodDelete, "/v1/orgs/acme/nmps/new", nil); code != 200 {
		t.Fatalf("delete: %d %s", code, raw)
	}
	if code, _, _ := s.call(t, http.MethodGet, "/v1/orgs/acme/nmps/new", nil); code != 404 {
		t.Fatalf("after delete: %d", code)
	}
	// A tenant acts in its own org only.
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/v1/orgs/acme/nmps", nil)
	wantError(t, "tenant in another org", code, body, 403, "acts for org t1")
	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodGet, "/v1/orgs/t1/nmps", nil); code != 200 {
		t.Fatalf("tenant in its org: %d %s", code, raw)
	}
}

func TestUnknownOrg(t *testing.T) {
	s := newStackWith(t, Options{Orgs: []string{"acme"}}, nil)
	code, body, _ := s.call(t, http.MethodPut, "/v1/orgs/other/nmps/p", map[string]any{})
	wantError(t, "unknown org", code, body, 404, "unknown org other", "acme")
	code, body, _, _ = s.callAs(t, agentToken, http.MethodPut, "/v1/orgs/other/nodes/n1", map[string]any{"softwareVersion": "1.0.0"})
	wantError(t, "node of an unknown org", code, body, 404, "unknown org other")
	if code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/p", map[string]any{}); code != 200 {
		t.Fatalf("known org: %d %s", code, raw)
	}
}

func TestDirectiveLongPoll(t *testing.T) {
	s := newStack(t, nil)
	agentToken := s.registerNode(t, "acme", "n1")
	code, body, _, _ := s.callAs(t, agentToken, http.MethodGet, "/v1/orgs/acme/nodes/n1/directive", nil)
	wantError(t, "no directive", code, body, 404, "no directive yet")
	d := &events.AgentDirective{Org: "acme", Node: "n1", DirectiveID: "d1", Policy: "acme/p", Action: nmp.ActionUpgrade, TargetVersion: "1.1.0", StartAt: time.Unix(100, 0), IssuedAt: time.Unix(100, 0), Conflicts: []string{}}
	s.Produce(t, topology.AgentDirectives, "acme/n1", d)
	var first map[string]any
	var etag string
	testkit.Eventually(t, 10*time.Second, func() error {
		code, b, raw, h := s.callAs(t, agentToken, http.MethodGet, "/v1/orgs/acme/nodes/n1/directive", nil)
		if code != http.StatusOK {
			return fmt.Errorf("directive: %d %s", code, raw)
		}
		first, etag = b, h.Get("ETag")
		return nil
	})
	if first["directiveId"] != "d1" || first["targetVersion"] != "1.1.0" || etag == "" {
		t.Fatalf("directive %v etag %q", first, etag)
	}
	idx := strings.Trim(etag, `"`)
	// The same directive issued again is no change: the poll times out
	// with 304.
	s.Produce(t, topology.AgentDirectives, "acme/n1", d)
	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/orgs/acme/nodes/n1/directive?wait=1s&index="+idx, nil)
	auth.SetBearer(req, agentToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("unchanged: %d, want 304", resp.StatusCode)
	}
	// A waiting poll answers as soon as the directive changes.
	got := make(chan map[string]any, 1)
	go func() {
		_, b, _, _ := s.callAs(t, agentToken, http.MethodGet, "/v1/orgs/acme/nodes/n1/directive?wait=60s&index="+idx, nil)
		got <- b
	}()
	d2 := *d
	d2.DirectiveID, d2.TargetVersion = "d2", "1.2.0"
	s.Produce(t, topology.AgentDirectives, "acme/n1", &d2)
	if b := <-got; b["directiveId"] != "d2" {
		t.Fatalf("after the change: %v", b)
	}
	code, body, _, _ = s.callAs(t, agentToken, http.MethodGet, "/v1/orgs/acme/nodes/n1/directive?index=x", nil)
	wantError(t, "bad index", code, body, 400, "index")
}

func TestAgentPackagesUploadAndDownload(t *testing.T) {
	dir := t.TempDir()
	s := newStackWith(t, Options{PackageDir: dir}, nil)
	upload := func(token string, data []byte, sum string) (int, map[string]any, []byte) {
		u := s.url + "/v1/agentpackages"
		if sum != "" {
			u += "?sha256=" + sum
		}
		req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/gzip")
		auth.SetBearer(req, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = jsonUnmarshal(raw, &m)
		return resp.StatusCode, m, raw
	}
	pkg, err := nmp.BuildPackage(nmp.Manifest{Version: "1.1.0"}, map[string][]byte{"packages/agent.bin": []byte("v1.1.0")})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	hexSum := hex.EncodeToString(sum[:])
	code, body, _ := upload(adminToken, pkg, strings.Repeat("0", 64))
	wantError(t, "wrong hash", code, body, 400, "SHA-256 is "+hexSum)
	code, body, _ = upload(adminToken, []byte("junk"), "")
	wantError(t, "not a package", code, body, 400, "not a gzipped tar")
	code, body, _ = upload(agentToken, pkg, "")
	wantError(t, "agent uploads", code, body, 403, "may not call")
	code, body, raw := upload(adminToken, pkg, hexSum)
	if code != 200 || body["sha256"] != hexSum || body["version"] != "1.1.0" {
		t.Fatalf("upload: %d %s", code, raw)
	}
	other, _ := nmp.BuildPackage(nmp.Manifest{Version: "1.1.0"}, map[string][]byte{"packages/agent.bin": []byte("changed")})
	code, body, _ = upload(adminToken, other, "")
	wantError(t, "same version, other content", code, body, 409, "new version")
	rec := s.Read(t, topology.AgentPackages, 1, 10*time.Second)[0]
	if p := stagetest.Decode[*events.AgentPackage](t, rec); string(rec.Key) != "1.1.0" || p.SHA256 != hexSum || p.Size != int64(len(pkg)) {
		t.Fatalf("record %s %+v", rec.Key, p)
	}
	code, _, raw, _ = s.callAs(t, agentToken, http.MethodGet, "/v1/agentpackages", nil)
	if code != 200 || !strings.Contains(compact(raw), hexSum) {
		t.Fatalf("list: %d %s", code, raw)
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/agentpackages/1.1.0/file", nil)
	auth.SetBearer(req, agentToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(data, pkg) || resp.Header.Get("X-Checksum-Sha256") != hexSum {
		t.Fatalf("download: %d %d bytes, sha header %q", resp.StatusCode, len(data), resp.Header.Get("X-Checksum-Sha256"))
	}
	code, body, _, _ = s.callAs(t, agentToken, http.MethodGet, "/v1/agentpackages/9.9.9", nil)
	wantError(t, "unknown version", code, body, 404, "no agent package 9.9.9")

	// The same file signed: the signature replaces the record's and is
	// sent with the file.
	req, _ = http.NewRequest(http.MethodPost, s.url+"/v1/agentpackages", bytes.NewReader(pkg))
	auth.SetBearer(req, adminToken)
	req.Header.Set(api.SignatureHeader, "c2lnbmF0dXJl")
	req.Header.Set(api.SigningKeyHeader, "0011223344556677")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(compact(data), `"signature":"c2lnbmF0dXJl","signingKey":"0011223344556677"`) {
		t.Fatalf("signed upload: %d %s", resp.StatusCode, data)
	}
	req, _ = http.NewRequest(http.MethodGet, s.url+"/v1/agentpackages/1.1.0/file", nil)
	auth.SetBearer(req, agentToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(api.SignatureHeader); got != "c2lnbmF0dXJl" {
		t.Fatalf("download's signature header %q", got)
	}

	// Whoever can write the package store swaps the file: the hub refuses
	// to serve it under the published checksum.
	evil, _ := nmp.BuildPackage(nmp.Manifest{Version: "1.1.0"}, map[string][]byte{"packages/agent.bin": []byte("evil")})
	if err := os.WriteFile(filepath.Join(dir, hexSum+".tar.gz"), evil, 0o644); err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodGet, s.url+"/v1/agentpackages/1.1.0/file", nil)
	auth.SetBearer(req, agentToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || bytes.Contains(data, []byte("evil")) || !strings.Contains(string(data), "altered") {
		t.Fatalf("tampered file: %d %q, want 500 saying it was altered and none of the file", resp.StatusCode, data)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// compact is a JSON answer without the whitespace between tokens.
func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// The hub refuses a package with two package.json files and one that
// decompresses past --max-unpacked-package-bytes (a gzip bomb), and
// stores neither.
func TestAgentPackageUploadRefusesBombsAndRepeatedFiles(t *testing.T) {
	dir := t.TempDir()
	s := newStackWith(t, Options{PackageDir: dir, MaxUnpackedPackageBytes: 1 << 20}, nil)
	entries := func(e ...[2]string) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, f := range e {
			_ = tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg})
			_, _ = tw.Write([]byte(f[1]))
		}
		_ = tw.Close()
		_ = gz.Close()
		return buf.Bytes()
	}
	for what, tc := range map[string]struct {
		pkg  []byte
		want string
	}{
		"two package.json": {entries([2]string{"package.json", `{"version":"1.0.0"}`}, [2]string{"package.json", `{"version":"2.0.0"}`}), "package.json twice"},
		"a gzip bomb":      {entries([2]string{"package.json", `{"version":"1.0.0"}`}, [2]string{"packages/zeros", strings.Repeat("\x00", 4<<20)}), "decompresses to more than the limit (1048576 bytes)"},
	} {
		code, body, _, _ := s.callAs(t, adminToken, http.MethodPost, "/v1/agentpackages", string(tc.pkg))
		wantError(t, what, code, body, http.StatusBadRequest, tc.want)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("refused packages left %d files in the store", len(left))
	}
}
