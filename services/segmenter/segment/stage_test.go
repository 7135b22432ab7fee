package segment

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

const partitions = 3

func newCluster(t *testing.T) runtime.Kafka {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := runtime.Kafka{Brokers: c.ListenAddrs(), Prefix: "t.", FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// The input takes whole deltas, several MiB; the output keeps the
	// broker's default record limit, which every piece must fit.
	big := map[string]*string{"max.message.bytes": strPtr(topology.MaxMessageBytes)}
	for tp, cfg := range map[string]map[string]*string{
		topology.PolicyMatches:                big,
		topology.PolicySegments:               nil,
		topology.DLQ(topology.StageSegmenter): big,
	} {
		resp, err := adm.CreateTopic(context.Background(), partitions, 1, cfg, k.Topic(tp))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tp, err, resp.Err)
		}
	}
	return k
}

func strPtr(s string) *string { return &s }

func testEnv(k runtime.Kafka) runtime.Env {
	env := runtime.NewEnv(k, runtime.Consul{}, runtime.NewLogger(io.Discard, "error", false))
	env.Retry = runtime.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}
	env.TransactionTimeout = 10 * time.Second
	return env
}

func produce(t *testing.T, k runtime.Kafka, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ProducerBatchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range recs {
		r.Topic = k.Topic(r.Topic)
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func matchRecord(t *testing.T, m *events.PolicyMatch) *kgo.Record {
	t.Helper()
	b, err := events.Default().Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: topology.PolicyMatches, Key: []byte(m.DeploymentID), Value: b}
}

// readUntil reads a topic read_committed until done says so or the
// deadline passes, then lingers briefly to catch anything extra.
func readUntil(t *testing.T, k runtime.Kafka, topic string, wait time.Duration, done func([]*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(k.Topic(topic)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(wait)
	for !done(out) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		out = append(out, cl.PollFetches(ctx).Records()...)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	out = append(out, cl.PollFetches(ctx).Records()...)
	cancel()
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func TestStageCutsBigDeltasAndPassesSmallOnes(t *testing.T) {
	k := newCluster(t)
	const limit = 256 << 10
	small := &events.PolicyMatch{
		UpdateID: "u-small", DeploymentID: "dep-small", CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Components: []events.ComponentDelta{{ComponentID: "vm_2_9d982", UpdatedPolicies: []events.Policy{{
			PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
			Body: `{"config":{"min_memory":"8GB"},"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222"}`,
		}}}},
	}
	big := bigMatch(4, 3<<20, 60<<10)
	big.DeploymentID = "dep-big"
	tooBig := &events.PolicyMatch{UpdateID: "u-huge", DeploymentID: "dep-huge", Components: []events.ComponentDelta{{
		ComponentID: "c", UpdatedPolicies: []events.Policy{pol("DCAE.Config_huge", "3", 300<<10)},
	}}}
	produce(t, k, matchRecord(t, small), matchRecord(t, big), matchRecord(t, tooBig))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- StageWith(Config{MaxSegmentBytes: limit}).Run(ctx, testEnv(k)) }()

	byDep := func(recs []*kgo.Record) map[string][]events.PolicySegment {
		out := map[string][]events.PolicySegment{}
		for _, r := range recs {
			ev, err := events.Default().Decode(context.Background(), r.Value)
			if err != nil {
				t.Fatal(err)
			}
			s := *ev.(*events.PolicySegment)
			if string(r.Key) != s.DeploymentID {
				t.Fatalf("segment of %s keyed %q", s.DeploymentID, r.Key)
			}
			if len(r.Value) > limit {
				t.Fatalf("segment %d/%d of %s is %d bytes, over %d", s.Index, s.Count, s.DeploymentID, len(r.Value), limit)
			}
			out[s.DeploymentID] = append(out[s.DeploymentID], s)
		}
		return out
	}
	complete := func(recs []*kgo.Record) bool {
		segs := byDep(recs)
		b := segs["dep-big"]
		return len(segs["dep-small"]) == 1 && len(b) > 0 && len(b) == int(b[0].Count)
	}
	out := readUntil(t, k, topology.PolicySegments, 60*time.Second, complete)
	dlq := readUntil(t, k, topology.DLQ(topology.StageSegmenter), 30*time.Second, func(r []*kgo.Record) bool { return len(r) >= 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stage: %v", err)
	}

	segs := byDep(out)
	if s := segs["dep-small"]; len(s) != 1 || s[0].Index != 1 || s[0].Count != 1 || !reflect.DeepEqual(normalize(&events.PolicyMatch{Components: s[0].Components}), normalize(&events.PolicyMatch{Components: small.Components})) {
		t.Fatalf("small delta: got %+v, want one segment 1/1 with the delta", s)
	}
	b := segs["dep-big"]
	if len(b) < 2 {
		t.Fatalf("big delta: got %d segments, want several", len(b))
	}
	for i, s := range b {
		if s.Index != int32(i+1) || s.Count != int32(len(b)) || s.UpdateID != big.UpdateID {
			t.Fatalf("big delta: segment at position %d is %d/%d of %s, want %d/%d of %s", i, s.Index, s.Count, s.UpdateID, i+1, len(b), big.UpdateID)
		}
	}
	back, err := Assemble(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(byComponent(back), byComponent(big)) {
		t.Fatal("big delta: the segments on the topic do not reassemble to the original deltas")
	}
	if len(segs["dep-huge"]) != 0 {
		t.Fatalf("a delta that cannot be cut produced %d segments", len(segs["dep-huge"]))
	}
	if len(dlq) != 1 || string(dlq[0].Key) != "dep-huge" {
		t.Fatalf("got %d dead letters, want the one of dep-huge", len(dlq))
	}
	if reason := header(dlq[0], runtime.HeaderError); !strings.Contains(reason, "DCAE.Config_huge") || !strings.Contains(reason, ErrTooLarge.Error()) {
		t.Fatalf("dead letter reason %q does not say which policy does not fit", reason)
	}
}
