package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// partState tracks one policy.segments partition of this member.
type partState struct {
	synced       bool  // state restored for the position being read
	next         int64 // offset after the last record handled
	rebufferedAt int64 // the offset the assembler was restored for; -1 none
}

// assigned restores, for each newly assigned policy.segments partition,
// the pieces of an update cut at the group's committed offset. The handler
// checks the offset again on the partition's first record (the committed
// offset may still move while the previous owner's transaction ends).
func (e *executor) assigned(ctx context.Context, env runtime.Env, assigned map[string][]int32) error {
	ps := assigned[topology.PolicySegments]
	if len(ps) == 0 {
		return nil
	}
	offsets, err := runtime.CommittedOffsets(ctx, env.Kafka, e.self.GroupIn(env.Kafka), topology.PolicySegments)
	if err != nil {
		return fmt.Errorf("executor: restore assigned partitions %v: %w", ps, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.hold(ctx, ps); err != nil {
		return fmt.Errorf("executor: restore assigned partitions %v: %w", ps, err)
	}
	for _, p := range ps {
		e.asm.Drop(p)
		st := &partState{rebufferedAt: -1}
		e.parts[p] = st
		if c, ok := offsets[p]; ok && c > 0 {
			if err := e.rebuffer(ctx, p, c); err != nil {
				delete(e.parts, p)
				return err
			}
			st.rebufferedAt = c
		}
	}
	return nil
}

// hold adds policy.segments partitions to those this member holds and,
// when it gained any, reads the collections of their components (follow).
// Callers hold mu.
func (e *executor) hold(ctx context.Context, ps []int32) error {
	n, err := runtime.TopicPartitions(ctx, e.env.Kafka, topology.PolicySegments)
	if err != nil {
		return err
	}
	gained := e.cols.own(int(n), ps)
	if !gained && e.tables != nil {
		return nil
	}
	return e.follow(ctx)
}

// revoked forgets the pieces and writes of partitions this member lost.
func (e *executor) revoked(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lost := revoked[topology.PolicySegments]
	for _, p := range lost {
		e.asm.Drop(p)
		delete(e.parts, p)
		e.cols.dropOverlay(p)
	}
	if len(lost) == 0 {
		return
	}
	// The collections of the components it may no longer update go.
	e.cols.disown(lost)
}

// rewound forgets what the records of an aborted transaction did: the
// pieces they added and the collections they wrote. Each partition's
// state is restored on its next record (see track), from the offset the
// records come again from.
func (e *executor) rewound(_ context.Context, _ runtime.Env, assigned map[string][]int32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range assigned[topology.PolicySegments] {
		e.asm.Drop(p)
		e.parts[p] = &partState{rebufferedAt: -1}
		e.cols.dropOverlay(p)
	}
	return nil
}

// rebuffer reads back the records before offset c of a partition and
// keeps the pieces of the update they leave incomplete. Callers hold mu.
func (e *executor) rebuffer(ctx context.Context, p int32, c int64) error {
	window := int64(min(firstRebufferWindow, e.cfg.RebufferWindow))
	for {
		start := max(0, c-window)
		e.asm.Drop(p)
		pieces := 0
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		// A record that is not a segment was dead-lettered when first read.
		err := runtime.ReadRange(rctx, e.env.Kafka, topology.PolicySegments, map[int32]int64{p: start}, map[int32]int64{p: c}, runtime.Rows(rctx, e.env, runtime.SkipTombstones, func(r runtime.Msg[*events.PolicySegment]) error {
			seg := r.Value
			if seg.DeploymentID == "" {
				seg.DeploymentID = string(r.Key)
			}
			pieces++
			if upd, _, err := e.asm.Add(p, seg); err == nil && upd != nil {
				e.asm.Done(upd.UpdateID) // complete before c: it was applied
			}
			return nil
		}))
		cancel()
		if err != nil {
			return fmt.Errorf("executor: read back %s[%d] from %d to %d: %w", topology.PolicySegments, p, start, c, err)
		}
		needMore := false
		var kept []PendingInfo
		for _, info := range e.asm.Pending() {
			if info.Partition != p {
				continue
			}
			if info.Have[len(info.Have)-1] == info.Count {
				// Its last piece lies before c: it was applied; only
				// its first pieces were cut off by the window.
				e.asm.Done(info.UpdateID)
				continue
			}
			if info.Have[0] > 1 && start > 0 {
				needMore = true
			}
			kept = append(kept, info)
		}
		if needMore && window < int64(e.cfg.RebufferWindow) {
			window = min(2*window, int64(e.cfg.RebufferWindow))
			continue
		}
		for _, info := range kept {
			if info.Have[0] > 1 {
				e.log.Error().Str("update_id", info.UpdateID).Str("deployment_id", info.Deployment).Int32("partition", p).
					Int("window", e.cfg.RebufferWindow).Msg("the first pieces of an update lie beyond the read-back window; the update is lost until a catch-up")
				e.asm.Done(info.UpdateID)
				continue
			}
			e.log.Info().Str("update_id", info.UpdateID).Str("deployment_id", info.Deployment).Int32("partition", p).
				Int64("offset", c).Int("pieces", len(info.Have)).Int32("count", info.Count).
				Msg("restored the pieces of an incomplete update")
		}
		e.log.Debug().Int32("partition", p).Int64("from", start).Int64("to", c).Int("pieces_read", pieces).Msg("read back policy segments")
		return nil
	}
}

// track restores a partition's state on its first record after an
// assignment, and again when a record comes before the last one handled
// (the transaction was aborted and the partition rewound).
func (e *executor) track(ctx context.Context, p int32, offset int64) error {
	st := e.parts[p]
	if st == nil {
		st = &partState{rebufferedAt: -1}
		e.parts[p] = st
	}
	switch {
	case !st.synced:
	case offset < st.next:
		e.log.Info().Int32("partition", p).Int64("offset", offset).Int64("expected", st.next).
			Msg("partition rewound (transaction aborted); restoring its state")
		st.rebufferedAt = -1
	default:
		return nil
	}
	if err := e.barrier(ctx, p); err != nil {
		return err
	}
	if st.rebufferedAt != offset {
		if err := e.rebuffer(ctx, p, offset); err != nil {
			return err
		}
		st.rebufferedAt = offset
	}
	st.synced = true
	st.next = offset
	return nil
}

func (e *executor) advance(p int32, offset int64) {
	if st := e.parts[p]; st != nil && offset+1 > st.next {
		st.next = offset + 1
	}
}

// barrier makes the committed view authoritative for the components of a
// partition: it waits until every committed collection is read, then
// drops what this member wrote for that partition and may have been
// aborted.
func (e *executor) barrier(ctx context.Context, partition int32) error {
	if err := e.tables.WaitCaughtUp(ctx, topology.ComponentPolicies); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.cols.dropOverlay(partition)
	return nil
}

// follow (re)starts following component.policies from its start, keeping
// the collections of the partitions owned now, and waits until it has
// read what the topic held. Called when the member gains partitions:
// collections it skipped before are kept this time. Callers hold mu (the
// handler does not run meanwhile).
func (e *executor) follow(ctx context.Context) error {
	if e.tables != nil {
		e.tables.Close()
		e.tables = nil
	}
	start := time.Now()
	f, err := runtime.Follow(e.env.Kafka, e.log, map[string]runtime.ApplyFunc{topology.ComponentPolicies: e.cols.apply})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.tables = f
	if err := f.WaitCaughtUp(ctx); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	kept, other := e.cols.counts()
	e.log.Info().Int("collections_kept", kept).Int("collections_of_other_members", other).Dur("took", time.Since(start)).
		Msg("read component.policies for the partitions held")
	return nil
}
