package northapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/acmapi"
	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// acmAPI is a North API on an in-process Kafka with replica-sync, for the
// ACM runtime's routes, which need no Consul.
type acmAPI struct {
	c   *stagetest.Cluster
	url string
}

func newACMAPI(t *testing.T) *acmAPI {
	t.Helper()
	c := stagetest.NewCluster(t, testPartitions, topology.PDPNotifications, topology.PolicyCatalog, topology.DeployComponents, topology.CatchupRequests,
		topology.ComponentApplied, topology.CatchupProgress, topology.ACMSync, topology.ACMRuntime, topology.ACMParticipant,
		topology.NMPPolicies, topology.AgentNodes, topology.AgentStatus, topology.AgentPackages, topology.AgentDirectives,
		topology.AppPolicies, topology.AdmissionVerdicts, topology.DeployRequests, topology.Datacenters, topology.Deployments,
		topology.DLQ(topology.StageReplicaSync), topology.DLQ(acm.DLQStage))
	stagetest.Run(t, replicasync.StageWith(replicasync.Config{OfflineAfter: time.Minute}), stagetest.Env(c.Kafka))
	env := stagetest.Env(c.Kafka)
	srv, err := New(env, Options{InsecureNoAuth: true, Consul: consulkv.Config{Addr: "127.0.0.1:1"}, Registration: testRegistration()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-done
		srv.Close()
	})
	return &acmAPI{c: c, url: ts.URL}
}

// replica runs a replica that heartbeats once an hour: a fresh lastMsg is
// its answer to a status request.
func (a *acmAPI) replica(t *testing.T, pid, rid string) *participant.Participant {
	t.Helper()
	p, err := participant.New(participant.Config{Kafka: a.c.Kafka, ParticipantID: pid, ReplicaID: rid, Heartbeat: time.Hour,
		SessionTimeout: time.Second, Log: runtime.NewLogger(io.Discard, "error", false),
		Types: map[string]participant.Callbacks{kvType + ":1.0.0": {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("replica %s/%s: %v", pid, rid, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s/%s not ready", pid, rid)
	}
	return p
}

func (a *acmAPI) do(t *testing.T, method, path string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	return a.doWith(t, checkedClient(t), method, path, hdr)
}

// doUnchecked is do without the OpenAPI check, for PUT .../participants/sync
// alone: the document describes it as the {participantId} route's PUT
// (the route that serves it), and the checker's router takes the path for
// .../participants/sync/{participantId} with the id missing.
func (a *acmAPI) doUnchecked(t *testing.T, method, path string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	return a.doWith(t, http.DefaultClient, method, path, hdr)
}

func (a *acmAPI) doWith(t *testing.T, c *http.Client, method, path string, hdr map[string]string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, a.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// list reads GET .../participants until ok holds of it.
func (a *acmAPI) list(t *testing.T, what string, ok func([]acm.ParticipantInformation) bool) []acm.ParticipantInformation {
	t.Helper()
	var ps []acm.ParticipantInformation
	testkit.Eventually(t, 60*time.Second, testkit.Named(what, func() error {
		code, b, _ := a.do(t, http.MethodGet, acmapi.RuntimeBase+"/participants", nil)
		ps = nil
		if code == http.StatusOK && json.Unmarshal(b, &ps) == nil && ok(ps) {
			return nil
		}
		return fmt.Errorf("last answer %d %s", code, b)
	}))
	return ps
}

// The ACM runtime's routes answer in its shapes, and its status report
// request reaches every replica of every participant across the
// partitions of acm.participant: each replica's lastMsg moves, though
// none heartbeats on its own within the test.
func TestACMRuntimeParticipantsAndStatusReport(t *testing.T) {
	a := newACMAPI(t)
	rs := []*participant.Participant{a.replica(t, "pa", "a1"), a.replica(t, "pa", "a2"), a.replica(t, "pb", "b1")}
	testkit.Eventually(t, 60*time.Second, testkit.Holds("the groups settle",
		func() bool {
			return len(rs[0].Partitions()) != 0 && len(rs[1].Partitions()) != 0 && len(rs[2].Partitions()) == testPartitions
		},
		func() string { return fmt.Sprint(rs[0].Partitions(), rs[1].Partitions(), rs[2].Partitions()) }))
	replicas := func(ps []acm.ParticipantInformation) map[string]acm.ReplicaInfo {
		out := map[string]acm.ReplicaInfo{}
		for _, p := range ps {
			for id, r := range p.Participant.Replicas {
				out[p.Participant.ParticipantID+"/"+id] = r
			}
		}
		return out
	}
	ps := a.list(t, "three replicas ON_LINE", func(ps []acm.ParticipantInformation) bool {
		n := 0
		for _, r := range replicas(ps) {
			if r.ParticipantState == acm.OnLine {
				n++
			}
		}
		return n == 3
	})
	if p := ps[0].Participant; p.ParticipantID != "pa" || p.ParticipantState != acm.OnLine ||
		p.ParticipantSupportedElementTypes[kvType+":1.0.0"] != (acm.SupportedElementType{ID: kvType + ":1.0.0", TypeName: kvType, TypeVersion: "1.0.0"}) {
		t.Errorf("participant pa: %+v", p)
	}
	code, one, _ := a.do(t, http.MethodGet, acmapi.RuntimeBase+"/participants/pb", nil)
	var pb acm.ParticipantInformation
	if code != http.StatusOK || json.Unmarshal(one, &pb) != nil || pb.Participant.ParticipantID != "pb" || len(pb.Participant.Replicas) != 1 {
		t.Fatalf("GET participants/pb: %d %s", code, one)
	}

	// Each replica's last message before the request.
	before := replicas(ps)
	time.Sleep(5 * time.Millisecond)
	code, b, hdr := a.do(t, http.MethodPut, acmapi.RuntimeBase+"/participants", map[string]string{acmapi.RequestIDHeader: "7f3c0e52-6a43-4f4e-9f0e-3f1d2a4b5c6d"})
	var ans acmapi.StatusReportAnswer
	if code != http.StatusAccepted || json.Unmarshal(b, &ans) != nil || ans.Partitions != testPartitions || ans.RequestID != "7f3c0e52-6a43-4f4e-9f0e-3f1d2a4b5c6d" ||
		hdr.Get(acmapi.RequestIDHeader) != ans.RequestID {
		t.Fatalf("PUT participants: %d %s %v", code, b, hdr)
	}
	a.list(t, "every replica answered the status report", func(ps []acm.ParticipantInformation) bool {
		now := replicas(ps)
		for k, r := range before {
			if now[k].LastMsg <= r.LastMsg {
				return false
			}
		}
		return true
	})

	// One participant's report moves only its replicas' lastMsg.
	ps = a.list(t, "settled", func([]acm.ParticipantInformation) bool { return true })
	before = replicas(ps)
	time.Sleep(5 * time.Millisecond)
	if code, b, _ := a.do(t, http.MethodPut, acmapi.RuntimeBase+"/participants/pb", nil); code != http.StatusAccepted {
		t.Fatalf("PUT participants/pb: %d %s", code, b)
	}
	ps = a.list(t, "pb answered", func(ps []acm.ParticipantInformation) bool {
		return replicas(ps)["pb/b1"].LastMsg > before["pb/b1"].LastMsg
	})
	time.Sleep(300 * time.Millisecond)
	ps = a.list(t, "read again", func([]acm.ParticipantInformation) bool { return true })
	if now := replicas(ps); now["pa/a1"] != before["pa/a1"] || now["pa/a2"] != before["pa/a2"] {
		t.Errorf("a report of pb moved pa's replicas: %v, before %v", now, before)
	}

	// The resyncs, at ACM's paths.
	var sync acmapi.SyncAnswer
	if code, b, _ := a.doUnchecked(t, http.MethodPut, acmapi.RuntimeBase+"/participants/sync", nil); code != http.StatusAccepted || json.Unmarshal(b, &sync) != nil || sync.Partitions != testPartitions {
		t.Errorf("PUT participants/sync: %d %s", code, b)
	}
	sync = acmapi.SyncAnswer{}
	if code, b, _ := a.do(t, http.MethodPut, acmapi.RuntimeBase+"/participants/sync/pa", nil); code != http.StatusAccepted || json.Unmarshal(b, &sync) != nil || sync.ParticipantID != "pa" {
		t.Errorf("PUT participants/sync/pa: %d %s", code, b)
	}

	// Bad input: a reason, no write.
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
		code         int
		reason       string
	}{
		{http.MethodGet, "/participants?page=1", nil, http.StatusBadRequest, "give both"},
		{http.MethodGet, "/participants?page=-1&size=2", nil, http.StatusBadRequest, "page from 0"},
		{http.MethodGet, "/participants?name=x", nil, http.StatusBadRequest, "takes only page, size"},
		{http.MethodGet, "/participants?sort=x", nil, http.StatusBadRequest, "unknown query parameter"},
		{http.MethodGet, "/participants/nobody", nil, http.StatusNotFound, "participant nobody is unknown"},
		{http.MethodPut, "/participants/nobody", nil, http.StatusNotFound, "participant nobody is unknown"},
		{http.MethodPut, "/participants/sync/nobody", nil, http.StatusNotFound, "participant nobody is unknown"},
		{http.MethodPut, "/participants", map[string]string{acmapi.RequestIDHeader: "a b"}, http.StatusBadRequest, acmapi.RequestIDHeader},
	} {
		code, b, _ := a.do(t, c.method, acmapi.RuntimeBase+c.path, c.hdr)
		if code != c.code || !strings.Contains(string(b), c.reason) {
			t.Errorf("%s %s: %d %s, want %d with %q", c.method, c.path, code, b, c.code, c.reason)
		}
	}
}
