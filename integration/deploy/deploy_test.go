package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/tools/devstack"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	return root
}

// TestManifestsCoverEveryService fails when a service was added to (or
// removed from) services/ without `deploy/stages.sh render`.
func TestManifestsCoverEveryService(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("sh", filepath.Join(root, "deploy", "stages.sh"), "check")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/stages.sh check: %v\n%s", err, out)
	}
	list, err := exec.Command("sh", filepath.Join(root, "deploy", "stages.sh"), "list").Output()
	if err != nil {
		t.Fatalf("deploy/stages.sh list: %v", err)
	}
	compose, err := os.ReadFile(filepath.Join(root, "deploy", "compose.yaml"))
	if err != nil {
		t.Fatalf("read deploy/compose.yaml: %v", err)
	}
	k8s, err := os.ReadFile(filepath.Join(root, "deploy", "k8s", "stages.yaml"))
	if err != nil {
		t.Fatalf("read deploy/k8s/stages.yaml: %v", err)
	}
	for _, s := range strings.Fields(string(list)) {
		if !strings.Contains(string(compose), "\n  "+s+":\n") {
			t.Errorf("deploy/compose.yaml has no service %s", s)
		}
		if !strings.Contains(string(k8s), "kind: Deployment\nmetadata:\n  name: "+s+"\n") {
			t.Errorf("deploy/k8s/stages.yaml has no Deployment %s", s)
		}
	}
}

// TestImagesAreBuiltFromScratch reads every Dockerfile of deploy/: the
// images must build where no base image can be pulled.
func TestImagesAreBuiltFromScratch(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "deploy", "Dockerfile.*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/Dockerfile.* found (%v)", err)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatalf("open %s: %v", f, err)
		}
		sc := bufio.NewScanner(fh)
		froms := 0
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && strings.EqualFold(fields[0], "FROM") {
				froms++
				if fields[1] != "scratch" {
					t.Errorf("%s: FROM %s, want FROM scratch", filepath.Base(f), fields[1])
				}
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		if froms == 0 {
			t.Errorf("%s: no FROM line", filepath.Base(f))
		}
	}
}
