package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAlertRules checks deploy/prometheus/policyflow-alerts.yaml with
// promtool and runs its unit tests (deploy/prometheus/*_test.yaml):
// recorded series of a stage down, not ready, its dependency down, its lag
// growing or stuck, and of a healthy pipeline. Without promtool the test
// is skipped, or fails under CI or PF_REQUIRE_PROMTOOL (`make test`, whose
// promtool target installs it).
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("PF_REQUIRE_PROMTOOL") != "" {
			t.Fatal("no promtool on PATH: `make promtool` installs it (Debian's prometheus package)")
		}
		t.Skip("no promtool on PATH: `make promtool` installs it")
	}
	dir := filepath.Join(repoRoot(t), "deploy", "prometheus")
	tests, err := filepath.Glob(filepath.Join(dir, "*_test.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rules test in %s (%v)", dir, err)
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Join(dir, "policyflow-alerts.yaml")},
		append([]string{"test", "rules"}, tests...),
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
