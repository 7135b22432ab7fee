package participant

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

const (
	pid      = "p1"
	stubType = "org.policyflow.Stub"
	// offlineAfter is replica-sync's silence in these tests.
	offlineAfter = time.Second
	wait         = 60 * time.Second
)

// harness is an in-process Kafka with the ACM topics and replica-sync.
type harness struct {
	c   *stagetest.Cluster
	rec *recorder
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	c := stagetest.NewCluster(t, 3, topology.ACMParticipant, topology.ACMRuntime, topology.ACMSync,
		topology.DLQ(acm.DLQStage), topology.DLQ(topology.StageReplicaSync))
	stagetest.Run(t, replicasync.StageWith(replicasync.Config{OfflineAfter: offlineAfter, TickEvery: 50 * time.Millisecond}), stagetest.Env(c.Kafka))
	return &harness{c: c, rec: &recorder{ran: map[string][]string{}}}
}

// recorder keeps which replica ran which operation, and lets a deploy
// block until its context ends when its properties say "stuck".
type recorder struct {
	mu  sync.Mutex
	ran map[string][]string // replica -> operation ids that completed
}

func (r *recorder) callbacks(replica string) map[string]Callbacks {
	done := func(op string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ran[replica] = append(r.ran[replica], op)
	}
	deploy := func(ctx context.Context, e Element) (json.RawMessage, error) {
		var props struct{ Stuck bool }
		_ = json.Unmarshal(e.Properties, &props)
		if props.Stuck {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		done(e.OperationID)
		return json.RawMessage(`{"out":"` + e.ElementID + `"}`), nil
	}
	return map[string]Callbacks{stubType: {
		Prime:    func(context.Context, Composition) error { return nil },
		Deploy:   deploy,
		Update:   deploy,
		Undeploy: func(_ context.Context, e Element) error { done(e.OperationID); return nil },
	}}
}

func (r *recorder) replicasThatRan() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ops := range r.ran {
		if len(ops) > 0 {
			n++
		}
	}
	return n
}

// replica runs one replica until the test ends and waits until it takes
// operations.
func (h *harness) replica(t *testing.T, id string) *Participant {
	t.Helper()
	p, _ := h.replicaStop(t, id)
	return p
}

// replicaStop is replica with a function that stops it cleanly.
func (h *harness) replicaStop(t *testing.T, id string) (*Participant, func()) {
	t.Helper()
	p, err := New(Config{Kafka: h.c.Kafka, ParticipantID: pid, ReplicaID: id, Types: h.rec.callbacks(id),
		Heartbeat: 100 * time.Millisecond, SessionTimeout: time.Second,
		Log: runtime.NewLogger(io.Discard, "error", false)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %s: %v", id, err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("replica %s ended before it was ready: %v", id, err)
	case <-time.After(wait):
		t.Fatalf("replica %s not ready within %s", id, wait)
	}
	return p, stop
}

var opSeq int

// op sends an operation keyed as the runtime keys it and returns its id.
func (h *harness) op(t *testing.T, o *events.ParticipantOperation) string {
	t.Helper()
	opSeq++
	if o.MessageID == "" {
		o.MessageID = fmt.Sprintf("op-%d", opSeq)
	}
	if o.ParticipantID == "" {
		o.ParticipantID = pid
	}
	if o.Properties == "" {
		o.Properties = "{}"
	}
	o.SentAt = time.Now()
	h.c.Produce(t, topology.ACMParticipant, acm.OperationKey(o.ParticipantID, deref(o.CompositionID), deref(o.InstanceID)), o)
	return o.MessageID
}

func sp(s string) *string { return &s }

func deploy(inst string, rev int64, props string, elems ...string) *events.ParticipantOperation {
	o := &events.ParticipantOperation{Kind: acm.OpDeploy, CompositionID: sp("c1"), InstanceID: sp(inst), Revision: rev}
	for _, e := range elems {
		o.Elements = append(o.Elements, events.OperationElement{ElementID: e, ElementType: stubType, Properties: props})
	}
	return o
}

// waitState waits until cond holds of p's state.
func waitState(t *testing.T, p *Participant, what string, cond func(State) bool) {
	t.Helper()
	_, r := p.ID()
	testkit.Eventually(t, wait, testkit.Holds("replica "+r+": "+what,
		func() bool { return cond(p.Dump()) },
		func() string { return fmt.Sprintf("state %+v", p.Dump()) }))
}

func elementIs(inst, elem, state string) func(State) bool {
	return func(s State) bool { return s[acm.ElementKey(pid, inst, elem)].State == state }
}

// messages reads acm.runtime until done holds of the messages read.
func (h *harness) messages(t *testing.T, done func([]*events.ParticipantMessage) bool) []*events.ParticipantMessage {
	t.Helper()
	decode := func(recs []*kgo.Record) []*events.ParticipantMessage {
		ms := make([]*events.ParticipantMessage, 0, len(recs))
		for _, r := range recs {
			ms = append(ms, stagetest.Decode[*events.ParticipantMessage](t, r))
		}
		return ms
	}
	// Every record read, the ones of the last linger included: with
	// several brokers one fetch may bring some partitions only.
	return decode(h.c.ReadUntil(t, topology.ACMRuntime, wait, func(recs []*kgo.Record) bool { return done(decode(recs)) }))
}

func answered(ms []*events.ParticipantMessage, opID, outcome string) *events.ParticipantMessage {
	for _, m := range ms {
		if m.ResponseTo != nil && *m.ResponseTo == opID && m.Outcome == outcome {
			return m
		}
	}
	return nil
}

func TestReplicasSpreadOperationsAndEndIdentical(t *testing.T) {
	h := newHarness(t)
	rs := []*Participant{h.replica(t, "r1"), h.replica(t, "r2"), h.replica(t, "r3")}
	// The group has settled when each of the three holds one of the three
	// partitions.
	testkit.Eventually(t, wait, testkit.Holds("one partition each",
		func() bool {
			return len(rs[0].Partitions()) == 1 && len(rs[1].Partitions()) == 1 && len(rs[2].Partitions()) == 1
		},
		func() string {
			return fmt.Sprintf("partitions: r1 %v, r2 %v, r3 %v", rs[0].Partitions(), rs[1].Partitions(), rs[2].Partitions())
		}))
	h.op(t, &events.ParticipantOperation{Kind: acm.OpPrime, CompositionID: sp("c1"), Revision: 1,
		Elements: []events.OperationElement{{ElementID: "def1", ElementType: stubType, Properties: `{"image":"x"}`}}})
	const instances = 12
	for i := range instances {
		h.op(t, deploy(fmt.Sprintf("i%02d", i), 2, `{"v":1}`, "e1", "e2"))
	}
	allDeployed := func(s State) bool {
		n := 0
		for _, st := range s {
			if st.Kind == acm.KindElement && st.State == acm.Deployed {
				n++
			}
		}
		return n == 2*instances && s[acm.CompositionKey(pid, "c1")].State == acm.Primed
	}
	for _, r := range rs {
		waitState(t, r, "every element DEPLOYED", allDeployed)
	}
	// All three converge on the same versions of the same records.
	var d State
	testkit.Eventually(t, wait, func() error {
		d = rs[0].Dump()
		if d1, d2 := rs[1].Dump(), rs[2].Dump(); !reflect.DeepEqual(d, d1) || !reflect.DeepEqual(d, d2) {
			return fmt.Errorf("the replicas' dumps differ:\nr1 %v\nr2 %v\nr3 %v", d, d1, d2)
		}
		return nil
	})
	if e := d[acm.ElementKey(pid, "i00", "e1")]; e.Properties != `{"out":"e1","v":1}` || e.ElementType != stubType || e.Revision != 2 {
		t.Errorf("element i00/e1: %+v", e)
	}
	if n := h.rec.replicasThatRan(); n < 2 {
		t.Errorf("operations ran on %d replica(s), want them spread over at least 2 of 3", n)
	}

	// A fourth replica started later rebuilds the same state from acm.sync
	// alone: the runtime sends nothing.
	r4 := h.replica(t, "r4")
	if got := r4.Dump(); !reflect.DeepEqual(got, d) {
		t.Errorf("r4 rebuilt %d keys, want the %d of r1 exactly", len(got), len(d))
	}
	// And it sees the registry: four replicas ON_LINE.
	waitRegistry(t, r4, func(reg map[string]events.ReplicaState) bool {
		return len(reg) == 4 && reg["r1"].State == acm.OnLine && reg["r4"].State == acm.OnLine
	})
}

func waitRegistry(t *testing.T, p *Participant, cond func(map[string]events.ReplicaState) bool) {
	t.Helper()
	testkit.Eventually(t, wait, testkit.Holds("the registry",
		func() bool { return cond(p.Replicas()) },
		func() string { return fmt.Sprintf("%+v", p.Replicas()) }))
}

func TestStuckOperationCancelledByTheNext(t *testing.T) {
	h := newHarness(t)
	r := h.replica(t, "r1")
	stuck := h.op(t, deploy("i1", 1, `{"stuck":true}`, "e1"))
	h.op(t, deploy("i2", 1, `{}`, "e1"))
	waitState(t, r, "i1/e1 DEPLOYING", elementIs("i1", "e1", acm.Deploying))
	// The stuck deploy does not hold up another instance's.
	waitState(t, r, "i2/e1 DEPLOYED", elementIs("i2", "e1", acm.Deployed))
	undeploy := deploy("i1", 2, "", "e1")
	undeploy.Kind = acm.OpUndeploy
	next := h.op(t, undeploy)
	waitState(t, r, "i1/e1 UNDEPLOYED", elementIs("i1", "e1", acm.Undeployed))
	ms := h.messages(t, func(ms []*events.ParticipantMessage) bool { return answered(ms, next, acm.Success) != nil })
	if m := answered(ms, stuck, acm.Cancelled); m == nil || !strings.Contains(m.Detail, "superseded") {
		t.Errorf("the stuck deploy %s was not answered CANCELLED: %+v", stuck, m)
	}
}

func TestOperationTimesOut(t *testing.T) {
	h := newHarness(t)
	r := h.replica(t, "r1")
	o := deploy("i1", 1, `{"stuck":true}`, "e1")
	o.TimeoutMs = 200
	id := h.op(t, o)
	waitState(t, r, "i1/e1 TIMEOUT", elementIs("i1", "e1", acm.Timeout))
	ms := h.messages(t, func(ms []*events.ParticipantMessage) bool { return answered(ms, id, acm.TimedOut) != nil })
	if m := answered(ms, id, acm.TimedOut); !strings.Contains(m.Detail, "200ms") {
		t.Errorf("TIMEOUT detail %q", m.Detail)
	}
}

func TestStaleOperationAnsweredNotApplied(t *testing.T) {
	h := newHarness(t)
	r := h.replica(t, "r1")
	h.op(t, deploy("i1", 5, `{"v":5}`, "e1"))
	waitState(t, r, "i1/e1 DEPLOYED", elementIs("i1", "e1", acm.Deployed))
	old := deploy("i1", 3, `{"v":3}`, "e1")
	old.Kind = acm.OpUpdate
	id := h.op(t, old)
	ms := h.messages(t, func(ms []*events.ParticipantMessage) bool { return answered(ms, id, acm.Stale) != nil })
	if m := answered(ms, id, acm.Stale); !strings.Contains(m.Detail, "revision 3, older than the state's 5") {
		t.Errorf("STALE detail %q", m.Detail)
	}
	// A barrier: a later operation on the same instance is applied, so the
	// stale one would have been by now.
	h.op(t, deploy("i1", 6, `{"v":6}`, "e2"))
	waitState(t, r, "i1/e2 DEPLOYED", elementIs("i1", "e2", acm.Deployed))
	if st, _ := r.ElementState("i1", "e1"); st.Revision != 5 || st.Properties != `{"out":"e1","v":5}` {
		t.Errorf("the stale update changed the element: %+v", st)
	}
	if n := len(h.rec.ran["r1"]); n != 2 {
		t.Errorf("%d callbacks ran, want 2 (the stale update never runs)", n)
	}
}

func TestOtherParticipantOrReplicaIgnored(t *testing.T) {
	h := newHarness(t)
	r := h.replica(t, "r1")
	other := deploy("i1", 1, `{}`, "e1")
	other.ParticipantID = "p2"
	ignored := []string{h.op(t, other)}
	toReplica := deploy("i1", 1, `{}`, "e2")
	toReplica.ReplicaID = sp("r9")
	ignored = append(ignored, h.op(t, toReplica))
	notListed := deploy("i1", 1, `{}`, "e3")
	notListed.ParticipantIDList = []string{"p2"}
	ignored = append(ignored, h.op(t, notListed))
	mine := deploy("i1", 1, `{}`, "e4")
	mine.ReplicaID = sp("R1") // ids compare by value
	barrier := h.op(t, mine)
	ms := h.messages(t, func(ms []*events.ParticipantMessage) bool { return answered(ms, barrier, acm.Success) != nil })
	for _, m := range ms {
		for _, id := range ignored {
			if m.ResponseTo != nil && *m.ResponseTo == id {
				t.Errorf("operation %s, not for replica r1 of %s, was answered: %+v", id, pid, m)
			}
		}
	}
	if _, ok := r.ElementState("i1", "e1"); ok {
		t.Error("an element of another participant's operation is held")
	}
}

func TestBadInputDeadLettered(t *testing.T) {
	h := newHarness(t)
	r := h.replica(t, "r1")
	bad := deploy("i1", 1, `{}`, "e1")
	bad.Elements[0].ElementType = "org.example.Unknown"
	id := h.op(t, bad)
	h.c.ProduceRecords(t, &kgo.Record{Topic: h.c.Kafka.Topic(topology.ACMParticipant), Key: []byte("i9"), Value: []byte("not avro")})
	h.c.ProduceRecords(t, &kgo.Record{Topic: h.c.Kafka.Topic(topology.ACMSync), Key: []byte(acm.ElementKey(pid, "i8", "e1")), Value: []byte("not avro")})
	dlq := h.c.Read(t, topology.DLQ(acm.DLQStage), 3, wait)
	reasons := make([]string, 0, len(dlq))
	for _, d := range dlq {
		reasons = append(reasons, stagetest.Header(d, runtime.HeaderError))
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{`type "org.example.Unknown", which participant p1 does not support`, "operation at t.acm.participant", `acm.sync record "p1/instance/i8/e1"`} {
		if !strings.Contains(all, want) {
			t.Errorf("no dead letter saying %q; reasons:\n%s", want, all)
		}
	}
	// The runtime is told the operation failed, and the replica goes on.
	waitState(t, r, "i1/e1 FAILED", elementIs("i1", "e1", acm.Failed))
	ms := h.messages(t, func(ms []*events.ParticipantMessage) bool { return answered(ms, id, acm.Failure) != nil })
	_ = ms
	h.op(t, deploy("i2", 1, `{}`, "e1"))
	waitState(t, r, "i2/e1 DEPLOYED", elementIs("i2", "e1", acm.Deployed))
}

// TestKilledReplica kills a replica (SIGKILL, a helper process) in the
// middle of an operation: the operation times out, the registry shows
// the replica OFF_LINE after the silence, and the operation, never
// committed, completes on another replica.
func TestKilledReplica(t *testing.T) {
	h := newHarness(t)
	victim := exec.Command(os.Args[0], "-test.run=^TestHelperReplica$")
	victim.Env = append(os.Environ(), "PF_TEST_HELPER_BROKERS="+strings.Join(h.c.Kafka.Brokers, ","), "PF_TEST_HELPER_PREFIX="+h.c.Kafka.Prefix)
	out, err := victim.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	victim.Stderr = os.Stderr
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(wait):
		t.Fatal("the helper replica did not get ready")
	}
	o := deploy("i1", 1, `{}`, "e1")
	o.TimeoutMs = 300
	id := h.op(t, o)
	syncRecs := h.c.Reader(t, topology.ACMSync)
	states := func() map[string][]string { // key -> states in order, "state@replica"
		m := map[string][]string{}
		for _, r := range syncRecs.Records() {
			if r.Value != nil {
				st := stagetest.Decode[*events.ReplicaState](t, r)
				m[string(r.Key)] = append(m[string(r.Key)], st.State+"@"+st.ReplicaID)
			}
		}
		return m
	}
	until := func(what string, cond func(map[string][]string) bool) {
		t.Helper()
		// The check fetches what acm.sync got since, between its looks.
		testkit.Eventually(t, wait, func() error {
			if cond(states()) {
				return nil
			}
			syncRecs.Poll(100 * time.Millisecond)
			return fmt.Errorf("%s: acm.sync holds %v", what, states())
		})
	}
	ek, rk := acm.ElementKey(pid, "i1", "e1"), acm.ReplicaKey(pid, "victim")
	until("DEPLOYING on the victim", func(m map[string][]string) bool { return contains(m[ek], "DEPLOYING@victim") })
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	until("TIMEOUT after the operation's 300ms", func(m map[string][]string) bool { return contains(m[ek], "TIMEOUT@victim") })
	until("the victim OFF_LINE", func(m map[string][]string) bool { return contains(m[rk], "OFF_LINE@victim") })
	// Another replica takes the victim's partition; the operation it
	// never finished was timed out, which is final: r2 does not run it
	// again, until the runtime asks again with a new operation.
	r2 := h.replica(t, "r2")
	again := h.op(t, deploy("i1", 1, `{}`, "e1"))
	waitState(t, r2, "i1/e1 DEPLOYED", elementIs("i1", "e1", acm.Deployed))
	if st, _ := r2.ElementState("i1", "e1"); st.ReplicaID != "r2" || st.OperationID != again {
		t.Errorf("i1/e1 %+v, want DEPLOYED by r2 for the new operation %s", st, again)
	}
	until("DEPLOYED by r2", func(m map[string][]string) bool { return contains(m[ek], "DEPLOYED@r2") })
	for _, r := range syncRecs.Records() {
		if string(r.Key) != ek || r.Value == nil {
			continue
		}
		if st := stagetest.Decode[*events.ReplicaState](t, r); st.ReplicaID == "r2" && st.OperationID == id {
			t.Errorf("r2 ran operation %s again after it was timed out: %s", id, st.State)
		}
	}
	if got := r2.Replicas()["victim"]; got.State != acm.OffLine {
		t.Errorf("registry entry of the victim %+v, want OFF_LINE", got)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestHelperReplica is the victim of TestKilledReplica, run in its own
// process: a replica whose deploys never end.
func TestHelperReplica(t *testing.T) {
	brokers := os.Getenv("PF_TEST_HELPER_BROKERS")
	if brokers == "" {
		t.Skip("helper process of TestKilledReplica")
	}
	k := runtime.Kafka{Brokers: strings.Split(brokers, ","), Prefix: os.Getenv("PF_TEST_HELPER_PREFIX"), FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	p, err := New(Config{Kafka: k, ParticipantID: pid, ReplicaID: "victim", Heartbeat: 100 * time.Millisecond, SessionTimeout: time.Second,
		Log: runtime.NewLogger(io.Discard, "error", false),
		Types: map[string]Callbacks{stubType: {Deploy: func(ctx context.Context, _ Element) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-p.Ready(); fmt.Println("ready") }()
	_ = p.Run(context.Background())
}

func TestRegistrationHeartbeatsAndDeregistration(t *testing.T) {
	h := newHarness(t)
	r1 := h.replica(t, "r1")
	_, stop := h.replicaStop(t, "r2")
	waitRegistry(t, r1, func(reg map[string]events.ReplicaState) bool {
		return reg["r1"].State == acm.OnLine && reg["r2"].State == acm.OnLine && len(reg["r2"].SupportedElementTypes) == 1
	})
	// Heartbeats move the last heartbeat on.
	first := r1.Replicas()["r2"].HeartbeatMs
	waitRegistry(t, r1, func(reg map[string]events.ReplicaState) bool { return reg["r2"].HeartbeatMs > first })
	// A clean stop deregisters: the entry goes.
	stop()
	waitRegistry(t, r1, func(reg map[string]events.ReplicaState) bool {
		_, ok := reg["r2"]
		return !ok && reg["r1"].State == acm.OnLine
	})
}

// An operation whose element the replicas' state shows ended (a result,
// or replica-sync's TIMEOUT) is not run again by the replica that takes
// its partition over; one still in transition, or another operation, is.
func TestEndedOperationsAreNotRunAgain(t *testing.T) {
	for _, tc := range []struct {
		prev *events.ReplicaState
		op   string
		want bool
	}{
		{nil, "op1", false},
		{&events.ReplicaState{State: acm.Timeout, OperationID: "op1"}, "op1", true},
		{&events.ReplicaState{State: acm.Deployed, OperationID: "op1"}, "op1", true},
		{&events.ReplicaState{State: acm.Deploying, OperationID: "op1"}, "op1", false},
		{&events.ReplicaState{State: acm.Timeout, OperationID: "op1"}, "op2", false},
		{&events.ReplicaState{State: acm.Timeout}, "", false},
	} {
		if got := ended(tc.prev, tc.op); got != tc.want {
			t.Errorf("ended(%+v, %q) = %v, want %v", tc.prev, tc.op, got, tc.want)
		}
	}
}

// An operation a replica cannot run goes to dlq.participants through the
// runtime's dead-letter path: with the runtime's headers saying where it
// came from and why, the participant's saying which replica, and counted
// in the replica's metrics.
func TestFailedOperationDeadLetteredByTheRuntime(t *testing.T) {
	h := newHarness(t)
	r := h.replica(t, "r1")
	bad := deploy("i1", 1, `{}`, "e1")
	bad.Elements[0].ElementType = "org.example.Unknown"
	h.op(t, bad)
	dlq := h.c.Read(t, topology.DLQ(acm.DLQStage), 1, wait)
	d := dlq[0]
	want := map[string]string{
		runtime.HeaderStage: acm.DLQStage,
		runtime.HeaderTopic: h.c.Kafka.Topic(topology.ACMParticipant),
		HeaderParticipant:   pid,
		HeaderReplica:       "r1",
	}
	for k, v := range want {
		if got := stagetest.Header(d, k); got != v {
			t.Errorf("dead letter header %s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{runtime.HeaderPartition, runtime.HeaderOffset, runtime.HeaderFailedAt} {
		if stagetest.Header(d, k) == "" {
			t.Errorf("dead letter has no %s header", k)
		}
	}
	if reason := stagetest.Header(d, runtime.HeaderError); !strings.Contains(reason, `type "org.example.Unknown"`) {
		t.Errorf("dead letter reason %q", reason)
	}
	if got := testutil.ToFloat64(r.Metrics().DLQ.WithLabelValues(acm.DLQStage, topology.ACMParticipant)); got != 1 {
		t.Errorf("dead letters counted %v, want 1", got)
	}
}

// A replica that stops before an operation it runs is answered has not
// committed it: the replica that takes its partition over is handed the
// operation again and runs it (at least once).
func TestUnansweredOperationRunsAgainOnTheNextReplica(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{}, 1)
	p1, err := New(Config{Kafka: h.c.Kafka, ParticipantID: pid, ReplicaID: "r1",
		Heartbeat: 100 * time.Millisecond, SessionTimeout: time.Second,
		Log: runtime.NewLogger(io.Discard, "error", false),
		Types: map[string]Callbacks{stubType: {Deploy: func(ctx context.Context, _ Element) (json.RawMessage, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p1.Run(ctx) }()
	t.Cleanup(cancel)
	select {
	case <-p1.Ready():
	case <-time.After(wait):
		t.Fatal("r1 not ready")
	}
	id := h.op(t, deploy("i1", 1, `{}`, "e1"))
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("r1 did not start the deploy")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("r1: %v", err)
	}
	r2 := h.replica(t, "r2")
	waitState(t, r2, "i1/e1 DEPLOYED", elementIs("i1", "e1", acm.Deployed))
	if st, _ := r2.ElementState("i1", "e1"); st.ReplicaID != "r2" || st.OperationID != id {
		t.Errorf("i1/e1 %+v, want DEPLOYED by r2 for the operation %s r1 left unanswered", st, id)
	}
}
