package consulwriter

import (
	"context"
	"fmt"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// handleInputs hands each run of component.policies records of a poll to
// policies and each run of catch-up requests to catchup, in input order.
// After a transient failure the inputs that follow are not handled: the
// runtime hands them in again with the failed one.
func (w *writer) handleInputs(policies, catchup runtime.BatchHandler) runtime.BatchHandler {
	return func(ctx context.Context, ins []runtime.Input) []runtime.Outcome {
		out := make([]runtime.Outcome, len(ins))
		for i := 0; i < len(ins); {
			isCatchup := ins[i].Topic == topology.CatchupRequests
			j := i + 1
			for j < len(ins) && (ins[j].Topic == topology.CatchupRequests) == isCatchup {
				j++
			}
			handle := policies
			if isCatchup {
				handle = catchup
			}
			copy(out[i:j], handle(ctx, ins[i:j]))
			for k := i; k < j; k++ {
				if err := out[k].Err; err != nil && !runtime.IsPermanent(err) {
					for r := j; r < len(ins); r++ {
						out[r].Err = errNotWritten
					}
					return out
				}
			}
			i = j
		}
		return out
	}
}

// repair is a catch-up's drift repair: every component whose latest
// collection is on a request's partition of component.policies (of the
// request's deployment, when it names one) has its folder compared with
// that collection, and only the keys that differ are written back
// (PlanRepair). Repaired folders are reported on component.applied with
// catch_up set; the agent-notifier does not notify a generation it already
// notified. A folder that cannot be repaired for good (a write the token
// is denied) is logged and the others go on; a transient failure retries
// the whole repair, which writes nothing twice.
//
// The requests of a poll's run that are for distinct partitions (as a
// catch-up of everything sends one to each) are handled at once: their
// partitions read together, their folders checked in shared transactions
// and shared listings (unchanged), each prefix listed once for all of
// them. A request for a partition already in the group starts the next
// group, handled after it.
func (w *writer) repair(ctx context.Context, ms []runtime.Msg[*events.CatchupRequest]) []runtime.Outcome {
	out := make([]runtime.Outcome, len(ms))
	for i := 0; i < len(ms); {
		seen := map[int32]bool{}
		j := i
		for j < len(ms) && !seen[ms[j].Partition] {
			seen[ms[j].Partition] = true
			j++
		}
		w.repairGroup(ctx, ms[i:j], out[i:j])
		for k := i; k < j; k++ {
			if err := out[k].Err; err != nil && !runtime.IsPermanent(err) {
				for r := k + 1; r < len(ms); r++ {
					out[r] = runtime.Outcome{Err: errNotWritten}
				}
				return out
			}
		}
		i = j
	}
	return out
}

// catchupReq is one request of a group being repaired.
type catchupReq struct {
	k    int // its place in the group
	req  *events.CatchupRequest
	part int32
	dep  string // "" for every deployment
	// jobs are its components, compared: those of the group's from
	// first on.
	jobs  []*job
	first int
}

// repairGroup repairs requests of distinct partitions at once, setting
// out[k] for ms[k].
func (w *writer) repairGroup(ctx context.Context, ms []runtime.Msg[*events.CatchupRequest], out []runtime.Outcome) {
	start := time.Now()
	var reqs []*catchupReq
	var parts []int32
	for k, m := range ms {
		r := &catchupReq{k: k, req: m.Value, part: m.Partition}
		if r.req.Scope == events.ScopeDeployment {
			if r.req.DeploymentID == nil || *r.req.DeploymentID == "" {
				out[k].Err = runtime.Permanentf("consul-writer: catch-up request %s has scope DEPLOYMENT but no deployment_id", r.req.RequestID)
				continue
			}
			r.dep = *r.req.DeploymentID
		}
		reqs = append(reqs, r)
		parts = append(parts, m.Partition)
	}
	if len(reqs) == 0 {
		return
	}
	fail := func(format string, args ...any) {
		for _, r := range reqs {
			out[r.k].Err = fmt.Errorf("consul-writer: catch-up %s: "+format, append([]any{r.req.RequestID}, args...)...)
		}
	}
	// Each partition's latest collection of each key, keys in order.
	latest := map[int32]map[string]*events.ComponentPolicies{}
	order := map[int32][]string{}
	for _, p := range parts {
		latest[p] = map[string]*events.ComponentPolicies{}
	}
	err := runtime.ReadPartitions(ctx, w.env.Kafka, topology.ComponentPolicies, parts,
		runtime.Rows(ctx, w.env, runtime.PassTombstones, func(r runtime.Msg[*events.ComponentPolicies]) error {
			k := string(r.Key)
			if _, seen := latest[r.Partition][k]; !seen {
				order[r.Partition] = append(order[r.Partition], k)
			}
			latest[r.Partition][k] = r.Value // nil for a tombstone
			return nil
		}))
	if err != nil {
		fail("read partitions %v of %s: %w", parts, topology.ComponentPolicies, err)
		return
	}
	var jobs []*job
	for _, r := range reqs {
		r.first = len(jobs)
		for _, k := range order[r.part] {
			rec := latest[r.part][k]
			if rec == nil || rec.Uninstalled || rec.ServiceComponentName == "" || r.dep != "" && rec.DeploymentID != r.dep {
				continue
			}
			if rec.ComponentID == "" {
				rec.ComponentID = k
			}
			j := w.newJob(len(jobs), rec, start)
			j.repair = true
			jobs = append(jobs, j)
			r.jobs = append(r.jobs, j)
		}
	}
	// Folders certainly as last written are not read (unchanged); the
	// others are read whole and compared.
	last, err := w.lastWritten(ctx, parts)
	if err != nil {
		fail("read partitions %v of %s: %w", parts, topology.ComponentApplied, err)
		return
	}
	// The other partitions' components share the prefixes listed.
	all, err := runtime.TopicPartitions(ctx, w.env.Kafka, topology.ComponentPolicies)
	if err != nil {
		fail("%w", err)
		return
	}
	spread := (int(all) + len(parts) - 1) / len(parts)
	same, stats := w.unchanged(ctx, jobs, last, spread)
	toRead := jobs[:0:0]
	for i, j := range jobs {
		if !same[i] {
			j.i = len(toRead)
			toRead = append(toRead, j)
		}
	}
	b := &batch{w: w, out: make([]runtime.Outcome, len(toRead)), failed: len(toRead)}
	for _, wave := range waves(toRead) {
		b.wave(ctx, wave)
	}
	for _, r := range reqs {
		var outs []runtime.Output
		read, repaired, failed, keys := 0, 0, 0, 0
		for n, j := range r.jobs {
			if same[r.first+n] {
				continue
			}
			read++
			switch o := b.out[j.i]; {
			case o.Err != nil && !runtime.IsPermanent(o.Err):
				out[r.k].Err = fmt.Errorf("consul-writer: catch-up %s: repair of component %s: %w", r.req.RequestID, j.rec.ComponentID, o.Err)
			case o.Err != nil:
				failed++
				j.log.Error().Err(o.Err).Str("request_id", r.req.RequestID).Msg("folder could not be repaired")
			case len(o.Outputs) > 0:
				repaired++
				outs = append(outs, o.Outputs...)
				keys += j.plan.KeysChanged + 1 // and the event key
			}
			if out[r.k].Err != nil {
				break
			}
		}
		if out[r.k].Err != nil {
			continue
		}
		out[r.k].Outputs = append(outs, runtime.Output{Topic: topology.CatchupProgress, Key: []byte(r.req.RequestID), Value: &events.CatchupProgress{
			RequestID: r.req.RequestID, Stage: events.ProgressConsulWriter, Partition: r.part,
			Compared: int64(len(r.jobs)), Differed: int64(repaired), KeysWritten: int64(keys), DoneAt: time.Now().UTC(),
		}})
		w.log.Info().Str("request_id", r.req.RequestID).Int32("partition", r.part).Str("deployment_id", r.dep).Int("partitions_at_once", len(parts)).
			Int("components_compared", len(r.jobs)).Int("folders_read", read).Int("folders_repaired", repaired).Int("keys_written", keys).Int("folders_not_repaired", failed).
			Int("check_transactions", stats.txns).Int("shared_listings", stats.ranges).Int("folders_listed_alone", stats.alone).
			Dur("took", time.Since(start)).Msg("catch-up compared the Consul folders with their collections")
	}
}
