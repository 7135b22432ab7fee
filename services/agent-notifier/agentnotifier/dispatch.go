package agentnotifier

import (
	"cmp"
	"context"
	"fmt"
	"sync"

	"github.com/policyflow/policyflow/services/runtime"
)

// The agent-notifier does not wait for a whole batch: each record's job
// runs on its component's chain (claim, notify, record), the chains of
// different components side by side, and the batch handler returns as
// soon as every job of the batch is claimed. A finished claim is what
// keeps a replayed record from notifying anyone again; a record's offset
// is held (runtime's Input.Hold) until its notification and the outcome's
// record, which go on in the background, ended. A notifier that stops in
// the middle leaves its claims unfinished and their records uncommitted:
// the member that gets the partition next handles them again (and finds
// unfinished claims whose records were committed, recoverPartitions),
// and runs them again, at once when it sees the notifier process that
// claimed them gone (after killing what it left running) or is that
// notifier restarted under its instance id, otherwise once their lease
// ended (ClaimAction): every update is notified at least once, and two
// runs for a component never overlap. A slow or failing script or webhook
// holds up only its own component's next notification (and, when that
// one is in the next batch, the return of that batch's handler, which
// waits for its claim), a notification slot, and the commit of its
// partition's later offsets.
//
// Every run of a notification starts only once fence allows it: its
// claim still this notifier run's, its lease proved; while the
// notification goes on its lease is renewed, and a run whose lease was
// not renewed in time is stopped (fence.go).
//
// Claims, the checks and renewals of claims before runs, and outcome
// records of jobs that are ready at about the same time share Consul
// transactions: lanes take whatever is waiting, up to a transaction's
// worth. The leases of the notifications under way are renewed together,
// a transaction's worth at a time.

// chains runs jobs in order per claim key, at most cfg.Concurrency
// scripts and webhooks at once.
type chains struct {
	n     *notifier
	slots chan struct{}

	mu      sync.Mutex
	tails   map[string]chan struct{} // per key: closed when its last job is finished
	running int                      // jobs handed in and not finished
	idle    *sync.Cond               // on mu: running fell to 0

	claims  chan claimReq
	records chan recordReq
	fences  chan fenceReq
	// inflight are the notifications under way, whose leases the
	// renewal lane renews (fence.go); on mu.
	inflight map[*tracked]struct{}
	// quit stops the renewal lane.
	quit  chan struct{}
	lanes sync.WaitGroup
	// stopped is set by close: no job may be handed in after.
	stopped bool
}

// closed reports whether close was called.
func (c *chains) closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

type claimReq struct {
	j   *job
	res chan<- claimRes
}

type claimRes struct {
	claimed bool // false with err nil: the update was claimed before
	err     error
}

type recordReq struct {
	j    *job
	done chan<- struct{}
}

func newChains(n *notifier) *chains {
	c := &chains{
		n:        n,
		slots:    make(chan struct{}, n.cfg.Concurrency),
		tails:    map[string]chan struct{}{},
		claims:   make(chan claimReq, 4*maxTxnOps),
		records:  make(chan recordReq, 4*maxTxnOps),
		fences:   make(chan fenceReq, 4*maxTxnOps),
		inflight: map[*tracked]struct{}{},
		quit:     make(chan struct{}),
	}
	c.idle = sync.NewCond(&c.mu)
	for range consulParallel {
		c.lanes.Go(c.claimLane)
		c.lanes.Go(c.recordLane)
		c.lanes.Go(c.fenceLane)
	}
	c.lanes.Go(c.renewLane)
	return c
}

// drain waits until every job handed in is finished: notified and its
// outcome recorded. Partitions are given away only once drained, so no
// other member claims a component's next update while this one still
// notifies it. It may be called at any time, also while jobs are handed
// in.
func (c *chains) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.running > 0 {
		c.idle.Wait()
	}
}

// close drains and stops the lanes; no job may be handed in after.
func (c *chains) close() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.drain()
	close(c.claims)
	close(c.records)
	close(c.fences)
	close(c.quit)
	c.lanes.Wait()
}

// notifyAll hands the jobs of a batch (in input order) to their chains and
// returns once each is claimed, or known to need nothing, or failed; it
// sets the Outcome of each job that failed. A job that failed
// transiently (the runtime hands it and every input after it in again)
// also fails the jobs after it of the same component, which must not be
// claimed before it; one that can never be notified (Permanent: it is
// dead-lettered) does not.
func (n *notifier) notifyAll(ctx context.Context, jobs []*job, out []runtime.Outcome) {
	ctx = context.WithoutCancel(ctx) // the notifications outlive the call
	var mu sync.Mutex
	failed := map[string]bool{} // keys with a job that failed in this batch
	results := make([]chan error, len(jobs))
	c := n.chains
	for k, j := range jobs {
		res := make(chan error, 1)
		results[k] = res
		c.mu.Lock()
		if c.stopped {
			c.mu.Unlock()
			res <- fmt.Errorf("agent-notifier: stopping: update %s of component %s is handed in again: %w", j.a.UpdateID, j.a.ComponentID, ErrClaimTaken)
			continue
		}
		prev, mine := c.tails[j.key], make(chan struct{})
		c.tails[j.key] = mine
		c.running++
		c.mu.Unlock()
		go func() {
			defer c.finish(j.key, mine)
			if prev != nil {
				<-prev
			}
			mu.Lock()
			blocked := failed[j.key]
			mu.Unlock()
			if blocked {
				res <- fmt.Errorf("agent-notifier: claim %s for update %s: an earlier update of the component in this batch was not claimed", j.key, j.a.UpdateID)
				return
			}
			r := c.claim(j)
			if r.err != nil && !runtime.IsPermanent(r.err) {
				mu.Lock()
				failed[j.key] = true
				mu.Unlock()
			}
			j.claimed = r.claimed
			res <- r.err
			if !r.claimed {
				return // the caller releases it, or hands it on
			}
			c.slots <- struct{}{}
			finished := n.notify(ctx, j)
			<-c.slots
			if finished {
				c.record(j)
			}
			if j.unrecorded {
				// Its claim stays unfinished under this run's name:
				// looked at again (and run again) later, its record's
				// offset held meanwhile.
				n.resumeLater(j.a, n.retry.Max, j.release)
				return
			}
			j.release()
		}()
	}
	for k, j := range jobs {
		if err := <-results[k]; err != nil {
			out[j.i].Err = err
		}
	}
}

// finish ends a job: the next job of its key may start.
func (c *chains) finish(key string, mine chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tails[key] == mine {
		delete(c.tails, key)
	}
	close(mine)
	if c.running--; c.running == 0 {
		c.idle.Broadcast()
	}
}

// claim reads j's claim and, when j is still to be notified, claims it.
func (c *chains) claim(j *job) claimRes {
	res := make(chan claimRes, 1)
	c.claims <- claimReq{j: j, res: res}
	return <-res
}

// record writes j's outcome into its claim.
func (c *chains) record(j *job) {
	done := make(chan struct{})
	c.records <- recordReq{j: j, done: done}
	<-done
}

// gather takes first and whatever else is waiting in ch, up to a
// transaction's worth.
func gather[T any](first T, ch <-chan T) []T {
	g := []T{first}
	for len(g) < maxTxnOps {
		select {
		case r, ok := <-ch:
			if !ok {
				return g
			}
			g = append(g, r)
		default:
			return g
		}
	}
	return g
}

func (c *chains) claimLane() {
	for first := range c.claims {
		c.claimGroup(gather(first, c.claims))
	}
}

func (c *chains) recordLane() {
	ctx := context.Background()
	for first := range c.records {
		g := gather(first, c.records)
		jobs := make([]*job, len(g))
		for k, r := range g {
			jobs[k] = r.j
		}
		for _, t := range groups(jobs) {
			c.n.record(ctx, t)
		}
		for _, r := range g {
			close(r.done)
		}
	}
}

// claimGroup reads the claims of a group of jobs (each of a different
// key), with their components' items, in as few transactions as
// possible, builds the notifications of those still to be notified,
// claims them in as few as possible, and answers each job.
func (c *chains) claimGroup(g []claimReq) {
	ctx := context.Background()
	jobs := make([]*job, len(g))
	for k, r := range g {
		jobs[k] = r.j
	}
	errs := map[*job]error{}
	todo, err := c.n.read(ctx, jobs, func(j *job, err error) { errs[j] = err })
	if err != nil { // the read failed as a whole
		for _, r := range g {
			r.res <- claimRes{err: err}
		}
		return
	}
	var last error
	fail := func(j *job, err error) { errs[j], last = err, err }
	pending := map[*job]bool{}
	for _, j := range todo {
		pending[j] = true
	}
	claimed := map[*job]bool{}
	for _, j := range c.n.claimAll(ctx, todo, fail) {
		claimed[j] = true
	}
	for _, r := range g {
		j := r.j
		switch {
		case errs[j] != nil:
			r.res <- claimRes{err: errs[j]}
		case claimed[j]:
			r.res <- claimRes{claimed: true}
		case pending[j]: // claiming stopped at a Consul error before it
			r.res <- claimRes{err: fmt.Errorf("agent-notifier: claim %s for update %s: not tried after: %w", j.key, j.a.UpdateID, cmp.Or(last, ErrClaimTaken))}
		default: // claimed before: nothing to do
			r.res <- claimRes{}
		}
	}
}
