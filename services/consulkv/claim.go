package consulkv

import (
	"encoding/json"
	"fmt"
)

// Claim is the JSON value of the claim key. The agent-notifier writes it
// with check-and-set before the component is notified (ExitCode null,
// Outcome ""), and completes it with the outcome afterwards. A claim left
// unfinished by a notifier that stopped is taken over and run again once
// its lease ended, its Runner is seen gone, or by a notifier restarted
// under its Instance (Attempts counts the runs).
type Claim struct {
	UpdateID   string `json:"update_id"`
	Generation int64  `json:"generation"`
	// ExitCode is the script's exit status; -1 when it could not run or
	// was killed at its timeout. For a webhook: 0 on a 2xx answer, 1 on
	// any other answer, -1 when no answer came.
	ExitCode *int   `json:"exit_code"`
	Stderr   string `json:"stderr"`
	At       string `json:"at"`
	// HTTPStatus is the webhook's answer (webhooks only).
	HTTPStatus int `json:"http_status,omitempty"`
	// Attempts is how many times the notification was run: failed runs
	// retried and runs a stopped notifier left unfinished count too.
	Attempts int `json:"attempts,omitempty"`
	// Outcome is OutcomeOK, OutcomeFailed or OutcomeSuperseded once the
	// notification is finished, "" while it runs (see Finished).
	Outcome string `json:"outcome,omitempty"`
	// Owner names the agent-notifier run that holds the claim: its
	// instance id (or host) and a random run id, "<instance>/<run>".
	Owner string `json:"owner,omitempty"`
	// Instance is the instance id (--instance-id) of the notifier that
	// holds the claim, when it runs as a static group member; empty
	// otherwise (Owner's first part is then its host name). Static
	// membership lets one live member hold an id, so a notifier started
	// under it is the one that holds it now: the run that wrote the
	// claim, another Owner, is gone.
	Instance string `json:"instance,omitempty"`
	// Told is, by policy_id, what the component was last told with
	// success: the next notification's updated and removed policies are
	// what changed since, whatever generations came between. Empty for
	// components with more than MaxTold policies (their updates are then
	// the update's own).
	Told map[string]Told `json:"told,omitempty"`
	// LeaseUntil (RFC3339Nano) is until when the owner may still run
	// the notification, as its clock said when it last wrote the claim;
	// it renews the lease while the notification runs. A claim left
	// unfinished is not taken over before, unless its Runner is seen to
	// be gone or a notifier under its Instance took its place. A claim
	// without a readable one is taken over.
	LeaseUntil string `json:"lease_until,omitempty"`
	// Runner is the notifier process that holds the claim, so that a
	// notifier on the same machine can tell whether it still lives.
	Runner *Runner `json:"runner,omitempty"`
	// ConsulIndex is the consul_index of the component.applied record
	// notified: a drift repair of the same generation writes the folder
	// again, at a greater index, and is notified again.
	ConsulIndex int64 `json:"consul_index,omitempty"`
	// Renotify is the catch-up request that last asked for this
	// component to be notified again whatever its claim said, once
	// notified for it (so that the same request read twice runs once).
	Renotify string `json:"renotify,omitempty"`
}

// Runner names a notifier process: its host and boot, its PID namespace,
// its PID and the start time of that PID (in clock ticks since boot), so
// that a PID reused by another process is not taken for it.
type Runner struct {
	Host   string `json:"host"`
	BootID string `json:"boot_id,omitempty"`
	PIDNS  string `json:"pid_ns,omitempty"`
	PID    int    `json:"pid"`
	Start  uint64 `json:"start,omitempty"`
}

// Told is one policy as a component was last told of it.
type Told struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Hash is policy.BodyHash of the body as Consul held it.
	Hash string `json:"hash"`
}

// MaxTold bounds Claim.Told, so a claim stays small.
const MaxTold = 1000

// Outcomes of a finished notification.
const (
	OutcomeOK     = "ok"
	OutcomeFailed = "failed"
	// OutcomeSuperseded: runs failed, and the rollout of a version the
	// update delivers was aborted before it ran again; it was not run
	// again, as the version restored by the abort is on its way. Like a
	// failure, the component was not told of it (Told stays).
	OutcomeSuperseded = "superseded"
)

// Finished reports whether the notification the claim names ended, and
// how: ok is true for exit code 0 (a 2xx answer). The notifier records the
// outcome with the exit code, so a claim without one is unfinished.
func (c Claim) Finished() (finished, ok bool) {
	switch c.Outcome {
	case OutcomeOK:
		return true, true
	case OutcomeFailed, OutcomeSuperseded:
		return true, false
	}
	return false, false
}

// JSON is the claim's value in Consul.
func (c Claim) JSON() []byte {
	b, _ := json.Marshal(c) // strings and integers only: cannot fail
	return b
}

// ParseClaim reads the claim key's value.
func ParseClaim(b []byte) (Claim, error) {
	var c Claim
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parse notification claim: %w", err)
	}
	return c, nil
}
