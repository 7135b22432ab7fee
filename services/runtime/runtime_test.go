package runtime

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

func newCluster(t *testing.T) (Kafka, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := Kafka{Brokers: c.ListenAddrs(), Prefix: "t.", FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, tp := range []string{"in", "out", "dlq.echo", "dlq.sink"} {
		resp, err := adm.CreateTopic(context.Background(), 3, 1, nil, k.Topic(tp))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tp, err, resp.Err)
		}
	}
	return k, adm
}

func testEnv(k Kafka) Env {
	env := NewEnv(k, Consul{}, NewLogger(io.Discard, "error", false))
	env.Retry = Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	env.TransactionTimeout = 5 * time.Second
	env.PollRecords = 50
	return env
}

func req(id string) *events.CatchupRequest {
	return &events.CatchupRequest{RequestID: id, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.UnixMilli(1).UTC()}
}

func produce(t *testing.T, k Kafka, n int, poisonAt int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		key := []byte("k" + strconv.Itoa(i))
		v, _ := events.Default().Encode(req("r" + strconv.Itoa(i)))
		if i == poisonAt {
			v = []byte("definitely not avro")
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic("in"), Key: key, Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readAll reads a topic with read_committed until want records arrived or
// the deadline passed.
func readAll(t *testing.T, k Kafka, topic string, want int, wait time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(k.Topic(topic)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(wait)
	for len(out) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		out = append(out, fs.Records()...)
	}
	// Linger briefly for records beyond want (duplicates would show here).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	out = append(out, cl.PollFetches(ctx).Records()...)
	cancel()
	return out
}

func echoStage(calls *atomic.Int64) Stage {
	return Stage{
		Name:   "echo",
		Mode:   Transactional,
		Inputs: []string{"in"},
		Setup: func(context.Context, Env) (Handler, func(), error) {
			return func(_ context.Context, in Input) ([]Output, error) {
				calls.Add(1)
				r := in.Value.(*events.CatchupRequest)
				return []Output{{Topic: "out", Key: in.Key, Value: req("out-" + r.RequestID)}}, nil
			}, nil, nil
		},
	}
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func TestTransactionalEchoWithPoisonRecord(t *testing.T) {
	k, _ := newCluster(t)
	produce(t, k, 100, 42)
	env := testEnv(k)
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- echoStage(&calls).Run(ctx, env) }()

	out := readAll(t, k, "out", 99, 60*time.Second)
	dlq := readAll(t, k, "dlq.echo", 1, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stage: %v", err)
	}
	if len(out) != 99 {
		t.Fatalf("got %d outputs, want 99 (100 inputs, one poison)", len(out))
	}
	seen := map[string]bool{}
	for _, r := range out {
		ev, err := events.Default().Decode(context.Background(), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		id := ev.(*events.CatchupRequest).RequestID
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
	if header(d, HeaderStage) != "echo" || header(d, HeaderTopic) != k.Topic("in") ||
		header(d, HeaderOffset) == "" || header(d, HeaderPartition) == "" || header(d, HeaderError) == "" {
		t.Fatalf("dead letter headers incomplete: %+v", d.Headers)
	}
	if reason := header(d, HeaderError); !strings.Contains(reason, "not an Avro single-object encoded record") {
		t.Fatalf("dead letter reason %q does not say what is wrong", reason)
	}
}

func TestTransactionalRebalanceExactlyOnce(t *testing.T) {
	k, _ := newCluster(t)
	const n = 600
	produce(t, k, n, -1)
	env := testEnv(k)
	env.PollRecords = 20
	// Slow handlers keep transactions open while members join and leave.
	slow := func(calls *atomic.Int64) Stage {
		s := echoStage(calls)
		inner := s.Setup
		s.Setup = func(ctx context.Context, env Env) (Handler, func(), error) {
			h, c, err := inner(ctx, env)
			return func(ctx context.Context, in Input) ([]Output, error) {
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
	out := readAll(t, k, "out", n, 90*time.Second)
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
	k, adm := newCluster(t)
	produce(t, k, 30, 7)
	env := testEnv(k)
	var mu sync.Mutex
	applied := map[string]int{}
	failures := 0
	stage := Stage{
		Name:   "sink",
		Mode:   AtLeastOnce,
		Inputs: []string{"in"},
		Setup: func(context.Context, Env) (Handler, func(), error) {
			return func(_ context.Context, in Input) ([]Output, error) {
				mu.Lock()
				defer mu.Unlock()
				r := in.Value.(*events.CatchupRequest)
				if r.RequestID == "r3" && failures < 3 {
					failures++
					return nil, errors.New("effect target unavailable")
				}
				applied[r.RequestID]++
				return []Output{{Topic: "out", Key: in.Key, Value: req("applied-" + r.RequestID)}}, nil
			}, nil, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- stage.Run(ctx, env) }()
	out := readAll(t, k, "out", 29, 60*time.Second)
	dlq := readAll(t, k, "dlq.sink", 1, 30*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(out) < 29 || len(dlq) != 1 {
		t.Fatalf("outputs %d (want 29), dead letters %d (want 1)", len(out), len(dlq))
	}
	mu.Lock()
	if applied["r3"] != 1 || failures != 3 {
		t.Fatalf("r3 applied %d times after %d failures, want once after 3", applied["r3"], failures)
	}
	mu.Unlock()
	// Every offset was committed at shutdown: the group's lag is zero.
	lags, err := adm.Lag(context.Background(), stage.GroupIn(k))
	if err != nil {
		t.Fatal(err)
	}
	if total := lags[stage.GroupIn(k)].Lag.Total(); total != 0 {
		t.Fatalf("group lag %d after drain, want 0", total)
	}
}

func TestReadPartitionsStopsAtEnd(t *testing.T) {
	k, _ := newCluster(t)
	produce(t, k, 50, -1)
	// A committed transaction leaves markers at the partition's end.
	txcl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID("tx-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer txcl.Close()
	ctx := context.Background()
	if err := txcl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	v, _ := events.Default().Encode(req("tx"))
	if err := txcl.ProduceSync(ctx, &kgo.Record{Topic: k.Topic("in"), Key: []byte("k-tx"), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txcl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	n := 0
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ReadPartitions(rctx, k, "in", nil, func(*kgo.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 51 {
		t.Fatalf("read %d records, want 51", n)
	}
}
