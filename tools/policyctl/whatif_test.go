package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/topology"
)

// TestPolicyPushDryRun: policy push --dry-run asks one policy_id at a
// time and prints each what-if as a table (or JSON), and publishes
// nothing; a body that is not a valid policy_body is refused (exit 1).
func TestPolicyPushDryRun(t *testing.T) {
	url, k := northAPI(t)
	t.Setenv("PF_API", url)
	two := `[{"policyName": "DCAE.Config_C.2.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 1}},
	  {"policyName": "DCAE.Config_D.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 2}}]`
	r := policyctlIn(t, two, "policy", "push", "--dry-run", "-")
	if r.code != 0 || !strings.Contains(r.out, "policy DCAE.Config_C version 2 (none loaded) — dry run, nothing was published") ||
		!strings.Contains(r.out, "policy DCAE.Config_D version 1") || !strings.Contains(r.out, "0 would change (0 added, 0 updated, 0 removed), 0 unchanged") {
		t.Errorf("policy push --dry-run: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctlIn(t, `{"policyName": "DCAE.Config_C.2.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 1}}`, "policy", "push", "--dry-run", "-o", "json", "-")
	var w map[string]any
	if err := json.Unmarshal([]byte(r.out), &w); r.code != 0 || err != nil || w["policy_id"] != "DCAE.Config_C" || w["count"] != float64(0) {
		t.Errorf("policy push --dry-run -o json: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctlIn(t, `{"policyName": "DCAE.Config_C.2.xml", "policyConfigStatus": "CONFIG_NOT_FOUND", "config": {"k": 1}}`, "policy", "push", "--dry-run", "-")
	if r.code != 1 || !strings.Contains(r.errOut, "CONFIG_NOT_FOUND") {
		t.Errorf("a refused dry run: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "pdp", "notify", "--dry-run", writeFile(t, "n.json", `{"loadedPolicies": [{"policyName": "DCAE.Config_B.1.xml", "versionNo": "1"}]}`))
	if r.code != 0 || !strings.Contains(r.out, "policy DCAE.Config_B version 1 (none loaded) — dry run") {
		t.Errorf("pdp notify --dry-run: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	// A real push afterwards: the only record on pdp.notifications.
	if r = policyctlIn(t, `{"policyName": "DCAE.Config_E.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 1}}`, "policy", "push", "-"); r.code != 0 {
		t.Fatalf("policy push: exit %d stderr %q", r.code, r.errOut)
	}
	for _, rec := range readTopic(t, k, topology.PDPNotifications, 1) {
		if string(rec.Key) != "DCAE.Config_E" {
			t.Errorf("a dry run published %s", rec.Key)
		}
	}
}

// TestPrintWhatIf: the table names each component that would change with
// the version it holds, the counts by change, the diff, the refusals and
// the notes.
func TestPrintWhatIf(t *testing.T) {
	answer := `{"policy_id": "DCAE.Config_X", "version": "7", "loaded_version": "6",
	  "components": [{"component_id": "tca-1", "service_component_name": "dcae-tca", "deployment_id": "dep-tca", "change": "updated", "from_version": "6"},
	                 {"component_id": "tca-9", "service_component_name": "dcae-tca-9", "deployment_id": "dep-tca", "change": "added", "from_version": null}],
	  "count": 2, "unchanged": 40, "diff": [{"op": "replace", "path": "/config/min_memory", "value": "8GB"}, {"op": "remove", "path": "/config/old"}],
	  "refused": [{"index": 1, "by": "north-api", "status": 409, "reason": "older"}], "notes": ["already loaded"]}`
	var b strings.Builder
	if err := printWhatIf(&b, []byte(answer)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"policy DCAE.Config_X version 7 (loaded: 6) — dry run, nothing was published",
		"tca-1      dcae-tca                dep-tca     updated  6",
		"tca-9      dcae-tca-9              dep-tca     added    -",
		"2 would change (1 added, 1 updated, 0 removed), 40 unchanged",
		`  replace /config/min_memory "8GB"`, "  remove /config/old",
		"  policies[1] by north-api 409: older", "notes:\n  already loaded",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}
