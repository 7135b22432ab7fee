// Package chaos runs a short fault matrix (tools/pfchaos/chaos) as a
// test, so that `make test` keeps it working: the stages and the North API
// built from this checkout and run as processes in the configuration the
// manifests ship, some of them killed or replaced mid-run, the broker
// restarted, leaders and coordinators moved, a rolling restart of its
// brokers, retriable errors, Consul stopped a few seconds, a short rebalance storm,
// scripts failing and Consul edited by hand, each checked against the
// ledger of every notification run: nothing owed lost, no finished run
// repeated, no two runs of a component at once, nothing backwards, and
// progress within the bound. `make chaos` runs the whole matrix with
// longer faults.
package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/tools/pfchaos/chaos"
)

// build compiles the stages and the North API of this checkout into dir.
func build(t *testing.T, dir string) {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, s := range append(append([]string(nil), chaos.Stages...), chaos.NorthAPI) {
		args = append(args, "./"+s)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(root, "services")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestFaultMatrix runs the matrix in the configuration the manifests
// ship (static members under their pod's name, the ConfigMap's session
// timeout), with a fault for each promise, after a row with none (the
// baseline): a notifier killed mid-run, a stage replaced by a new
// identity, the broker restarted, the faults of
// its three brokers (partition leaders re-elected mid-stream, the group
// and transaction coordinators moved as transactions end, a rolling
// restart, a burst of retriable errors on produce, fetch, offset commits
// and EndTxn), Consul away, a rebalance storm, scripts failing, Consul
// edited by hand.
func TestFaultMatrix(t *testing.T) {
	faults := []string{chaos.FaultNone, chaos.Kill("executor"), chaos.Kill("agent-notifier"), chaos.Kill(chaos.NorthAPI),
		chaos.Replace("consul-writer"), chaos.FaultBrokerRestart}
	faults = append(faults, chaos.ClusterFaults()...)
	runMatrix(t, false, shippedSessionTimeout(t), append(faults, chaos.FaultConsulDown, chaos.FaultRebalanceStorm,
		chaos.FaultScriptFails, chaos.FaultConsulEdit))
}

// TestFaultMatrixDynamicMembers runs the stage kills with dynamic group
// members (no instance id): every restart is a new identity, bound by
// the replacement's 20 s.
func TestFaultMatrixDynamicMembers(t *testing.T) {
	runMatrix(t, true, shippedSessionTimeout(t), []string{chaos.Kill("consul-writer"), chaos.Kill("agent-notifier")})
}

// shippedSessionTimeout is the session timeout of the Kubernetes
// manifests of this checkout.
func shippedSessionTimeout(t *testing.T) time.Duration {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	timeout, err := chaos.ShippedSessionTimeout(root)
	if err != nil {
		t.Fatal(err)
	}
	return timeout
}

func runMatrix(t *testing.T, dynamic bool, sessionTimeout time.Duration, faults []string) {
	var ext *chaos.External
	switch kind := runtime.EnvOr("PF_BACKEND", "embedded"); kind {
	case "embedded":
		if _, err := devstack.ConsulBinary(); err != nil {
			t.Fatal(err)
		}
	case "external":
		// The faults that stop neither the broker nor Consul, against
		// the cluster the environment names.
		var err error
		if ext, err = chaos.ExternalFromEnv(); err != nil {
			t.Fatal(err)
		}
		faults = slices.DeleteFunc(slices.Clone(faults), func(f string) bool { return !slices.Contains(chaos.ExternalFaults(), f) })
		if len(faults) == 0 {
			t.Skip("none of these faults can run against an external cluster: each stops the broker or Consul or needs the in-process broker")
		}
	default:
		t.Skipf("the fault matrix brings its own broker and Consul agent, or uses an external one; it runs with PF_BACKEND=embedded or external, not %s", kind)
	}
	bin := t.TempDir()
	build(t, bin)
	o := chaos.Defaults()
	o.BinDir, o.Dir = bin, t.TempDir()
	o.Faults, o.Dynamic, o.SessionTimeout, o.External = faults, dynamic, sessionTimeout, ext
	// Consul stays down long enough for the consul-writer's committed lag
	// to be read while updates wait (chaos.LagVisibleAfter).
	o.Components, o.Updates, o.ConsulDown, o.StormRounds, o.FailFor = 20, 10, chaos.LagVisibleAfter+time.Second, 2, 3*time.Second
	o.Progress = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := chaos.Run(ctx, o)
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, o.Dir)
	}
	var table strings.Builder
	m.Print(&table)
	t.Logf("fault matrix (session timeout %s, dynamic members %v):\n%s", sessionTimeout, dynamic, table.String())
	if len(m) != len(o.Faults) || m.Failed() {
		for _, name := range append(append([]string(nil), chaos.Stages...), chaos.NorthAPI) {
			t.Logf("--- %s.log ---\n%s", name, devstack.Tail(filepath.Join(o.Dir, name+".log"), 3000))
		}
		t.Fatalf("the fault matrix has %d rows for %d faults, or a count that is not 0", len(m), len(o.Faults))
	}
}
