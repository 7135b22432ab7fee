package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// passThrough answers each request with "out-<id>" on "out".
func passThrough(in runtime.Input) []runtime.Output {
	r := in.Value.(*events.CatchupRequest)
	return []runtime.Output{{Topic: "out", Key: in.Key, Value: req("out-" + r.RequestID)}}
}

// outputIDs returns the request ids of records of "out", counted.
func outputIDs(t *testing.T, recs []*kgo.Record) map[string]int {
	t.Helper()
	ids := map[string]int{}
	for _, r := range recs {
		ids[stagetest.Decode[*events.CatchupRequest](t, r).RequestID]++
	}
	return ids
}

func TestRetryThenSuccessAndPermanentToDeadLetter(t *testing.T) {
	c := newCluster(t)
	k := c.Kafka
	var recs []*kgo.Record
	for i := 0; i < 20; i++ {
		rec := c.Record(t, "in", "k"+strconv.Itoa(i), req("r"+strconv.Itoa(i)))
		rec.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("t" + strconv.Itoa(i))}}
		if i == 11 {
			// A producer's own reason must not pass for the stage's.
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: runtime.HeaderError, Value: []byte("forged by the producer")})
		}
		recs = append(recs, rec)
	}
	c.ProduceRecords(t, recs...)
	var mu sync.Mutex
	failures := 0
	stage := runtime.Stage{
		Name:   "echo",
		Mode:   runtime.Transactional,
		Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) {
				mu.Lock()
				defer mu.Unlock()
				switch in.Value.(*events.CatchupRequest).RequestID {
				case "r3":
					if failures < 2 {
						failures++
						return nil, errors.New("downstream unavailable")
					}
				case "r11":
					return nil, runtime.Permanentf("request r11 is refused")
				}
				return passThrough(in), nil
			}, nil, nil
		},
	}
	stop := stagetest.Run(t, stage, stagetest.Env(k))
	out := c.Read(t, "out", 19, 60*time.Second)
	dlq := c.Read(t, "dlq.echo", 1, 30*time.Second)
	stop()

	ids := outputIDs(t, out)
	for i := 0; i < 20; i++ {
		id, want := "out-r"+strconv.Itoa(i), 1
		if i == 11 {
			want = 0
		}
		if ids[id] != want {
			t.Fatalf("%s produced %d times, want %d (outputs %v)", id, ids[id], want, ids)
		}
	}
	mu.Lock()
	if failures != 2 {
		t.Fatalf("r3 failed %d times before it succeeded, want 2", failures)
	}
	mu.Unlock()
	if len(dlq) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dlq))
	}
	d := dlq[0]
	if string(d.Key) != "k11" || string(d.Value) != string(recs[11].Value) {
		t.Fatalf("dead letter carries %q=%x, want the original record k11", d.Key, d.Value)
	}
	h := func(key string) string { return stagetest.Header(d, key) }
	if h("trace") != "t11" {
		t.Fatalf("dead letter lost the input's own header: %+v", d.Headers)
	}
	if h(runtime.HeaderError) != "request r11 is refused" || h(runtime.HeaderStage) != "echo" || h(runtime.HeaderTopic) != k.Topic("in") {
		t.Fatalf("dead letter headers say error %q, stage %q, topic %q", h(runtime.HeaderError), h(runtime.HeaderStage), h(runtime.HeaderTopic))
	}
	if d.Headers[0].Key != runtime.HeaderError || h(runtime.HeaderOriginalPrefix+runtime.HeaderError) != "forged by the producer" {
		t.Fatalf("the producer's own %s header is not kept apart after the stage's reason: %+v", runtime.HeaderError, d.Headers)
	}
	for _, hd := range d.Headers[1:] {
		if hd.Key == runtime.HeaderError {
			t.Fatalf("a second %s header on the dead letter: %+v", runtime.HeaderError, d.Headers)
		}
	}
	if want := strconv.Itoa(int(recs[11].Partition)); h(runtime.HeaderPartition) != want {
		t.Fatalf("dead letter partition header %q, want %s", h(runtime.HeaderPartition), want)
	}
	if want := strconv.FormatInt(recs[11].Offset, 10); h(runtime.HeaderOffset) != want {
		t.Fatalf("dead letter offset header %q, want %s", h(runtime.HeaderOffset), want)
	}
	if _, err := time.Parse(time.RFC3339Nano, h(runtime.HeaderFailedAt)); err != nil {
		t.Fatalf("dead letter failed_at header %q: %v", h(runtime.HeaderFailedAt), err)
	}
}

func TestPanicIsDeadLetteredAndTheStageGoesOn(t *testing.T) {
	for _, mode := range []string{"transactional", "at-least-once batch"} {
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t)
			// One partition's worth of order: every record keyed alike.
			var recs []*kgo.Record
			for i := 0; i < 10; i++ {
				recs = append(recs, c.Record(t, "in", "same", req("r"+strconv.Itoa(i))))
			}
			c.ProduceRecords(t, recs...)
			panicky := func(in runtime.Input) []runtime.Output {
				if in.Value.(*events.CatchupRequest).RequestID == "r5" {
					var m map[string]int
					m["r5"]++ // a nil map: the handler's own bug
				}
				return passThrough(in)
			}
			stage := runtime.Stage{Name: "echo", Mode: runtime.Transactional, Inputs: []string{"in"}}
			if mode == "transactional" {
				stage.Setup = func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
					return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) { return panicky(in), nil }, nil, nil
				}
			} else {
				stage.Mode = runtime.AtLeastOnce
				stage.SetupBatch = func(context.Context, runtime.Env) (runtime.BatchHandler, func(), error) {
					return func(_ context.Context, ins []runtime.Input) []runtime.Outcome {
						out := make([]runtime.Outcome, len(ins))
						for i, in := range ins {
							out[i].Outputs = panicky(in)
						}
						return out
					}, nil, nil
				}
			}
			stop := stagetest.Run(t, stage, stagetest.Env(c.Kafka))
			out := c.Read(t, "out", 9, 60*time.Second)
			dlq := c.Read(t, "dlq.echo", 1, 30*time.Second)
			stop()

			ids := outputIDs(t, out)
			for i := 0; i < 10; i++ {
				id, want := "out-r"+strconv.Itoa(i), 1
				if i == 5 {
					want = 0
				}
				if ids[id] != want {
					t.Fatalf("%s produced %d times, want %d (outputs %v)", id, ids[id], want, ids)
				}
			}
			if len(dlq) != 1 || string(dlq[0].Value) != string(recs[5].Value) {
				t.Fatalf("got %d dead letters, want the record of r5 alone", len(dlq))
			}
			reason := stagetest.Header(dlq[0], runtime.HeaderError)
			for _, want := range []string{"handler panicked: assignment to entry in nil map", "middleware_test.go:"} {
				if !strings.Contains(reason, want) {
					t.Fatalf("dead letter reason %q does not contain %q", reason, want)
				}
			}
		})
	}
}

func TestRetryStopsWaitingWhenStopped(t *testing.T) {
	stop := make(chan struct{})
	calls := 0
	h := runtime.Chain(func(_ context.Context, ins []runtime.Input) []runtime.Outcome {
		calls++
		out := make([]runtime.Outcome, len(ins))
		out[1].Err = errors.New("downstream unavailable")
		close(stop)
		return out
	}, runtime.Retry(runtime.Backoff{Initial: time.Hour, Max: time.Hour}, stop, nil))
	out := h(context.Background(), make([]runtime.Input, 3))
	if calls != 1 {
		t.Fatalf("the handler was called %d times, want once", calls)
	}
	if out[0].Err != nil || out[1].Err == nil || out[2].Err == nil {
		t.Fatalf("outcomes %+v: want the first input handled and the rest not", out)
	}
}

// TestLargePollWithMalformedRecordsDecodedAhead: a poll large enough for
// the records to be decoded ahead on every core still hands the handler
// each record once, in each partition's order, and dead-letters every
// malformed record with the reason, in both modes.
func TestLargePollWithMalformedRecordsDecodedAhead(t *testing.T) {
	for _, mode := range []runtime.Mode{runtime.Transactional, runtime.AtLeastOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newCluster(t)
			const n = 1000
			var recs []*kgo.Record
			bad := map[string]bool{}
			for i := 0; i < n; i++ {
				key := "k" + strconv.Itoa(i%7)
				rec := c.Record(t, "in", key, req("r"+strconv.Itoa(i)))
				if i%97 == 5 {
					rec.Value = []byte("not avro " + strconv.Itoa(i))
					bad[string(rec.Value)] = true
				}
				recs = append(recs, rec)
			}
			c.ProduceRecords(t, recs...)
			var mu sync.Mutex
			seen := map[string][]int{} // key -> request numbers, in handling order
			stage := runtime.Stage{
				Name: "echo", Mode: mode, Inputs: []string{"in"},
				Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
					return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) {
						mu.Lock()
						defer mu.Unlock()
						id, _ := strconv.Atoi(strings.TrimPrefix(in.Value.(*events.CatchupRequest).RequestID, "r"))
						seen[string(in.Key)] = append(seen[string(in.Key)], id)
						return passThrough(in), nil
					}, nil, nil
				},
			}
			stop := stagetest.Run(t, stage, stagetest.Env(c.Kafka))
			out := c.Read(t, "out", n-len(bad), 60*time.Second)
			dlq := c.Read(t, "dlq.echo", len(bad), 30*time.Second)
			stop()
			if ids := outputIDs(t, out); len(ids) != n-len(bad) {
				t.Fatalf("%d distinct outputs, want %d", len(ids), n-len(bad))
			}
			for _, d := range dlq {
				if !bad[string(d.Value)] {
					t.Errorf("dead letter %q is not one of the malformed records", d.Value)
				}
				if e := stagetest.Header(d, runtime.HeaderError); !strings.Contains(e, "not an Avro single-object encoded record") {
					t.Errorf("dead letter %q says %q, want the reason it is malformed", d.Value, e)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for key, ids := range seen {
				for i := 1; i < len(ids); i++ {
					if ids[i] <= ids[i-1] {
						t.Fatalf("key %s handled out of order: %v", key, ids)
					}
				}
			}
		})
	}
}

// TestRetryAfterComesSoonerThanTheBackoff: an input whose error says when
// it may succeed (RetryAfter) is handed in again then, not after a longer
// backoff, and never sooner than the first backoff; the error is still
// what it wraps.
func TestRetryAfterComesSoonerThanTheBackoff(t *testing.T) {
	waiting := errors.New("another process's lease")
	var delays []time.Duration
	calls := 0
	h := runtime.Chain(func(_ context.Context, ins []runtime.Input) []runtime.Outcome {
		calls++
		out := make([]runtime.Outcome, len(ins))
		switch calls {
		case 1:
			out[0].Err = runtime.RetryAfter(fmt.Errorf("wait: %w", waiting), time.Hour) // the backoff is sooner
		case 2:
			out[0].Err = runtime.RetryAfter(waiting, 0) // no sooner than the first backoff
		case 3:
			out[0].Err = runtime.RetryAfter(waiting, 25*time.Millisecond) // sooner than the backoff, 40ms
		}
		return out
	}, runtime.Retry(runtime.Backoff{Initial: 10 * time.Millisecond, Max: time.Second}, nil, func(_ runtime.Input, _ int, err error, d time.Duration) {
		if !errors.Is(err, waiting) {
			t.Errorf("retried error %v does not wrap what RetryAfter was given", err)
		}
		delays = append(delays, d)
	}))
	start := time.Now()
	if out := h(context.Background(), make([]runtime.Input, 1)); out[0].Err != nil {
		t.Fatalf("outcome %v", out[0].Err)
	}
	want := []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond}
	if calls != 4 || !slices.Equal(delays, want) {
		t.Fatalf("%d calls, retried after %v; want 4 calls, after %v", calls, delays, want)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("retries took %s", took)
	}
	if d, ok := runtime.RetryDelay(fmt.Errorf("wrapped: %w", runtime.RetryAfter(waiting, time.Second))); !ok || d != time.Second {
		t.Fatalf("RetryDelay of a wrapped RetryAfter: %s %v", d, ok)
	}
	if _, ok := runtime.RetryDelay(waiting); ok {
		t.Fatal("RetryDelay of a plain error says a delay")
	}
}
