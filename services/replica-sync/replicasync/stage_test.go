package replicasync

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// latest folds acm.sync records into the latest state per key.
func latest(t *testing.T, recs []*kgo.Record) map[string]*events.ReplicaState {
	t.Helper()
	out := map[string]*events.ReplicaState{}
	for _, r := range recs {
		if r.Value == nil {
			delete(out, string(r.Key))
			continue
		}
		out[string(r.Key)] = stagetest.Decode[*events.ReplicaState](t, r)
	}
	return out
}

func TestStage(t *testing.T) {
	c := stagetest.NewCluster(t, 3, topology.ACMRuntime, topology.ACMSync, topology.DLQ(topology.StageReplicaSync))
	stagetest.Run(t, StageWith(Config{OfflineAfter: 300 * time.Millisecond, TickEvery: 50 * time.Millisecond}), stagetest.Env(c.Kafka))
	out := c.Reader(t, topology.ACMSync)

	now := time.Now()
	// Participants on every partition: each partition's owner checks its own.
	others := []string{"p2", "p3", "p4", "p5", "p6"}
	for _, p := range append([]string{"p1"}, others...) {
		c.Produce(t, topology.ACMRuntime, p, &events.ParticipantMessage{MessageID: "m1" + p, ParticipantID: p, ReplicaID: "r1", Kind: acm.MsgRegister, SupportedElementTypes: []string{"consul"}, Properties: "{}", SentAt: now})
	}
	inst, elem, st := "i1", "e1", acm.Deployed
	c.Produce(t, topology.ACMRuntime, "p1", &events.ParticipantMessage{MessageID: "m2", ParticipantID: "p1", ReplicaID: "r1", Kind: acm.MsgResult, InstanceID: &inst, ElementID: &elem, State: &st, ElementType: "consul", Properties: `{"k":"v"}`, Revision: 3, SentAt: now})

	key := acm.ReplicaKey("p1", "r1")
	var got map[string]*events.ReplicaState
	testkit.Eventually(t, 30*time.Second, func() error {
		got = latest(t, out.Records())
		off := 0
		for _, p := range append([]string{"p1"}, others...) {
			if r := got[acm.ReplicaKey(p, "r1")]; r != nil && r.State == acm.OffLine {
				off++
			}
		}
		if off != 1+len(others) {
			out.Poll(200 * time.Millisecond)
			return fmt.Errorf("%d of %d replicas r1 OFF_LINE in the registry", off, 1+len(others))
		}
		return nil
	})
	for _, p := range others {
		if r := got[acm.ReplicaKey(p, "r1")]; r == nil || r.State != acm.OffLine {
			t.Errorf("registry entry of %s/r1: %+v, want OFF_LINE", p, r)
		}
	}
	r := got[key]
	if r == nil || r.State != acm.OffLine || !strings.Contains(r.Detail, "no heartbeat") || r.SupportedElementTypes[0] != "consul" {
		t.Fatalf("registry entry of r1: %+v, want OFF_LINE after 300ms of silence", r)
	}
	// It was ON_LINE before.
	online := false
	for _, rec := range out.Records() {
		if string(rec.Key) == key && stagetest.Decode[*events.ReplicaState](t, rec).State == acm.OnLine {
			online = true
		}
	}
	if !online {
		t.Error("r1 was never ON_LINE")
	}
	e := got[acm.ElementKey("p1", "i1", "e1")]
	if e == nil || e.State != acm.Deployed || e.Properties != `{"k":"v"}` || e.ReplicaID != "r1" || e.Revision != 3 {
		t.Fatalf("element: %+v", e)
	}

	// A message replica-sync cannot apply is dead-lettered with the reason.
	c.Produce(t, topology.ACMRuntime, "p1", &events.ParticipantMessage{MessageID: "m3", ParticipantID: "p1", ReplicaID: "r1", Kind: acm.MsgResult, State: &st, Properties: "{}", SentAt: now})
	dlq := c.Read(t, topology.DLQ(topology.StageReplicaSync), 1, 30*time.Second)
	if len(dlq) != 1 || !strings.Contains(stagetest.Header(dlq[0], runtime.HeaderError), "names neither an instance element") {
		t.Fatalf("dead letters: %d, want 1 with the reason", len(dlq))
	}
}

// A resync of every participant, written to every partition of
// acm.runtime as the North API writes it, rewrites every participant's
// state, whichever member of replica-sync owns its partition.
func TestResyncEveryParticipantWithSeveralMembers(t *testing.T) {
	c := stagetest.NewCluster(t, 3, topology.ACMRuntime, topology.ACMSync, topology.DLQ(topology.StageReplicaSync))
	cfg := Config{OfflineAfter: time.Hour, TickEvery: time.Hour}
	stagetest.Run(t, StageWith(cfg), stagetest.Env(c.Kafka))
	stagetest.Run(t, StageWith(cfg), stagetest.Env(c.Kafka))
	out := c.Reader(t, topology.ACMSync)

	now := time.Now()
	ps := []string{"p1", "p2", "p3", "p4", "p5", "p6"}
	where := runtime.Partitioner().ForTopic(c.Kafka.Topic(topology.ACMRuntime))
	on := map[int]bool{}
	for _, p := range ps {
		on[where.Partition(&kgo.Record{Key: []byte(p)}, 3)] = true
		c.Produce(t, topology.ACMRuntime, p, &events.ParticipantMessage{MessageID: "reg" + p, ParticipantID: p, ReplicaID: "r1", Kind: acm.MsgRegister, SupportedElementTypes: []string{"consul"}, Properties: "{}", SentAt: now})
	}
	if len(on) < 2 {
		t.Fatalf("the participants are on partitions %v; the test wants several", on)
	}
	version := func(recs []*kgo.Record) map[string]int64 {
		got := map[string]int64{}
		for k, st := range latest(t, recs) {
			got[k] = st.Version
		}
		return got
	}
	registered := out.Until(len(ps), 30*time.Second)
	before := version(registered)
	if len(before) != len(ps) {
		t.Fatalf("registry: %v, want every participant", before)
	}

	value, err := events.Default().Encode(&events.ParticipantMessage{MessageID: "sync", ReplicaID: "north-api", Kind: acm.MsgSync, Properties: "{}", SentAt: now})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := c.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(runtime.Partitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), runtime.EveryPartition(context.Background(), c.Kafka.Topic(topology.ACMRuntime), 3, nil, value)...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var after map[string]int64
	testkit.Eventually(t, 30*time.Second, func() error {
		after = version(out.Records())
		done := 0
		for k, v := range before {
			if after[k] > v {
				done++
			}
		}
		if done != len(before) {
			out.Poll(200 * time.Millisecond)
			return fmt.Errorf("%d of %d registry entries written again after the resync", done, len(before))
		}
		return nil
	})
	for k, v := range before {
		if after[k] <= v {
			t.Errorf("%s: version %d before the resync, %d after; want it written again", k, v, after[k])
		}
	}
}
