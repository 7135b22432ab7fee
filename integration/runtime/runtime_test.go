// Package runtime_test checks the shared stage runtime's guarantees on the
// chosen backend: exactly-once across rebalances and a killed member, and
// dead-lettering of poison records.
package runtime_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// childEnv marks a re-executed test binary that runs one stage member
// until it is killed.
const childEnv = "PF_RUNTIME_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	backend.Main(m)
}

func req(id string) *events.CatchupRequest {
	return &events.CatchupRequest{RequestID: id, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.UnixMilli(1).UTC()}
}

// echo maps each input to one output with the same key; slow keeps
// transactions open long enough for members to join, leave and die in the
// middle of them.
func echo(slow time.Duration) runtime.Stage {
	return runtime.Stage{
		Name:   "echo",
		Mode:   runtime.Transactional,
		Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) {
				time.Sleep(slow)
				r := in.Value.(*events.CatchupRequest)
				return []runtime.Output{{Topic: "out", Key: in.Key, Value: req("out-" + r.RequestID)}}, nil
			}, nil, nil
		},
	}
}

func env(k runtime.Kafka) runtime.Env {
	e := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	e.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	e.TransactionTimeout = 5 * time.Second
	e.SessionTimeout = 6 * time.Second
	e.PollRecords = 20
	return e
}

func runChild() {
	k := runtime.Kafka{
		Brokers:        strings.Split(os.Getenv("PF_CHILD_BROKERS"), ","),
		Prefix:         os.Getenv("PF_CHILD_PREFIX"),
		FetchMaxWait:   backend.FetchMaxWait,
		MetadataMinAge: backend.MetadataMinAge,
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	if err := echo(2*time.Millisecond).Run(ctx, env(k)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// inPartitions is the partition count of the test topics.
const inPartitions = 3

// holdings makes s tell which partitions of "in" it holds; held lists
// them, sorted.
func holdings(s *runtime.Stage) (held func() []int32) {
	var mu sync.Mutex
	parts := map[int32]bool{}
	s.Assigned = func(_ context.Context, _ runtime.Env, assigned map[string][]int32) error {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range assigned["in"] {
			parts[p] = true
		}
		return nil
	}
	s.Revoked = func(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range revoked["in"] {
			delete(parts, p)
		}
	}
	return func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Collect(maps.Keys(parts))
		slices.Sort(out)
		return out
	}
}

func setup(t *testing.T, n, poisonAt int) (*backend.Backend, runtime.Kafka) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	k := b.Kafka(prefix)
	adm := b.Admin(t)
	for _, tp := range []string{"in", "out", topology.DLQ("echo")} {
		resp, err := adm.CreateTopic(context.Background(), inPartitions, -1, nil, k.Topic(tp))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", k.Topic(tp), err, resp.Err)
		}
	}
	opts, _ := k.ClientOpts()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		v, _ := events.Default().Encode(req("r" + strconv.Itoa(i)))
		if i == poisonAt {
			v = []byte{0xc3, 0x01, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 1}
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic("in"), Key: []byte("k" + strconv.Itoa(i)), Value: v})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return b, k
}

// committed reads a topic read_committed until want records arrived (or
// the deadline), then a little longer so duplicates would show.
func committed(t *testing.T, k runtime.Kafka, topic string, want int, wait time.Duration) []*kgo.Record {
	t.Helper()
	opts, _ := k.ClientOpts()
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(k.Topic(topic)), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(wait)
	for len(out) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		out = append(out, cl.PollFetches(ctx).Records()...)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	out = append(out, cl.PollFetches(ctx).Records()...)
	cancel()
	return out
}

func count(t *testing.T, k runtime.Kafka, topic string) int {
	t.Helper()
	n := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := runtime.ReadPartitions(ctx, k, topic, nil, func(*kgo.Record) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestExactlyOnceAcrossRebalanceAndKilledMember(t *testing.T) {
	const n = 500
	_, k := setup(t, n, -1)

	// Member A is a separate process so it can be killed for real.
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "PF_CHILD_BROKERS="+strings.Join(k.Brokers, ","), "PF_CHILD_PREFIX="+k.Prefix)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	testkit.Eventually(t, 2*time.Minute, func() error {
		if n := count(t, k, "out"); n < 50 {
			return fmt.Errorf("member A produced %d records, want 50 before member B joins", n)
		}
		return nil
	})

	// Member B joins: a forced rebalance while A has a transaction open.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b := echo(2 * time.Millisecond)
	held := holdings(&b)
	go func() { done <- b.Run(ctx, env(k)) }()
	defer func() { cancel(); <-done }()
	// The rebalance happened: B holds some of in's partitions, A the rest.
	testkit.Eventually(t, time.Minute, func() error {
		if got := held(); len(got) == 0 || len(got) == inPartitions {
			return fmt.Errorf("member B holds partitions %v of in's %d; want some, and member A the rest", got, inPartitions)
		}
		return nil
	})

	// A dies mid-batch: no drain, no leave, an open transaction.
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true
	// A's session expires and B is given A's partitions too.
	testkit.Eventually(t, time.Minute, func() error {
		if got := held(); len(got) != inPartitions {
			return fmt.Errorf("member B holds partitions %v of in's %d after member A died; want all", got, inPartitions)
		}
		return nil
	})

	out := committed(t, k, "out", n, 3*time.Minute)
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Key)]++
	}
	missing, dup := 0, 0
	for i := 0; i < n; i++ {
		switch c := seen["k"+strconv.Itoa(i)]; {
		case c == 0:
			missing++
		case c > 1:
			dup++
		}
	}
	if missing > 0 || dup > 0 {
		t.Fatalf("%d inputs have no committed output and %d have more than one (of %d)", missing, dup, n)
	}
}

func TestPoisonRecordGoesToDLQAndNextIsProcessed(t *testing.T) {
	const n = 40
	_, k := setup(t, n, 17)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- echo(0).Run(ctx, env(k)) }()
	out := committed(t, k, "out", n-1, 2*time.Minute)
	dlq := committed(t, k, topology.DLQ("echo"), 1, time.Minute)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, r := range out {
		keys[string(r.Key)] = true
	}
	if len(out) != n-1 || keys["k17"] || !keys["k18"] {
		t.Fatalf("%d outputs (want %d), poison produced output: %v, next record processed: %v", len(out), n-1, keys["k17"], keys["k18"])
	}
	if len(dlq) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dlq))
	}
	h := map[string]string{}
	for _, x := range dlq[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if string(dlq[0].Key) != "k17" || h[runtime.HeaderStage] != "echo" || h[runtime.HeaderTopic] != k.Topic("in") ||
		h[runtime.HeaderOffset] == "" || h[runtime.HeaderPartition] == "" || !strings.Contains(h[runtime.HeaderError], "unknown writer schema") {
		t.Fatalf("dead letter key %q headers %v", dlq[0].Key, h)
	}
}
