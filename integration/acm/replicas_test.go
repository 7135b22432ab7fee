package acm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/participant-consul/consulparticipant"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// childEnv marks a re-executed test binary running one replica whose
// deploys never end, until it is killed.
const childEnv = "PF_ACM_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	backend.Main(m)
}

const (
	pid = "participant-consul"
	// offlineAfter is replica-sync's silence in these tests.
	offlineAfter = 2 * time.Second
	// sessionTimeout is the replicas' group session: Apache Kafka's
	// smallest by default.
	sessionTimeout = 6 * time.Second
	wait           = 90 * time.Second
)

func env(k runtime.Kafka) runtime.Env {
	e := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	e.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	e.TransactionTimeout = 10 * time.Second
	e.SessionTimeout = sessionTimeout
	return e
}

// suite is one test's topics (under its own prefix), replica-sync and the
// Consul prefix its replicas write under.
type suite struct {
	b      *backend.Backend
	k      runtime.Kafka
	kv     *capi.KV
	prefix string // Consul
	prod   *kgo.Client
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, 3)
	k := b.Kafka(prefix)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- replicasync.StageWith(replicasync.Config{OfflineAfter: offlineAfter, TickEvery: 100 * time.Millisecond}).Run(ctx, env(k))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica-sync: %v", err)
		}
	})
	client, err := b.Consul().Client()
	if err != nil {
		t.Fatal(err)
	}
	opts, _ := k.ClientOpts()
	prod, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(runtime.Partitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return &suite{b: b, k: k, kv: client.KV(), prefix: strings.TrimSuffix(prefix, "."), prod: prod}
}

// replica runs one replica of the reference participant until the test
// ends, and waits until it takes operations.
func (s *suite) replica(t *testing.T, id string) *participant.Participant {
	t.Helper()
	p, err := participant.New(participant.Config{Kafka: s.k, ParticipantID: pid, ReplicaID: id,
		Types: consulparticipant.Callbacks(s.kv, s.prefix), Heartbeat: 200 * time.Millisecond, SessionTimeout: sessionTimeout,
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
			t.Errorf("replica %s: %v", id, err)
		}
	})
	select {
	case <-p.Ready():
	case err := <-done:
		t.Fatalf("replica %s ended: %v", id, err)
	case <-time.After(wait):
		t.Fatalf("replica %s not ready within %s", id, wait)
	}
	return p
}

var seq int

// op sends an operation as the runtime does (keyed by instance).
func (s *suite) op(t *testing.T, o *events.ParticipantOperation) string {
	t.Helper()
	seq++
	o.MessageID = fmt.Sprintf("op-%d", seq)
	if o.ParticipantID == "" {
		o.ParticipantID = pid
	}
	o.Properties, o.SentAt = "{}", time.Now()
	b, err := events.Default().Encode(o)
	if err != nil {
		t.Fatal(err)
	}
	key := acm.OperationKey(o.ParticipantID, deref(o.CompositionID), deref(o.InstanceID))
	if err := s.prod.ProduceSync(context.Background(), &kgo.Record{Topic: s.k.Topic(topology.ACMParticipant), Key: []byte(key), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return o.MessageID
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sp(s string) *string { return &s }

func deploy(inst, elem, props string) *events.ParticipantOperation {
	return &events.ParticipantOperation{Kind: acm.OpDeploy, CompositionID: sp("c1"), InstanceID: sp(inst), Revision: time.Now().UnixMilli(),
		Elements: []events.OperationElement{{ElementID: elem, ElementType: consulparticipant.ElementType, Properties: props}}}
}

func waitState(t *testing.T, p *participant.Participant, what string, cond func(participant.State) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.WaitState(ctx, cond); err != nil {
		_, r := p.ID()
		t.Fatalf("replica %s: %s: %v", r, what, err)
	}
}

func elementIs(inst, elem, state string) func(participant.State) bool {
	return func(s participant.State) bool { return s[acm.ElementKey(pid, inst, elem)].State == state }
}

// consulValue is what Consul holds under the element's key ("" for none).
func (s *suite) consulValue(t *testing.T, inst, elem string) string {
	t.Helper()
	pair, _, err := s.kv.Get(consulkv.ParticipantElementKey(s.prefix, inst, elem), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil {
		return ""
	}
	return string(pair.Value)
}

func TestReplicasShareOperationsAndConverge(t *testing.T) {
	s := newSuite(t)
	rs := []*participant.Participant{s.replica(t, "r1"), s.replica(t, "r2"), s.replica(t, "r3")}
	testkit.Eventually(t, wait, func() error {
		if len(rs[0].Partitions()) != 1 || len(rs[1].Partitions()) != 1 || len(rs[2].Partitions()) != 1 {
			return fmt.Errorf("the group did not settle: %v %v %v", rs[0].Partitions(), rs[1].Partitions(), rs[2].Partitions())
		}
		return nil
	})
	const n = 12
	for i := range n {
		s.op(t, deploy(fmt.Sprintf("i%02d", i), "e1", fmt.Sprintf(`{"n":%d}`, i)))
	}
	deployed := func(st participant.State) bool {
		c := 0
		for _, e := range st {
			if e.State == acm.Deployed {
				c++
			}
		}
		return c == n
	}
	for _, r := range rs {
		waitState(t, r, "every element DEPLOYED", deployed)
	}
	var d participant.State
	testkit.Eventually(t, wait, func() error {
		d = rs[0].Dump()
		if !reflect.DeepEqual(d, rs[1].Dump()) || !reflect.DeepEqual(d, rs[2].Dump()) {
			return errors.New("the three replicas' dumps differ")
		}
		return nil
	})
	by := map[string]int{}
	for _, e := range d {
		by[e.ReplicaID]++
	}
	if len(by) < 2 {
		t.Errorf("operations ran on %v, want them spread over at least 2 replicas", by)
	}
	// What a user checks: the element's properties in Consul.
	if got := s.consulValue(t, "i03", "e1"); got != `{"n":3}` {
		t.Errorf("Consul holds %q for i03/e1, want {\"n\":3}", got)
	}
	if e := d[acm.ElementKey(pid, "i03", "e1")]; !strings.Contains(e.Properties, `"consulKey":"`+consulkv.ParticipantElementKey(s.prefix, "i03", "e1")+`"`) {
		t.Errorf("out properties not replicated: %s", e.Properties)
	}

	// A fourth replica, started later, holds the same state: nothing is
	// sent by the runtime.
	r4 := s.replica(t, "r4")
	if got := r4.Dump(); !reflect.DeepEqual(got, d) {
		t.Errorf("r4 rebuilt %d keys, want r1's %d exactly", len(got), len(d))
	}
}

func TestStuckOperationCancelledAndOthersIgnored(t *testing.T) {
	s := newSuite(t)
	// A replica whose deploys of "stuck" elements never end on their own.
	p, err := participant.New(participant.Config{Kafka: s.k, ParticipantID: pid, ReplicaID: "r1",
		Types: stuckOn("stuck", consulparticipant.Callbacks(s.kv, s.prefix)), Heartbeat: 200 * time.Millisecond,
		Log: runtime.NewLogger(io.Discard, "error", false)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-p.Ready()

	s.op(t, deploy("i1", "stuck", `{"v":1}`))
	waitState(t, p, "i1/stuck DEPLOYING", elementIs("i1", "stuck", acm.Deploying))
	undeploy := deploy("i1", "stuck", "")
	undeploy.Kind = acm.OpUndeploy
	s.op(t, undeploy)
	waitState(t, p, "i1/stuck UNDEPLOYED", elementIs("i1", "stuck", acm.Undeployed))

	other := deploy("i2", "e1", `{}`)
	other.ParticipantID = "another-participant"
	s.op(t, other)
	toReplica := deploy("i2", "e2", `{}`)
	toReplica.ReplicaID = sp("another-replica")
	s.op(t, toReplica)
	// A barrier on the same instance, so the same partition: handled after.
	s.op(t, deploy("i2", "e3", `{}`))
	waitState(t, p, "i2/e3 DEPLOYED", elementIs("i2", "e3", acm.Deployed))
	for _, e := range []string{"e1", "e2"} {
		if _, ok := p.ElementState("i2", e); ok {
			t.Errorf("i2/%s, for another participant or replica, is held", e)
		}
		if v := s.consulValue(t, "i2", e); v != "" {
			t.Errorf("i2/%s, for another participant or replica, was written to Consul: %s", e, v)
		}
	}
}

// stuckOn wraps callbacks so that deploying element id never ends before
// its context does.
func stuckOn(id string, cbs map[string]participant.Callbacks) map[string]participant.Callbacks {
	out := map[string]participant.Callbacks{}
	for typ, cb := range cbs {
		deploy := cb.Deploy
		cb.Deploy = func(ctx context.Context, e participant.Element) (json.RawMessage, error) {
			if e.ElementID == id {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return deploy(ctx, e)
		}
		out[typ] = cb
	}
	return out
}

// TestKilledReplica kills (SIGKILL) the only replica in the middle of a
// deploy: the deploy times out, the registry shows the replica OFF_LINE
// after the silence, and a replica started afterwards leaves the timed-out
// deploy (a TIMEOUT is final) and deploys when the runtime asks again.
func TestKilledReplica(t *testing.T) {
	s := newSuite(t)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "PF_CHILD_BROKERS="+strings.Join(s.k.Brokers, ","),
		"PF_CHILD_PREFIX="+s.k.Prefix, "PF_CHILD_CONSUL="+s.b.Consul().Addr, "PF_CHILD_CONSUL_PREFIX="+s.prefix)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
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
		t.Fatal("the replica to kill did not get ready")
	}
	o := deploy("i1", "stuck", `{"v":1}`)
	o.TimeoutMs = 500
	id := s.op(t, o)

	// A reader of acm.sync: what each key went through.
	opts, _ := s.k.ClientOpts()
	rd, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(s.k.Topic(topology.ACMSync)), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	history := map[string][]string{}
	until := func(what string, cond func() bool) {
		t.Helper()
		testkit.Eventually(t, wait, func() error {
			if cond() {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			for _, r := range rd.PollFetches(ctx).Records() {
				if r.Value != nil {
					var st events.ReplicaState
					if err := events.Default().DecodeInto(context.Background(), r.Value, &st); err != nil {
						t.Fatal(err)
					}
					history[string(r.Key)] = append(history[string(r.Key)], st.State+"@"+st.ReplicaID)
				}
			}
			cancel()
			return fmt.Errorf("%s: acm.sync went through %v", what, history)
		})
	}
	has := func(key, v string) func() bool {
		return func() bool {
			for _, x := range history[key] {
				if x == v {
					return true
				}
			}
			return false
		}
	}
	ek, rk := acm.ElementKey(pid, "i1", "stuck"), acm.ReplicaKey(pid, "victim")
	until("DEPLOYING on the victim", has(ek, "DEPLOYING@victim"))
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	until("TIMEOUT after the deploy's 500ms", has(ek, "TIMEOUT@victim"))
	until("the victim OFF_LINE after "+offlineAfter.String()+" of silence", has(rk, "OFF_LINE@victim"))

	// The timed-out deploy is final: r2, which takes the victim's
	// partition, does not run it again; the runtime asks again with a
	// new operation, and r2 deploys.
	r2 := s.replica(t, "r2")
	again := s.op(t, deploy("i1", "stuck", `{"v":1}`))
	waitState(t, r2, "i1/stuck DEPLOYED", elementIs("i1", "stuck", acm.Deployed))
	if st, _ := r2.ElementState("i1", "stuck"); st.ReplicaID != "r2" || st.OperationID != again {
		t.Errorf("i1/stuck: %+v, want DEPLOYED by r2 for the new operation %s", st, again)
	}
	until("DEPLOYED by r2", has(ek, "DEPLOYED@r2"))
	n := 0
	for _, x := range history[ek] {
		if x == "DEPLOYING@r2" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("r2 started the deploy %d times, want once (the new operation, not the timed-out %s): %v", n, id, history[ek])
	}
	if v := s.consulValue(t, "i1", "stuck"); v != `{"v":1}` {
		t.Errorf("Consul holds %q for i1/stuck", v)
	}
	if st := r2.Replicas()["victim"]; st.State != acm.OffLine {
		t.Errorf("the registry says %+v of the victim, want OFF_LINE", st)
	}
}

// runChild is the victim of TestKilledReplica: the reference participant
// with deploys of element "stuck" that never end.
func runChild() {
	k := runtime.Kafka{Brokers: strings.Split(os.Getenv("PF_CHILD_BROKERS"), ","), Prefix: os.Getenv("PF_CHILD_PREFIX"),
		FetchMaxWait: backend.FetchMaxWait, MetadataMinAge: backend.MetadataMinAge}
	client, err := consulkv.Config{Addr: os.Getenv("PF_CHILD_CONSUL")}.Client()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	p, err := participant.New(participant.Config{Kafka: k, ParticipantID: pid, ReplicaID: "victim",
		Types:     stuckOn("stuck", consulparticipant.Callbacks(client.KV(), os.Getenv("PF_CHILD_CONSUL_PREFIX"))),
		Heartbeat: 200 * time.Millisecond, SessionTimeout: sessionTimeout, Log: runtime.NewLogger(io.Discard, "error", false)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() { <-p.Ready(); fmt.Println("ready") }()
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
