package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// ACMBench is the participant replicas' part of the report (seed 003):
// replica-sync and the replicas run in this process, on an in-process
// broker of their own; the participant's callbacks do nothing, so what is
// measured is the replication, not an implementation.
type ACMBench struct {
	// Sync lag: a change sent by one replica until the last of the other
	// replicas applied it from acm.sync.
	LagReplicas  int     `json:"lag_replicas"`
	LagChanges   int     `json:"lag_changes"`
	LagRatePerS  int     `json:"lag_rate_per_sec"`
	LagP50Ms     float64 `json:"lag_p50_ms"`
	LagP99Ms     float64 `json:"lag_p99_ms"`
	LagMaxMs     float64 `json:"lag_max_ms"`
	LagGoalP99Ms float64 `json:"lag_goal_p99_ms"`
	// Rebuild: a new replica started on acm.sync holding RebuildElements
	// element records, until it is ready with all of them.
	RebuildElements int     `json:"rebuild_elements"`
	RebuildSeconds  float64 `json:"rebuild_seconds"`
	RebuildGoalS    float64 `json:"rebuild_goal_seconds"`
	// Operations through one participant with 1 and with 3 replicas, each
	// a one-element deploy of its own instance, until every element is
	// DEPLOYED in a replica's state.
	Ops           int     `json:"ops"`
	OpsPerSec1    float64 `json:"ops_per_sec_1_replica"`
	OpsPerSec3    float64 `json:"ops_per_sec_3_replicas"`
	ScalingRatio3 float64 `json:"scaling_ratio_3_to_1"`
}

const benchType = "org.policyflow.Bench"

// acmBench runs the three measurements, each on a fresh broker.
func acmBench(ctx context.Context, o options, log zerolog.Logger, progress func(string, ...any)) (ACMBench, error) {
	r := ACMBench{LagReplicas: 3, LagChanges: o.acmChanges, LagRatePerS: o.acmRate, LagGoalP99Ms: 50,
		RebuildElements: o.acmElements, RebuildGoalS: 2, Ops: o.acmOps}
	progress("acm: sync lag, 3 replicas, %d changes at %d/s", o.acmChanges, o.acmRate)
	if err := withACMStack(ctx, log, func(k runtime.Kafka, prod *kgo.Client) error { return r.lag(ctx, k, prod, o.timeout) }); err != nil {
		return r, fmt.Errorf("acm sync lag: %w", err)
	}
	progress("acm: rebuild of %d element instances by a new replica", o.acmElements)
	if err := withACMStack(ctx, log, func(k runtime.Kafka, prod *kgo.Client) error { return r.rebuild(ctx, k, prod, o.timeout) }); err != nil {
		return r, fmt.Errorf("acm rebuild: %w", err)
	}
	for _, n := range []int{1, 3} {
		progress("acm: %d operations through one participant with %d replica(s)", o.acmOps, n)
		var rate float64
		if err := withACMStack(ctx, log, func(k runtime.Kafka, prod *kgo.Client) error {
			var err error
			rate, err = opsRate(ctx, k, prod, n, o.acmOps, o.timeout)
			return err
		}); err != nil {
			return r, fmt.Errorf("acm operations with %d replicas: %w", n, err)
		}
		if n == 1 {
			r.OpsPerSec1 = rate
		} else {
			r.OpsPerSec3 = rate
		}
	}
	if r.OpsPerSec1 > 0 {
		r.ScalingRatio3 = r.OpsPerSec3 / r.OpsPerSec1
	}
	return r, nil
}

// withACMStack starts a broker with the topology (3 partitions for the
// ACM topics, as in production) and replica-sync.
func withACMStack(ctx context.Context, log zerolog.Logger, fn func(runtime.Kafka, *kgo.Client) error) error {
	broker, err := devstack.StartBroker(devstack.BrokerOptions{Partitions: topology.ACMPartitions, Logger: log.With().Str("component", "broker").Logger()})
	if err != nil {
		return err
	}
	defer broker.Close()
	k := runtime.Kafka{Brokers: broker.Addrs, FetchMaxWait: 20 * time.Millisecond, MetadataMinAge: 250 * time.Millisecond}
	prod, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(runtime.Partitioner()), kgo.ProducerLinger(0))
	if err != nil {
		return err
	}
	defer prod.Close()
	if _, err := topology.Apply(ctx, kadm.NewClient(prod), topology.Default(), topology.Options{}); err != nil {
		return fmt.Errorf("apply topology: %w", err)
	}
	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	env.SessionTimeout, env.TransactionTimeout = 10*time.Second, 10*time.Second
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- replicasync.StageWith(replicasync.Config{OfflineAfter: time.Minute}).Run(sctx, env) }()
	defer func() { stop(); <-done }()
	return fn(k, prod)
}

// replicas starts n replicas of participant "bench" and waits until they
// take operations; stop ends them.
func replicas(ctx context.Context, k runtime.Kafka, n int, onApply func(replica int, key string, st *events.ReplicaState), timeout time.Duration) (ps []*participant.Participant, stop func(), err error) {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	for i := range n {
		cfg := participant.Config{Kafka: k, ParticipantID: "bench", ReplicaID: "r" + strconv.Itoa(i),
			Types: map[string]participant.Callbacks{benchType: {}}, Log: runtime.NewLogger(io.Discard, "error", false)}
		if onApply != nil {
			cfg.OnApply = func(key string, st *events.ReplicaState) { onApply(i, key, st) }
		}
		p, err := participant.New(cfg)
		if err != nil {
			stop()
			return nil, nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Run(rctx) }()
		ps = append(ps, p)
	}
	for _, p := range ps {
		select {
		case <-p.Ready():
		case <-time.After(timeout):
			stop()
			return nil, nil, fmt.Errorf("a replica was not ready within %s", timeout)
		}
	}
	return ps, stop, nil
}

// lag sends STATE changes as replica r0 would, paced, and times each until
// both other replicas applied it.
func (r *ACMBench) lag(ctx context.Context, k runtime.Kafka, prod *kgo.Client, timeout time.Duration) error {
	var mu sync.Mutex
	sent := make([]time.Time, r.LagChanges)
	applied := make([][]time.Time, r.LagChanges) // per change, per replica 1 and 2
	all := make(chan struct{})
	remaining := r.LagChanges
	_, stop, err := replicas(ctx, k, r.LagReplicas, func(rep int, _ string, st *events.ReplicaState) {
		if rep == 0 || st.Kind != acm.KindElement {
			return
		}
		seq, err := strconv.Atoi(st.OperationID)
		if err != nil || seq < 0 || seq >= len(applied) {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if applied[seq] == nil {
			applied[seq] = make([]time.Time, r.LagReplicas)
		}
		if applied[seq][rep].IsZero() {
			applied[seq][rep] = now
			done := true
			for i := 1; i < r.LagReplicas; i++ {
				done = done && !applied[seq][i].IsZero()
			}
			if done {
				if remaining--; remaining == 0 {
					close(all)
				}
			}
		}
	}, timeout)
	if err != nil {
		return err
	}
	defer stop()
	codec := events.Default()
	var failed error // of a write
	interval := time.Second / time.Duration(r.LagRatePerS)
	start := time.Now()
	for i := range r.LagChanges {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		inst, elem, state, op := "i"+strconv.Itoa(i%100), "e1", acm.Deployed, strconv.Itoa(i)
		b, err := codec.Encode(&events.ParticipantMessage{MessageID: op, ParticipantID: "bench", ReplicaID: "r0", Kind: acm.MsgState,
			InstanceID: &inst, ElementID: &elem, State: &state, ResponseTo: &op, Properties: `{"seq":` + op + `}`, SentAt: time.Now(), Revision: 1})
		if err != nil {
			return err
		}
		// The lag runs from the moment of writing: a time taken in the
		// broker's acknowledgement came after some replicas had applied
		// the change (negative lags), or never (a zero time, lags of
		// centuries).
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		idx := i
		prod.Produce(ctx, &kgo.Record{Topic: k.Topic(topology.ACMRuntime), Key: []byte("bench"), Value: b}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = errors.Join(failed, fmt.Errorf("write change %d to acm.runtime: %w", idx, err))
				mu.Unlock()
			}
		})
	}
	select {
	case <-all:
	case <-time.After(timeout):
		return fmt.Errorf("%d of %d changes not applied by every replica within %s", remaining, r.LagChanges, timeout)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return failed
	}
	lags := make([]float64, 0, r.LagChanges)
	for i := range r.LagChanges {
		last := slices.MaxFunc(applied[i][1:], func(a, b time.Time) int { return a.Compare(b) })
		lag := last.Sub(sent[i])
		if lag < 0 {
			return fmt.Errorf("change %d was applied %s before it was written: the clock of the bench is wrong", i, -lag)
		}
		lags = append(lags, float64(lag.Microseconds())/1000)
	}
	slices.Sort(lags)
	r.LagP50Ms, r.LagP99Ms, r.LagMaxMs = lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1]
	return nil
}

// rebuild writes RebuildElements element records to acm.sync and times a
// new replica until it holds them all.
func (r *ACMBench) rebuild(ctx context.Context, k runtime.Kafka, prod *kgo.Client, timeout time.Duration) error {
	codec := events.Default()
	now := time.Now()
	recs := make([]*kgo.Record, 0, r.RebuildElements)
	for i := range r.RebuildElements {
		inst, elem := "i"+strconv.Itoa(i/10), "e"+strconv.Itoa(i%10)
		b, err := codec.Encode(&events.ReplicaState{ParticipantID: "bench", InstanceID: inst, ElementID: elem, Kind: acm.KindElement,
			State: acm.Deployed, Properties: `{"key":"value","n":` + strconv.Itoa(i) + `}`, Version: 1, UpdatedAt: now,
			ReplicaID: "r0", CompositionID: "c1", ElementType: benchType, Revision: 1, OperationID: "op"})
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic(topology.ACMSync), Key: []byte(acm.ElementKey("bench", inst, elem)), Value: b})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return err
	}
	start := time.Now()
	ps, stop, err := replicas(ctx, k, 1, nil, timeout)
	if err != nil {
		return err
	}
	defer stop()
	r.RebuildSeconds = time.Since(start).Seconds()
	if n := len(ps[0].Dump()); n != r.RebuildElements {
		return fmt.Errorf("the new replica holds %d elements, want %d", n, r.RebuildElements)
	}
	return nil
}

// opsRate sends ops one-element deploys of distinct instances and times
// them until every element is DEPLOYED in the first replica's state.
func opsRate(ctx context.Context, k runtime.Kafka, prod *kgo.Client, n, ops int, timeout time.Duration) (float64, error) {
	ps, stop, err := replicas(ctx, k, n, nil, timeout)
	if err != nil {
		return 0, err
	}
	defer stop()
	// Let the group settle: every replica owns a partition.
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		settled := true
		for _, p := range ps {
			settled = settled && len(p.Partitions()) > 0
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the replicas' group did not settle within %s", timeout)
		}
	}
	codec := events.Default()
	comp := "c1"
	recs := make([]*kgo.Record, 0, ops)
	for i := range ops {
		inst := "i" + strconv.Itoa(i)
		b, err := codec.Encode(&events.ParticipantOperation{MessageID: "op" + strconv.Itoa(i), ParticipantID: "bench", Kind: acm.OpDeploy,
			CompositionID: &comp, InstanceID: &inst, Properties: "{}", SentAt: time.Now(), Revision: 1,
			Elements: []events.OperationElement{{ElementID: "e1", ElementType: benchType, Properties: `{"k":"v"}`}}})
		if err != nil {
			return 0, err
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic(topology.ACMParticipant), Key: []byte(inst), Value: b})
	}
	start := time.Now()
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := ps[0].WaitState(wctx, func(s participant.State) bool {
		c := 0
		for _, st := range s {
			if st.State == acm.Deployed {
				c++
			}
		}
		return c == ops
	}); err != nil {
		return 0, err
	}
	return float64(ops) / time.Since(start).Seconds(), nil
}

// acmTable prints the ACM part of the report.
func (r ACMBench) table(w io.Writer) {
	fmt.Fprintf(w, "participant replicas (in this process, on a broker of their own)\n")
	fmt.Fprintf(w, "  sync lag, %d replicas, %d changes at %d/s: p50 %.1f ms, p99 %.1f ms%s, max %.1f ms (goal p99 <= %.0f ms)\n",
		r.LagReplicas, r.LagChanges, r.LagRatePerS, r.LagP50Ms, r.LagP99Ms, miss(r.LagP99Ms <= r.LagGoalP99Ms), r.LagMaxMs, r.LagGoalP99Ms)
	fmt.Fprintf(w, "  rebuild of %d element instances by a new replica: %.2f s%s (goal <= %.0f s)\n",
		r.RebuildElements, r.RebuildSeconds, miss(r.RebuildSeconds <= r.RebuildGoalS), r.RebuildGoalS)
	fmt.Fprintf(w, "  %d operations through one participant: %.0f ops/s with 1 replica, %.0f ops/s with 3 (ratio %.2f)\n",
		r.Ops, r.OpsPerSec1, r.OpsPerSec3, r.ScalingRatio3)
}
