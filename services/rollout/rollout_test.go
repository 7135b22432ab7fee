package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

func TestPlanCheck(t *testing.T) {
	for _, tc := range []struct {
		plan Plan
		want string // a reason, "" when valid
	}{
		{Plan{Steps: []float64{0.1, 0.5, 1}, Auto: true, PauseS: 60, MaxFailed: 2}, ""},
		{Plan{Steps: []float64{1}}, ""},
		{Plan{}, "rollout.steps is empty"},
		{Plan{Steps: []float64{0.5, 0.5, 1}}, "not greater than the step before"},
		{Plan{Steps: []float64{0, 1}}, "each step is a share in (0, 1]"},
		{Plan{Steps: []float64{0.5, 1.5}}, "each step is a share in (0, 1]"},
		{Plan{Steps: []float64{0.1, 0.5}}, "the last step is 1.0"},
		{Plan{Steps: []float64{1}, PauseS: -1}, "rollout.pause_s is -1"},
		{Plan{Steps: []float64{1}, MaxFailed: -3}, "rollout.max_failed is -3"},
	} {
		got := strings.Join(tc.plan.Check(), "; ")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: reasons %q, want %q", tc.plan, got, tc.want)
		}
	}
}

// TestCohortsAreStableAndProportional: a component's cohort depends on
// its id alone, cohorts are cumulative, and their sizes follow the steps.
func TestCohortsAreStableAndProportional(t *testing.T) {
	steps := []float64{0.1, 0.5, 1}
	const n = 10000
	in := make([]int, len(steps))
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("dep-%d.comp", i)
		f := Fraction(id)
		if f < 0 || f >= 1 || f != Fraction(id) {
			t.Fatalf("Fraction(%s) = %g, not stable in [0,1)", id, f)
		}
		for k := range steps {
			if InCohort(id, steps, k) {
				in[k]++
				if k+1 < len(steps) && !InCohort(id, steps, k+1) {
					t.Fatalf("%s is in step %d's cohort but not in the next one's", id, k)
				}
			}
		}
		if k := StepOf(id, steps); !InCohort(id, steps, k) || (k > 0 && InCohort(id, steps, k-1)) {
			t.Fatalf("StepOf(%s) = %d disagrees with InCohort", id, k)
		}
	}
	for k, s := range steps {
		if got := float64(in[k]) / n; got < s-0.02 || got > s+0.02 {
			t.Errorf("step %d holds %.3f of the components, want about %g", k, got, s)
		}
	}
	// A fixed id falls where it always did (SHA-256, first 8 bytes over
	// 2^64): every member and every release must agree on the cohorts.
	if f := Fraction("demo.vm"); fmt.Sprintf("%.9f", f) != "0.250983968" {
		t.Fatalf("Fraction(demo.vm) = %.9f, want 0.250983968: the cohort hash changed", f)
	}
}

func TestGate(t *testing.T) {
	r := &events.PolicyRollout{Version: "2", BodyHash: "h2", Steps: []float64{0.5, 1}, State: StateRunning}
	var inside, outside string
	for i := 0; inside == "" || outside == ""; i++ {
		if i > 10000 {
			t.Fatalf("no component in and out of the first step's cohort: InCohort ignores the hash")
		}
		id := fmt.Sprintf("c%d", i)
		if InCohort(id, r.Steps, 0) {
			inside = id
		} else {
			outside = id
		}
	}
	check := func(id, version, hash string, want Gating) {
		t.Helper()
		if got := Gate(r, id, version, hash); got != want {
			t.Errorf("%s %s: Gate(%s, %s, %s) = %d, want %d", r.State, id, id, version, hash, got, want)
		}
	}
	check(inside, "2", "h2", Latest)
	check(outside, "2", "h2", Previous)
	check(outside, "3", "h3", Latest) // a newer version supersedes the rollout
	r.State = StatePaused
	check(outside, "2", "h2", Previous)
	r.Step = 1
	check(outside, "2", "h2", Latest)
	r.State = StateAborted
	check(inside, "2", "h2", Restored)
	check(outside, "2", "h2", Restored)
	r.State = StateDone
	check(outside, "2", "h2", Latest)
	if Gate(nil, inside, "2", "h2") != Latest {
		t.Error("no rollout must not gate")
	}
}

func TestStateMachine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := Start("P", "r1", "2", "h2", &events.PolicyCatalogEntry{PolicyVersion: "1", Body: `{}`, BodyHash: "h1", Revision: 7},
		Plan{Steps: []float64{0.1, 0.5, 1}, Auto: true, PauseS: 60, MaxFailed: 1}, "op", t0)
	if r.State != StateRunning || r.Step != 0 || r.PreviousVersion != "1" || r.PreviousRevision != 7 {
		t.Fatalf("start: %+v", r)
	}
	c := func(cs ...int64) []events.RolloutStepCount {
		var out []events.RolloutStepCount
		for i := 0; i < len(cs); i += 3 {
			out = append(out, events.RolloutStepCount{Components: cs[i], Notified: cs[i+1], Failed: cs[i+2]})
		}
		return out
	}
	// Step 1 not done yet: only the counts change.
	n := Observe(r, c(2, 1, 0, 3, 0, 0, 5, 0, 0), t0.Add(time.Second))
	if n == nil || n.State != StateRunning || n.Step != 0 || n.StepDoneAt != nil {
		t.Fatalf("partial step: %+v", n)
	}
	r = n
	if Observe(r, c(2, 1, 0, 3, 0, 0, 5, 0, 0), t0.Add(2*time.Second)) != nil {
		t.Fatal("nothing changed, yet Observe wrote a record")
	}
	// Step 1 done: the next step waits pause_s.
	r = Observe(r, c(2, 2, 0, 3, 0, 0, 5, 0, 0), t0.Add(3*time.Second))
	if r.Step != 0 || r.StepDoneAt == nil {
		t.Fatalf("done step: %+v", r)
	}
	if Observe(r, c(2, 2, 0, 3, 0, 0, 5, 0, 0), t0.Add(62*time.Second)) != nil {
		t.Fatal("the next step started before pause_s")
	}
	r = Observe(r, c(2, 2, 0, 3, 0, 0, 5, 0, 0), t0.Add(63*time.Second))
	if r.Step != 1 || r.State != StateRunning || r.StepDoneAt != nil {
		t.Fatalf("auto advance: %+v", r)
	}
	// Two failures (> max_failed 1) pause it.
	r = Observe(r, c(2, 2, 0, 3, 1, 2, 5, 0, 0), t0.Add(70*time.Second))
	if r.State != StatePaused || !strings.Contains(r.Reason, "max_failed") {
		t.Fatalf("failures: %+v", r)
	}
	if _, err := Pause(r, "x", "op", t0); err == nil {
		t.Fatal("paused twice")
	}
	// Promote moves a paused rollout to the next step, still paused.
	r, err := Promote(r, "op", t0.Add(80*time.Second))
	if err != nil || r.Step != 2 || r.State != StatePaused {
		t.Fatalf("promote: %+v %v", r, err)
	}
	// Resume: the failures before it no longer count.
	r, err = Resume(r, "op", t0.Add(90*time.Second))
	if err != nil || r.State != StateRunning || r.FailedBaseline != 2 {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if n := Observe(r, c(2, 2, 0, 3, 1, 2, 5, 1, 0), t0.Add(91*time.Second)); n == nil || n.State != StateRunning {
		t.Fatalf("old failures paused it again: %+v", n)
	}
	// The failures forgiven by the resume settle their components: the
	// last step is done once every other component was notified, saying
	// how many failed, instead of waiting for them for ever.
	if d := Observe(r, c(2, 2, 0, 3, 1, 2, 5, 5, 0), t0.Add(95*time.Second)); d == nil || d.State != StateDone || !strings.Contains(d.Reason, "2 notifications failed") {
		t.Fatalf("a step holding forgiven failures: %+v", d)
	}
	a, err := Abort(r, 99, "op", t0.Add(100*time.Second))
	if err != nil || a.State != StateAborted || a.AbortRevision != 99 {
		t.Fatalf("abort: %+v %v", a, err)
	}
	for _, f := range []func() (*events.PolicyRollout, error){
		func() (*events.PolicyRollout, error) { return Promote(a, "op", t0) },
		func() (*events.PolicyRollout, error) { return Resume(a, "op", t0) },
		func() (*events.PolicyRollout, error) { return Abort(a, 100, "op", t0) },
	} {
		if _, err := f(); err == nil {
			t.Fatal("an aborted rollout accepted an action")
		}
	}
	// The last step done ends it.
	d := Observe(r, c(2, 2, 0, 3, 3, 0, 5, 5, 0), t0.Add(120*time.Second))
	if d == nil || d.State != StateDone {
		t.Fatalf("last step: %+v", d)
	}
	if r.Step != 2 || r.State != StateRunning {
		t.Fatal("Observe changed its input")
	}
}
