// Package rollout holds the rules of a staged rollout of a policy version:
// the plan and its checks, the cohort a component belongs to, the version
// a component should get while a rollout runs, and the state machine
// (promote, pause, resume, abort, and the progress a step makes). It is
// pure: the North API and the matcher call it, policy.rollouts carries its
// state. docs/rollouts.md explains it for operators.
package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/policyflow/policyflow/events"
)

// The states of a rollout.
const (
	StateRunning    = "running"
	StatePaused     = "paused"
	StateDone       = "done"
	StateAborted    = "aborted"
	StateSuperseded = "superseded"
)

// MaxSteps is the most steps a plan may have.
const MaxSteps = 20

// Plan is how a version is rolled out: the cumulative shares of the
// components that get it at each step, whether the next step starts by
// itself PauseS seconds after one is done, and how many failed
// notifications pause the rollout.
type Plan struct {
	Steps     []float64 `json:"steps"`
	Auto      bool      `json:"auto"`
	PauseS    int64     `json:"pause_s"`
	MaxFailed int64     `json:"max_failed"`
}

// Check lists what is wrong with a plan; none when it is valid.
func (p Plan) Check() []string {
	var out []string
	switch {
	case len(p.Steps) == 0:
		out = append(out, "rollout.steps is empty: give the cumulative shares of the components, e.g. [0.1, 0.5, 1.0]")
	case len(p.Steps) > MaxSteps:
		out = append(out, fmt.Sprintf("rollout.steps has %d steps, at most %d are allowed", len(p.Steps), MaxSteps))
	default:
		for i, s := range p.Steps {
			switch {
			case math.IsNaN(s) || s <= 0 || s > 1:
				out = append(out, fmt.Sprintf("rollout.steps[%d] is %g: each step is a share in (0, 1]", i, s))
			case i > 0 && s <= p.Steps[i-1]:
				out = append(out, fmt.Sprintf("rollout.steps[%d] is %g, not greater than the step before (%g): steps increase", i, s, p.Steps[i-1]))
			}
		}
		if last := p.Steps[len(p.Steps)-1]; last != 1 {
			out = append(out, fmt.Sprintf("rollout.steps ends at %g: the last step is 1.0 (every component)", last))
		}
	}
	if p.PauseS < 0 {
		out = append(out, fmt.Sprintf("rollout.pause_s is %d: give 0 or more seconds", p.PauseS))
	}
	if p.MaxFailed < 0 {
		out = append(out, fmt.Sprintf("rollout.max_failed is %d: give 0 or more failed notifications", p.MaxFailed))
	}
	return out
}

// Fraction is where a component falls in [0, 1): the first 8 bytes of the
// SHA-256 of its component_id over 2^64. It depends on the id alone, so
// it is the same on every member and across restarts.
func Fraction(componentID string) float64 {
	sum := sha256.Sum256([]byte(componentID))
	return float64(binary.BigEndian.Uint64(sum[:8])) / math.Exp2(64)
}

// StepOf is the first step whose cohort holds the component: the
// component is in step k's cohort iff Fraction(id) < steps[k].
func StepOf(componentID string, steps []float64) int {
	f := Fraction(componentID)
	for k, s := range steps {
		if f < s {
			return k
		}
	}
	return len(steps) // only when the last step is not 1.0
}

// InCohort says whether a component is among those that get the version at
// step (cumulative: step k's cohort holds every earlier step's).
func InCohort(componentID string, steps []float64, step int) bool {
	return step >= 0 && step < len(steps) && Fraction(componentID) < steps[step]
}

// Gating says what a rollout does to the version a component gets.
type Gating int

const (
	// Latest: the rollout does not concern the component; it gets the
	// catalog's latest version.
	Latest Gating = iota
	// Previous: the component gets the previous version (at its own
	// revision), or nothing when there was none.
	Previous
	// Restored: the rollout was aborted; the component gets the previous
	// version at the abort's revision, which is greater than the rolled
	// out version's (or loses the policy when there was none).
	Restored
)

// Gate says which version a component should get of a policy whose
// catalog latest is version with body hash: a rollout concerns only that
// version (a newer one supersedes it), while it is running or paused
// (components outside the current step's cohort keep the previous
// version) or after it was aborted (every component goes back).
func Gate(r *events.PolicyRollout, componentID, version, hash string) Gating {
	if r == nil || r.Version != version || r.BodyHash != hash {
		return Latest
	}
	switch r.State {
	case StateRunning, StatePaused:
		if InCohort(componentID, r.Steps, int(r.Step)) {
			return Latest
		}
		return Previous
	case StateAborted:
		return Restored
	}
	return Latest
}

// Start is the record of a new rollout of a version under plan.
func Start(id, rolloutID, version, hash string, prev *events.PolicyCatalogEntry, plan Plan, by string, now time.Time) *events.PolicyRollout {
	r := &events.PolicyRollout{PolicyID: id, RolloutID: rolloutID, Version: version, BodyHash: hash,
		Steps: plan.Steps, Auto: plan.Auto, PauseS: plan.PauseS, MaxFailed: plan.MaxFailed,
		State: StateRunning, StepStartedAt: now, Counts: make([]events.RolloutStepCount, len(plan.Steps)),
		UpdatedBy: by, UpdatedAt: now}
	if prev != nil && prev.Body != "" {
		r.PreviousVersion, r.PreviousBody, r.PreviousHash, r.PreviousRevision = prev.PolicyVersion, prev.Body, prev.BodyHash, prev.Revision
		r.Tenant = prev.Tenant
	}
	return r
}

// Active says whether the rollout still decides who gets its version and
// may move on (running or paused).
func Active(r *events.PolicyRollout) bool {
	return r != nil && (r.State == StateRunning || r.State == StatePaused)
}

// InForce is what the components have of a policy whose catalog latest is
// version with body hash, when a rollout r decides it: the version before
// r, at the revision it was restored at, once r was aborted (the catalog
// keeps the aborted version as its latest; every component went back).
// ok is false when r does not decide it (no rollout, another version, or
// not aborted): the components have the catalog's latest. A nil entry with
// ok true means they have nothing: the policy had no version before r.
// A version published next takes this as the one it replaces.
func InForce(r *events.PolicyRollout, version, hash string) (e *events.PolicyCatalogEntry, ok bool) {
	if r == nil || r.State != StateAborted || r.Version != version || r.BodyHash != hash {
		return nil, false
	}
	if r.PreviousBody == "" {
		return nil, true
	}
	return &events.PolicyCatalogEntry{PolicyVersion: r.PreviousVersion, Body: r.PreviousBody, BodyHash: r.PreviousHash,
		Revision: r.AbortRevision, Tenant: r.Tenant}, true
}

// Conflict is an action refused in the rollout's state (a 409).
type Conflict struct{ Msg string }

func (c *Conflict) Error() string { return c.Msg }

func conflict(format string, args ...any) error { return &Conflict{Msg: fmt.Sprintf(format, args...)} }

// next returns a copy of r stamped by who and when, for a change.
func next(r *events.PolicyRollout, by string, now time.Time) *events.PolicyRollout {
	n := *r
	n.Steps = append([]float64(nil), r.Steps...)
	n.Counts = append([]events.RolloutStepCount(nil), r.Counts...)
	n.UpdatedBy, n.UpdatedAt = by, now
	return &n
}

// Promote starts the next step now, whatever the current one did; a
// paused rollout stays paused at the next step. Promoting the last step
// finishes the rollout.
func Promote(r *events.PolicyRollout, by string, now time.Time) (*events.PolicyRollout, error) {
	if !Active(r) {
		return nil, conflict("the rollout of version %s of %s is %s: only a running or paused rollout can be promoted", r.Version, r.PolicyID, r.State)
	}
	n := next(r, by, now)
	if int(n.Step) >= len(n.Steps)-1 {
		n.State, n.Reason = StateDone, "promoted past the last step by "+by
		return n, nil
	}
	n.Step++
	n.StepStartedAt, n.StepDoneAt = now, nil
	n.Reason = fmt.Sprintf("promoted to step %d by %s", n.Step+1, by)
	return n, nil
}

// Pause stops the rollout where it is: no further step starts until it is
// resumed or promoted.
func Pause(r *events.PolicyRollout, reason, by string, now time.Time) (*events.PolicyRollout, error) {
	if !Active(r) {
		return nil, conflict("the rollout of version %s of %s is %s: only a running rollout can be paused", r.Version, r.PolicyID, r.State)
	}
	if r.State == StatePaused {
		return nil, conflict("the rollout of version %s of %s is already paused: %s", r.Version, r.PolicyID, r.Reason)
	}
	n := next(r, by, now)
	n.State, n.Reason = StatePaused, reason
	return n, nil
}

// Resume runs a paused rollout again; the failures counted so far no
// longer count against max_failed (as the node-management threshold
// counts only what happened since a resume).
func Resume(r *events.PolicyRollout, by string, now time.Time) (*events.PolicyRollout, error) {
	if r == nil || r.State != StatePaused {
		return nil, conflict("the rollout of version %s of %s is %s: only a paused rollout can be resumed", r.Version, r.PolicyID, r.State)
	}
	n := next(r, by, now)
	n.State, n.Reason = StateRunning, "resumed by "+by
	n.FailedBaseline = failed(r)
	n.StepDoneAt = nil
	return n, nil
}

// Abort ends the rollout: every component goes back to the previous
// version, at revision rev (greater than the rolled out version's, so
// that nothing goes backwards in the fencing sense).
func Abort(r *events.PolicyRollout, rev int64, by string, now time.Time) (*events.PolicyRollout, error) {
	if !Active(r) && r.State != StateDone {
		return nil, conflict("the rollout of version %s of %s is %s: it cannot be aborted", r.Version, r.PolicyID, r.State)
	}
	n := next(r, by, now)
	n.State, n.Reason, n.AbortRevision = StateAborted, "aborted by "+by, rev
	return n, nil
}

// Supersede ends a rollout whose version is no longer the latest.
func Supersede(r *events.PolicyRollout, version, by string, now time.Time) *events.PolicyRollout {
	n := next(r, by, now)
	n.State, n.Reason = StateSuperseded, "superseded by version "+version
	return n
}

func failed(r *events.PolicyRollout) int64 {
	var f int64
	for _, c := range r.Counts {
		f += c.Failed
	}
	return f
}

// Observe records what the components of each step did (counts, one per
// step) and moves the rollout on: failures since the last resume above
// max_failed pause it; a step is done once every component of its cohort
// (and of the earlier ones) was notified; with auto, the next step starts
// pause_s after that; the last step done is the rollout done. It returns
// nil when nothing changed.
func Observe(r *events.PolicyRollout, counts []events.RolloutStepCount, now time.Time) *events.PolicyRollout {
	if !Active(r) || len(counts) != len(r.Steps) {
		return nil
	}
	n := next(r, "rollout", now)
	n.Counts = counts
	changed := !sameCounts(r.Counts, counts)
	if n.State == StateRunning {
		if f := failed(n) - n.FailedBaseline; f > n.MaxFailed {
			n.State = StatePaused
			n.Reason = fmt.Sprintf("paused: %d notifications of version %s failed, more than max_failed %d; fix them, then resume or abort", f, n.Version, n.MaxFailed)
			return n
		}
		if stepDone(n) {
			if n.StepDoneAt == nil {
				t := now
				n.StepDoneAt, changed = &t, true
			}
			failedNote := ""
			if f := failed(n); f > 0 {
				failedNote = fmt.Sprintf(" (%d notifications failed, %d of them since the last resume, within max_failed %d)", f, f-n.FailedBaseline, n.MaxFailed)
			}
			switch {
			case int(n.Step) == len(n.Steps)-1:
				n.State, n.Reason, changed = StateDone, "every component was notified"+failedNote, true
			case n.Auto && !now.Before(n.StepDoneAt.Add(time.Duration(n.PauseS)*time.Second)):
				n.Step++
				n.StepStartedAt, n.StepDoneAt = now, nil
				n.Reason, changed = fmt.Sprintf("step %d done%s; step %d started", n.Step, failedNote, n.Step+1), true
			}
		}
	}
	if !changed {
		return nil
	}
	return n
}

// stepDone says whether every component of the current step's cohort (and
// of the earlier ones) was notified or failed: a failure that did not pause
// the rollout (within max_failed, or forgiven by a resume) settles its
// component for the step, or the step would wait for it forever.
func stepDone(r *events.PolicyRollout) bool {
	for k := 0; k <= int(r.Step) && k < len(r.Counts); k++ {
		if r.Counts[k].Notified+r.Counts[k].Failed < r.Counts[k].Components {
			return false
		}
	}
	return true
}

func sameCounts(a, b []events.RolloutStepCount) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
