package northapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

const kvType = "org.policyflow.Test"

// withParticipant runs replica-sync and one replica of participant p1 on
// the stack's cluster.
func withParticipant(t *testing.T, s *stack) {
	t.Helper()
	s.CreateTopics(t, nil, topology.DLQ(topology.StageReplicaSync), topology.DLQ(acm.DLQStage))
	stagetest.Run(t, replicasync.StageWith(replicasync.Config{OfflineAfter: time.Minute}), stagetest.Env(s.Kafka))
	p, err := participant.New(participant.Config{Kafka: s.Kafka, ParticipantID: "p1", ReplicaID: "r1",
		Log: runtime.NewLogger(io.Discard, "error", false),
		Types: map[string]participant.Callbacks{kvType: {
			Deploy: func(_ context.Context, e participant.Element) (json.RawMessage, error) {
				return json.RawMessage(`{"applied":true}`), nil
			},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// eventually calls the API until ok holds of the answer.
func eventually(t *testing.T, s *stack, path string, ok func(code int, body map[string]any) bool) map[string]any {
	t.Helper()
	var body map[string]any
	testkit.Eventually(t, 60*time.Second, func() error {
		code, b, raw := s.call(t, http.MethodGet, path, nil)
		if !ok(code, b) {
			return fmt.Errorf("GET %s: %d %s", path, code, raw)
		}
		body = b
		return nil
	})
	return body
}

func TestParticipantsAPI(t *testing.T) {
	s := newStack(t, nil)
	withParticipant(t, s)

	body := eventually(t, s, "/v2/participants/p1", func(code int, b map[string]any) bool {
		return code == http.StatusOK && b["participantState"] == acm.OnLine
	})
	reps, _ := body["replicas"].([]any)
	if len(reps) != 1 || reps[0].(map[string]any)["replicaId"] != "r1" || reps[0].(map[string]any)["lastMsg"] == "" {
		t.Fatalf("replicas of p1: %v", body["replicas"])
	}
	list := eventually(t, s, "/v2/participants", func(code int, _ map[string]any) bool { return code == http.StatusOK })
	if ps, _ := list["participants"].([]any); len(ps) != 1 {
		t.Fatalf("participants: %v", list)
	}

	code, ans, raw := s.call(t, http.MethodPost, "/v2/participants/p1/operations", map[string]any{
		"kind": "deploy", "compositionId": "c1", "instanceId": "i1",
		"elements": []map[string]any{{"id": "e1", "type": kvType, "properties": map[string]any{"k": "v"}}},
	})
	if code != http.StatusAccepted || ans["operationId"] == "" {
		t.Fatalf("deploy: %d %s", code, raw)
	}
	inst := eventually(t, s, "/v2/participants/p1/instances/i1", func(code int, b map[string]any) bool {
		els, _ := b["elements"].([]any)
		return code == http.StatusOK && len(els) == 1 && els[0].(map[string]any)["state"] == acm.Deployed
	})
	el := inst["elements"].([]any)[0].(map[string]any)
	if props := el["properties"].(map[string]any); props["k"] != "v" || props["applied"] != true || el["replicaId"] != "r1" || el["operationId"] != ans["operationId"] {
		t.Errorf("element: %v", el)
	}

	// Undeploy takes the elements the replicas hold, and the composition
	// the instance is of when the client leaves it out; an instance the
	// participant does not hold needs it given.
	code, out, _ := s.call(t, http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "UNDEPLOY", "instanceId": "i-unknown"})
	wantError(t, "undeploy of an unknown instance without compositionId", code, out, http.StatusBadRequest, "compositionId is missing", "holds no instance i-unknown")
	code, _, raw = s.call(t, http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "UNDEPLOY", "instanceId": "i1"})
	if code != http.StatusAccepted {
		t.Fatalf("undeploy without compositionId: %d %s", code, raw)
	}
	var undeploy *events.ParticipantOperation
	for _, r := range s.records(t, topology.ACMParticipant, 2) {
		var op events.ParticipantOperation
		if err := s.env.Codec.DecodeInto(t.Context(), r.Value, &op); err == nil && op.Kind == "UNDEPLOY" {
			undeploy = &op
		}
	}
	if undeploy == nil || undeploy.CompositionID == nil || *undeploy.CompositionID != "c1" {
		t.Fatalf("the undeploy sent without compositionId: %+v; want it of composition c1, the instance's", undeploy)
	}
	eventually(t, s, "/v2/participants/p1/instances/i1", func(code int, b map[string]any) bool {
		els, _ := b["elements"].([]any)
		return code == http.StatusOK && len(els) == 1 && els[0].(map[string]any)["state"] == acm.Undeployed
	})

	// Resync of every participant: one request on every partition of
	// acm.runtime, since each replica-sync member rewrites the
	// participants keyed to the partitions it owns; of one participant:
	// one request, on that participant's partition.
	code, body, raw = s.call(t, http.MethodPut, "/v2/participants/sync", nil)
	parts, _ := body["partitions"].(float64)
	if code != http.StatusAccepted || parts < 2 {
		t.Fatalf("PUT /v2/participants/sync: %d %s, want 202 naming the partitions (the test topic has several)", code, raw)
	}
	if code, _, raw := s.call(t, http.MethodPut, "/v2/participants/p1/sync", nil); code != http.StatusAccepted {
		t.Fatalf("PUT /v2/participants/p1/sync: %d %s", code, raw)
	}
	syncs := func(recs []*kgo.Record) (all map[int32]int, one int) {
		all = map[int32]int{}
		for _, r := range recs {
			if r.Value == nil {
				continue
			}
			if m := stagetest.Decode[*events.ParticipantMessage](t, r); m.Kind == acm.MsgSync && m.ParticipantID == "" {
				all[r.Partition]++
			} else if m.Kind == acm.MsgSync && m.ParticipantID == "p1" {
				one++
			}
		}
		return all, one
	}
	recs := s.ReadUntil(t, topology.ACMRuntime, 30*time.Second, func(recs []*kgo.Record) bool {
		all, one := syncs(recs)
		return len(all) >= int(parts) && one >= 1
	})
	if all, one := syncs(recs); len(all) != int(parts) || one != 1 {
		t.Errorf("resync of every participant on partitions %v (want each of %d once), of p1 %d times (want 1)", all, int(parts), one)
	} else {
		for p, n := range all {
			if n != 1 {
				t.Errorf("partition %d got %d resyncs of every participant, want 1", p, n)
			}
		}
	}

	for _, tc := range []struct {
		method, path string
		body         any
		code         int
		frag         string
	}{
		{http.MethodGet, "/v2/participants/p9", nil, http.StatusNotFound, "participant p9 is unknown"},
		{http.MethodPut, "/v2/participants/p9/sync", nil, http.StatusNotFound, "participant p9 is unknown"},
		{http.MethodPut, "/v2/participants/p1", nil, http.StatusMethodNotAllowed, "PUT /v2/participants/sync"},
		{http.MethodGet, "/v2/participants/p1/instances/i9", nil, http.StatusNotFound, "no element of instance i9"},
		{http.MethodPost, "/v2/participants/p9/operations", map[string]any{"kind": "DEPLOY", "compositionId": "c1", "instanceId": "i1", "elements": []map[string]any{{"id": "e1", "type": kvType}}}, http.StatusNotFound, "participant p9 is unknown"},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "RESTART", "compositionId": "c1"}, http.StatusBadRequest, `kind "RESTART"`},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "DEPLOY", "compositionId": "c1"}, http.StatusBadRequest, "instanceId"},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "DEPLOY", "compositionId": "c1", "instanceId": "i2", "elements": []map[string]any{{"id": "e1", "type": "org.example.Other"}}}, http.StatusBadRequest, "which no replica of participant p1 supports"},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "DEPLOY", "compositionId": "c1", "instanceId": "i2", "elements": []map[string]any{{"id": "a/b", "type": kvType}}}, http.StatusBadRequest, "elements[0].id"},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "DEPLOY", "compositionId": "c1", "instanceId": "i2"}, http.StatusBadRequest, "needs elements"},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "DEPLOY", "compositionId": "c1", "instanceId": "i2", "elements": []map[string]any{{"id": "e1", "type": kvType}}, "timeoutMs": -1}, http.StatusBadRequest, "timeoutMs -1"},
		{http.MethodPost, "/v2/participants/p1/operations", map[string]any{"kind": "DEPLOY", "extra": 1}, http.StatusBadRequest, "extra"},
	} {
		code, body, _ := s.call(t, tc.method, tc.path, tc.body)
		wantError(t, tc.method+" "+tc.path, code, body, tc.code, tc.frag)
	}
}
