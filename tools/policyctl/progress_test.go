package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/topology"
)

// TestBulkCommandsReportProgressAndASummary: several components and
// policy files at once, one of each refused: every other one is done, a
// line per item (stderr is no terminal here), a summary, exit 1 naming
// the refused one.
func TestBulkCommandsReportProgressAndASummary(t *testing.T) {
	url, k := northAPI(t)
	t.Setenv("PF_API", url)

	var files []string
	for i := range 3 {
		files = append(files, writeFile(t, fmt.Sprintf("c%d.json", i), fmt.Sprintf(
			`{"component_id": "bulk-%d", "deployment_id": "dep-1", "service_component_name": "scn-bulk-%d", "policy_ids": ["DCAE.Config_A"], "notify": {"kind": "none"}}`, i, i)))
	}
	bad := writeFile(t, "bad.json", `{"component_id": "bulk-bad", "deployment_id": "dep-1", "service_component_name": "has space", "notify": {"kind": "none"}}`)
	files = append(files[:1], append([]string{bad}, files[1:]...)...)
	r := policyctl(t, append([]string{"component", "put"}, files...)...)
	if r.code != 1 {
		t.Fatalf("component put of 4 files, one bad: exit %d, want 1; stderr %q", r.code, r.errOut)
	}
	for _, want := range []string{"[1/4] component bulk-0 ok", "[2/4] component bulk-bad failed", "[4/4] component bulk-2 ok",
		"4 components: 3 done, 1 failed", "1 of 4 components failed:\n  bulk-bad: "} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("component put stderr lacks %q:\n%s", want, r.errOut)
		}
	}
	if recs := readTopic(t, k, topology.DeployComponents, 3); len(recs) != 3 {
		t.Errorf("%d components on the topic, want the 3 good ones", len(recs))
	}
	if r := policyctl(t, "component", "put", "--id", "x", files[0], files[2]); r.code != 2 || !strings.Contains(r.errOut, "--id names the component of one file") {
		t.Errorf("--id with two files: exit %d stderr %q", r.code, r.errOut)
	}

	p1 := writeFile(t, "p1.json", `{"policyName": "DCAE.Config_Bulk1.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 1}}`)
	p2 := writeFile(t, "p2.json", `[{"policyName": "DCAE.Config_Bulk2.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 2}}]`)
	r = policyctl(t, "policy", "push", p1, p2)
	if r.code != 0 || !strings.Contains(r.errOut, "[2/2] file "+p2+" ok") || !strings.Contains(r.errOut, "2 files: 2 done, 0 failed") {
		t.Errorf("policy push of 2 files: exit %d stderr %q", r.code, r.errOut)
	}
	if recs := readTopic(t, k, topology.PDPNotifications, 2); len(recs) != 2 {
		t.Errorf("%d notifications on the topic, want 2", len(recs))
	}
}
