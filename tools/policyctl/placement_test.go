package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func exampleFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../services/placement/examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDatacenterAndPlaceCommands(t *testing.T) {
	url, k := northAPI(t)
	runAdmission(t, k)
	t.Setenv("PF_API", url)

	// A bad model is refused before anything is sent, every problem listed.
	bad := strings.Replace(exampleFile(t, "datacenter.json"), `"level": "rack", "parent": "room1"}`, `"level": "row", "parent": "room1"}`, -1)
	r := policyctl(t, "dc", "apply", writeFile(t, "bad.json", bad))
	if r.code != 2 || !strings.Contains(r.errOut, `location[1].level: unknown level "row"`) || !strings.Contains(r.errOut, `location[7].level: unknown level "row" of vertex "r2"`) {
		t.Fatalf("dc apply of a bad model: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "dc", "apply", writeFile(t, "dc.json", exampleFile(t, "datacenter.json")))
	if out := stdoutJSON(t, r); r.code != 0 || out["datacenter_id"] != "dc-example" || out["leaves"] != float64(15) {
		t.Fatalf("dc apply: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "dc", "list")
	if list, _ := stdoutJSON(t, r)["datacenters"].([]any); r.code != 0 || len(list) != 1 {
		t.Fatalf("dc list: exit %d stdout %q", r.code, r.out)
	}
	r = policyctl(t, "dc", "get", "dc-example")
	if m, _ := stdoutJSON(t, r)["model"].(map[string]any); r.code != 0 || m["id"] != "dc-example" {
		t.Fatalf("dc get: exit %d stdout %q", r.code, r.out)
	}

	// place --request fills the placement in; deploy admits the result.
	var req map[string]any
	if err := json.Unmarshal([]byte(exampleFile(t, "ha-clusters.json")), &req); err != nil {
		t.Fatal(err)
	}
	delete(req, "placement")
	req["deployment_id"], req["tenant"] = "ha-ctl", "t1"
	req["applications"] = []any{map[string]any{"name": "appserver", "class": "com.example.AppServer", "instances": 12}}
	b, _ := json.Marshal(req)
	r = policyctl(t, "place", "--request", writeFile(t, "req.json", string(b)))
	placed := stdoutJSON(t, r)
	if p, _ := placed["placement"].(map[string]any); r.code != 0 || len(p) != 12 || placed["deployment_id"] != "ha-ctl" {
		t.Fatalf("place --request: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	b, _ = json.Marshal(placed)
	r = policyctl(t, "deploy", writeFile(t, "placed.json", string(b)))
	if v := stdoutJSON(t, r); r.code != 0 || v["admitted"] != true {
		t.Fatalf("deploy of the proposal: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}

	// No placement meets the hard policies: the reason names them.
	req["placement_policies"].([]any)[0].(map[string]any)["properties"].(map[string]any)["n"] = 4
	b, _ = json.Marshal(req)
	r = policyctl(t, "place", writeFile(t, "req.json", string(b)))
	if r.code != 1 || !strings.Contains(r.errOut, "422") || !strings.Contains(r.errOut, "no placement meets every hard policy (ha-G1)") {
		t.Fatalf("place infeasible: exit %d stderr %q", r.code, r.errOut)
	}
	// The seed's Hadoop template as written, with the datacenter given
	// on the command line.
	r = policyctl(t, "dc", "apply", writeFile(t, "heat-dc.json", exampleFile(t, "heat-datacenter.json")))
	if r.code != 0 {
		t.Fatalf("dc apply heat: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "place", "--dc", "dc-heat", writeFile(t, "heat-hadoop.json", exampleFile(t, "heat-hadoop.json")))
	if p, _ := stdoutJSON(t, r)["placement"].(map[string]any); r.code != 0 || len(p) != 9 {
		t.Fatalf("place --dc of the seed's Hadoop: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctl(t, "place", writeFile(t, "nodc.json", `{"resources": []}`))
	if r.code != 2 || !strings.Contains(r.errOut, `names no datacenter: add "datacenter"`) {
		t.Fatalf("place without datacenter: exit %d stderr %q", r.code, r.errOut)
	}
	// A datacenter in use stays until its deployments are deleted.
	r = policyctl(t, "dc", "delete", "dc-example")
	if r.code != 1 || !strings.Contains(r.errOut, "409 Conflict") || !strings.Contains(r.errOut, "in use by deployments ha-ctl") {
		t.Fatalf("dc delete of a datacenter in use: exit %d stderr %q", r.code, r.errOut)
	}
	if r = policyctl(t, "undeploy", "ha-ctl"); r.code != 0 {
		t.Fatalf("undeploy: exit %d stderr %q", r.code, r.errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r = policyctl(t, "dc", "delete", "dc-example"); r.code != 0 && time.Now().Before(deadline); r = policyctl(t, "dc", "delete", "dc-example") {
		time.Sleep(200 * time.Millisecond)
	}
	if r.code != 0 {
		t.Fatalf("dc delete: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "dc", "get", "dc-example")
	if r.code != 1 || !strings.Contains(r.errOut, "404") {
		t.Fatalf("dc get after delete: exit %d stderr %q", r.code, r.errOut)
	}
}
