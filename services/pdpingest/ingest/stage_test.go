package ingest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

const partitions = 3

var dlqTopic = topology.DLQ(topology.StagePDPIngest)

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
	compact := "compact"
	for tp, cfg := range map[string]map[string]*string{
		topology.PDPNotifications: nil,
		topology.PolicyCatalog:    {"cleanup.policy": &compact},
		topology.PolicyChanges:    nil,
		dlqTopic:                  nil,
	} {
		resp, err := adm.CreateTopic(context.Background(), partitions, 1, cfg, k.Topic(tp))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tp, err, resp.Err)
		}
	}
	return k
}

func testEnv(k runtime.Kafka) runtime.Env {
	env := runtime.NewEnv(k, runtime.Consul{}, runtime.NewLogger(io.Discard, "error", false))
	env.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	env.TransactionTimeout = 20 * time.Second
	return env
}

// run starts pdp-ingest against the PDP at url; the returned func stops it
// and fails the test if it ended in error.
func run(t *testing.T, k runtime.Kafka, url string) func() {
	t.Helper()
	cfg := DefaultConfig()
	cfg.PDPURL = url
	cfg.PDPTimeout = 5 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- StageWith(cfg).Run(ctx, testEnv(k)) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stage: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func produce(t *testing.T, k runtime.Kafka, key string, n *events.PdpNotification) {
	t.Helper()
	b, err := events.Default().Encode(n)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: k.Topic(topology.PDPNotifications), Key: []byte(key), Value: b}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads a topic read_committed from the start until done says
// so or the deadline passes, then lingers to catch anything extra.
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
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	out = append(out, cl.PollFetches(ctx).Records()...)
	cancel()
	return out
}

// catalog is the catalog as a reader rebuilding it sees it: the last
// record per key, tombstones removing the key.
func catalog(t *testing.T, recs []*kgo.Record) map[string]*events.PolicyCatalogEntry {
	t.Helper()
	out := map[string]*events.PolicyCatalogEntry{}
	for _, r := range recs {
		if r.Value == nil {
			delete(out, string(r.Key))
			continue
		}
		ev, err := events.Default().Decode(context.Background(), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out[string(r.Key)] = ev.(*events.PolicyCatalogEntry)
	}
	return out
}

type change struct {
	partition int32
	key       string
	*events.PolicyChange
}

func changes(t *testing.T, recs []*kgo.Record) []change {
	t.Helper()
	var out []change
	for _, r := range recs {
		ev, err := events.Default().Decode(context.Background(), r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, change{r.Partition, string(r.Key), ev.(*events.PolicyChange)})
	}
	return out
}

// perPartition groups changes by partition.
func perPartition(cs []change) map[int32][]change {
	out := map[int32][]change{}
	for _, c := range cs {
		out[c.partition] = append(out[c.partition], c)
	}
	return out
}

func countAtLeast(n int) func([]*kgo.Record) bool {
	return func(r []*kgo.Record) bool { return len(r) >= n }
}

func config(t *testing.T, e *events.PolicyCatalogEntry) map[string]any {
	t.Helper()
	var b map[string]any
	if err := json.Unmarshal([]byte(e.Body), &b); err != nil {
		t.Fatal(err)
	}
	c, _ := b["config"].(map[string]any)
	return c
}

func loadedNote(id, version string) *events.PdpNotification {
	return &events.PdpNotification{
		NotificationID: "n-" + id + "-" + version, Source: "pdp", ReceivedAt: time.Now().UTC().Truncate(time.Millisecond),
		LoadedPolicies: []events.LoadedPolicy{{PolicyName: id + "." + version + ".xml", VersionNo: version,
			Matches: map[string]string{"ONAPName": "DCAE", "ConfigName": "vm_memory"}}},
	}
}

// The seed's example: DCAE.Config_VM_MEMORY goes from version 5
// {"min_memory":"2GB"} to version 222 {"min_memory":"8GB"}.
func TestStageSeedExampleUpdatesCatalogAndFansOutChanges(t *testing.T) {
	k := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	stop := run(t, k, srv.URL)

	v5 := pdpBody(memID, "5", `{"min_memory":"2GB"}`)
	v222 := pdpBody(memID, "222", `{"min_memory":"8GB"}`)
	pdp.set(v5)
	produce(t, k, memID, loadedNote(memID, "5"))
	readUntil(t, k, topology.PolicyCatalog, 60*time.Second, countAtLeast(1))
	pdp.set(v5, v222)
	produce(t, k, memID, loadedNote(memID, "222"))

	cat := catalog(t, readUntil(t, k, topology.PolicyCatalog, 60*time.Second, countAtLeast(2)))
	e := cat[memID]
	if e == nil || e.PolicyVersion != "222" || e.Status != events.StatusValid || e.PolicyName != memID+".222.xml" {
		t.Fatalf("catalog holds %+v for %s, want version 222, valid", e, memID)
	}
	if c := config(t, e); c["min_memory"] != "8GB" {
		t.Fatalf("catalog config is %v, want min_memory 8GB", c)
	}

	all := changes(t, readUntil(t, k, topology.PolicyChanges, 60*time.Second, countAtLeast(2*partitions)))
	if len(all) != 2*partitions {
		t.Fatalf("got %d change records, want 2 changes copied to %d partitions", len(all), partitions)
	}
	for p := int32(0); p < partitions; p++ {
		cs := perPartition(all)[p]
		if len(cs) != 2 {
			t.Fatalf("partition %d has %d changes, want 2", p, len(cs))
		}
		first, second := cs[0], cs[1]
		if first.Action != events.ActionUpdated || first.OldVersion != nil || deref(first.NewVersion) != "5" {
			t.Fatalf("partition %d: first change %s %v -> %v, want UPDATED none -> 5", p, first.Action, first.OldVersion, deref(first.NewVersion))
		}
		if second.Action != events.ActionUpdated || deref(second.OldVersion) != "5" || deref(second.NewVersion) != "222" ||
			second.Body == nil || !strings.Contains(*second.Body, `"min_memory":"8GB"`) {
			t.Fatalf("partition %d: second change %s %s -> %s, want UPDATED 5 -> 222 with the new body", p, second.Action, deref(second.OldVersion), deref(second.NewVersion))
		}
		if second.key != memID || second.ChangeID != perPartition(all)[0][1].ChangeID {
			t.Fatalf("partition %d: change keyed %q id %s, want key %s and the same change id on every partition", p, second.key, second.ChangeID, memID)
		}
	}

	// A restarted member restores the catalog: a replay changes nothing,
	// and removing 222 while the PDP still has 5 is an update back to 5.
	stop()
	run(t, k, srv.URL)
	produce(t, k, memID, loadedNote(memID, "222"))
	pdp.set(v5)
	produce(t, k, memID, &events.PdpNotification{NotificationID: "n-rm", Source: "pdp",
		RemovedPolicies: []events.UnloadedPolicy{{PolicyName: memID + ".222.xml", VersionNo: "222"}}})
	all = changes(t, readUntil(t, k, topology.PolicyChanges, 60*time.Second, countAtLeast(3*partitions)))
	if len(all) != 3*partitions {
		t.Fatalf("after restart: got %d change records, want %d (the replay changes nothing, the removal is one change)", len(all), 3*partitions)
	}
	for p, cs := range perPartition(all) {
		last := cs[len(cs)-1]
		if last.Action != events.ActionUpdated || deref(last.OldVersion) != "222" || deref(last.NewVersion) != "5" {
			t.Fatalf("partition %d: change after the removal is %s %s -> %s, want UPDATED 222 -> 5", p, last.Action, deref(last.OldVersion), deref(last.NewVersion))
		}
	}
	cat = catalog(t, readUntil(t, k, topology.PolicyCatalog, 30*time.Second, countAtLeast(3)))
	if e := cat[memID]; e == nil || e.PolicyVersion != "5" {
		t.Fatalf("catalog holds %+v, want version 5 back", e)
	}
}

func TestStageSplitsMultiPolicyNotification(t *testing.T) {
	k := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	ids := []string{"DCAE.Config_A", "DCAE.Config_B", "DCAE.Config_C"}
	var bodies []policy.Body
	for _, id := range ids {
		bodies = append(bodies, pdpBody(id, "1", `{"id":"`+id+`"}`))
	}
	pdp.set(bodies...)
	run(t, k, srv.URL)

	n := &events.PdpNotification{NotificationID: "n-multi", Source: "pdp", ReceivedAt: time.Now().UTC().Truncate(time.Millisecond)}
	for _, id := range ids {
		n.LoadedPolicies = append(n.LoadedPolicies, events.LoadedPolicy{PolicyName: id + ".1.xml", VersionNo: "1"})
	}
	produce(t, k, "pdp-batch", n)

	cat := catalog(t, readUntil(t, k, topology.PolicyCatalog, 60*time.Second, countAtLeast(len(ids))))
	for _, id := range ids {
		if e := cat[id]; e == nil || e.PolicyVersion != "1" || config(t, e)["id"] != id {
			t.Fatalf("catalog holds %+v for %s, want version 1 with its own config", e, id)
		}
	}
	all := changes(t, readUntil(t, k, topology.PolicyChanges, 60*time.Second, countAtLeast(len(ids)*partitions)))
	if len(all) != len(ids)*partitions {
		t.Fatalf("got %d change records, want %d", len(all), len(ids)*partitions)
	}
	for p, cs := range perPartition(all) {
		var got []string
		for _, c := range cs {
			got = append(got, c.key)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(ids, ",") {
			t.Fatalf("partition %d has changes of %v, want one of each of %v", p, got, ids)
		}
	}
	// The parts went back to pdp.notifications, keyed by policy_id.
	notes := readUntil(t, k, topology.PDPNotifications, 30*time.Second, countAtLeast(1+len(ids)))
	keys := map[string]int{}
	for _, r := range notes {
		keys[string(r.Key)]++
	}
	for _, id := range ids {
		if keys[id] != 1 {
			t.Fatalf("pdp.notifications has %d parts keyed %s, want 1 (keys %v)", keys[id], id, keys)
		}
	}
}

func TestStageDeadLettersBadPushedBodyAndGoesOn(t *testing.T) {
	k := newCluster(t)
	srv := httptest.NewServer(&fakePDP{})
	defer srv.Close()
	run(t, k, srv.URL)

	huge := pdpBody(memID, "7", `{"blob":"`+strings.Repeat("x", policy.MaxBodyBytes)+`"}`)
	bad := &events.PdpNotification{NotificationID: "n-big", Source: "north-api", PushedBodies: []string{jsonOf(t, huge)}}
	produce(t, k, memID, bad)
	good := &events.PdpNotification{NotificationID: "n-good", Source: "north-api",
		PushedBodies: []string{jsonOf(t, pdpBody(memID, "8", `{"min_memory":"4GB"}`))}}
	produce(t, k, memID, good)

	dlq := readUntil(t, k, dlqTopic, 60*time.Second, countAtLeast(1))
	if len(dlq) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dlq))
	}
	reason := ""
	for _, h := range dlq[0].Headers {
		if h.Key == runtime.HeaderError {
			reason = string(h.Value)
		}
	}
	for _, want := range []string{"n-big", "pushed_bodies[0]", "over the limit of 524288 bytes"} {
		if !strings.Contains(reason, want) {
			t.Fatalf("dead letter reason %q does not say %q", reason, want)
		}
	}
	if string(dlq[0].Key) != memID {
		t.Fatalf("dead letter keyed %q, want the original key", dlq[0].Key)
	}
	cat := catalog(t, readUntil(t, k, topology.PolicyCatalog, 60*time.Second, countAtLeast(1)))
	if e := cat[memID]; e == nil || e.PolicyVersion != "8" {
		t.Fatalf("catalog holds %+v, want the good push (version 8) applied after the refused one", e)
	}
}

func TestStageRetriesWhilePDPIsDownAndProcessesOnce(t *testing.T) {
	k := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	pdp.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`))
	pdp.down(http.StatusServiceUnavailable)
	run(t, k, srv.URL)

	produce(t, k, memID, loadedNote(memID, "5"))
	deadline := time.Now().Add(60 * time.Second)
	for pdp.callCount() < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if pdp.callCount() < 3 {
		t.Fatalf("the PDP was asked %d times while down, want retries", pdp.callCount())
	}
	if early := readUntil(t, k, topology.PolicyChanges, 300*time.Millisecond, countAtLeast(1)); len(early) != 0 {
		t.Fatalf("%d changes committed while the PDP was down", len(early))
	}
	pdp.down(0)

	all := changes(t, readUntil(t, k, topology.PolicyChanges, 60*time.Second, countAtLeast(partitions)))
	if len(all) != partitions {
		t.Fatalf("got %d change records, want the one change copied to %d partitions", len(all), partitions)
	}
	for _, c := range all {
		if c.Action != events.ActionUpdated || deref(c.NewVersion) != "5" {
			t.Fatalf("change %s -> %s, want UPDATED to 5", c.Action, deref(c.NewVersion))
		}
	}
	cat := readUntil(t, k, topology.PolicyCatalog, 30*time.Second, countAtLeast(1))
	if len(cat) != 1 {
		t.Fatalf("catalog got %d records, want one", len(cat))
	}
	if dlq := readUntil(t, k, dlqTopic, 300*time.Millisecond, countAtLeast(1)); len(dlq) != 0 {
		t.Fatalf("%d records dead-lettered; an unreachable PDP must be retried", len(dlq))
	}
}

// When a transaction aborts, the consumer is rewound to the last committed
// offset; the catalog entries decided in the aborted transaction were never
// written, so the same inputs must produce the same outputs again.
func TestRewoundInputIsDecidedAgain(t *testing.T) {
	k := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	pdp.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`))
	cfg := DefaultConfig()
	cfg.PDPURL = srv.URL
	ctx := context.Background()
	g, err := newIngester(ctx, cfg, testEnv(k))
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if err := g.load(ctx, []int32{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	in := runtime.Input{Topic: topology.PDPNotifications, Partition: 1, Offset: 7, Key: []byte(memID), Value: loadedNote(memID, "5"), Raw: []byte{1}}
	decided := func() []runtime.Output {
		t.Helper()
		outs, err := g.handle(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return outs
	}
	first := decided()
	if len(first) != 1+partitions {
		t.Fatalf("first pass: %d outputs, want the catalog entry and %d change copies", len(first), partitions)
	}
	// The same offset again: a rewind. Nothing was committed, so the same
	// outputs come out.
	again := decided()
	if len(again) != len(first) {
		t.Fatalf("after a rewind: %d outputs, want %d again", len(again), len(first))
	}
	for i := range again {
		if again[i].Topic != first[i].Topic || again[i].Partition != first[i].Partition {
			t.Fatalf("after a rewind output %d goes to %s[%d], want %s[%d]", i, again[i].Topic, again[i].Partition, first[i].Topic, first[i].Partition)
		}
		if again[i].Topic != topology.PolicyChanges {
			continue
		}
		a, b := decodeChange(t, first[i].Raw), decodeChange(t, again[i].Raw)
		if a.ChangeID != b.ChangeID || a.Action != b.Action || deref(a.NewVersion) != deref(b.NewVersion) || deref(a.OldVersion) != deref(b.OldVersion) {
			t.Fatalf("after a rewind the change is %s %s -> %s (%s), want %s %s -> %s (%s)", b.Action, deref(b.OldVersion), deref(b.NewVersion), b.ChangeID,
				a.Action, deref(a.OldVersion), deref(a.NewVersion), a.ChangeID)
		}
	}
	// The next offset sees the in-memory state: the replay changes nothing.
	in.Offset = 8
	if outs := decided(); len(outs) != 0 {
		t.Fatalf("a replayed notification after the first was handled produced %d outputs, want none", len(outs))
	}
}

func decodeChange(t *testing.T, b []byte) *events.PolicyChange {
	t.Helper()
	ev, err := events.Default().Decode(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return ev.(*events.PolicyChange)
}
