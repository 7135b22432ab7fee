package execute

import (
	"context"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// cluster is an in-process Kafka with the executor's topics.
type cluster struct {
	k   runtime.Kafka
	adm *kadm.Client
	cl  *kgo.Client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := runtime.Kafka{Brokers: c.ListenAddrs(), Prefix: "t.", FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ProducerBatchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	big := "67108864"
	for _, tp := range []string{topology.PolicySegments, topology.DeployComponents, topology.ComponentPolicies, topology.DLQ(topology.StageExecutor)} {
		resp, err := adm.CreateTopic(context.Background(), 3, 1, map[string]*string{"max.message.bytes": &big}, k.Topic(tp))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tp, err, resp.Err)
		}
	}
	return &cluster{k: k, adm: adm, cl: cl}
}

func (c *cluster) produce(t *testing.T, topic, key string, v events.Event) {
	t.Helper()
	rec := &kgo.Record{Topic: c.k.Topic(topic), Key: []byte(key)}
	if v != nil {
		b, err := events.Default().Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		rec.Value = b
	}
	if err := c.cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// reader reads a topic from its start, read committed.
type reader struct {
	cl  *kgo.Client
	got []*kgo.Record
}

func (c *cluster) reader(t *testing.T, topic string) *reader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.k.Brokers...), kgo.ConsumeTopics(c.k.Topic(topic)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &reader{cl: cl}
}

// until polls until at least n records arrived in total or wait passed,
// and returns every record read so far.
func (r *reader) until(n int, wait time.Duration) []*kgo.Record {
	deadline := time.Now().Add(wait)
	for len(r.got) < n && time.Now().Before(deadline) {
		r.poll(500 * time.Millisecond)
	}
	return r.got
}

func (r *reader) poll(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	r.got = append(r.got, r.cl.PollFetches(ctx).Records()...)
	cancel()
}

func decodeCP(t *testing.T, rec *kgo.Record) *events.ComponentPolicies {
	t.Helper()
	ev, err := events.Default().Decode(context.Background(), rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	return ev.(*events.ComponentPolicies)
}

func testEnv(k runtime.Kafka) runtime.Env {
	log := runtime.NewLogger(os.Stderr, "error", true)
	env := runtime.NewEnv(k, runtime.Consul{}, log)
	env.Retry = runtime.Backoff{Initial: 50 * time.Millisecond, Max: 300 * time.Millisecond}
	env.TransactionTimeout = 10 * time.Second
	env.PollRecords = 50
	return env
}

func run(t *testing.T, s runtime.Stage, env runtime.Env) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, env) }()
	var once bool
	stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stage %s: %v", s.Name, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("stage %s did not stop", s.Name)
		}
	}
	t.Cleanup(stop)
	return stop
}

func component(id, scn string) *events.Component {
	return &events.Component{
		ComponentID: id, DeploymentID: "dep-1", ServiceComponentName: scn,
		Notify:    events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/opt/app/reconfigure.sh"},
		Config:    "{}",
		UpdatedAt: time.UnixMilli(1000).UTC(),
	}
}

func vmMemory() events.Policy {
	return events.Policy{
		PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
		Body: `{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}`,
	}
}

func piece(update string, index, count int32, comps ...events.ComponentDelta) *events.PolicySegment {
	return &events.PolicySegment{UpdateID: update, DeploymentID: "dep-1", Index: index, Count: count, Components: comps, CreatedAt: time.UnixMilli(2000).UTC()}
}

func TestExecutorStage(t *testing.T) {
	c := newCluster(t)
	c.produce(t, topology.DeployComponents, "c1", component("c1", "dcae-vm"))
	out := c.reader(t, topology.ComponentPolicies)
	run(t, Stage(), testEnv(c.k))

	// A one-piece update: the component's first collection.
	c.produce(t, topology.PolicySegments, "dep-1", piece("u1", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{vmMemory()}}))
	recs := out.until(1, 60*time.Second)
	if len(recs) != 1 {
		t.Fatalf("got %d component.policies records after u1, want 1", len(recs))
	}
	cp := decodeCP(t, recs[0])
	if string(recs[0].Key) != "c1" || cp.UpdateID != "u1" || cp.Generation != 1 || cp.ServiceComponentName != "dcae-vm" ||
		cp.DeploymentID != "dep-1" || cp.Notify.Kind != events.NotifyScript || cp.Uninstalled ||
		!reflect.DeepEqual(cp.Policies, []events.Policy{vmMemory()}) || !reflect.DeepEqual(cp.UpdatedPolicies, []events.Policy{vmMemory()}) ||
		len(cp.RemovedPolicies) != 0 {
		t.Fatalf("u1 wrote %+v", cp)
	}

	// A three-piece update applies as one change: one record.
	c.produce(t, topology.PolicySegments, "dep-1", piece("u2", 1, 3, events.ComponentDelta{ComponentID: "c1",
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_VM_MEMORY", PolicyVersion: ver("222")}}}))
	c.produce(t, topology.PolicySegments, "dep-1", piece("u2", 2, 3, events.ComponentDelta{ComponentID: "c1",
		UpdatedPolicies: []events.Policy{pol("X", "1")}}))
	time.Sleep(500 * time.Millisecond) // the pieces so far are committed on their own
	c.produce(t, topology.PolicySegments, "dep-1", piece("u2", 3, 3, events.ComponentDelta{ComponentID: "c1",
		AddedPolicies: []events.FilterMatch{{FilterID: "f1", Policies: []events.Policy{pol("Y", "2")}}}}))
	recs = out.until(2, 60*time.Second)
	if len(recs) != 2 {
		t.Fatalf("got %d records after u2, want 2", len(recs))
	}
	cp = decodeCP(t, recs[1])
	if cp.UpdateID != "u2" || cp.Generation != 2 || !reflect.DeepEqual(ids(cp.Policies), []string{"X@1", "Y@2"}) ||
		!reflect.DeepEqual(ids(cp.UpdatedPolicies), []string{"X@1", "Y@2"}) || !reflect.DeepEqual(cp.RemovedPolicies, []events.Policy{vmMemory()}) {
		t.Fatalf("u2 wrote %+v", cp)
	}

	// A lower version changes nothing: no record.
	c.produce(t, topology.PolicySegments, "dep-1", piece("u3", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("Y", "1")}}))

	// A component registered after its update arrived: retried until
	// deploy.components has it.
	c.produce(t, topology.PolicySegments, "dep-1", piece("u4", 1, 1, events.ComponentDelta{ComponentID: "c2", UpdatedPolicies: []events.Policy{vmMemory()}}))
	time.Sleep(time.Second)
	out.poll(500 * time.Millisecond)
	if len(out.got) != 2 {
		t.Fatalf("got %d records before c2 was registered, want 2 (u3 changes nothing, u4 waits)", len(out.got))
	}
	c.produce(t, topology.DeployComponents, "c2", component("c2", "dcae-other"))
	recs = out.until(3, 60*time.Second)
	if len(recs) != 3 {
		t.Fatalf("got %d records after c2 was registered, want 3", len(recs))
	}
	if cp = decodeCP(t, recs[2]); string(recs[2].Key) != "c2" || cp.UpdateID != "u4" || cp.Generation != 1 || cp.ServiceComponentName != "dcae-other" {
		t.Fatalf("u4 wrote %+v", cp)
	}

	// Uninstall: the component's tombstone, then the delta removing all.
	c.produce(t, topology.DeployComponents, "c1", nil)
	c.produce(t, topology.PolicySegments, "dep-1", piece("u5", 1, 1, events.ComponentDelta{ComponentID: "c1", Uninstall: true,
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "X"}, {PolicyID: "Y"}}}))
	recs = out.until(4, 60*time.Second)
	if len(recs) != 4 {
		t.Fatalf("got %d records after uninstall, want 4", len(recs))
	}
	cp = decodeCP(t, recs[3])
	if string(recs[3].Key) != "c1" || cp.UpdateID != "u5" || !cp.Uninstalled || cp.Generation != 3 || len(cp.Policies) != 0 ||
		cp.ServiceComponentName != "dcae-vm" || !reflect.DeepEqual(ids(cp.RemovedPolicies), []string{"X@1", "Y@2"}) {
		t.Fatalf("uninstall wrote %+v", cp)
	}
	// A malformed piece is dead-lettered with its reason; the stage goes on.
	c.produce(t, topology.PolicySegments, "dep-1", piece("u6", 4, 2))
	dlq := c.reader(t, topology.DLQ(topology.StageExecutor)).until(1, 60*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dlq))
	}
	for _, h := range dlq[0].Headers {
		if h.Key == runtime.HeaderError && !reflect.DeepEqual(h.Value, []byte(nil)) {
			t.Logf("dead letter reason: %s", h.Value)
		}
	}
	out.poll(500 * time.Millisecond)
	if len(out.got) != 4 {
		t.Fatalf("got %d records in the end, want 4", len(out.got))
	}
}

// waitCommitted waits until the group committed every record of topic.
func (c *cluster) waitCommitted(t *testing.T, group, topic string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ends, err := c.adm.ListEndOffsets(ctx, c.k.Topic(topic))
		if err != nil {
			t.Fatal(err)
		}
		offs, err := c.adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			if got, ok := offs.Lookup(o.Topic, o.Partition); !ok || got.At < o.Offset {
				done = false
			}
		})
		if done {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("group %s did not commit %s", group, topic)
}

func TestExecutorRestoresUpdateCutByRestart(t *testing.T) {
	c := newCluster(t)
	c.produce(t, topology.DeployComponents, "c1", component("c1", "dcae-vm"))
	out := c.reader(t, topology.ComponentPolicies)
	first := Stage()
	stopFirst := run(t, first, testEnv(c.k))

	c.produce(t, topology.PolicySegments, "dep-1", piece("u1", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{vmMemory()}}))
	if n := len(out.until(1, 60*time.Second)); n != 1 {
		t.Fatalf("got %d records after u1, want 1", n)
	}
	// Two of three pieces are consumed and committed, then the member stops.
	c.produce(t, topology.PolicySegments, "dep-1", piece("u2", 1, 3, events.ComponentDelta{ComponentID: "c1",
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_VM_MEMORY"}}}))
	c.produce(t, topology.PolicySegments, "dep-1", piece("u2", 2, 3, events.ComponentDelta{ComponentID: "c1",
		UpdatedPolicies: []events.Policy{pol("X", "1")}}))
	c.waitCommitted(t, first.GroupIn(c.k), topology.PolicySegments)
	stopFirst()

	c.produce(t, topology.PolicySegments, "dep-1", piece("u2", 3, 3, events.ComponentDelta{ComponentID: "c1",
		UpdatedPolicies: []events.Policy{pol("Z", "3")}}))
	run(t, Stage(), testEnv(c.k))
	recs := out.until(2, 60*time.Second)
	out.poll(time.Second)
	if len(out.got) != 2 {
		t.Fatalf("got %d records, want 2 (u1, then u2 once)", len(out.got))
	}
	cp := decodeCP(t, recs[1])
	if cp.UpdateID != "u2" || cp.Generation != 2 || !reflect.DeepEqual(ids(cp.Policies), []string{"X@1", "Z@3"}) ||
		!reflect.DeepEqual(ids(cp.RemovedPolicies), []string{"DCAE.Config_VM_MEMORY@222"}) {
		t.Fatalf("u2 after restart wrote %+v; want every piece's change", cp)
	}
}
