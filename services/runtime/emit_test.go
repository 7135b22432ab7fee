package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// A timer's records go through the runtime's producer: encoded, placed
// (pinned to every partition by Fanout), counted as the stage's records
// out; Wake runs it early; a failed run is retried at its next time.
func TestEmitterTimerProducesThroughTheRuntime(t *testing.T) {
	c := newCluster(t)
	env := stagetest.Env(c.Kafka)
	em, err := runtime.NewEmitter(env, "ticker")
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close()
	wake := make(chan struct{}, 1)
	runs := make(chan runtime.Tick, 10)
	failed := false
	stop := em.Every(context.Background(), runtime.Timer{
		Name: "test",
		Next: func() time.Duration { return time.Hour },
		Wake: wake,
		Run: func(ctx context.Context, tick runtime.Tick) error {
			runs <- tick
			if !failed {
				failed = true
				return errors.New("the first run fails")
			}
			b, err := env.Codec.Encode(req("tick"))
			if err != nil {
				return err
			}
			return em.Emit(ctx, runtime.Fanout("out", 3, []byte("k"), b)...)
		},
	})
	for range 2 {
		wake <- struct{}{}
		select {
		case tick := <-runs:
			if !tick.Woken {
				t.Error("a run asked for by Wake is not Woken")
			}
		case <-time.After(time.Minute):
			t.Fatal("Wake did not run the timer")
		}
	}
	out := c.Read(t, "out", 3, time.Minute)
	stop()
	parts := map[int32]bool{}
	for _, r := range out {
		parts[r.Partition] = true
	}
	if len(out) != 3 || len(parts) != 3 {
		t.Errorf("%d records on partitions %v, want one on each of 3", len(out), parts)
	}
	if got := testutil.ToFloat64(env.Metrics.RecordsOut.WithLabelValues("ticker", "out")); got != 3 {
		t.Errorf("records out counted %v, want 3", got)
	}

	// The dead letter of a followed record is the runtime's.
	in := runtime.Input{Topic: "in", Partition: 1, Offset: 7, Key: []byte("k"), Raw: []byte("junk")}
	if err := em.DeadLetter(context.Background(), in, errors.New("not a thing")); err != nil {
		t.Fatal(err)
	}
	d := c.Read(t, "dlq.ticker", 1, time.Minute)[0]
	if stagetest.Header(d, runtime.HeaderError) != "not a thing" || stagetest.Header(d, runtime.HeaderOffset) != "7" ||
		stagetest.Header(d, runtime.HeaderTopic) != c.Kafka.Topic("in") || string(d.Value) != "junk" {
		t.Errorf("dead letter %q with headers %+v", d.Value, d.Headers)
	}
}
