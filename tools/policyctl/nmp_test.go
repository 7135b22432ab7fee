package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	wire "github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

func TestNMPCommands(t *testing.T) {
	url, k := northAPI(t)
	t.Setenv("PF_API", url)
	t.Setenv("PF_ORG", "acme")

	r := policyctl(t, "nmp", "new")
	if r.code != 0 || !strings.Contains(r.out, `"atLeastVersion": "current"`) || !strings.Contains(r.out, `"failureThreshold"`) {
		t.Fatalf("nmp new: exit %d %q", r.code, r.out)
	}
	// The template, filled in, publishes with its comments.
	filled := strings.NewReplacer(`{"name": "", "value": null}`, `{"name": "tier", "value": "edge"}`, `    ""`, `    "web"`).Replace(r.out)
	r = policyctl(t, "nmp", "publish", "--dry-run", "tmpl", writeFile(t, "tmpl.json", filled))
	if r.code != 0 || !strings.Contains(r.out, "NMP acme/tmpl would be published") {
		t.Fatalf("template: exit %d %q %q\n%s", r.code, r.out, r.errOut, filled)
	}
	all := writeFile(t, "all.json", `{"enabled": true, "agentUpgradePolicy": {"duration": 600}}`)
	r = policyctl(t, "nmp", "publish", "fleet", all)
	if r.code != 1 || !strings.Contains(r.errOut, "no constraints") || !strings.Contains(r.errOut, "--yes-all-nodes") {
		t.Fatalf("unconfirmed: exit %d %q", r.code, r.errOut)
	}
	r = policyctl(t, "nmp", "publish", "--dry-run", "--yes-all-nodes", "fleet", all)
	if r.code != 0 || !strings.Contains(r.out, "dry run, nothing stored") {
		t.Fatalf("dry run: exit %d %q %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "nmp", "publish", "--yes-all-nodes", "fleet", all)
	if r.code != 0 || !strings.Contains(r.out, "NMP acme/fleet published") {
		t.Fatalf("publish: exit %d %q %q", r.code, r.out, r.errOut)
	}
	recs := readTopic(t, k, topology.NMPPolicies, 1)
	var p events.NodeManagementPolicy
	if err := events.Default().DecodeInto(context.Background(), recs[0].Value, &p); err != nil {
		t.Fatal(err)
	}
	if string(recs[0].Key) != "acme/fleet" || !p.Enabled || p.AgentUpgrade.DurationS != 600 {
		t.Fatalf("stored %s %+v", recs[0].Key, p)
	}
	bad := writeFile(t, "bad.json", `{"constraints": ["arch == amd64 &&"]}`)
	r = policyctl(t, "nmp", "publish", "other", bad)
	if r.code != 1 || !strings.Contains(r.errOut, "at position 16") || !strings.Contains(r.errOut, "Fix the input") {
		t.Fatalf("bad constraint: exit %d %q", r.code, r.errOut)
	}
	r = policyctl(t, "nmp", "list")
	if r.code != 0 || !strings.Contains(r.out, "fleet") || !strings.Contains(r.out, "600s") {
		t.Fatalf("list: exit %d %q %q", r.code, r.out, r.errOut)
	}
	for _, verb := range []string{"disable", "resume", "rollback", "nodes"} {
		if r := policyctl(t, "nmp", verb, "fleet"); r.code != 0 {
			t.Fatalf("%s: exit %d %q", verb, r.code, r.errOut)
		}
	}
	r = policyctl(t, "nmp", "enable", "fleet")
	if r.code != 1 || !strings.Contains(r.errOut, "--yes-all-nodes") {
		t.Fatalf("enable unconfirmed: exit %d %q", r.code, r.errOut)
	}
	if r := policyctl(t, "nmp", "enable", "--yes-all-nodes", "fleet"); r.code != 0 {
		t.Fatalf("enable: exit %d %q", r.code, r.errOut)
	}
	// A node registered at 1.0.0: nmp nodes --versions shows it.
	tok, err := devstack.EnsureDevToken(os.Getenv("PF_DEV_DATA_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, url+"/v1/orgs/acme/nodes/n1", strings.NewReader(`{"properties": [], "softwareVersion": "1.0.0"}`))
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("register a node: %v %v", resp, err)
	}
	resp.Body.Close()
	testkit.Eventually(t, 10*time.Second, func() error {
		r = policyctl(t, "nmp", "nodes", "--versions", "fleet")
		if r.code == 0 && regexp.MustCompile(`(?m)^n1\s+1\.0\.0`).MatchString(r.out) {
			return nil
		}
		return fmt.Errorf("nodes --versions: exit %d %q %q", r.code, r.out, r.errOut)
	})
	// Without NAME: the org's nodes, as a table, JSON or YAML, filtered.
	r = policyctl(t, "nmp", "nodes", "-o", "table")
	if r.code != 0 || !regexp.MustCompile(`(?m)^NODE\s+VERSION\s+PATTERN\s+STATUS`).MatchString(r.out) || !regexp.MustCompile(`(?m)^n1\s+1\.0\.0\s+waiting`).MatchString(r.out) {
		t.Fatalf("org nodes: exit %d %q %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "nmp", "nodes", "-o", "json", "--software-version", "1.0.0", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.out, `"node": "n1"`) || !strings.Contains(r.out, `"org": "acme"`) {
		t.Fatalf("org nodes as JSON: exit %d %q %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "nmp", "nodes", "-o", "yaml", "--software-version", "9.9.9")
	if r.code != 0 || !strings.Contains(r.out, "nodes: []") {
		t.Fatalf("org nodes filtered out, as YAML: exit %d %q %q", r.code, r.out, r.errOut)
	}
	if r := policyctl(t, "nmp", "nodes", "--status", "waiting", "fleet"); r.code != 2 || !strings.Contains(r.errOut, "without an NMP's NAME") {
		t.Fatalf("a filter with NAME: exit %d %q", r.code, r.errOut)
	}
	r = policyctl(t, "nmp", "status", "fleet")
	if r.code != 0 || !strings.Contains(r.out, "enabled true, 1 node(s)") {
		t.Fatalf("status: exit %d %q %q", r.code, r.out, r.errOut)
	}
	if r := policyctl(t, "nmp", "remove", "fleet"); r.code != 0 {
		t.Fatalf("remove: exit %d %q", r.code, r.errOut)
	}
	r = policyctl(t, "nmp", "status", "fleet")
	if r.code != 1 || !strings.Contains(r.errOut, "no node management policy fleet") {
		t.Fatalf("status after remove: exit %d %q", r.code, r.errOut)
	}
	t.Setenv("PF_ORG", "")
	if r := policyctl(t, "nmp", "list"); r.code != 2 || !strings.Contains(r.errOut, "--org") {
		t.Fatalf("no org: exit %d %q", r.code, r.errOut)
	}
}

func TestAgentPackageCommands(t *testing.T) {
	url, k := northAPI(t)
	t.Setenv("PF_API", url)
	dir := filepath.Join(t.TempDir(), "pkg")
	if r := policyctl(t, "agentpackage", "new", "1.1.0", dir); r.code != 0 {
		t.Fatalf("new: exit %d %q", r.code, r.errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "agent.cfg"), []byte("HUB=x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := policyctl(t, "agentpackage", "publish", dir)
	if r.code != 2 || !strings.Contains(r.errOut, "--key") {
		t.Fatalf("publish without a key: exit %d %q %q", r.code, r.out, r.errOut)
	}
	key := filepath.Join(t.TempDir(), "signing.key")
	if r := policyctl(t, "agentpackage", "keygen", key); r.code != 0 {
		t.Fatalf("keygen: exit %d %q", r.code, r.errOut)
	}
	if info, err := os.Stat(key); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v %v, want mode 0600", info, err)
	}
	if r := policyctl(t, "agentpackage", "keygen", key); r.code != 1 || !strings.Contains(r.errOut, "exists") {
		t.Fatalf("keygen over a key: exit %d %q", r.code, r.errOut)
	}
	r = policyctl(t, "agentpackage", "publish", "--key", key, dir)
	if r.code != 0 || !strings.Contains(r.out, "published agent package 1.1.0") {
		t.Fatalf("publish: exit %d %q %q", r.code, r.out, r.errOut)
	}
	rec := readTopic(t, k, topology.AgentPackages, 1)[0]
	var p events.AgentPackage
	if err := events.Default().DecodeInto(context.Background(), rec.Value, &p); err != nil {
		t.Fatal(err)
	}
	if p.Version != "1.1.0" || !strings.Contains(r.out, p.SHA256) {
		t.Fatalf("stored %+v, printed %q", p, r.out)
	}
	// The signature travels with the record, and the public key verifies it.
	pub, _ := os.ReadFile(key + ".pub")
	trusted, err := nmp.ParseTrustedKeys(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := nmp.CheckSignature(trusted, p.Version, p.SHA256, p.Signature); err != nil || p.SigningKey != nmp.KeyID(trusted[0]) {
		t.Fatalf("the record's signature: %v (key %q)", err, p.SigningKey)
	}
	r = policyctl(t, "agentpackage", "list")
	if r.code != 0 || !strings.Contains(r.out, p.SHA256) {
		t.Fatalf("list: exit %d %q", r.code, r.out)
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"version": "1.2"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = policyctl(t, "agentpackage", "publish", "--key", key, dir)
	if r.code != 1 || !strings.Contains(r.errOut, "semantic version") {
		t.Fatalf("bad manifest: exit %d %q", r.code, r.errOut)
	}
	if r := policyctl(t, "agentpackage", "new", "1.x", t.TempDir()+"/p"); r.code != 2 {
		t.Fatalf("bad version: exit %d %q", r.code, r.errOut)
	}
}

// TestNMPStatusTableLines: a failed download (no failed version known)
// prints no empty "(version )", and a failed precheck names the running
// version once.
func TestNMPStatusTableLines(t *testing.T) {
	st := wire.NMPStatus{Nodes: 3, States: map[string]int{"download failed": 1, "failed": 1, "precheck failed": 1},
		Failing: []wire.NodeState{
			{Node: "n1", Status: "download failed", Version: "1.0.0", Error: "connection reset"},
			{Node: "n2", Status: "failed", Version: "1.0.0", FailedVersion: "1.1.0", Error: "exit status 1"},
			{Node: "n4", Status: "signature rejected", Error: "package 1.1.0 (sha256 ab): the package's signature is not one of a trusted key (1 trusted)"},
		},
		PrecheckFailed: []wire.NodeState{{Node: "n3", Status: "precheck failed", Version: "1.0.0", Error: "this NMP (o/p) upgrades only from >=1.0.1"}}}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := nmpStatusTable(&b, "o/p", data); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"  n1: download failed: connection reset\n",
		"  n2: failed (version 1.1.0): exit status 1\n",
		"  n4: signature rejected: package 1.1.0 (sha256 ab): the package's signature is not one of a trusted key (1 trusted)\n",
		"  n3 (running 1.0.0): this NMP (o/p) upgrades only from >=1.0.1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "(version )") || strings.Count(out, "1.0.0") != 1 {
		t.Errorf("empty version or repeated running version in:\n%s", out)
	}
}
