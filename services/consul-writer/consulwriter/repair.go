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
// policies and each catch-up request to catchup, in input order. After a
// transient failure the inputs that follow are not handled: the runtime
// hands them in again with the failed one.
func (w *writer) handleInputs(policies runtime.BatchHandler, catchup runtime.Handler) runtime.BatchHandler {
	return func(ctx context.Context, ins []runtime.Input) []runtime.Outcome {
		out := make([]runtime.Outcome, len(ins))
		for i := 0; i < len(ins); {
			j := i + 1
			if ins[i].Topic == topology.CatchupRequests {
				outs, err := catchup(ctx, ins[i])
				out[i] = runtime.Outcome{Outputs: outs, Err: err}
			} else {
				for j < len(ins) && ins[j].Topic != topology.CatchupRequests {
					j++
				}
				copy(out[i:j], policies(ctx, ins[i:j]))
			}
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
// collection is on the request's partition of component.policies (of the
// request's deployment, when it names one) has its folder compared with
// that collection, and only the keys that differ are written back
// (PlanRepair). Repaired folders are reported on component.applied with
// catch_up set; the agent-notifier does not notify a generation it already
// notified. A folder that cannot be repaired for good (a write the token
// is denied) is logged and the others go on; a transient failure retries
// the whole repair, which writes nothing twice.
func (w *writer) repair(ctx context.Context, in runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
	req := in.Value
	dep := ""
	if req.Scope == events.ScopeDeployment {
		if req.DeploymentID == nil || *req.DeploymentID == "" {
			return nil, runtime.Permanentf("consul-writer: catch-up request %s has scope DEPLOYMENT but no deployment_id", req.RequestID)
		}
		dep = *req.DeploymentID
	}
	start := time.Now()
	latest := map[string]*events.ComponentPolicies{}
	var order []string
	err := runtime.ReadPartitions(ctx, w.env.Kafka, topology.ComponentPolicies, []int32{in.Partition},
		runtime.Rows(ctx, w.env, runtime.PassTombstones, func(r runtime.Msg[*events.ComponentPolicies]) error {
			k := string(r.Key)
			if _, seen := latest[k]; !seen {
				order = append(order, k)
			}
			latest[k] = r.Value // nil for a tombstone
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("consul-writer: catch-up %s: read partition %d of %s: %w", req.RequestID, in.Partition, topology.ComponentPolicies, err)
	}
	var jobs []*job
	for _, k := range order {
		rec := latest[k]
		if rec == nil || rec.Uninstalled || rec.ServiceComponentName == "" || dep != "" && rec.DeploymentID != dep {
			continue
		}
		if rec.ComponentID == "" {
			rec.ComponentID = k
		}
		j := w.newJob(len(jobs), rec, start)
		j.repair = true
		jobs = append(jobs, j)
	}
	compared := len(jobs)
	// Folders certainly as last written are not read (unchanged); the
	// others are read whole and compared.
	last, err := w.lastWritten(ctx, []int32{in.Partition})
	if err != nil {
		return nil, fmt.Errorf("consul-writer: catch-up %s: read partition %d of %s: %w", req.RequestID, in.Partition, topology.ComponentApplied, err)
	}
	// The other partitions' components share the prefixes listed.
	spread, err := runtime.TopicPartitions(ctx, w.env.Kafka, topology.ComponentPolicies)
	if err != nil {
		return nil, fmt.Errorf("consul-writer: catch-up %s: %w", req.RequestID, err)
	}
	same, stats := w.unchanged(ctx, jobs, last, int(spread))
	toRead := jobs[:0:0]
	for i, j := range jobs {
		if !same[i] {
			j.i = len(toRead)
			toRead = append(toRead, j)
		}
	}
	jobs = toRead
	b := &batch{w: w, out: make([]runtime.Outcome, len(jobs)), failed: len(jobs)}
	for _, wave := range waves(jobs) {
		b.wave(ctx, wave)
	}
	var outs []runtime.Output
	repaired, failed, keys := 0, 0, 0
	for i, o := range b.out {
		switch {
		case o.Err != nil && !runtime.IsPermanent(o.Err):
			return nil, fmt.Errorf("consul-writer: catch-up %s: repair of component %s: %w", req.RequestID, jobs[i].rec.ComponentID, o.Err)
		case o.Err != nil:
			failed++
			jobs[i].log.Error().Err(o.Err).Str("request_id", req.RequestID).Msg("folder could not be repaired")
		case len(o.Outputs) > 0:
			repaired++
			outs = append(outs, o.Outputs...)
			keys += jobs[i].plan.KeysChanged + 1 // and the event key
		}
	}
	outs = append(outs, runtime.Output{Topic: topology.CatchupProgress, Key: []byte(req.RequestID), Value: &events.CatchupProgress{
		RequestID: req.RequestID, Stage: events.ProgressConsulWriter, Partition: in.Partition,
		Compared: int64(compared), Differed: int64(repaired), KeysWritten: int64(keys), DoneAt: time.Now().UTC(),
	}})
	w.log.Info().Str("request_id", req.RequestID).Int32("partition", in.Partition).Str("deployment_id", dep).
		Int("components_compared", compared).Int("check_transactions", stats.txns).Int("shared_listings", stats.ranges).Int("folders_listed_alone", stats.alone).
		Int("folders_read", len(jobs)).Int("folders_repaired", repaired).Int("keys_written", keys).Int("folders_not_repaired", failed).
		Dur("took", time.Since(start)).Msg("catch-up compared the Consul folders with their collections")
	return outs, nil
}
