package agentnotifier

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// Fencing. A notifier runs a component's script or calls its webhook only
// while it holds the component's claim for that generation, and only
// while the claim's lease, as the notifier's own monotonic clock counts
// it from the last write of it Consul confirmed, lasts. A notifier that
// was paused (a GC pause, its CPU throttled, its VM frozen) may have lost
// its lease meanwhile: other notifiers, their clocks saying it ended, take
// the claim over and notify newer generations. Before every run the
// notifier therefore makes sure of its claim again (fence), and stops,
// not to run again, when it is no longer its: an older generation is
// never sent after a newer one by a notifier that kept going. The claim's
// generation goes with every notification (HeaderGeneration,
// EnvGeneration) so that a receiver can also drop an older one itself, as
// a fencing token.
//
// Leases are short (Config.Lease, 15 s), whatever a notification's
// timeout, so that the claims of a notifier that died are taken over soon
// after its last renewal: while a notification goes on (its runs, and the
// backoff between them) its lease is renewed every fifth of the lease,
// the leases of every notification under way in one check-and-set
// transaction per 128 claims (renewLane). A run whose lease was not
// renewed in time is stopped (its script killed, its webhook call given
// up) a fifth of the lease before the lease ends, by the notifier's own
// clock (guard), and one whose claim was found to be another's is stopped
// at once: no run goes on past a lease Consul confirmed.

// fenceReq asks a fence lane to prove j's claim; done is closed once it is
// proved, lost or left unrecorded.
type fenceReq struct {
	j    *job
	done chan<- struct{}
}

// renewEvery is how often the leases of the notifications under way are
// renewed: a fifth of the lease.
func (n *notifier) renewEvery() time.Duration { return n.lease() / 5 }

// fenceMargin is what a notifier keeps to spare of a lease, by its own
// clock: a run still under way that long before its lease ends is
// stopped unless the lease was renewed since. It is room for the clocks
// of the other notifiers, which say when they may take the claim over,
// and for a killed script to end: a fifth of the lease.
func (n *notifier) fenceMargin() time.Duration { return n.lease() / 5 }

// guardAt is when, by this notifier's clock, a run of j still under way
// is stopped unless its lease is renewed before.
func (n *notifier) guardAt(j *job) time.Time {
	return j.leased.Add(n.lease() - n.fenceMargin())
}

// covers reports whether j's lease, counted by this notifier's own clock
// from the write that set it, leaves a run started now the time of two
// renewals before its guard: such a run starts without a request.
func (n *notifier) covers(j *job) bool {
	if j.leased.IsZero() {
		return false
	}
	return n.now().Add(2 * n.renewEvery()).Before(n.guardAt(j))
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
	if j.lost || j.unrecorded {
		return false
	}
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
// and each is proved alone: a job whose claim changed is lost, unless
// the change may be this run's own (a write whose answer was lost: the
// claim is read back, readBack). A Consul that does not answer is asked
// again a while; then the jobs are left unrecorded.
func (n *notifier) prove(ctx context.Context, jobs []*job, ambiguous bool) {
	var err error
retry:
	for attempt := 0; attempt < 8; attempt++ {
		start := n.now()
		renew := map[*job]bool{}
		for _, j := range jobs {
			if !n.covers(j) {
				renew[j] = true
				j.claim.LeaseUntil = start.UTC().Add(n.lease()).Format(time.RFC3339Nano)
			}
		}
		var ok bool
		ok, err = n.casOrCheck(ctx, jobs, func(j *job) bool { return renew[j] })
		switch {
		case err == nil && ok:
			for j := range renew {
				j.leased = start
			}
			for _, j := range jobs {
				j.ambiguous = false
			}
			return
		case (err == nil || errors.Is(err, errClaimDenied)) && len(jobs) > 1:
			// Proved one at a time, so a claim that changed stops
			// only its own component.
			for _, j := range jobs {
				n.prove(ctx, []*job{j}, ambiguous)
			}
			return
		case err == nil && (ambiguous || jobs[0].ambiguous) && n.readBack(ctx, jobs[0]) != nil:
			// Changed by this run's own write, whose answer was lost:
			// proved again at the index read.
			ambiguous = false
			continue
		case err == nil:
			jobs[0].lost = true
			jobs[0].log.Warn().Str("key", jobs[0].key).
				Msg("the claim is another notifier's now (it took the claim over, or claimed a newer generation): no run of this notification starts again")
			return
		case runtime.IsPermanent(err):
			break retry
		}
		ambiguous = ambiguous || len(renew) > 0
		for j := range renew {
			j.ambiguous = true
		}
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

// readBack reads j's claim (one consistent read) after a write of it whose
// answer was lost, or a check that found it changed after such a write,
// to tell whether it is still this notifier run's: it is when it names
// this run as its owner, for j's update (another notifier writes its own
// name). Then j takes its ModifyIndex, and the claim read is returned;
// j's lease still counts from the last write Consul confirmed (j.leased),
// which is no later than any write that went through since. nil: the
// claim is another's, or could not be read.
func (n *notifier) readBack(ctx context.Context, j *job) *consulkv.Claim {
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	ops := api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVGet, Key: j.key}}}
	ok, resp, _, err := n.txn.Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
	if err != nil || !ok || len(resp.Results) != 1 || resp.Results[0].KV == nil {
		return nil
	}
	kv := resp.Results[0].KV
	c, err := consulkv.ParseClaim(kv.Value)
	if err != nil || c.Owner != n.owner || c.UpdateID != j.a.UpdateID || c.Generation != j.a.Generation {
		return nil
	}
	j.index, j.ambiguous = kv.ModifyIndex, false
	return &c
}

// errLeaseEnds and errClaimLost say why a run under way was stopped.
var (
	errLeaseEnds = errors.New("its lease was not renewed in time")
	errClaimLost = errors.New("its claim is another notifier's now")
)

// tracked is a notification under way (its job holds a slot), whose lease
// the renewal lane renews.
type tracked struct {
	// mu is held by the job's own goroutine while it works on the job
	// (fence, outcome), and by the renewal lane while it renews the
	// job's lease: the goroutine lets go of it only while a run goes on
	// and while it waits between runs.
	mu sync.Mutex
	j  *job
	// stop ends the run under way, with the reason, and guard calls it at
	// the run's guard (guardAt); both nil between runs.
	stop  context.CancelCauseFunc
	guard *time.Timer
}

// track makes j's notification one under way until untrack; j's goroutine
// holds the tracked's mu.
func (c *chains) track(j *job) *tracked {
	t := &tracked{j: j}
	t.mu.Lock()
	c.mu.Lock()
	c.inflight[t] = struct{}{}
	c.mu.Unlock()
	return t
}

// untrack ends what track began; t.mu is let go of.
func (c *chains) untrack(t *tracked) {
	c.mu.Lock()
	delete(c.inflight, t)
	c.mu.Unlock()
	t.mu.Unlock()
}

// run runs one script or webhook call (fn) of t's notification, its lease
// renewed meanwhile, and stops it at its guard unless the lease was
// renewed in time, or at once when the claim was found to be another's.
// It returns what fn returned, and why the run was stopped (nil: it was
// not).
func (c *chains) run(ctx context.Context, t *tracked, fn func(context.Context) Result) (Result, error) {
	rctx, stop := context.WithCancelCause(ctx)
	t.stop = stop
	t.guard = time.AfterFunc(c.n.guardAt(t.j).Sub(c.n.now()), func() { stop(errLeaseEnds) })
	t.mu.Unlock()
	res := fn(rctx)
	t.mu.Lock()
	t.guard.Stop()
	t.stop, t.guard = nil, nil
	cause := context.Cause(rctx)
	stop(nil)
	return res, cause
}

// pause waits d between two runs of t's notification, its lease renewed
// meanwhile.
func (c *chains) pause(ctx context.Context, t *tracked, d time.Duration) {
	t.mu.Unlock()
	defer t.mu.Lock()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// renewLane renews, every renewEvery, the leases of the notifications
// under way, until the chains close.
func (c *chains) renewLane() {
	tick := time.NewTicker(c.n.renewEvery())
	defer tick.Stop()
	for {
		select {
		case <-c.quit:
			return
		case <-tick.C:
		}
		c.renewDue()
	}
}

// renewDue renews the leases of the notifications under way that were
// not written in the last half renewal period, in one check-and-set
// transaction per transaction's worth of claims, and stops the runs of
// those whose claim is another's now. A notification whose goroutine
// works on it now is left out: it makes sure of its claim itself (fence).
func (c *chains) renewDue() {
	c.mu.Lock()
	all := make([]*tracked, 0, len(c.inflight))
	for t := range c.inflight {
		all = append(all, t)
	}
	c.mu.Unlock()
	now := c.n.now()
	var due []*tracked
	var jobs []*job
	for _, t := range all {
		if !t.mu.TryLock() {
			continue
		}
		if j := t.j; j.lost || j.unrecorded || now.Sub(j.leased) < c.n.renewEvery()/2 {
			t.mu.Unlock()
			continue
		}
		due = append(due, t)
		jobs = append(jobs, t.j)
	}
	if len(due) == 0 {
		return
	}
	// A renewal that takes longer than a period is of no use: the next
	// tick tries again, and the guards stop the runs it did not renew.
	ctx, cancel := context.WithTimeout(context.Background(), c.n.renewEvery())
	for _, g := range groups(jobs) {
		c.n.renew(ctx, g)
	}
	cancel()
	for _, t := range due {
		switch {
		case t.j.lost && t.stop != nil:
			t.stop(errClaimLost)
		case t.guard != nil:
			t.guard.Reset(c.n.guardAt(t.j).Sub(c.n.now()))
		}
		t.mu.Unlock()
	}
}

// renew writes the claims of jobs again with a new lease, in one
// check-and-set transaction, once. When a claim changed the transaction
// fails as a whole, and each is renewed alone: a job whose claim changed
// is lost, unless the change may be this run's own (readBack). When
// Consul does not answer the leases stay as they were confirmed last (the
// write may still have gone through: the jobs are ambiguous until a
// write of them is confirmed or their claim read back).
func (n *notifier) renew(ctx context.Context, jobs []*job) {
	start := n.now()
	for _, j := range jobs {
		j.claim.LeaseUntil = start.UTC().Add(n.lease()).Format(time.RFC3339Nano)
	}
	ok, err := n.cas(ctx, jobs)
	switch {
	case err == nil && ok:
		for _, j := range jobs {
			j.leased, j.ambiguous = start, false
		}
	case (err == nil || errors.Is(err, errClaimDenied)) && len(jobs) > 1:
		for _, j := range jobs {
			n.renew(ctx, []*job{j})
		}
	case err == nil && jobs[0].ambiguous && n.readBack(ctx, jobs[0]) != nil:
		n.renew(ctx, jobs) // at the index read; not ambiguous any more
	case err == nil:
		jobs[0].lost = true
		jobs[0].log.Warn().Str("key", jobs[0].key).
			Msg("the claim is another notifier's now (it took the claim over, or claimed a newer generation): the notification under way is stopped")
	default:
		for _, j := range jobs {
			j.ambiguous = true
		}
		n.log.Warn().Err(err).Str("key", jobs[0].key).Int("claims", len(jobs)).Msg("renew the leases of the notifications under way; tried again at the next renewal")
	}
}
