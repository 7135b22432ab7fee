package participant

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// quietReplica runs a replica of participant that heartbeats only once an
// hour, so a HEARTBEAT seen is its answer to a status request.
func (h *harness) quietReplica(t *testing.T, participant, id string) *Participant {
	t.Helper()
	p, err := New(Config{Kafka: h.c.Kafka, ParticipantID: participant, ReplicaID: id, Types: h.rec.callbacks(id),
		Heartbeat: time.Hour, SessionTimeout: time.Second, Log: runtime.NewLogger(io.Discard, "error", false)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s/%s: %v", participant, id, err)
		}
	})
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("replica %s/%s ended before it was ready: %v", participant, id, err)
	case <-time.After(wait):
		t.Fatalf("replica %s/%s not ready within %s", participant, id, wait)
	}
	return p
}

// statusRequest writes a status request for participant (every one when
// empty) to every partition of acm.participant, as the North API does.
func (h *harness) statusRequest(t *testing.T, id, participant string) {
	t.Helper()
	h.statusRequestAt(t, id, participant, time.Now())
}

func (h *harness) statusRequestAt(t *testing.T, id, participant string, sentAt time.Time) {
	t.Helper()
	op := &events.ParticipantOperation{MessageID: id, ParticipantID: participant, Kind: acm.OpStatus, Properties: "{}", SentAt: sentAt}
	b, err := events.Default().Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := h.c.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(runtime.Partitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := runtime.EveryPartition(context.Background(), h.c.Kafka.Topic(topology.ACMParticipant), 3, nil, b)
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// answers counts, per participant/replica, the HEARTBEATs answering
// request id.
func answers(ms []*events.ParticipantMessage, id string) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		if m.Kind == acm.MsgHeartbeat && m.ResponseTo != nil && *m.ResponseTo == id {
			out[m.ParticipantID+"/"+m.ReplicaID]++
		}
	}
	return out
}

// A status request for every participant reaches every replica of every
// participant, on whichever partitions they own, and each answers it once;
// one for a participant is answered by its replicas only.
func TestStatusRequestReachesEveryReplica(t *testing.T) {
	h := newHarness(t)
	rs := []*Participant{h.quietReplica(t, "pa", "a1"), h.quietReplica(t, "pa", "a2"), h.quietReplica(t, "pb", "b1")}
	// Wait until each participant's group has handed out its partitions.
	testkit.Eventually(t, wait, testkit.Holds("the groups settle",
		func() bool {
			a1, a2, b1 := len(rs[0].Partitions()), len(rs[1].Partitions()), len(rs[2].Partitions())
			return a1 != 0 && a2 != 0 && a1+a2 == 3 && b1 == 3
		},
		func() string { return fmt.Sprint(rs[0].Partitions(), rs[1].Partitions(), rs[2].Partitions()) }))
	want := map[string]int{"pa/a1": 1, "pa/a2": 1, "pb/b1": 1}
	// A request older than the heartbeat interval (an hour here) is not
	// answered: a heartbeat since told what it asked.
	h.statusRequestAt(t, "status-old", "", time.Now().Add(-2*time.Hour))
	h.statusRequest(t, "status-all", "")
	h.messages(t, func(ms []*events.ParticipantMessage) bool { return len(answers(ms, "status-all")) == len(want) })
	// The copies on the other partitions are not answered again.
	h.statusRequest(t, "status-pb", "pb")
	ms := h.messages(t, func(ms []*events.ParticipantMessage) bool { return len(answers(ms, "status-pb")) == 1 })
	time.Sleep(300 * time.Millisecond)
	ms = h.messages(t, func(got []*events.ParticipantMessage) bool {
		return len(got) >= len(ms) && len(answers(got, "status-all")) == len(want) && len(answers(got, "status-pb")) == 1
	})
	if got := answers(ms, "status-all"); len(got) != len(want) || got["pa/a1"] != 1 || got["pa/a2"] != 1 || got["pb/b1"] != 1 {
		t.Errorf("answers to the request of every participant: %v, want %v", got, want)
	}
	if got := answers(ms, "status-old"); len(got) != 0 {
		t.Errorf("a request two hours old was answered by %v", got)
	}
	if got := answers(ms, "status-pb"); len(got) != 1 || got["pb/b1"] != 1 {
		t.Errorf("answers to the request of pb: %v, want pb/b1 once", got)
	}
}
