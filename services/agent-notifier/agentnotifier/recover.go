package agentnotifier

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// recoverPartitions looks, when partitions of component.applied are
// assigned, for notifications a stopped notifier left unfinished: for
// every component of those partitions, the claim of its latest update is
// read, and one that is unfinished for that very update is handed to
// resume (run again now when its owner is gone or was this notifier's
// previous run under its instance id, looked at again once its lease ended
// otherwise). The records of notifications under way are not committed,
// and come again to the next member; this finds those whose records were
// committed all the same (by a notifier that committed a record once it
// was claimed), which are not handed in again. Claims of older updates
// are left to the records still to come, which supersede them.
func (n *notifier) recoverPartitions(ctx context.Context, env runtime.Env, partitions []int32) error {
	if len(partitions) == 0 || n.chains == nil {
		return nil
	}
	latest, err := n.latestApplied(ctx, env, partitions)
	if err != nil {
		return fmt.Errorf("agent-notifier: look for unfinished notifications in partitions %v of %s: %w", partitions, topology.ComponentApplied, err)
	}
	var jobs []*job
	for _, a := range latest {
		if j, err := n.prepare(a); err == nil && j != nil {
			jobs = append(jobs, j)
		}
	}
	var unfinished []*events.ComponentApplied
	for _, g := range readGroups(jobs) {
		folders, err := n.get(ctx, g)
		if err != nil {
			return fmt.Errorf("agent-notifier: look for unfinished notifications: read the claims of %d component(s): %w", len(g), err)
		}
		for k, j := range g {
			p := folders[k].claim
			if p.ModifyIndex == 0 {
				continue
			}
			c, err := consulkv.ParseClaim(p.Value)
			if err != nil || c.Generation != j.a.Generation {
				continue
			}
			if done, _ := c.Finished(); !done {
				j.log.Warn().Str("owner", c.Owner).Str("claimed_at", c.At).Msg("notification left unfinished by a notifier that stopped; it is run again")
				unfinished = append(unfinished, j.a)
			}
		}
	}
	n.log.Info().Ints32("partitions", partitions).Int("components", len(jobs)).Int("unfinished", len(unfinished)).Msg("looked for unfinished notifications")
	if len(unfinished) > 0 {
		go n.resume(unfinished)
	}
	return nil
}

// resume hands updates to their components' chains outside any batch:
// each is claimed (taking over an unfinished claim as ClaimAction allows)
// and notified; one whose claim another notifier still holds is looked at
// again when that claim's lease may have ended.
func (n *notifier) resume(as []*events.ComponentApplied) {
	var jobs []*job
	for _, a := range as {
		if j, err := n.prepare(a); err == nil && j != nil {
			jobs = append(jobs, j)
		}
	}
	n.resumeJobs(jobs)
}

// resumeOne is resume for one update, whose record's offset release lets
// be committed once it ended.
func (n *notifier) resumeOne(a *events.ComponentApplied, release func()) {
	j, err := n.prepare(a)
	if err != nil || j == nil {
		release()
		return
	}
	j.release = release
	n.resumeJobs([]*job{j})
}

// resumeJobs is resume for jobs already prepared.
func (n *notifier) resumeJobs(jobs []*job) {
	if len(jobs) == 0 {
		return
	}
	for k, j := range jobs {
		j.i = k
	}
	out := make([]runtime.Outcome, len(jobs))
	n.notifyAll(context.Background(), jobs, out)
	for k, j := range jobs {
		switch err := out[k].Err; {
		case j.claimed: // its chain releases it
		case err == nil:
			j.release()
		case errors.Is(err, ErrClaimTaken):
			// Looked at again when the lease it waits for ends (or, when
			// it lost a race, once a lease could).
			d, ok := runtime.RetryDelay(err)
			if !ok {
				d = n.lease()
			}
			n.resumeLater(j.a, d, j.release)
		default:
			j.log.Error().Err(err).Msg("notification not run again; the component's next update notifies it")
			j.release()
		}
	}
}

// latestApplied reads partitions of component.applied into the latest
// record of each component (by key; uninstalled ones left out).
func (n *notifier) latestApplied(ctx context.Context, env runtime.Env, partitions []int32) (map[string]*events.ComponentApplied, error) {
	latest := map[string]*events.ComponentApplied{}
	err := runtime.ReadPartitions(ctx, env.Kafka, topology.ComponentApplied, partitions, runtime.Rows(ctx, env, runtime.PassTombstones, func(m runtime.Msg[*events.ComponentApplied]) error {
		k := string(m.Key)
		if m.Value == nil {
			delete(latest, k)
			return nil
		}
		if m.Value.ComponentID == "" {
			m.Value.ComponentID = k
		}
		latest[k] = m.Value
		return nil
	}))
	return latest, err
}

// catchUp is the agent-notifier's part of a catch-up request: on the
// request's partition of component.applied (co-partitioned with
// catchup.requests), every component whose notification of its latest
// update failed is notified again, and so is the component the request
// names (an operator's renotify), however its last notification ended,
// once per request. The folders the consul-writer repairs for the same
// request reach the notifier as component.applied records flagged
// catch_up, and are notified again (ClaimAction). The request's scope
// does not narrow the failed notifications run again: component.applied
// does not say a component's deployment. It reports on catchup.progress
// how many components it looked at and how many it notified again.
func (n *notifier) catchUp(ctx context.Context, in runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
	req := in.Value
	latest, err := n.latestApplied(ctx, n.env, []int32{in.Partition})
	if err != nil {
		return nil, fmt.Errorf("agent-notifier: catch-up %s: read partition %d of %s: %w", req.RequestID, in.Partition, topology.ComponentApplied, err)
	}
	ids := slices.Sorted(maps.Keys(latest))
	var jobs []*job
	for _, id := range ids {
		j, err := n.prepare(latest[id])
		if err != nil || j == nil {
			continue
		}
		j.again = AgainFailed
		if req.ComponentID != nil && *req.ComponentID == j.a.ComponentID {
			j.again, j.request = AgainAlways, req.RequestID
		}
		jobs = append(jobs, j)
	}
	var todo []*job
	for _, g := range readGroups(jobs) {
		folders, err := n.get(ctx, g)
		if err != nil {
			return nil, fmt.Errorf("agent-notifier: catch-up %s: read the claims of %d component(s): %w", req.RequestID, len(g), err)
		}
		for k, j := range g {
			c, err := consulkv.ParseClaim(folders[k].claim.Value)
			done, ok := c.Finished()
			if j.again == AgainAlways || err == nil && c.Generation == j.a.Generation && done && !ok {
				todo = append(todo, j)
			}
		}
	}
	n.log.Info().Str("request_id", req.RequestID).Int32("partition", in.Partition).Int("components", len(jobs)).Int("notified_again", len(todo)).
		Msg("catch-up: failed notifications run again")
	n.resumeJobs(todo)
	return []runtime.Output{{Topic: topology.CatchupProgress, Key: []byte(req.RequestID), Value: &events.CatchupProgress{
		RequestID: req.RequestID, Stage: events.ProgressAgentNotifier, Partition: in.Partition,
		Compared: int64(len(jobs)), Differed: int64(len(todo)), DoneAt: time.Now().UTC(),
	}}}, nil
}

// resumeLater calls resumeOne for a after d, unless the notifier closed.
func (n *notifier) resumeLater(a *events.ComponentApplied, d time.Duration, release func()) {
	time.AfterFunc(d, func() {
		if n.chains != nil && !n.chains.closed() {
			n.resumeOne(a, release)
			return
		}
		release()
	})
}

// orphanWait bounds how long the processes a gone notifier left running
// of a component take to end once killed.
const orphanWait = 10 * time.Second

// seen is what the notifier sees beside j's claim (prior): whether the
// notifier process that holds it unfinished (for this generation or an
// older one) is gone, as seen from this machine (a process of the same
// host, boot and PID namespace), and this notifier's instance id.
func (n *notifier) seen(prior *consulkv.Claim, j *job) Seen {
	s := Seen{Self: n.owner, Now: n.now(), Instance: n.instance, Again: j.again, Request: j.request}
	if prior != nil && prior.Generation <= j.a.Generation && prior.Owner != n.owner {
		if done, _ := prior.Finished(); !done {
			s.OwnerGone = runnerGone(prior.Runner, n.runner)
		}
	}
	return s
}

// stopLeft kills what the notifier run that holds j's unfinished claim
// left running for j's component on this machine (its script, and the
// children that kept its environment), before the notification runs
// again, so that two runs never overlap. ok is false when some did not
// end in time. A claim of a notifier whose processes this one cannot see
// (another host, boot or PID namespace, or a claim that names no runner)
// costs no look through the processes: none of them is its.
func (n *notifier) stopLeft(prior *consulkv.Claim, j *job) (killed int, ok bool) {
	if prior.Owner == "" || !visible(prior.Runner, n.runner) {
		return 0, true
	}
	killed, ok = stopOrphans(prior.Owner, j.a.ComponentID, orphanWait)
	if killed > 0 || !ok {
		j.log.Warn().Str("owner", prior.Owner).Int("killed", killed).Bool("stopped", ok).Msg("processes the previous notifier left running were killed")
	}
	return killed, ok
}
