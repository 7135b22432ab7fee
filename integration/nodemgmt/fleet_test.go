package nodemgmt_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/testkit"
)

// A fleet upgrades from 1.0.0 to 1.1.0 through an NMP; a node already at
// 1.1.0 reports that no action is required; a node the NMP does not
// select is left alone.
func TestFleetUpgrades(t *testing.T) {
	h := start(t)
	h.publishPackage("1.0.0")
	h.publishPackage("1.1.0")
	for _, n := range []string{"n1", "n2", "n3"} {
		h.startAgent(n, "1.0.0", "amd64", "")
	}
	h.startAgent("n4", "1.1.0", "amd64", "")
	h.startAgent("arm", "1.0.0", "arm64", "")
	// The confirmation is needed only for an NMP that reaches every node.
	code, out := h.do(http.MethodPut, "/v1/orgs/acme/nmps/all", map[string]any{"enabled": true, "agentUpgradePolicy": map[string]any{}})
	if code != http.StatusConflict || !strings.Contains(string(out), "confirmAllNodes") {
		t.Fatalf("unconfirmed all-node NMP: %d %s", code, out)
	}
	testkit.Eventually(t, time.Minute, testkit.Named("every node registered", func() error {
		var ans struct{ Nodes []string }
		_ = json.Unmarshal(h.must(http.MethodPut, "/v1/orgs/acme/nmps/fleet?dryRun=true", amd64NMP("1.1.0", nil)), &ans)
		if len(ans.Nodes) != 4 {
			return errorf("dry run selects %v", ans.Nodes)
		}
		return nil
	}))
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/fleet", amd64NMP("1.1.0", nil))
	for _, n := range []string{"n1", "n2", "n3"} {
		s := h.waitStatus(n, "successful", "1.1.0")
		if v := manifestVersion(t, s.AgentVersion.Package); v != "1.1.0" || s.Policy != "acme/fleet" || s.PreviousVersion != "1.0.0" ||
			s.AgentVersion.UpgradeStart == nil || s.AgentVersion.UpgradeEnd == nil || s.AgentVersion.Failed != "" {
			t.Errorf("%s: %+v (package %s)", n, s, s.AgentVersion.Package)
		}
		if got := h.installLines(n); !slices.Equal(got, []string{"packages 1.1.0", "config 1.1.0"}) {
			t.Errorf("%s ran %v", n, got)
		}
	}
	h.waitStatus("n4", "no action required", "1.1.0")
	if got := h.installLines("n4"); len(got) != 0 {
		t.Errorf("n4 at the version installed %v", got)
	}
	st := h.nmpStatus("fleet")
	if st.Nodes != 4 || st.States["successful"] != 3 || st.States["no action required"] != 1 || len(st.Failing) != 0 {
		t.Errorf("NMP status %+v", st)
	}
	if d := h.directive("arm"); d.Action != "none" {
		t.Errorf("arm64 node: %+v", d)
	}
	if _, ok := h.status("arm"); ok {
		t.Error("the arm64 node reported an upgrade")
	}
}

// A package whose install fails on a node is rolled back there and not
// tried again; a newer package is tried and installed.
func TestFailedInstallRollsBackAndANewerVersionIsTried(t *testing.T) {
	h := start(t)
	h.publishPackage("1.0.0")
	h.publishPackage("1.1.0")
	h.mark("fail", "n1", "1.1.0")
	h.startAgent("n1", "1.0.0", "amd64", "")
	h.startAgent("n2", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/cur", map[string]any{"enabled": true, "constraints": []string{"arch == amd64"}, "agentUpgradePolicy": map[string]any{"atLeastVersion": "current"}})
	s := h.waitStatus("n1", "rollback successful", "1.0.0")
	if s.AgentVersion.Failed != "1.1.0" || !strings.Contains(s.Error, "cannot install 1.1.0") {
		t.Errorf("n1 after the failure: %+v", s)
	}
	h.waitStatus("n2", "successful", "1.1.0")
	// The failed version was installed once, then the old one again.
	if got := h.installLines("n1"); !slices.Equal(got, []string{"packages 1.1.0", "packages 1.0.0", "config 1.0.0"}) {
		t.Errorf("n1 ran %v", got)
	}
	st := h.nmpStatus("cur")
	if len(st.Failing) != 1 || st.Failing[0].Node != "n1" || st.Failing[0].FailedVersion != "1.1.0" {
		t.Errorf("NMP status %+v", st)
	}
	// A newer package: n1 tries it (the barrier showing 1.1.0 was not
	// retried in between), n2 upgrades too.
	h.publishPackage("1.2.0")
	s = h.waitStatus("n1", "successful", "1.2.0")
	h.waitStatus("n2", "successful", "1.2.0")
	if got := h.installLines("n1"); !slices.Equal(got, []string{"packages 1.1.0", "packages 1.0.0", "config 1.0.0", "packages 1.2.0", "config 1.2.0"}) {
		t.Errorf("n1 ran %v", got)
	}
	if s.AgentVersion.Failed != "1.1.0" {
		t.Errorf("n1 forgot the failed version: %+v", s)
	}
}

// A package the hub serves corrupt for a moment is downloaded again: the
// node upgrades to it without waiting for a newer package.
func TestBrieflyCorruptPackageIsDownloadedAgain(t *testing.T) {
	h := start(t)
	h.publishPackage("1.0.0")
	file := h.publishPackage("1.1.0")
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("corrupt"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.startAgent("n1", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/p", amd64NMP("1.1.0", nil))
	testkit.Eventually(t, time.Minute, testkit.Named("n1 tries the download", func() error {
		if s, _ := h.status("n1"); s.Status != "download started" && s.Status != "download failed" {
			return errorf("n1: %+v", s)
		}
		return nil
	}))
	if err := os.WriteFile(file, good, 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("n1", "successful", "1.1.0")
}

// With a failure threshold, enough failures pause the rollout: a node
// that has not started gets no start until the NMP is resumed.
func TestThresholdPausesTheRollout(t *testing.T) {
	h := start(t)
	h.publishPackage("1.0.0")
	h.publishPackage("1.1.0")
	h.mark("fail", "n1", "1.1.0")
	h.mark("fail", "n2", "1.1.0")
	h.startAgent("n1", "1.0.0", "amd64", "")
	h.startAgent("n2", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/safe", amd64NMP("1.1.0", map[string]any{"failureThreshold": map[string]any{"count": 2}}))
	h.waitStatus("n1", "rollback successful", "1.0.0")
	h.waitStatus("n2", "rollback successful", "1.0.0")
	testkit.Eventually(t, time.Minute, testkit.Named("rollout paused", func() error {
		if st := h.nmpStatus("safe"); !st.Rollout.Paused {
			return errorf("rollout %+v", st.Rollout)
		}
		return nil
	}))
	// A node that comes now is told the rollout is paused.
	h.startAgent("n3", "1.0.0", "amd64", "")
	testkit.Eventually(t, time.Minute, testkit.Named("n3 paused", func() error {
		code, out := h.do(http.MethodGet, "/v1/orgs/acme/nodes/n3/directive", nil)
		if code != 200 || !strings.Contains(string(out), `"action": "paused"`) || !strings.Contains(string(out), "2 nodes failed") {
			return errorf("%d %s", code, out)
		}
		return nil
	}))
	h.must(http.MethodPost, "/v1/orgs/acme/nmps/safe/resume", nil)
	h.waitStatus("n3", "successful", "1.1.0")
	if got := h.installLines("n3"); !slices.Equal(got, []string{"packages 1.1.0", "config 1.1.0"}) {
		t.Errorf("n3 ran %v", got)
	}
	if st := h.nmpStatus("safe"); st.Rollout.Paused || st.States["successful"] != 1 {
		t.Errorf("after resume: %+v", st)
	}
}

// Two conflicting NMPs: where the first is enacted the later one is
// ignored and reported; where none is enacted the newer wins.
func TestConflictingPolicies(t *testing.T) {
	h := start(t)
	for _, v := range []string{"1.0.0", "1.1.0", "1.2.0"} {
		h.publishPackage(v)
	}
	h.startAgent("n1", "1.0.0", "amd64", "")
	h.startAgent("n2", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/first", amd64NMP("1.1.0", nil))
	h.waitStatus("n1", "successful", "1.1.0")
	h.waitStatus("n2", "successful", "1.1.0")
	var ans struct {
		Conflicts map[string]string `json:"conflicts"`
	}
	if err := json.Unmarshal(h.must(http.MethodPut, "/v1/orgs/acme/nmps/second", amd64NMP("1.2.0", nil)), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Conflicts["acme/n1"] != "acme/first" || ans.Conflicts["acme/n2"] != "acme/first" {
		t.Fatalf("publishing reported conflicts %v", ans.Conflicts)
	}
	// A node where neither is enacted takes the newer.
	h.startAgent("n3", "1.0.0", "amd64", "")
	h.waitStatus("n3", "successful", "1.2.0")
	for _, n := range []string{"n1", "n2"} {
		d := h.directive(n)
		if d.Policy != "acme/first" || d.TargetVersion != "1.1.0" || len(d.Conflicts) != 1 || !strings.Contains(d.Conflicts[0], "acme/second: ignored") {
			t.Errorf("%s: %+v", n, d)
		}
		if s, _ := h.status(n); s.SoftwareVersion != "1.1.0" {
			t.Errorf("%s moved to %s", n, s.SoftwareVersion)
		}
	}
	if d := h.directive("n3"); d.Policy != "acme/second" || len(d.Conflicts) != 1 || !strings.Contains(d.Conflicts[0], "acme/first: ignored") {
		t.Errorf("n3: %+v", d)
	}
	// Each NMP's status says where it is ignored, and keeps its own
	// nodes' states.
	if st := h.nmpStatus("second"); st.States["ignored (conflict with acme/first)"] != 2 || st.States["successful"] != 1 {
		t.Errorf("status of second: %+v", st.States)
	}
	if st := h.nmpStatus("first"); st.States["successful"] != 2 || st.States["ignored (conflict with acme/second)"] != 1 {
		t.Errorf("status of first: %+v", st.States)
	}
}

// An agent killed in the middle of an install rolls back when it starts
// again, then installs the version: never left half installed.
func TestAgentRestartedMidUpgrade(t *testing.T) {
	h := start(t)
	h.publishPackage("1.0.0")
	h.publishPackage("1.1.0")
	hang := h.mark("hang", "n1", "1.1.0")
	a := h.startAgent("n1", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/p", amd64NMP("1.1.0", nil))
	h.waitStatus("n1", "initiated", "1.0.0")
	a.stop(syscall.SIGKILL)
	if err := os.Remove(hang); err != nil {
		t.Fatal(err)
	}
	h.startAgent("n1", "1.0.0", "amd64", a.dir)
	s := h.waitStatus("n1", "successful", "1.1.0")
	if s.AgentVersion.Failed != "" || manifestVersion(t, s.AgentVersion.Package) != "1.1.0" {
		t.Errorf("after the restart: %+v", s)
	}
	// The interrupted install (killed before it recorded anything), the
	// rollback to 1.0.0, then 1.1.0 whole.
	if got := h.installLines("n1"); !slices.Equal(got, []string{"packages 1.0.0", "config 1.0.0", "packages 1.1.0", "config 1.1.0"}) {
		t.Errorf("n1 ran %v", got)
	}
}

// A rollback order takes the nodes an NMP upgraded back to their
// previous version; a node it did not upgrade does not start.
func TestRollbackOrder(t *testing.T) {
	h := start(t)
	h.publishPackage("1.0.0")
	h.publishPackage("1.1.0")
	h.startAgent("n1", "1.0.0", "amd64", "")
	h.startAgent("n2", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/p", amd64NMP("1.1.0", nil))
	h.waitStatus("n1", "successful", "1.1.0")
	h.waitStatus("n2", "successful", "1.1.0")
	h.must(http.MethodPost, "/v1/orgs/acme/nmps/p/rollback", nil)
	for _, n := range []string{"n1", "n2"} {
		h.waitStatus(n, "rolled back", "1.0.0")
		if got := h.installLines(n); !slices.Equal(got, []string{"packages 1.1.0", "config 1.1.0", "packages 1.0.0", "config 1.0.0"}) {
			t.Errorf("%s ran %v", n, got)
		}
	}
	// The NMP's status lists them as rolled back to 1.0.0, not failing.
	if st := h.nmpStatus("p"); len(st.Failing) != 0 || len(st.RolledBack) != 2 || st.RolledBack[0].Version != "1.0.0" || st.States["rolled back"] != 2 {
		t.Errorf("NMP status %+v", st)
	}
	// A node that comes now is not started.
	h.startAgent("n3", "1.0.0", "amd64", "")
	testkit.Eventually(t, time.Minute, testkit.Named("n3 paused", func() error {
		code, out := h.do(http.MethodGet, "/v1/orgs/acme/nodes/n3/directive", nil)
		if code != 200 || !strings.Contains(string(out), `"action": "paused"`) {
			return errorf("n3: %d %s", code, out)
		}
		return nil
	}))
	if d := h.directive("n1"); d.Action != "paused" {
		t.Errorf("n1 after its rollback: %+v", d)
	}
}

// Agents run only packages signed by a key they trust: a package the hub
// serves under a signature of another key is refused before it is
// unpacked (reported as signature rejected, nothing installed), and the
// agent keeps the node's own token, readable by it alone.
func TestAgentsRunOnlyPackagesSignedByATrustedKey(t *testing.T) {
	h := start(t)
	priv, _, err := nmp.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := nmp.ParseSigningKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	h.publishPackage("1.0.0")
	h.publishSigned("1.1.0", untrusted)
	a := h.startAgent("n1", "1.0.0", "amd64", "")
	h.must(http.MethodPut, "/v1/orgs/acme/nmps/cur", map[string]any{"enabled": true, "constraints": []string{"arch == amd64"}, "agentUpgradePolicy": map[string]any{"atLeastVersion": "1.1.0"}})
	// A bad signature is its own state, not a download to retry.
	s := h.waitStatus("n1", "signature rejected", "1.0.0")
	if !strings.Contains(s.Error, "not one of a trusted key") {
		t.Errorf("n1's report: %+v, want the signature named", s)
	}
	if got := h.installLines("n1"); len(got) != 0 {
		t.Errorf("n1 installed %v", got)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "versions", "1.1.0")); !os.IsNotExist(err) {
		t.Errorf("the untrusted package was unpacked: %v", err)
	}
	info, err := os.Stat(filepath.Join(a.dir, "node.token"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the node's token file: %v %v, want mode 0600", info, err)
	}
}
