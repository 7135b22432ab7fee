package northapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// A version pushed with a plan: a bad plan is refused with every reason
// and nothing is written; a good one writes the rollout (with the loaded
// version as the previous one) before the push; the actions move it and
// refuse what its state does not allow; only operators may act.
func TestStagedRolloutPlanAndActions(t *testing.T) {
	const id = "DCAE.Config_STAGED"
	v1 := pdpBody(id+".1.xml", "1", map[string]any{"v": 1})
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.PolicyCatalog, id, catalogRecord(id+".1.xml", "1", v1))
	})
	v2 := pdpBody(id+".2.xml", "2", map[string]any{"v": 2})

	code, out, _ := s.call(t, http.MethodPost, "/v1/policies", map[string]any{"policy": v2,
		"rollout": map[string]any{"steps": []float64{0.5, 0.2}, "pause_s": -5, "max_failed": -1}})
	wantError(t, "bad plan", code, out, http.StatusBadRequest, "not greater than the step before", "the last step is 1.0",
		"pause_s is -5", "max_failed is -1", "nothing was published")
	code, out, _ = s.call(t, http.MethodPost, "/v1/policies", map[string]any{"policy": v2,
		"rollout": map[string]any{"steps": []float64{1}, "canary": true}})
	wantError(t, "unknown plan field", code, out, http.StatusBadRequest, "canary")
	code, out, _ = s.call(t, http.MethodPost, "/v1/policies", map[string]any{"policy": v1, "rollout": map[string]any{"steps": []float64{1}}})
	wantError(t, "loaded version", code, out, http.StatusConflict, "already loaded")
	code, out, _ = s.call(t, http.MethodPost, "/v1/policies/"+id+"/rollout/promote", nil)
	wantError(t, "no rollout", code, out, http.StatusNotFound, "has no staged rollout")

	// A dry run of a push with a plan is a what-if, even by a tenant: a
	// bad plan is refused, a good one answered with the first step's
	// share; nothing is written (the counts of records below hold one
	// rollout and one push, those of the real push).
	code, out, _ = s.call(t, http.MethodPost, "/v1/policies?dry_run=true", map[string]any{"policy": v2,
		"rollout": map[string]any{"steps": []float64{0.5, 0.2}}})
	wantError(t, "dry run of a bad plan", code, out, http.StatusBadRequest, "the last step is 1.0")
	for _, token := range []string{adminToken, tenantToken} {
		code, _, raw, _ := s.callAs(t, token, http.MethodPost, "/v1/policies?dry_run=true", map[string]any{"policy": v2,
			"rollout": map[string]any{"steps": []float64{0.1, 0.5, 1}, "auto": true}})
		var wi policyapi.WhatIf
		if err := json.Unmarshal(raw, &wi); code != http.StatusOK || err != nil || wi.Version != "2" || !slices.ContainsFunc(wi.Notes, func(n string) bool {
			return strings.HasPrefix(n, "staged rollout: step 1 of 3 (0.1 of the components)")
		}) || wi.FirstCohort == nil || wi.FirstCohort.Count != len(wi.FirstCohort.ComponentIDs) || wi.AbortedVersion != "" {
			t.Fatalf("dry run of a push with a plan: %d %s", code, raw)
		}
	}

	code, _, raw := s.call(t, http.MethodPost, "/v1/policies", map[string]any{"policy": v2,
		"rollout": map[string]any{"steps": []float64{0.1, 0.5, 1}, "auto": true, "pause_s": 60, "max_failed": 2}})
	if code != http.StatusAccepted {
		t.Fatalf("push with a plan: %d %s", code, raw)
	}
	var acc policyapi.PushAccepted
	if err := json.Unmarshal(raw, &acc); err != nil || acc.Rollout == nil || acc.Rollout.State != rollout.StateRunning || acc.Rollout.PreviousVersion != "1" {
		t.Fatalf("answer %s (%v)", raw, err)
	}
	recs := s.records(t, topology.PolicyRollouts, 1)
	if len(recs) != 1 {
		t.Fatalf("%d rollout records, want 1", len(recs))
	}
	var r events.PolicyRollout
	if err := s.env.Codec.DecodeInto(t.Context(), recs[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	b1, _ := json.Marshal(v1)
	if r.Version != "2" || r.PreviousVersion != "1" || r.PreviousHash != policy.BodyHash(r.PreviousBody) || r.PreviousBody == "" || r.Step != 0 || len(r.Counts) != 3 {
		t.Fatalf("rollout record %+v (previous body of %s)", r, b1)
	}
	if n := len(s.records(t, topology.PDPNotifications, 1)); n != 1 {
		t.Fatalf("%d pushes, want 1", n)
	}

	code, out, _, _ = s.callAs(t, tenantToken, http.MethodPost, "/v1/policies/"+id+"/rollout/pause", nil)
	if code != http.StatusForbidden {
		t.Fatalf("a tenant paused a rollout: %d %v", code, out)
	}
	code, out, _ = s.call(t, http.MethodPost, "/v1/policies/"+id+"/rollout/resume", nil)
	wantError(t, "resume a running rollout", code, out, http.StatusConflict, "only a paused rollout can be resumed")
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies/"+id+"/rollout/pause", map[string]any{"reason": "error rate"})
	if code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, raw)
	}
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies/"+id+"/rollout/promote", nil)
	var st policyapi.Staged
	if err := json.Unmarshal(raw, &st); code != http.StatusOK || err != nil || st.CurrentStep != 2 || st.State != rollout.StatePaused {
		t.Fatalf("promote: %d %s", code, raw)
	}
	// The promote asked every matcher partition to compare its components.
	if n := len(s.records(t, topology.CatchupRequests, testPartitions)); n != testPartitions {
		t.Fatalf("%d catch-up requests after the promote, want one per partition (%d)", n, testPartitions)
	}
	// Version 3 with a plan supersedes the paused rollout: it starts from
	// its own first step, and the components outside it keep version 1.
	// pdp-ingest loaded version 2 meanwhile.
	s.Produce(t, topology.PolicyCatalog, id, catalogRecord(id+".2.xml", "2", v2))
	testkit.Eventually(t, 30*time.Second, func() error {
		_, out, _ := s.call(t, http.MethodGet, "/policy_latest/"+id, nil)
		if b, _ := out["policy_body"].(map[string]any); b == nil || b["policyVersion"] != "2" || out["in_force"] != nil || out["aborted_version"] != nil {
			return fmt.Errorf("latest %v", out)
		}
		return nil
	})
	v3 := pdpBody(id+".3.xml", "3", map[string]any{"v": 3})
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies", map[string]any{"policy": v3, "rollout": map[string]any{"steps": []float64{0.5, 1}}})
	acc = policyapi.PushAccepted{}
	if err := json.Unmarshal(raw, &acc); code != http.StatusAccepted || err != nil || acc.Rollout == nil || acc.Rollout.Version != "3" ||
		acc.Rollout.PreviousVersion != "1" || acc.Rollout.CurrentStep != 1 || acc.Rollout.State != rollout.StateRunning {
		t.Fatalf("superseding push: %d %s", code, raw)
	}
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies/"+id+"/rollout/abort", nil)
	if err := json.Unmarshal(raw, &st); code != http.StatusOK || err != nil || st.State != rollout.StateAborted {
		t.Fatalf("abort: %d %s", code, raw)
	}
	code, out, _ = s.call(t, http.MethodPost, "/v1/policies/"+id+"/rollout/promote", nil)
	wantError(t, "promote an aborted rollout", code, out, http.StatusConflict, "aborted")
	aborted := st

	// The catalog keeps the aborted version 3 as its latest, but every
	// component went back to version 1: version 4 with a plan replaces
	// version 1, at the abort's revision, so the components outside its
	// first step keep version 1 instead of being given version 3.
	s.Produce(t, topology.PolicyCatalog, id, catalogRecord(id+".3.xml", "3", v3))
	testkit.Eventually(t, 30*time.Second, func() error {
		_, out, _ := s.call(t, http.MethodGet, "/policy_latest/"+id, nil)
		// It also says the version was aborted, and what is in force.
		in, _ := out["in_force"].(map[string]any)
		if b, _ := out["policy_body"].(map[string]any); b == nil || b["policyVersion"] != "3" || out["aborted_version"] != "3" || in == nil ||
			in["policy_version"] != "1" || in["revision"] == nil {
			return fmt.Errorf("latest %v", out)
		}
		if b, _ := in["policy_body"].(map[string]any); b == nil || b["policyVersion"] != "1" {
			return fmt.Errorf("in force %v", in)
		}
		return nil
	})
	v4 := pdpBody(id+".4.xml", "4", map[string]any{"v": 4})
	// A what-if of version 4 says so too, and diffs from version 1, the
	// one in force; a body pushed without the fields the PDP adds when it
	// serves one is not said to remove them.
	bare := maps.Clone(v4)
	delete(bare, "policyConfigMessage")
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies?dry_run=true", map[string]any{"policy": bare, "rollout": map[string]any{"steps": []float64{0.5, 1}}})
	var wi policyapi.WhatIf
	if err := json.Unmarshal(raw, &wi); code != http.StatusOK || err != nil || wi.AbortedVersion != "3" || wi.InForceVersion == nil || *wi.InForceVersion != "1" {
		t.Fatalf("dry run after the abort: %d %s", code, raw)
	}
	wantOps := map[string]string{"/policyName": "replace", "/policyVersion": "replace", "/config/v": "replace"}
	if len(wi.Diff) != len(wantOps) {
		t.Fatalf("diff of the dry run after the abort %+v, want %v", wi.Diff, wantOps)
	}
	for _, op := range wi.Diff {
		if wantOps[op.Path] != op.Op {
			t.Fatalf("diff of the dry run after the abort %+v, want %v", wi.Diff, wantOps)
		}
	}
	code, _, raw = s.call(t, http.MethodPost, "/v1/policies", map[string]any{"policy": v4, "rollout": map[string]any{"steps": []float64{0.5, 1}}})
	acc = policyapi.PushAccepted{}
	if err := json.Unmarshal(raw, &acc); code != http.StatusAccepted || err != nil || acc.Rollout == nil || acc.Rollout.Version != "4" {
		t.Fatalf("push after the abort: %d %s", code, raw)
	}
	if acc.Rollout.PreviousVersion != "1" {
		t.Fatalf("the rollout of version 4 after version 3 was aborted replaces version %s, want 1 (what the components went back to): %s",
			acc.Rollout.PreviousVersion, raw)
	}
	rs := s.records(t, topology.PolicyRollouts, 5)
	var r4 events.PolicyRollout
	if err := s.env.Codec.DecodeInto(t.Context(), rs[len(rs)-1].Value, &r4); err != nil {
		t.Fatal(err)
	}
	var abortRec events.PolicyRollout
	if err := s.env.Codec.DecodeInto(t.Context(), rs[len(rs)-2].Value, &abortRec); err != nil {
		t.Fatal(err)
	}
	if r4.Version != "4" || r4.PreviousVersion != "1" || r4.PreviousBody == "" || r4.PreviousRevision != abortRec.AbortRevision || abortRec.AbortRevision == 0 {
		t.Fatalf("rollout of version 4 %+v; the aborted one (%s) restored at revision %d", r4, aborted.State, abortRec.AbortRevision)
	}
}
