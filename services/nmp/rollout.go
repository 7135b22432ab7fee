package nmp

import (
	"fmt"
	"time"

	"github.com/policyflow/policyflow/events"
)

// The states of an agent upgrade, as Open Horizon reports them.
const (
	StateWaiting            = "waiting"
	StateDownloadStarted    = "download started"
	StateDownloaded         = "downloaded"
	StateDownloadFailed     = "download failed"
	StateInitiated          = "initiated"
	StateSuccessful         = "successful"
	StateNoActionRequired   = "no action required"
	StateFailed             = "failed"
	StateRollbackStarted    = "rollback started"
	StateRollbackFailed     = "rollback failed"
	StateRollbackSuccessful = "rollback successful"
)

// States lists every state in the order of a rollout.
var States = []string{StateWaiting, StateDownloadStarted, StateDownloaded, StateDownloadFailed, StateInitiated,
	StateSuccessful, StateNoActionRequired, StateFailed, StateRollbackStarted, StateRollbackFailed, StateRollbackSuccessful}

// ValidState says whether s is one of States.
func ValidState(s string) bool {
	for _, x := range States {
		if x == s {
			return true
		}
	}
	return false
}

// Failed says whether a state is a failed upgrade (whatever its rollback
// did).
func Failed(s string) bool {
	switch s {
	case StateDownloadFailed, StateFailed, StateRollbackStarted, StateRollbackFailed, StateRollbackSuccessful:
		return true
	}
	return false
}

// upgraded says whether the node installed the policy's version (so a
// rollback order concerns it).
func upgraded(s string) bool { return s == StateSuccessful }

// started says whether the node began the policy's upgrade: its last
// report is about the policy and past waiting.
func started(st *events.AgentStatus, policy string) bool {
	return st != nil && st.Policy == policy && st.Status != "" && st.Status != StateWaiting && st.Status != StateNoActionRequired
}

// Rollout is the safe-rollout state of one NMP.
type Rollout struct {
	Started, Failed int64
	Paused          bool
	Reason          string
}

// Tally counts, for one NMP, the nodes that started and failed since the
// last resume, from their last reports.
type Tally struct {
	Started, Failed int64
}

// Add counts one node's last report for the NMP p.
func (t *Tally) Add(p *events.NodeManagementPolicy, st *events.AgentStatus) {
	if !counts(p, st) {
		return
	}
	t.Started++
	if Failed(st.Status) {
		t.Failed++
	}
}

// Remove uncounts a report Add counted.
func (t *Tally) Remove(p *events.NodeManagementPolicy, st *events.AgentStatus) {
	if !counts(p, st) {
		return
	}
	t.Started--
	if Failed(st.Status) {
		t.Failed--
	}
}

func counts(p *events.NodeManagementPolicy, st *events.AgentStatus) bool {
	if st == nil || !started(st, Key(p.Org, p.Name)) {
		return false
	}
	if p.ResumedAt > 0 {
		end := st.ReportedAt
		if st.UpgradeStart != nil {
			end = *st.UpgradeStart
		}
		return !end.Before(time.UnixMilli(p.ResumedAt))
	}
	return true
}

// Evaluate applies the NMP's failure threshold to a tally: the rollout is
// paused when Failed reaches the count, or when Failed/Started reaches
// the ratio once at least MinStarted (1 by default) nodes started.
func Evaluate(p *events.NodeManagementPolicy, t Tally) Rollout {
	r := Rollout{Started: t.Started, Failed: t.Failed}
	if p.FailureCount > 0 && t.Failed >= p.FailureCount {
		r.Paused = true
		r.Reason = fmt.Sprintf("rollout paused: %d nodes failed, the threshold is %d; resume with policyctl nmp resume %s", t.Failed, p.FailureCount, p.Name)
		return r
	}
	minStarted := max(p.FailureMinStarted, 1)
	if p.FailureRatio > 0 && t.Started >= minStarted && float64(t.Failed) >= p.FailureRatio*float64(t.Started) && t.Failed > 0 {
		r.Paused = true
		r.Reason = fmt.Sprintf("rollout paused: %d of %d started nodes failed, the threshold ratio is %g; resume with policyctl nmp resume %s", t.Failed, t.Started, p.FailureRatio, p.Name)
	}
	return r
}
