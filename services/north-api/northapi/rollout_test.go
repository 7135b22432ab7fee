package northapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// The rollout of a policy version: who should have it (by id and by
// filter), who has it in Consul, who was told and how it went.
func TestPolicyRolloutCountsWhoHasTheVersion(t *testing.T) {
	const id = "DCAE.Config_ROLL"
	body := pdpBody(id+".7.xml", "7", map[string]any{"r": 7})
	body["matchingConditions"] = map[string]any{"ONAPName": "DCAE", "key1": "value1"}
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.PolicyCatalog, id, catalogRecord(id+".7.xml", "7", body))
	})
	suffix := fmt.Sprint(time.Now().UnixNano())
	scn := func(c string) string { return c + "-" + suffix }
	register := func(c, tenant string, byID bool) {
		reg := componentBody()
		// A deployment belongs to one tenant: one per tenant.
		reg["service_component_name"], reg["tenant"], reg["deployment_id"] = scn(c), tenant, "dep-roll-"+tenant
		reg["policy_ids"] = []string{}
		if byID {
			reg["policy_ids"] = []string{id}
		} else {
			// Only the filter (DCAE.Config_.*, key1=value1) selects it.
			reg["policy_filters"] = []map[string]any{{"filter_id": "f1", "policyName": "DCAE.Config_R.*", "configAttributes": map[string]any{"key1": "value1"}}}
		}
		if code, _, raw := s.call(t, http.MethodPut, "/v1/components/"+c, reg); code != http.StatusAccepted {
			t.Fatalf("PUT %s: %d %s", c, code, raw)
		}
	}
	applied := func(c, version string, gen int64) {
		s.Produce(t, topology.ComponentApplied, c, &events.ComponentApplied{
			ComponentID: c, ServiceComponentName: scn(c), UpdateID: "u-" + c, Action: "gathered", Generation: gen,
			PolicyRefs:  []events.PolicyRef{{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version}},
			UpdatedRefs: []events.PolicyRef{{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version}},
			Notify:      events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: testScript}, AppliedAt: time.Now().UTC(),
		})
	}
	register("c-ok", "t1", true)
	register("c-fail", "t1", false)
	register("c-old", "t1", true)
	register("c-new", "t1", true)
	register("c-running", "t1", true)
	register("c-t2", "t2", true)
	applied("c-ok", "7", 2)
	applied("c-fail", "7", 3)
	applied("c-old", "6", 1)
	applied("c-running", "7", 4)
	applied("c-t2", "7", 1)
	putKV(t, s.consul, consulkv.ClaimKey(scn("c-ok")), `{"update_id":"u-c-ok","generation":2,"exit_code":0,"outcome":"ok","stderr":"","at":"2026-01-01T00:00:00Z"}`)
	putKV(t, s.consul, consulkv.ClaimKey(scn("c-fail")), `{"update_id":"u-c-fail","generation":3,"exit_code":3,"outcome":"failed","stderr":"boom","at":"2026-01-01T00:00:01Z"}`)
	putKV(t, s.consul, consulkv.ClaimKey(scn("c-running")), `{"update_id":"u-c-running","generation":4,"exit_code":null,"stderr":"","at":"2026-01-01T00:00:02Z"}`)

	var r policyapi.Rollout
	testkit.Eventually(t, 30*time.Second, func() error {
		code, _, raw := s.call(t, http.MethodGet, "/v1/policies/"+id+"/rollout", nil)
		if code != http.StatusOK {
			t.Fatalf("rollout: %d %s", code, raw)
		}
		r = policyapi.Rollout{}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if r.Components == 6 && r.InConsul == 4 { // every record read by the views
			return nil
		}
		return fmt.Errorf("rollout does not count every component: %s", raw)
	})
	if r.Version != "7" || r.Notified != 1 || r.Failed != 1 || r.Pending != 4 || r.OtherVersions["6"] != 1 || r.Truncated {
		t.Fatalf("rollout %+v", r)
	}
	if len(r.FailedComponents) != 1 || r.FailedComponents[0].ComponentID != "c-fail" || *r.FailedComponents[0].ExitCode != 3 {
		t.Fatalf("failed components %+v", r.FailedComponents)
	}
	reasons := map[string]string{}
	for _, p := range r.PendingComponents {
		reasons[p.ComponentID] = p.Reason
	}
	want := map[string]string{"c-old": "its Consul folder holds version 6", "c-new": "not in its Consul folder yet",
		"c-running": "notification running", "c-t2": "not notified yet"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Fatalf("pending %v, want %v", reasons, want)
	}

	// A tenant sees its own components only; a limit cuts the lists.
	code, _, raw, _ := s.callAs(t, tenantToken, http.MethodGet, "/v1/policies/"+id+"/rollout?limit=1", nil)
	r = policyapi.Rollout{}
	if err := json.Unmarshal(raw, &r); code != http.StatusOK || err != nil || r.Components != 5 || r.Pending != 3 || len(r.PendingComponents) != 1 || !r.Truncated {
		t.Fatalf("tenant's rollout with limit 1: %d %s", code, raw)
	}
	// ?version= counts the components at that version: c-old holds 6.
	code, _, raw, _ = s.callAs(t, adminToken, http.MethodGet, "/v1/policies/"+id+"/rollout?version=6", nil)
	r = policyapi.Rollout{}
	if err := json.Unmarshal(raw, &r); code != http.StatusOK || err != nil || r.Version != "6" || r.InConsul != 1 || r.OtherVersions["7"] != 4 {
		t.Fatalf("rollout of version 6: %d %s", code, raw)
	}
	code, body2, _ := s.call(t, http.MethodGet, "/v1/policies/"+id+"/rollout?version=8", nil)
	wantError(t, "rollout of a version newer than the latest", code, body2, http.StatusNotFound, "the latest is 7")
	code, body2, _ = s.call(t, http.MethodGet, "/v1/policies/"+id+"/rollout?version=v6", nil)
	wantError(t, "rollout of a malformed version", code, body2, http.StatusBadRequest, "not a policyVersion")
	code, body2, _ = s.call(t, http.MethodGet, "/v1/policies/DCAE.Config_NONE/rollout", nil)
	wantError(t, "rollout of an unknown policy", code, body2, http.StatusNotFound, "is not in the catalog")
	code, body2, _ = s.call(t, http.MethodGet, "/v1/policies/"+id+"/rollout?limit=x", nil)
	wantError(t, "rollout with a bad limit", code, body2, http.StatusBadRequest, "limit")
	code, body2, _, _ = s.callAs(t, agentToken, http.MethodGet, "/v1/policies/"+id+"/rollout", nil)
	wantError(t, "rollout as an agent", code, body2, http.StatusForbidden, "role agent")
}
