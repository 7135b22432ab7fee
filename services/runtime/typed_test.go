package runtime_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

func TestTypedChecksTypesAndTombstonesOnce(t *testing.T) {
	c := newCluster(t)
	c.CreateTopics(t, nil, "in.pass", "in.refuse")
	k := c.Kafka
	change := &events.PolicyChange{ChangeID: "c1", PolicyID: "p1", Action: events.ActionRemoved, ChangedAt: time.UnixMilli(1).UTC()}
	// Keyed alike, so the records of each topic stay in order on one
	// partition.
	c.ProduceRecords(t,
		c.Record(t, "in", "x", nil),              // skipped
		c.Record(t, "in", "x", change),           // another event: dead-lettered
		c.Record(t, "in", "x", req("r1")),        // handled
		c.Record(t, "in.pass", "x", nil),         // handed through
		c.Record(t, "in.refuse", "x", nil),       // dead-lettered
		c.Record(t, "in.refuse", "x", req("r2")), // handled
	)
	echo := func(_ context.Context, m runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
		return []runtime.Output{{Topic: "out", Key: m.Key, Value: req("out-" + m.Value.RequestID)}}, nil
	}
	stage := runtime.Stage{
		Name:   "echo",
		Mode:   runtime.Transactional,
		Inputs: []string{"in", "in.pass", "in.refuse"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return runtime.Route(map[string]runtime.Handler{
				"in": runtime.Typed(runtime.SkipTombstones, echo),
				"in.pass": runtime.Typed(runtime.PassTombstones, func(_ context.Context, m runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
					if m.Value != nil {
						return nil, fmt.Errorf("want the tombstone of %s, got a value", m.Key)
					}
					return []runtime.Output{{Topic: "out", Key: m.Key, Value: req("deleted-" + string(m.Key))}}, nil
				}),
				"in.refuse": runtime.Typed(runtime.RefuseTombstones, echo),
			}), nil, nil
		},
	}
	stop := stagetest.Run(t, stage, stagetest.Env(k))
	out := c.Read(t, "out", 3, 60*time.Second)
	c.Read(t, "dlq.echo", 2, 30*time.Second)
	stop()

	var ids []string
	for id := range outputIDs(t, out) {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if got, want := fmt.Sprint(ids), "[deleted-x out-r1 out-r2]"; got != want {
		t.Fatalf("outputs %s, want %s", got, want)
	}
	// The stage committed everything before it stopped: the dead-letter
	// topic, read to its end, holds every dead letter.
	var dlq []*kgo.Record
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := runtime.ReadPartitions(rctx, k, "dlq.echo", nil, func(r *kgo.Record) error { dlq = append(dlq, r); return nil }); err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, d := range dlq {
		topic := stagetest.Header(d, runtime.HeaderTopic)
		where := fmt.Sprintf("%s[%s]@%s", topic[len(k.Prefix):], stagetest.Header(d, runtime.HeaderPartition), stagetest.Header(d, runtime.HeaderOffset))
		reason := stagetest.Header(d, runtime.HeaderError)
		switch topic {
		case k.Topic("in"):
			if want := "record at " + where + " is " + events.SchemaPolicyChange + ", want " + events.SchemaCatchupRequest; reason != want {
				t.Errorf("dead letter of %s says %q, want %q", topic, reason, want)
			}
		case k.Topic("in.refuse"):
			if want := "record at " + where + " is a tombstone (no value), which in.refuse never carries: want " + events.SchemaCatchupRequest; reason != want || d.Value != nil {
				t.Errorf("dead letter of %s says %q (value %x), want %q and the tombstone", topic, reason, d.Value, want)
			}
		}
		reasons[topic] = true
	}
	if len(dlq) != 2 || !reasons[k.Topic("in")] || !reasons[k.Topic("in.refuse")] {
		t.Fatalf("%d dead letters from %v, want one of in and one of in.refuse", len(dlq), reasons)
	}
}

func TestTypedBatchHandsOnlyItsTypeAndKeepsOrder(t *testing.T) {
	other := &events.PolicyChange{ChangeID: "c1"}
	ins := []runtime.Input{
		{Topic: "in", Offset: 0, Value: req("r0"), Raw: []byte{1}},
		{Topic: "in", Offset: 1, Raw: nil}, // a tombstone
		{Topic: "in", Offset: 2, Value: other, Raw: []byte{1}},
		{Topic: "in", Offset: 3, Value: req("r3"), Raw: []byte{1}},
	}
	var seen []string
	h := runtime.TypedBatch(runtime.SkipTombstones, func(_ context.Context, ms []runtime.Msg[*events.CatchupRequest]) []runtime.Outcome {
		out := make([]runtime.Outcome, len(ms))
		for i, m := range ms {
			seen = append(seen, fmt.Sprintf("%s@%d", m.Value.RequestID, m.Offset))
			out[i].Outputs = []runtime.Output{{Topic: "out", Value: req("out-" + m.Value.RequestID)}}
		}
		return out
	})
	out := h(context.Background(), ins)
	if got := fmt.Sprint(seen); got != "[r0@0 r3@3]" {
		t.Fatalf("the handler saw %s, want [r0@0 r3@3]", got)
	}
	if len(out) != 4 || len(out[0].Outputs) != 1 || len(out[3].Outputs) != 1 || out[1].Err != nil || len(out[1].Outputs) != 0 {
		t.Fatalf("outcomes %+v: want outputs for inputs 0 and 3 and nothing for the tombstone", out)
	}
	if !runtime.IsPermanent(out[2].Err) || out[2].Err.Error() != "record at in[0]@2 is "+events.SchemaPolicyChange+", want "+events.SchemaCatchupRequest {
		t.Fatalf("the input of another type failed with %v", out[2].Err)
	}
}
