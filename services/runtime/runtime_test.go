package runtime_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// newCluster is an in-process Kafka with the topics of the tests' stages.
func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	return stagetest.NewCluster(t, 3, "in", "out", "dlq.echo", "dlq.sink", "dlq.ticker")
}

func req(id string) *events.CatchupRequest {
	return &events.CatchupRequest{RequestID: id, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.UnixMilli(1).UTC()}
}

// produce writes n requests keyed k0, k1, ... to "in"; the one at poisonAt
// (none when negative) is not Avro.
func produce(t *testing.T, c *stagetest.Cluster, n int, poisonAt int) {
	t.Helper()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		rec := c.Record(t, "in", "k"+strconv.Itoa(i), req("r"+strconv.Itoa(i)))
		if i == poisonAt {
			rec.Value = []byte("definitely not avro")
		}
		recs = append(recs, rec)
	}
	c.ProduceRecords(t, recs...)
}

func echoStage(calls *atomic.Int64) runtime.Stage {
	return runtime.Stage{
		Name:   "echo",
		Mode:   runtime.Transactional,
		Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) {
				calls.Add(1)
				r := in.Value.(*events.CatchupRequest)
				return []runtime.Output{{Topic: "out", Key: in.Key, Value: req("out-" + r.RequestID)}}, nil
			}, nil, nil
		},
	}
}

func TestTransactionalEchoWithPoisonRecord(t *testing.T) {
	c := newCluster(t)
	k := c.Kafka
	produce(t, c, 100, 42)
	var calls atomic.Int64
	env := stagetest.Env(k)
	stop := stagetest.Run(t, echoStage(&calls), env)

	out := c.Read(t, "out", 99, 60*time.Second)
	dlq := c.Read(t, "dlq.echo", 1, 30*time.Second)
	// Outputs are counted by topic once their transaction committed
	// (the records themselves are not kept until then).
	testkit.Eventually(t, 10*time.Second, testkit.Holds("records out counted", func() bool {
		return testutil.ToFloat64(env.Metrics.RecordsOut.WithLabelValues("echo", "out")) == 99 &&
			testutil.ToFloat64(env.Metrics.RecordsOut.WithLabelValues("echo", "dlq.echo")) == 1
	}))
	stop()
	if len(out) != 99 {
		t.Fatalf("got %d outputs, want 99 (100 inputs, one poison)", len(out))
	}
	seen := map[string]bool{}
	for _, r := range out {
		id := stagetest.Decode[*events.CatchupRequest](t, r).RequestID
		if seen[id] {
			t.Fatalf("duplicate output %s", id)
		}
		seen[id] = true
	}
	if seen["out-r42"] || !seen["out-r43"] {
		t.Fatalf("poison record produced output or the next record did not: %v %v", seen["out-r42"], seen["out-r43"])
	}
	if len(dlq) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dlq))
	}
	d := dlq[0]
	if string(d.Key) != "k42" || string(d.Value) != "definitely not avro" {
		t.Fatalf("dead letter carries %q=%q, want the original record", d.Key, d.Value)
	}
	header := func(key string) string { return stagetest.Header(d, key) }
	if header(runtime.HeaderStage) != "echo" || header(runtime.HeaderTopic) != k.Topic("in") ||
		header(runtime.HeaderOffset) == "" || header(runtime.HeaderPartition) == "" || header(runtime.HeaderError) == "" {
		t.Fatalf("dead letter headers incomplete: %+v", d.Headers)
	}
	if reason := header(runtime.HeaderError); !strings.Contains(reason, "not an Avro single-object encoded record") {
		t.Fatalf("dead letter reason %q does not say what is wrong", reason)
	}
}

func TestTransactionalRebalanceExactlyOnce(t *testing.T) {
	c := newCluster(t)
	const n = 600
	produce(t, c, n, -1)
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 20
	// Slow handlers keep transactions open while members join and leave.
	slow := func(calls *atomic.Int64) runtime.Stage {
		s := echoStage(calls)
		inner := s.Setup
		s.Setup = func(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
			h, c, err := inner(ctx, env)
			return func(ctx context.Context, in runtime.Input) ([]runtime.Output, error) {
				time.Sleep(time.Millisecond)
				return h(ctx, in)
			}, c, err
		}
		return s
	}
	var callsA, callsB atomic.Int64
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = slow(&callsA).Run(ctxA, env) }()
	for callsA.Load() < 100 {
		time.Sleep(10 * time.Millisecond)
	}
	go func() { defer wg.Done(); _ = slow(&callsB).Run(ctxB, env) }() // forces a rebalance
	for callsB.Load() < 50 && callsA.Load()+callsB.Load() < n {
		time.Sleep(10 * time.Millisecond)
	}
	cancelA() // member A leaves mid-stream: another rebalance
	out := c.Read(t, "out", n, 90*time.Second)
	cancelB()
	wg.Wait()
	counts := map[string]int{}
	for _, r := range out {
		counts[string(r.Key)]++
	}
	for i := 0; i < n; i++ {
		if c := counts["k"+strconv.Itoa(i)]; c != 1 {
			t.Errorf("input k%d has %d committed outputs, want exactly 1", i, c)
		}
	}
	t.Logf("handler calls: A=%d B=%d (more than %d means aborted batches were redone)", callsA.Load(), callsB.Load(), n)
}

func TestAtLeastOnceRetriesThenMarks(t *testing.T) {
	c := newCluster(t)
	k := c.Kafka
	produce(t, c, 30, 7)
	var mu sync.Mutex
	applied := map[string]int{}
	failures := 0
	stage := runtime.Stage{
		Name:   "sink",
		Mode:   runtime.AtLeastOnce,
		Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) {
				mu.Lock()
				defer mu.Unlock()
				r := in.Value.(*events.CatchupRequest)
				if r.RequestID == "r3" && failures < 3 {
					failures++
					return nil, errors.New("effect target unavailable")
				}
				applied[r.RequestID]++
				return []runtime.Output{{Topic: "out", Key: in.Key, Value: req("applied-" + r.RequestID)}}, nil
			}, nil, nil
		},
	}
	stop := stagetest.Run(t, stage, stagetest.Env(k))
	out := c.Read(t, "out", 29, 60*time.Second)
	dlq := c.Read(t, "dlq.sink", 1, 30*time.Second)
	stop()
	if len(out) < 29 || len(dlq) != 1 {
		t.Fatalf("outputs %d (want 29), dead letters %d (want 1)", len(out), len(dlq))
	}
	mu.Lock()
	if applied["r3"] != 1 || failures != 3 {
		t.Fatalf("r3 applied %d times after %d failures, want once after 3", applied["r3"], failures)
	}
	mu.Unlock()
	// Every offset was committed at shutdown: the group's lag is zero.
	lags, err := c.Admin.Lag(context.Background(), stage.GroupIn(k))
	if err != nil {
		t.Fatal(err)
	}
	if total := lags[stage.GroupIn(k)].Lag.Total(); total != 0 {
		t.Fatalf("group lag %d after drain, want 0", total)
	}
}

func TestAtLeastOnceBatchRetriesFromFailureAndDeadLetters(t *testing.T) {
	c := newCluster(t)
	k := c.Kafka
	produce(t, c, 60, 7)
	var mu sync.Mutex
	applied := map[string]int{}
	var batches []int
	failures := 0
	stage := runtime.Stage{
		Name:   "sink",
		Mode:   runtime.AtLeastOnce,
		Inputs: []string{"in"},
		SetupBatch: func(context.Context, runtime.Env) (runtime.BatchHandler, func(), error) {
			return func(_ context.Context, ins []runtime.Input) []runtime.Outcome {
				mu.Lock()
				defer mu.Unlock()
				batches = append(batches, len(ins))
				outs := make([]runtime.Outcome, len(ins))
				for i, in := range ins {
					r := in.Value.(*events.CatchupRequest)
					switch {
					case r.RequestID == "r3" && failures < 2:
						failures++
						outs[i].Err = errors.New("effect target unavailable")
						// What follows a transient failure is handed in again:
						// answer anything here, it must not be produced.
						for j := i + 1; j < len(ins); j++ {
							outs[j].Outputs = []runtime.Output{{Topic: "out", Key: ins[j].Key, Value: req("discarded")}}
						}
						return outs
					case r.RequestID == "r11":
						outs[i].Err = runtime.Permanentf("request r11 is refused")
						continue
					}
					applied[r.RequestID]++
					outs[i].Outputs = []runtime.Output{{Topic: "out", Key: in.Key, Value: req("applied-" + r.RequestID)}}
				}
				return outs
			}, nil, nil
		},
	}
	stop := stagetest.Run(t, stage, stagetest.Env(k))
	out := c.Read(t, "out", 58, 60*time.Second)
	dlq := c.Read(t, "dlq.sink", 2, 30*time.Second)
	stop()
	if len(out) != 58 || len(dlq) != 2 {
		t.Fatalf("outputs %d (want 58: 60 inputs, one poison, one refused), dead letters %d (want 2)", len(out), len(dlq))
	}
	seen := map[string]int{}
	for _, r := range out {
		seen[stagetest.Decode[*events.CatchupRequest](t, r).RequestID]++
	}
	for i := 0; i < 60; i++ {
		id, want := "applied-r"+strconv.Itoa(i), 1
		if i == 7 || i == 11 {
			want = 0
		}
		if seen[id] != want {
			t.Fatalf("%s produced %d times, want %d (outputs %v)", id, seen[id], want, seen)
		}
	}
	if seen["discarded"] != 0 {
		t.Fatalf("outputs of inputs after a transient failure were produced %d times", seen["discarded"])
	}
	reasons := map[string]bool{}
	for _, d := range dlq {
		reasons[string(d.Key)+": "+stagetest.Header(d, runtime.HeaderError)] = true
	}
	if !reasons["k11: request r11 is refused"] {
		t.Fatalf("dead letters %v lack k11 with its reason", reasons)
	}
	mu.Lock()
	defer mu.Unlock()
	if failures != 2 || applied["r3"] != 1 {
		t.Fatalf("r3 applied %d times after %d failures, want once after 2", applied["r3"], failures)
	}
	multi := false
	for _, n := range batches {
		multi = multi || n > 1
	}
	if !multi {
		t.Fatalf("batch sizes %v: the handler never got more than one input at once", batches)
	}
	lags, err := c.Admin.Lag(context.Background(), stage.GroupIn(k))
	if err != nil {
		t.Fatal(err)
	}
	if total := lags[stage.GroupIn(k)].Lag.Total(); total != 0 {
		t.Fatalf("group lag %d after drain, want 0", total)
	}
}

func TestStageValidateRefusesTwoSetups(t *testing.T) {
	h := func(context.Context, runtime.Env) (runtime.Handler, func(), error) { return nil, nil, nil }
	b := func(context.Context, runtime.Env) (runtime.BatchHandler, func(), error) { return nil, nil, nil }
	for _, tc := range []struct {
		stage runtime.Stage
		want  string
	}{
		{runtime.Stage{Name: "x", Inputs: []string{"in"}, Mode: runtime.AtLeastOnce, Setup: h, SetupBatch: b}, "both Setup and SetupBatch"},
		{runtime.Stage{Name: "x", Inputs: []string{"in"}, Mode: runtime.Transactional, SetupBatch: b}, "SetupBatch is for at-least-once"},
	} {
		if err := tc.stage.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Validate = %v, want an error saying %q", err, tc.want)
		}
	}
	if err := (runtime.Stage{Name: "x", Inputs: []string{"in"}, Mode: runtime.AtLeastOnce, SetupBatch: b}).Validate(); err != nil {
		t.Fatalf("an at-least-once batch stage is refused: %v", err)
	}
}

func TestReadPartitionsStopsAtEnd(t *testing.T) {
	c := newCluster(t)
	produce(t, c, 50, -1)
	// A committed transaction leaves markers at the partition's end.
	c.ProduceCommitted(t, c.Record(t, "in", "k-tx", req("tx")))
	n := 0
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := runtime.ReadPartitions(rctx, c.Kafka, "in", nil, func(*kgo.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 51 {
		t.Fatalf("read %d records, want 51", n)
	}
}

func TestTransactionalProduceFailureAborts(t *testing.T) {
	c := newCluster(t)
	produceOneKey(t, c, 10)
	env := stagetest.Env(c.Kafka)
	env.MaxRecordBytes = 4096
	var mu sync.Mutex
	calls := map[string]int{}
	stage := runtime.Stage{
		Name:   "echo",
		Mode:   runtime.Transactional,
		Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return runtime.Typed(runtime.SkipTombstones, func(_ context.Context, m runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
				mu.Lock()
				defer mu.Unlock()
				id := m.Value.RequestID
				calls[id]++
				if id == "r4" && calls[id] == 1 {
					// Too big for the producer: it fails, and the whole
					// transaction with it.
					return []runtime.Output{{Topic: "out", Key: m.Key, Raw: make([]byte, 8192)}}, nil
				}
				return []runtime.Output{{Topic: "out", Key: m.Key, Value: req("out-" + id)}}, nil
			}), nil, nil
		},
	}
	stop := stagetest.Run(t, stage, env)
	out := c.Read(t, "out", 10, 60*time.Second)
	stop()
	for _, r := range out {
		if len(r.Value) > 4096 {
			t.Fatalf("the output that failed was committed")
		}
	}
	eachOnce(t, out, 10)
	mu.Lock()
	defer mu.Unlock()
	if calls["r4"] != 2 {
		t.Fatalf("r4 handled %d times, want twice (once more after the abort)", calls["r4"])
	}
}

// TestStaticMemberTakesItsPartitionsBack: a stage with an instance id is a
// static member; stopped without leaving the group (as a killed process
// is), it is replaced by the next process under the same name at once,
// not after the session timeout, which is set here far beyond the wait
// for the second half of the outputs: they can only come from the
// takeover.
func TestStaticMemberTakesItsPartitionsBack(t *testing.T) {
	c := newCluster(t)
	env := stagetest.Env(c.Kafka)
	env.InstanceID = "echo-0"
	env.SessionTimeout = 4 * time.Minute
	var calls atomic.Int64
	produce(t, c, 30, -1)
	stop := stagetest.Run(t, echoStage(&calls), env)
	c.Read(t, "out", 30, 60*time.Second)
	stop() // a static member does not leave: the group keeps waiting for it
	group := echoStage(&calls).GroupIn(c.Kafka)
	described, err := c.Admin.DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	if ms := described[group].Members; len(ms) != 1 || ms[0].InstanceID == nil || *ms[0].InstanceID != "echo-0" {
		t.Fatalf("group %s after the member stopped: %+v; want it still holding the static member echo-0", group, ms)
	}

	var recs []*kgo.Record
	for i := 30; i < 60; i++ {
		recs = append(recs, c.Record(t, "in", "k"+strconv.Itoa(i), req("r"+strconv.Itoa(i))))
	}
	c.ProduceRecords(t, recs...)
	stagetest.Run(t, echoStage(&calls), env)
	out := c.Read(t, "out", 60, 90*time.Second)
	counts := map[string]int{}
	for _, r := range out {
		counts[string(r.Key)]++
	}
	for i := 0; i < 60; i++ {
		if n := counts["k"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("input k%d has %d committed outputs, want exactly 1", i, n)
		}
	}
}

// TestTransactionalOutputsBeyondTheProducerBuffer: a transaction with far
// more outputs than the producer may hold unacknowledged
// (Env.MaxBufferedOutputs) waits for room instead of failing, and commits
// every output once.
func TestTransactionalOutputsBeyondTheProducerBuffer(t *testing.T) {
	c := newCluster(t)
	produce(t, c, 200, -1)
	var calls atomic.Int64
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 200
	env.MaxBufferedOutputs = 3
	stop := stagetest.Run(t, echoStage(&calls), env)
	out := c.Read(t, "out", 200, 60*time.Second)
	stop()
	eachOnce(t, out, 200)
}

// TestSlowPollsStayInsideTheTransactionTimeout: a poll whose records take
// three times the transaction timeout to handle would be aborted by the
// broker, which fences the stage's producer and stops the stage. The
// stage aborts it itself at half the timeout and goes on in smaller
// polls: every output once, the stage still running.
func TestSlowPollsStayInsideTheTransactionTimeout(t *testing.T) {
	c := newCluster(t)
	produce(t, c, 40, -1)
	var calls atomic.Int64
	s := echoStage(&calls)
	echo := s.Setup
	s.Setup = func(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
		h, done, err := echo(ctx, env)
		return func(ctx context.Context, in runtime.Input) ([]runtime.Output, error) {
			time.Sleep(150 * time.Millisecond)
			return h(ctx, in)
		}, done, err
	}
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 40
	env.TransactionTimeout = 2 * time.Second
	stop := stagetest.Run(t, s, env)
	out := c.Read(t, "out", 40, 90*time.Second)
	stop() // reports the stage's error, a fenced producer among them
	eachOnce(t, out, 40)
	if got := testutil.ToFloat64(env.Metrics.Txns.WithLabelValues("echo", "aborted")); got == 0 {
		t.Fatalf("no transaction was aborted: the poll of 40 slow records should have been cut")
	}
}

// eachOnce checks that the echo stage's outputs are n distinct requests,
// none twice.
func eachOnce(t *testing.T, out []*kgo.Record, n int) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range out {
		id := stagetest.Decode[*events.CatchupRequest](t, r).RequestID
		if seen[id] {
			t.Fatalf("duplicate output %s", id)
		}
		seen[id] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d distinct outputs, want %d", len(seen), n)
	}
}

// TestTransactionalPollBudget: a poll whose records take longer than the
// stage's PollBudget is not committed whole: its transaction is aborted
// once the budget is spent, the stage is rewound, and the records are
// handled again in smaller polls, each output committed once.
func TestTransactionalPollBudget(t *testing.T) {
	c := newCluster(t)
	produceOneKey(t, c, 10)
	env := stagetest.Env(c.Kafka)
	var rewound atomic.Int64
	stage := runtime.Stage{
		Name:       "echo",
		Mode:       runtime.Transactional,
		Inputs:     []string{"in"},
		PollBudget: 200 * time.Millisecond,
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return runtime.Typed(runtime.SkipTombstones, func(_ context.Context, m runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
				if m.Value.RequestID == "r2" {
					time.Sleep(300 * time.Millisecond) // a costly record
				}
				return []runtime.Output{{Topic: "out", Key: m.Key, Value: req("out-" + m.Value.RequestID)}}, nil
			}), nil, nil
		},
		Rewound: func(context.Context, runtime.Env, map[string][]int32) error {
			rewound.Add(1)
			return nil
		},
	}
	stop := stagetest.Run(t, stage, env)
	out := c.Read(t, "out", 10, 60*time.Second)
	stop()
	eachOnce(t, out, 10)
	if rewound.Load() == 0 {
		t.Fatalf("the poll that overran its budget was committed whole; want it aborted and the stage rewound")
	}
}

// produceOneKey writes n requests r0, r1, ... to "in", all under one key
// (one partition, in order).
func produceOneKey(t *testing.T, c *stagetest.Cluster, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		recs = append(recs, c.Record(t, "in", "same", req("r"+strconv.Itoa(i))))
	}
	c.ProduceRecords(t, recs...)
}
