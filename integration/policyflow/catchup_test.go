package policyflow_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/policy"
)

// lastCallHas waits until the recorder's last call carries every want.
func (p *pipeline) lastCallHas(rec *recorder, what string, want ...string) int {
	p.t.Helper()
	n := 0
	p.eventually(what, 2*time.Minute, func() error {
		calls := rec.calls(p.t)
		n = len(calls)
		if n == 0 {
			return fmt.Errorf("no call")
		}
		for _, w := range want {
			if !strings.Contains(calls[n-1].raw, w) {
				return fmt.Errorf("last of %d calls lacks %s: %s", n, w, calls[n-1].raw)
			}
		}
		return nil
	})
	return n
}

// catchup asks for a catch-up and waits until both stages reported from
// every partition.
func (p *pipeline) catchup(method, path string, body any) northapi.CatchupStatus {
	p.t.Helper()
	var accepted struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(p.must(method, path, body)), &accepted); err != nil || accepted.RequestID == "" {
		p.t.Fatalf("catch-up answer without request_id: %v", err)
	}
	var st northapi.CatchupStatus
	p.eventually("catch-up "+accepted.RequestID+" done", 2*time.Minute, func() error {
		code, out := p.do(http.MethodGet, "/v1/catchup/"+accepted.RequestID, nil)
		st = northapi.CatchupStatus{}
		if err := json.Unmarshal([]byte(out), &st); code != http.StatusOK || err != nil {
			return fmt.Errorf("%d %s", code, out)
		}
		if !st.Done {
			return fmt.Errorf("not done: %s", out)
		}
		return nil
	})
	return st
}

// A catch-up with nothing changed writes nothing to Consul and notifies
// nobody; a key deleted by hand is restored by the next catch-up.
func TestCatchupRestoresKeysDeletedByHandAndOtherwiseDoesNothing(t *testing.T) {
	p := start(t)
	rec := p.newRecorder()
	scn := scnFor(p, "drift")
	match := map[string]any{"ONAPName": "DCAE"}
	p.register("comp-drift", map[string]any{
		"deployment_id": "dep-drift", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_DRIFT_A", "DCAE.Config_DRIFT_B"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_DRIFT_A.1.xml", "1", `{"a": 1}`, match)
	p.publish("DCAE.Config_DRIFT_B.1.xml", "1", `{"b": 1}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_DRIFT_A": `{"a":1}`, "DCAE.Config_DRIFT_B": `{"b":1}`})
	calls := p.lastCallHas(rec, "the script is told of both policies", `"a":1`, `"b":1`)

	before := p.modifyIndexes(scn)
	st := p.catchup(http.MethodPost, "/v1/catchup", map[string]any{"reason": "nothing changed"})
	if st.Matcher.Compared < 1 || st.Matcher.Differed != 0 || st.ConsulWriter.Compared < 1 || st.ConsulWriter.Differed != 0 || st.ConsulWriter.KeysWritten != 0 {
		t.Fatalf("catch-up with nothing changed: %+v, want components and folders compared, none differing", st)
	}
	if after := p.modifyIndexes(scn); !equalMaps(before, after) {
		t.Fatalf("a catch-up with nothing changed wrote to Consul: before %v after %v", before, after)
	}
	// A key deleted by hand: the seed's GET /catch_up puts it back, and
	// only it (and the event key).
	bKey := consulkv.ItemKey(scn, "DCAE.Config_DRIFT_B")
	if _, err := p.consul.KV().Delete(bKey, nil); err != nil {
		t.Fatal(err)
	}
	st = p.catchup(http.MethodGet, "/catch_up", nil)
	if st.ConsulWriter.Differed != 1 || st.ConsulWriter.KeysWritten != 2 {
		t.Fatalf("catch-up after a key was deleted: %+v, want one folder written back with 2 keys", st)
	}
	p.waitItems(scn, map[string]string{"DCAE.Config_DRIFT_A": `{"a":1}`, "DCAE.Config_DRIFT_B": `{"b":1}`})
	after := p.modifyIndexes(scn)
	for k, i := range before {
		if k != bKey && k != consulkv.EventKey(scn) && after[k] != i {
			t.Fatalf("catch-up rewrote %s, which nobody changed: ModifyIndex %d -> %d", k, i, after[k])
		}
	}

	// Barrier for the notifier: the next version's notification comes
	// after anything the catch-ups would have sent, so it must be the only
	// call since.
	p.publish("DCAE.Config_DRIFT_A.2.xml", "2", `{"a": 2}`, match)
	if n := p.lastCallHas(rec, "the script is told of version 2", `"a":2`); n != calls+1 {
		t.Fatalf("%d calls since the catch-ups, want only the barrier's: a catch-up with nothing changed notified the component", n-calls)
	}
}

// A PDP notification that never arrives is repaired by the periodic
// catch-up: pdp-ingest compares the PDP's full state with its catalog.
func TestPeriodicCatchupRepairsAMissedPDPNotification(t *testing.T) {
	p := start(t, func(p *pipeline) { p.catchupEvery = 2 * time.Second })
	rec := p.newRecorder()
	scn := scnFor(p, "missed")
	p.register("comp-missed", map[string]any{
		"deployment_id": "dep-missed", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_MISSED"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	// In the PDP, and nobody tells the pipeline.
	if _, err := p.pdp.Put(policy.Body{
		policy.FieldPolicyName: "DCAE.Config_MISSED.3.xml", policy.FieldPolicyVersion: "3",
		policy.FieldConfig: `{"m": 3}`, policy.FieldMatchingConditions: map[string]any{"ONAPName": "DCAE"},
	}); err != nil {
		t.Fatal(err)
	}
	p.waitItems(scn, map[string]string{"DCAE.Config_MISSED": `{"m":3}`})
	p.lastCallHas(rec, "the script is told of version 3", `"m":3`)
}

// The PDP withdraws the newest version while an older one remains: the
// older one is the latest again, and components holding the withdrawn one
// get it as an update and are notified.
func TestWithdrawnNewestVersionFallsBackToTheRemainingOne(t *testing.T) {
	p := start(t)
	rec := p.newRecorder()
	scn := scnFor(p, "withdraw")
	match := map[string]any{"ONAPName": "DCAE", "ConfigName": "vm_memory"}
	p.register("comp-withdraw", map[string]any{
		"deployment_id": "dep-withdraw", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_WD"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_WD.5.xml", "5", `{"min_memory": "2GB"}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_WD": `{"min_memory":"2GB"}`})
	p.publish("DCAE.Config_WD.222.xml", "222", `{"min_memory": "8GB"}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_WD": `{"min_memory":"8GB"}`})
	p.lastCallHas(rec, "the script is told of version 222", "8GB")

	p.unpublish("DCAE.Config_WD.222.xml")
	p.waitItems(scn, map[string]string{"DCAE.Config_WD": `{"min_memory":"2GB"}`})
	p.lastCallHas(rec, "the script is told of version 5 again", "2GB", `"policyVersion":"5"`)

	// The rollout view says the same: version 5, in Consul and notified.
	p.eventually("rollout of version 5 complete", time.Minute, func() error {
		var r struct {
			Version    string `json:"version"`
			Components int    `json:"components"`
			InConsul   int    `json:"in_consul"`
			Notified   int    `json:"notified"`
			Pending    int    `json:"pending"`
		}
		code, body := p.do(http.MethodGet, "/v1/policies/DCAE.Config_WD/rollout", nil)
		if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
			return fmt.Errorf("%d %s", code, body)
		}
		if r.Version != "5" || r.Components != 1 || r.InConsul != 1 || r.Notified != 1 || r.Pending != 0 {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	})
}
