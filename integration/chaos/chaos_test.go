// Package chaos runs a short fault matrix (tools/pfchaos/chaos) as a
// test, so that `make test` keeps it working: the stages and the North API
// built from this checkout and run as processes, some of them killed
// mid-stream, the broker restarted, Consul stopped a few seconds and a
// short rebalance storm, each followed by the check that no component lost
// the newest version, got a notification twice or saw a step backwards.
// `make chaos` runs the whole matrix with longer faults.
package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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

func TestFaultMatrix(t *testing.T) {
	if kind := runtime.EnvOr("PF_BACKEND", "embedded"); kind != "embedded" {
		t.Skipf("the fault matrix brings its own broker and Consul agent; it runs with PF_BACKEND=embedded, not %s", kind)
	}
	if _, err := devstack.ConsulBinary(); err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build(t, bin)
	o := chaos.Defaults()
	o.BinDir, o.Dir = bin, t.TempDir()
	o.Faults = []string{chaos.Kill("executor"), chaos.Kill("agent-notifier"), chaos.Kill(chaos.NorthAPI),
		chaos.FaultBrokerRestart, chaos.FaultConsulDown, chaos.FaultRebalanceStorm}
	o.Components, o.Updates, o.ConsulDown, o.StormRounds = 20, 10, 3*time.Second, 2
	o.Progress = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := chaos.Run(ctx, o)
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, o.Dir)
	}
	var table strings.Builder
	m.Print(&table)
	t.Logf("fault matrix:\n%s", table.String())
	if len(m) != len(o.Faults) || m.Failed() {
		for _, name := range append(append([]string(nil), chaos.Stages...), chaos.NorthAPI) {
			t.Logf("--- %s.log ---\n%s", name, devstack.Tail(filepath.Join(o.Dir, name+".log"), 3000))
		}
		t.Fatalf("the fault matrix has %d rows for %d faults, or a count that is not 0", len(m), len(o.Faults))
	}
}
