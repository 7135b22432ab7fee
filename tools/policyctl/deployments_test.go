package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/admission/admission"
	"github.com/policyflow/policyflow/services/runtime"
)

// runAdmission runs the admission stage on k until the test ends.
func runAdmission(t *testing.T, k runtime.Kafka) {
	t.Helper()
	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- admission.Stage().Run(ctx, env) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("admission stage: %v", err)
		}
	})
}

const flavorPolicyFile = `{"name": "flavors", "description": "Policy to limit possible flavor", "tenantIds": ["t1"],
 "objectModel": {"maxFlavor": "m1.medium", "approvedApplications": ["com.example.Analytics"], "?": {"type": "io.policyflow.admission.FlavorLimit"}}}`

func deploymentFile(id, class, flavor string) string {
	return `{"deployment_id": "` + id + `", "tenant": "t1", "environment": "prod",
 "applications": [{"name": "app", "class": "` + class + `", "flavor": "` + flavor + `"}]}`
}

func TestDeployAndAppPolicyCommands(t *testing.T) {
	url, k := northAPI(t)
	runAdmission(t, k)
	t.Setenv("PF_API", url)

	r := policyctl(t, "app-policy", "create", writeFile(t, "p.json", flavorPolicyFile))
	created := stdoutJSON(t, r)
	id, _ := created["id"].(string)
	if r.code != 0 || id == "" || created["type"] != "io.policyflow.admission.FlavorLimit" {
		t.Fatalf("app-policy create: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "app-policy", "create", writeFile(t, "p.json", flavorPolicyFile))
	if r.code != 1 || !strings.Contains(r.errOut, "409 Conflict") || !strings.Contains(r.errOut, `a policy named "flavors" exists already`) {
		t.Errorf("duplicate create: exit %d stderr %q", r.code, r.errOut)
	}
	bad := strings.Replace(flavorPolicyFile, `"m1.medium"`, `"m1.huge"`, 1)
	r = policyctl(t, "app-policy", "update", id, writeFile(t, "bad.json", bad))
	if r.code != 1 || !strings.Contains(r.errOut, "objectModel.maxFlavor") || !strings.Contains(r.errOut, "Fix the input") {
		t.Errorf("bad update: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "app-policy", "list")
	if list, _ := stdoutJSON(t, r)["policies"].([]any); r.code != 0 || len(list) != 1 {
		t.Errorf("app-policy list: exit %d stdout %q", r.code, r.out)
	}
	r = policyctl(t, "app-policy", "get", id)
	if got := stdoutJSON(t, r); r.code != 0 || got["objectModel"] == nil {
		t.Errorf("app-policy get: exit %d stdout %q", r.code, r.out)
	}

	// A dry run shows the denial and deploys nothing; exit 1.
	r = policyctl(t, "deploy", "--dry-run", writeFile(t, "d.json", deploymentFile("dep-big", "com.example.Web", "m1.large")))
	if got := stdoutJSON(t, r); r.code != 1 || got["dry_run"] != true || got["admitted"] != false ||
		!strings.Contains(r.errOut, "flavor m1.large is larger than m1.medium") || !strings.Contains(r.errOut, "of policy "+id) {
		t.Errorf("deploy --dry-run: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	// Deployed: the stage's verdict, admitted for the approved application.
	r = policyctl(t, "deploy", writeFile(t, "d.json", deploymentFile("dep-ok", "com.example.Analytics", "m1.xlarge")))
	if got := stdoutJSON(t, r); r.code != 0 || got["admitted"] != true || got["deployment_id"] != "dep-ok" {
		t.Fatalf("deploy: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	// Undeployed: the deletion is queued, and once decided the
	// deployment is gone.
	r = policyctl(t, "undeploy", "dep-ok")
	if got := stdoutJSON(t, r); r.code != 0 || got["status"] != "deleting" || got["tenant"] != "t1" {
		t.Fatalf("undeploy: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r = policyctl(t, "undeploy", "dep-ok"); r.code == 0 && time.Now().Before(deadline); r = policyctl(t, "undeploy", "dep-ok") {
		time.Sleep(200 * time.Millisecond)
	}
	if r.code != 1 || !strings.Contains(r.errOut, "404 Not Found") {
		t.Errorf("undeploy of a deleted deployment: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "deploy", writeFile(t, "d.json", deploymentFile("dep-big", "com.example.Web", "m1.large")))
	if got := stdoutJSON(t, r); r.code != 1 || got["admitted"] != false || !strings.Contains(r.errOut, "deployment dep-big is denied") {
		t.Errorf("deploy of a denied request: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "deploy", writeFile(t, "d.json", `{"deployment_id": "x", "tenant": "t1", "applications": [{"name": "a"}]}`))
	if r.code != 1 || !strings.Contains(r.errOut, "applications[0].class: is missing") {
		t.Errorf("deploy without class: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "app-policy", "delete", id)
	if r.code != 0 {
		t.Errorf("app-policy delete: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "app-policy", "get", id)
	if r.code != 1 || !strings.Contains(r.errOut, "404 Not Found") {
		t.Errorf("get after delete: exit %d stderr %q", r.code, r.errOut)
	}
}
