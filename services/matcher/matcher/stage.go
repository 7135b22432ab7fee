package matcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Stage returns the matcher stage: transactional, co-partitioned over
// policy.changes, deploy.components and catchup.requests, writing
// policy.matches keyed by deployment_id. Each call returns a stage with its
// own state; run one value at a time.
//
// Setup reads policy.catalog. Assigned rebuilds each assigned partition
// from the deploy.components and matcher.holdings partitions with the
// same number (component.policies where matcher.holdings has none), and
// re-reads policy.catalog (the view must not be older than
// what the partitions' previous owner already processed). Revoked drops the
// partitions' state. After an aborted transaction the runtime calls Revoked
// and Assigned again, so what the aborted records changed in memory is
// rebuilt from Kafka before they are handled again.
func Stage() runtime.Stage {
	s := &stage{}
	return runtime.Stage{
		Name:          topology.StageMatcher,
		Mode:          runtime.Transactional,
		Inputs:        []string{topology.PolicyChanges, topology.DeployComponents, topology.CatchupRequests},
		Outputs:       []string{topology.PolicyMatches, topology.MatcherHoldings},
		CoPartitioned: true,
		Setup:         s.setup,
		Assigned:      s.assigned,
		Revoked:       s.revoked,
		GCPercent:     gcPercent,
	}
}

// gcPercent is the matcher's garbage collector target (see
// runtime.Stage.GCPercent): its live heap is the components it matches
// and their held sets, and with Go's default of 100 its process peaked
// at 238 to 282 MiB while catching 100,000 components up (pfbench's
// catch-up), at or above the 256 MiB it is given. At 70 it peaked at 223
// and 228 MiB, against 249 and 251 for 100 in alternating runs; the
// executor, at 70 too, measured about 1.2 times its CPU for it.
const gcPercent = 70

// stage holds the running matcher. The lock is held by the handler and by
// the partition hooks, which the consumer may call concurrently.
type stage struct {
	mu  sync.Mutex
	m   *Matcher
	log zerolog.Logger
	// rollouts is policy.rollouts, followed (see rollout.go).
	rollouts *runtime.Table[*events.PolicyRollout]
}

func (s *stage) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = env.Log.With().Str("stage", topology.StageMatcher).Logger()
	m := New()
	cat, err := readCatalog(ctx, env, s.log)
	if err != nil {
		return nil, nil, err
	}
	m.SetCatalog(cat)
	rollouts, err := runtime.FollowTable[*events.PolicyRollout](env, topology.PolicyRollouts, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("matcher: %w", err)
	}
	if err := rollouts.WaitCaughtUp(ctx); err != nil {
		rollouts.Close()
		return nil, nil, fmt.Errorf("matcher: read %s: %w", env.Kafka.Topic(topology.PolicyRollouts), err)
	}
	m.SetRollouts(rollouts)
	s.m, s.rollouts = m, rollouts
	s.log.Info().Int("policies", cat.Len()).Int("rollouts", rollouts.Len()).Msg("catalog view read")
	return s.handler(), rollouts.Close, nil
}

// readCatalog reads policy.catalog (every partition) into a new view.
func readCatalog(ctx context.Context, env runtime.Env, log zerolog.Logger) (*Catalog, error) {
	cat := NewCatalog()
	err := runtime.ReadPartitions(ctx, env.Kafka, topology.PolicyCatalog, nil, runtime.Rows(ctx, env, runtime.PassTombstones, func(r runtime.Msg[*events.PolicyCatalogEntry]) error {
		if err := cat.Apply(string(r.Key), r.Value, r.Timestamp); err != nil {
			log.Warn().Err(err).Int32("partition", r.Partition).Int64("offset", r.Offset).Msg("skip policy.catalog record")
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("matcher: read %s: %w", env.Kafka.Topic(topology.PolicyCatalog), err)
	}
	return cat, nil
}

// restorePartition builds one partition's state from deploy.components
// and what the matcher has sent each component: its changelog,
// matcher.holdings, which commits with the matcher's deltas, so that a
// member given the partition goes on from exactly what the previous owner
// committed. component.policies, what the executor has applied, lags
// behind it: restored from it, a member sent again what had been sent.
// It is read only when the changelog's partition holds nothing (a cluster
// from before the changelog, or a partition without components).
func restorePartition(ctx context.Context, env runtime.Env, log zerolog.Logger, partition int32) (*Partition, error) {
	p := NewPartition()
	parts := []int32{partition}
	err := runtime.ReadPartitions(ctx, env.Kafka, topology.DeployComponents, parts, runtime.Rows(ctx, env, runtime.PassTombstones, func(r runtime.Msg[*events.Component]) error {
		if err := p.Restore(string(r.Key), r.Value); err != nil {
			log.Warn().Err(err).Str("component_id", string(r.Key)).Int32("partition", partition).Int64("offset", r.Offset).
				Msg("component definition refused while restoring")
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("matcher: restore partition %d from %s: %w", partition, env.Kafka.Topic(topology.DeployComponents), err)
	}
	for _, from := range []string{topology.MatcherHoldings, topology.ComponentPolicies} {
		read := 0
		err = runtime.ReadPartitions(ctx, env.Kafka, from, parts, runtime.Rows(ctx, env, runtime.PassTombstones, func(r runtime.Msg[*events.ComponentPolicies]) error {
			read++
			p.RestoreHas(string(r.Key), r.Value)
			return nil
		}))
		if err != nil {
			return nil, fmt.Errorf("matcher: restore partition %d from %s: %w", partition, env.Kafka.Topic(from), err)
		}
		if read > 0 {
			break
		}
	}
	return p, nil
}

func union(assigned map[string][]int32) []int32 {
	var out []int32
	for _, ps := range assigned {
		out = append(out, ps...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// assigned restores the assigned partitions. It holds the lock throughout,
// so no record is handled against a half-refreshed view.
func (s *stage) assigned(ctx context.Context, env runtime.Env, assigned map[string][]int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	cat, err := readCatalog(ctx, env, s.log)
	if err != nil {
		return err
	}
	parts := union(assigned)
	built := make(map[int32]*Partition, len(parts))
	for _, p := range parts {
		ps, err := restorePartition(ctx, env, s.log, p)
		if err != nil {
			return err
		}
		built[p] = ps
	}
	s.m.SetCatalog(cat)
	comps := 0
	for p, ps := range built {
		s.m.Assign(p, ps)
		comps += ps.Components()
	}
	s.log.Info().Ints32("partitions", parts).Int("components", comps).Int("policies", cat.Len()).
		Dur("took", time.Since(start)).Msg("state of assigned partitions restored")
	return nil
}

func (s *stage) revoked(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := union(revoked)
	s.m.Drop(parts...)
	s.log.Info().Ints32("partitions", parts).Msg("state of revoked partitions dropped")
}

// handler hands each input, typed, to the matcher's decision for its
// topic. A tombstone means something only on deploy.components (an
// uninstall); on the other inputs it is refused.
func (s *stage) handler() runtime.Handler {
	return runtime.Route(map[string]runtime.Handler{
		topology.PolicyChanges: runtime.Typed(runtime.RefuseTombstones, func(ctx context.Context, in runtime.Msg[*events.PolicyChange]) ([]runtime.Output, error) {
			if err := s.rolloutsCurrent(ctx, in.Polled); err != nil {
				return nil, err
			}
			return s.decide(in.Input, func() ([]events.PolicyMatch, error) { return s.m.OnChange(in.Partition, in.Value) })
		}),
		topology.DeployComponents: runtime.Typed(runtime.PassTombstones, func(_ context.Context, in runtime.Msg[*events.Component]) ([]runtime.Output, error) {
			outs, err := s.decide(in.Input, func() ([]events.PolicyMatch, error) { return s.m.OnComponent(in.Partition, string(in.Key), in.Value) })
			if err == nil && in.Tombstone() && !slices.ContainsFunc(outs, func(o runtime.Output) bool { return o.Topic == topology.MatcherHoldings }) {
				// An uninstall forgets the component even when it
				// sent nothing: so does the changelog.
				outs = append(outs, holdingOutput(in.Partition, string(in.Key), nil))
			}
			return outs, err
		}),
		topology.CatchupRequests: runtime.Typed(runtime.RefuseTombstones, func(ctx context.Context, in runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
			if err := s.rolloutsCurrent(ctx, in.Polled); err != nil {
				return nil, err
			}
			var count CatchupCount
			notOwned := false
			outs, err := s.decide(in.Input, func() (ms []events.PolicyMatch, err error) {
				ms, count, err = s.m.OnCatchupCounted(in.Partition, in.Value)
				notOwned = errors.Is(err, ErrNotOwned)
				return ms, err
			})
			if err != nil || notOwned {
				return outs, err
			}
			s.log.Info().Str("request_id", in.Value.RequestID).Int32("partition", in.Partition).Int("components_compared", count.Compared).
				Int("components_differed", count.Differed).Msg("catch-up compared the components with what they should have")
			return append(outs, runtime.Output{Topic: topology.CatchupProgress, Key: []byte(in.Value.RequestID), Value: &events.CatchupProgress{
				RequestID: in.Value.RequestID, Stage: events.ProgressMatcher, Partition: in.Partition,
				Compared: int64(count.Compared), Differed: int64(count.Differed), DoneAt: time.Now().UTC(),
			}}), nil
		}),
	})
}

// decide runs one of the matcher's decisions on an input, under the lock,
// and turns its matches into policy.matches records.
func (s *stage) decide(in runtime.Input, decision func() ([]events.PolicyMatch, error)) ([]runtime.Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	matches, err := decision()
	switch {
	case errors.Is(err, ErrNotOwned):
		s.log.Warn().Str("topic", in.Topic).Int32("partition", in.Partition).Int64("offset", in.Offset).
			Msg("record of a partition no longer owned; its new owner handles it")
		return nil, nil
	case err != nil:
		return nil, runtime.Permanent(fmt.Errorf("matcher: %s[%d]@%d: %w", in.Topic, in.Partition, in.Offset, err))
	}
	outs := make([]runtime.Output, 0, len(matches)+1)
	for i := range matches {
		pm := &matches[i]
		outs = append(outs, runtime.Output{Topic: topology.PolicyMatches, Key: []byte(pm.DeploymentID), Value: pm})
		if e := s.log.Debug(); e.Enabled() {
			e.Str("update_id", pm.UpdateID).Str("deployment_id", pm.DeploymentID).Bool("catch_up", pm.CatchUp).
				Int("components", len(pm.Components)).Str("cause", in.Topic).Msg("policy match")
		}
	}
	// What each component was sent, into the changelog in the same
	// transaction: a component's holding changes exactly when it is
	// sent a delta.
	for i := range matches {
		for _, d := range matches[i].Components {
			outs = append(outs, holdingOutput(in.Partition, d.ComponentID, s.m.Holding(in.Partition, d.ComponentID)))
		}
	}
	return outs, nil
}

// holdingOutput is the changelog record of what a component of partition
// was sent (nil: its tombstone), on the partition of its component.
func holdingOutput(partition int32, componentID string, h *events.ComponentPolicies) runtime.Output {
	o := runtime.Output{Topic: topology.MatcherHoldings, Key: []byte(componentID), Partition: partition, Explicit: true}
	if h != nil {
		o.Value = h
	}
	return o
}

// rolloutsCurrent waits until the rollouts table holds every rollout
// committed before polled, when the input's poll returned: a version
// published with a plan has its rollout written before it, and a step
// that moves on asks for a catch-up after it, so the change or the
// catch-up is decided with the rollout in force. The table lists
// policy.rollouts' ends once for all the inputs of one poll (a listing
// is four requests to the brokers), not once per input.
func (s *stage) rolloutsCurrent(ctx context.Context, polled time.Time) error {
	if s.rollouts == nil {
		return nil
	}
	if polled.IsZero() {
		polled = time.Now()
	}
	if err := s.rollouts.WaitCaughtUpAsOf(ctx, polled); err != nil {
		return fmt.Errorf("matcher: catch up with %s: %w", topology.PolicyRollouts, err)
	}
	return nil
}
