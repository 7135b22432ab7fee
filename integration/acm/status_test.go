package acm

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/participant-consul/consulparticipant"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// quietReplica runs a replica of participant that heartbeats once an hour,
// so a fresh heartbeat is its answer to a status report request.
func (s *suite) quietReplica(t *testing.T, participantID, id string) *participant.Participant {
	t.Helper()
	p, err := participant.New(participant.Config{Kafka: s.k, ParticipantID: participantID, ReplicaID: id,
		Types: consulparticipant.Callbacks(s.kv, s.prefix), Heartbeat: time.Hour, SessionTimeout: sessionTimeout,
		Log: runtime.NewLogger(io.Discard, "error", false)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s/%s: %v", participantID, id, err)
		}
	})
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("replica %s/%s ended: %v", participantID, id, err)
	case <-time.After(wait):
		t.Fatalf("replica %s/%s not ready within %s", participantID, id, wait)
	}
	return p
}

// A status report request written to every partition of acm.participant,
// as the North API's PUT /onap/policy/clamp/acm/v2/participants writes it,
// reaches every replica of every participant, whichever partitions each
// owns, and each answers with a heartbeat that replica-sync records.
func TestStatusReportReachesEveryReplica(t *testing.T) {
	s := newSuite(t)
	pa := []*participant.Participant{s.quietReplica(t, "pa", "a1"), s.quietReplica(t, "pa", "a2")}
	pb := []*participant.Participant{s.quietReplica(t, "pb", "b1")}
	for deadline := time.Now().Add(wait); len(pa[0].Partitions()) == 0 || len(pa[1].Partitions()) == 0 ||
		len(pa[0].Partitions())+len(pa[1].Partitions()) != 3 || len(pb[0].Partitions()) != 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the groups did not settle: %v %v %v", pa[0].Partitions(), pa[1].Partitions(), pb[0].Partitions())
		}
	}
	sent := time.Now().UTC().Truncate(time.Millisecond)
	b, err := events.Default().Encode(&events.ParticipantOperation{MessageID: "status-1", Kind: acm.OpStatus, Properties: "{}", SentAt: sent})
	if err != nil {
		t.Fatal(err)
	}
	recs := runtime.EveryPartition(context.Background(), s.k.Topic(topology.ACMParticipant), 3, nil, b)
	if err := s.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id  string
		rs  []*participant.Participant
		ids []string
	}{{"pa", pa, []string{"a1", "a2"}}, {"pb", pb, []string{"b1"}}} {
		for deadline := time.Now().Add(wait); ; time.Sleep(50 * time.Millisecond) {
			reg, fresh := c.rs[0].Replicas(), 0
			for _, id := range c.ids {
				if st, ok := reg[id]; ok && st.HeartbeatMs >= sent.UnixMilli() {
					fresh++
				}
			}
			if fresh == len(c.ids) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("participant %s: %d of its replicas answered the status report; registry %+v", c.id, fresh, reg)
			}
		}
	}
}
