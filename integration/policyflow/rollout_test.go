package policyflow_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/services/testkit"
)

// stagedComponent is one component of the rollout test: its cohort and
// the ledger of the versions its script was told of.
type stagedComponent struct {
	id, scn string
	step    int
	rec     *recorder // nil for the failing one
}

// ledger is the version of policyID in each notification the component
// received that held it, in order (the first one, at registration, holds
// nothing).
func (c *stagedComponent) ledger(t *testing.T, policyID string) []string {
	t.Helper()
	var out []string
	for _, call := range c.rec.calls(t) {
		v := "-"
		for _, b := range call.payload.Policies {
			if name, _ := b["policyName"].(string); strings.HasPrefix(name, policyID+".") {
				v, _ = b["policyVersion"].(string)
			}
		}
		if v != "-" {
			out = append(out, v)
		}
	}
	return out
}

// TestStagedRollout publishes version 1 of a policy to every component,
// then version 2 with a three-step plan (auto, no pause, max_failed 0):
// the first step's components get it, the second step starts by itself,
// its failing script pauses the rollout, and the third step's components
// are told nothing. Every stage and the North API restart in the middle;
// a catch-up and a component registered meanwhile respect the rollout.
// A promote brings version 2 to the third step; an abort brings every
// component back to version 1, as a new revision: each component's
// ledger of notifications is checked at every step.
func TestStagedRollout(t *testing.T) {
	p := start(t)
	suffix := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	const policyID = "DCAE.Config_STAGED"
	steps := []float64{0.3, 0.6, 1.0}
	// Pick component ids by the cohort their hash puts them in: two in
	// step 1, a good one and the failing one in step 2, two in step 3 and
	// one more in step 3 that registers during the rollout.
	want := []int{0, 0, 1, 1, 2, 2, 2}
	var comps []*stagedComponent
	for i := 0; len(comps) < len(want); i++ {
		id := fmt.Sprintf("staged-%d-%s", i, suffix)
		k := rollout.StepOf(id, steps)
		n := 0
		for _, c := range comps {
			if c.step == k {
				n++
			}
		}
		need := 0
		for _, w := range want {
			if w == k {
				need++
			}
		}
		if n < need {
			comps = append(comps, &stagedComponent{id: id, scn: "scn-" + id, step: k})
		}
	}
	slices.SortStableFunc(comps, func(a, b *stagedComponent) int { return a.step - b.step })
	failing, late := comps[3], comps[6]
	register := func(c *stagedComponent) {
		notify := map[string]any{"kind": "script"}
		if c == failing {
			notify["script_path"] = p.failingScript()
		} else {
			c.rec = p.newRecorder()
			notify["script_path"] = c.rec.path
		}
		p.register(c.id, map[string]any{"deployment_id": "dep-" + c.id, "service_component_name": c.scn,
			"policy_ids": []string{policyID}, "notify": notify})
	}
	for _, c := range comps {
		if c != late {
			register(c)
		}
	}
	body := func(v string) map[string]any {
		return map[string]any{"policyName": policyID + "." + v + ".xml", "policyVersion": v, "policyConfigStatus": "CONFIG_RETRIEVED",
			"matchingConditions": map[string]any{"ONAPName": "DCAE"}, "config": map[string]any{"v": v}}
	}
	ledgers := func(step string, want func(c *stagedComponent) []string) {
		t.Helper()
		testkit.Eventually(t, 2*time.Minute, testkit.Named(step, func() error {
			for _, c := range comps {
				if c.rec == nil { // the failing one, and the late one before it registers
					continue
				}
				if got, w := c.ledger(t, policyID), want(c); !slices.Equal(got, w) {
					return fmt.Errorf("%s (step %d) was told versions %v, want %v", c.id, c.step+1, got, w)
				}
			}
			return nil
		}))
	}
	consulVersion := func(step string, want func(c *stagedComponent) string) {
		t.Helper()
		testkit.Eventually(t, 2*time.Minute, testkit.Named(step, func() error {
			for _, c := range comps {
				if c == late && c.rec == nil {
					continue
				}
				if got, w := p.items(c.scn)[policyID]["policyVersion"], want(c); got != w {
					return fmt.Errorf("%s (step %d) holds version %v in Consul, want %s", c.id, c.step+1, got, w)
				}
			}
			return nil
		}))
	}
	staged := func() policyapi.Staged {
		t.Helper()
		var r policyapi.Rollout
		if err := json.Unmarshal([]byte(p.must(http.MethodGet, "/v1/policies/"+policyID+"/rollout", nil)), &r); err != nil {
			t.Fatal(err)
		}
		if r.Staged == nil {
			t.Fatalf("GET rollout shows no staged rollout: %+v", r)
		}
		return *r.Staged
	}
	waitState := func(what string, ok func(s policyapi.Staged) error) {
		t.Helper()
		testkit.Eventually(t, time.Minute, testkit.Named(what, func() error { return ok(staged()) }))
	}

	// Version 1 everywhere, without a plan.
	p.must(http.MethodPost, "/v1/policies", body("1"))
	ledgers("version 1 reaches every component", func(*stagedComponent) []string { return []string{"1"} })

	// A plan that is not valid is refused with every reason.
	code, out := p.do(http.MethodPost, "/v1/policies", map[string]any{"policy": body("2"),
		"rollout": map[string]any{"steps": []float64{0.5, 0.4}, "pause_s": -1}})
	if code != http.StatusBadRequest || !strings.Contains(out, "not greater than the step before") || !strings.Contains(out, "last step is 1.0") ||
		!strings.Contains(out, "pause_s is -1") {
		t.Fatalf("bad plan: %d %s", code, out)
	}

	// Version 2 with a plan.
	p.must(http.MethodPost, "/v1/policies", map[string]any{"policy": body("2"),
		"rollout": map[string]any{"steps": steps, "auto": true, "pause_s": 0, "max_failed": 0}})
	waitState("the failing script pauses the rollout at step 2", func(s policyapi.Staged) error {
		if s.State != rollout.StatePaused || s.CurrentStep != 2 || s.Steps[1].Failed != 1 || s.Steps[0].Notified != 2 {
			return fmt.Errorf("state %s step %d steps %+v", s.State, s.CurrentStep, s.Steps)
		}
		return nil
	})
	var status policyapi.PipelineStatus
	if err := json.Unmarshal([]byte(p.must(http.MethodGet, "/v1/status", nil)), &status); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(status.Changes, func(c policyapi.PolicyRollout) bool { return c.PolicyID == policyID }); i < 0 ||
		status.Changes[i].Staged != "paused at step 2 of 3" {
		t.Fatalf("the status page does not show the paused rollout: %+v", status.Changes)
	}
	untilStep := func(last int, v string) func(c *stagedComponent) []string {
		return func(c *stagedComponent) []string {
			if c.step <= last {
				return []string{"1", v}
			}
			return []string{"1"}
		}
	}
	ledgers("steps 1 and 2 got version 2, step 3 was told nothing", untilStep(1, "2"))

	// Every stage and the North API restart; pdp-ingest's catch-up on
	// start compares every component, and respects the rollout.
	p.stop()
	p.run()
	register(late)
	waitState("the rollout is still paused at step 2 after the restart", func(s policyapi.Staged) error {
		if s.State != rollout.StatePaused || s.CurrentStep != 2 {
			return fmt.Errorf("state %s step %d", s.State, s.CurrentStep)
		}
		return nil
	})
	ledgers("after the restart, a catch-up and a registration, step 3 still has version 1", func(c *stagedComponent) []string {
		if c == late {
			return []string{"1"} // registered during the rollout, outside the step
		}
		return untilStep(1, "2")(c)
	})

	// Promote: step 3 gets version 2 (the rollout stays paused).
	var s policyapi.Staged
	if err := json.Unmarshal([]byte(p.must(http.MethodPost, "/v1/policies/"+policyID+"/rollout/promote", nil)), &s); err != nil {
		t.Fatal(err)
	}
	if s.CurrentStep != 3 || s.State != rollout.StatePaused {
		t.Fatalf("promote: %+v", s)
	}
	ledgers("the promote brought version 2 to step 3", func(*stagedComponent) []string { return []string{"1", "2"} })
	if code, out := p.do(http.MethodPost, "/v1/policies/"+policyID+"/rollout/resume", map[string]any{"reason": "script fixed", "extra": 1}); code != http.StatusBadRequest {
		t.Fatalf("unknown field in an action's body: %d %s", code, out)
	}

	// Abort: every component goes back to version 1.
	if err := json.Unmarshal([]byte(p.must(http.MethodPost, "/v1/policies/"+policyID+"/rollout/abort", map[string]any{"reason": "error rate"})), &s); err != nil {
		t.Fatal(err)
	}
	if s.State != rollout.StateAborted {
		t.Fatalf("abort: %+v", s)
	}
	ledgers("the abort brought every component back to version 1", func(*stagedComponent) []string { return []string{"1", "2", "1"} })
	consulVersion("Consul holds version 1 everywhere, the failing component's folder too", func(*stagedComponent) string { return "1" })
	if code, out := p.do(http.MethodPost, "/v1/policies/"+policyID+"/rollout/resume", nil); code != http.StatusConflict {
		t.Fatalf("resume after abort: %d %s", code, out)
	}
}
