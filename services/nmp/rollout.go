package nmp

import (
	"fmt"
	"time"

	"github.com/policyflow/policyflow/events"
)

// The states of an agent upgrade, as Open Horizon reports them.
const (
	StateWaiting         = "waiting"
	StateDownloadStarted = "download started"
	StateDownloaded      = "downloaded"
	StateDownloadFailed  = "download failed"
	// StateSignatureRejected: the package downloaded, but no trusted key
	// verifies its signature; nothing was installed and the agent does
	// not download that package again (a new one must be published).
	StateSignatureRejected  = "signature rejected"
	StateInitiated          = "initiated"
	StateSuccessful         = "successful"
	StateNoActionRequired   = "no action required"
	StateFailed             = "failed"
	StateRollbackStarted    = "rollback started"
	StateRollbackFailed     = "rollback failed"
	StateRollbackSuccessful = "rollback successful"
	// StatePrecheckFailed: the host cannot take the upgrade (not enough
	// free disk for the package, a version guard); the agent checked
	// before downloading, so nothing changed on the node.
	StatePrecheckFailed = "precheck failed"
	// StateRolledBack: the node went back to its previous version
	// because the NMP ordered a rollback (not because an upgrade failed).
	StateRolledBack = "rolled back"
)

// StateIgnored is what an NMP's status shows for a node where another
// NMP with a different intent is enacted (never reported by an agent).
func StateIgnored(other string) string { return "ignored (conflict with " + other + ")" }

// States lists every state in the order of a rollout.
var States = []string{StateWaiting, StateDownloadStarted, StateDownloaded, StateDownloadFailed, StateSignatureRejected, StateInitiated,
	StateSuccessful, StateNoActionRequired, StateFailed, StateRollbackStarted, StateRollbackFailed, StateRollbackSuccessful, StatePrecheckFailed, StateRolledBack}

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
	case StateDownloadFailed, StateSignatureRejected, StateFailed, StateRollbackStarted, StateRollbackFailed, StateRollbackSuccessful:
		return true
	}
	return false
}

// upgraded says whether the node installed the policy's version (so a
// rollback order concerns it).
func upgraded(s string) bool { return s == StateSuccessful }

// started says whether the node began the policy's upgrade: its last
// report is about the policy and past waiting. A node that failed its
// precheck did not start (nothing changed on it).
func started(st *events.AgentStatus, policy string) bool {
	return st != nil && st.Policy == policy && st.Status != "" && st.Status != StateWaiting && st.Status != StateNoActionRequired &&
		st.Status != StatePrecheckFailed
}

// Rollout is the safe-rollout state of one NMP.
type Rollout struct {
	Started, Failed int64
	// PrecheckFailed counts the nodes that cannot take the upgrade; they
	// are neither started nor failed, so they never pause the rollout.
	PrecheckFailed int64
	Paused         bool
	Reason         string
}

// Tally counts, for one NMP, the nodes that started and failed since the
// last resume, and those whose precheck failed, from their last reports
// about the NMP.
type Tally struct {
	Started, Failed, PrecheckFailed int64
}

// Add counts one node's last report for the NMP p.
func (t *Tally) Add(p *events.NodeManagementPolicy, st *events.AgentStatus) { t.add(p, st, 1) }

// Remove uncounts a report Add counted.
func (t *Tally) Remove(p *events.NodeManagementPolicy, st *events.AgentStatus) { t.add(p, st, -1) }

func (t *Tally) add(p *events.NodeManagementPolicy, st *events.AgentStatus, n int64) {
	if !sinceResume(p, st) || st.Policy != Key(p.Org, p.Name) {
		return
	}
	if st.Status == StatePrecheckFailed {
		t.PrecheckFailed += n
		return
	}
	if !started(st, Key(p.Org, p.Name)) {
		return
	}
	t.Started += n
	if Failed(st.Status) {
		t.Failed += n
	}
}

// sinceResume says whether a report counts for the NMP's rollout: every
// report, or once the rollout was resumed those of upgrades begun since.
func sinceResume(p *events.NodeManagementPolicy, st *events.AgentStatus) bool {
	if st == nil {
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
	r := Rollout{Started: t.Started, Failed: t.Failed, PrecheckFailed: t.PrecheckFailed}
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
