package agentnotifier

import (
	"context"
	"errors"
	"time"

	"github.com/policyflow/policyflow/services/runtime"
)

// Fencing. A notifier runs a component's script or calls its webhook only
// while it holds the component's claim for that generation, and only
// while the claim's lease, as the notifier's own monotonic clock counts
// it, lasts until that run ended. A notifier that was paused (a GC pause,
// its CPU throttled, its VM frozen) may have lost its lease meanwhile:
// other notifiers, their clocks saying it ended, take the claim over and
// notify newer generations. Before every run the notifier therefore makes
// sure of its claim again (fence), and stops, not to run again, when it
// is no longer its: an older generation is never sent after a newer one
// by a notifier that kept going. The claim's generation goes with every
// notification (HeaderGeneration, EnvGeneration) so that a receiver can
// also drop an older one itself, as a fencing token.

// fenceReq asks a fence lane to prove j's claim; done is closed once it is
// proved, lost or left unrecorded.
type fenceReq struct {
	j    *job
	done chan<- struct{}
}

// fenceMargin is what a notifier keeps to spare of a lease, by its own
// clock, when a run ends (covers): room for the clocks of the other
// notifiers, which say when they may take the claim over, and for a killed
// script to end. It is half of the leaseMargin a lease adds to its runs:
// the other half is what a job may wait for a slot, and its runs take
// beyond their timeouts, before its lease must be renewed.
const fenceMargin = leaseMargin / 2

// covers reports whether j's lease, counted by this notifier's own clock
// from the write that set it, lasts until a run started now ended (at its
// timeout, when a script is killed and a webhook call given up), with
// fenceMargin to spare.
func (n *notifier) covers(j *job) bool {
	if j.leased.IsZero() {
		return false
	}
	return n.now().Add(n.timeout(j) + fenceMargin).Before(j.leased.Add(n.stale(j)))
}

// fence is asked before every run of j's notification and reports whether
// the run may start: j's claim is still this notifier run's, and its lease
// covers the run. The first run needs nothing more when its lease covers
// it: the check-and-set that wrote the claim proved it. A run again, after
// one that failed or timed out, is checked in Consul first: the claim key
// must still be at the ModifyIndex this run wrote (one consistent read).
// A run its lease does not cover, as when the notifier waited for a slot
// or was paused, renews the lease with check-and-set first. Those requests
// of jobs ready at about the same time share a transaction (fenceLane).
// false: neither this run nor any after it may start; the claim is
// another's (j.lost), or could not be proved (j.unrecorded: the update is
// looked at again later).
func (c *chains) fence(j *job, again bool) bool {
	if again || !c.n.covers(j) {
		done := make(chan struct{})
		c.fences <- fenceReq{j: j, done: done}
		<-done
	}
	return !j.lost && !j.unrecorded
}

func (c *chains) fenceLane() {
	ctx := context.Background()
	for first := range c.fences {
		g := gather(first, c.fences)
		jobs := make([]*job, len(g))
		for k, r := range g {
			jobs[k] = r.j
		}
		for _, t := range groups(jobs) {
			c.n.prove(ctx, t, false)
		}
		for _, r := range g {
			close(r.done)
		}
	}
}

// prove makes sure, in one transaction, that the claims of jobs are still
// as this notifier run wrote them: the claim of a job whose lease covers
// its next run is checked, the others are written again with a new lease
// (check-and-set). When a claim changed the transaction fails as a whole
// and each is proved alone: a job whose claim changed is lost. A Consul
// that does not answer is asked again a while; then the jobs are left
// unrecorded, as they are when a claim changed after a request that may
// have renewed it (ambiguous: the change may be this run's own).
func (n *notifier) prove(ctx context.Context, jobs []*job, ambiguous bool) {
	var err error
retry:
	for attempt := 0; attempt < 8; attempt++ {
		start := n.now()
		renew := map[*job]bool{}
		for _, j := range jobs {
			if !n.covers(j) {
				renew[j] = true
				j.claim.LeaseUntil = start.UTC().Add(n.stale(j)).Format(time.RFC3339Nano)
			}
		}
		var ok bool
		ok, err = n.casOrCheck(ctx, jobs, func(j *job) bool { return renew[j] })
		switch {
		case err == nil && ok:
			for j := range renew {
				j.leased = start
			}
			return
		case (err == nil || errors.Is(err, errClaimDenied)) && len(jobs) > 1:
			// Proved one at a time, so a claim that changed stops
			// only its own component.
			for _, j := range jobs {
				n.prove(ctx, []*job{j}, ambiguous)
			}
			return
		case err == nil && ambiguous:
			jobs[0].unrecorded = true
			jobs[0].log.Warn().Str("key", jobs[0].key).
				Msg("the claim changed, maybe by this notifier's own renewal, which Consul did not confirm: no run starts; the update is looked at again later")
			return
		case err == nil:
			jobs[0].lost = true
			jobs[0].log.Warn().Str("key", jobs[0].key).
				Msg("the claim is another notifier's now (it took the claim over, or claimed a newer generation): no run of this notification starts again")
			return
		case runtime.IsPermanent(err):
			break retry
		}
		ambiguous = ambiguous || len(renew) > 0
		n.log.Warn().Err(err).Str("key", jobs[0].key).Int("claims", len(jobs)).Msg("make sure of the notification claim before a run; retrying")
		select {
		case <-ctx.Done():
			break retry
		case <-time.After(n.retry.Next(attempt)):
		}
	}
	for _, j := range jobs {
		j.unrecorded = true
		j.log.Error().Err(err).Str("key", j.key).Msg("the notification claim could not be made sure of: no run starts; the update is looked at again later")
	}
}
