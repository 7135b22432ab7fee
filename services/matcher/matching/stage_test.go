package matching

import (
	"context"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

const testPartitions = 3

type cluster struct {
	k runtime.Kafka
	// keyed produces by key hash (as every other client does); manual
	// produces to the record's Partition (fan-out copies).
	keyed, manual *kgo.Client
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := runtime.Kafka{Brokers: c.ListenAddrs(), Prefix: "t.", FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	topics := []string{topology.PolicyCatalog, topology.PolicyChanges, topology.DeployComponents, topology.CatchupRequests,
		topology.ComponentPolicies, topology.PolicyMatches, runtime.DLQTopic(topology.StageMatcher)}
	for _, tp := range topics {
		resp, err := adm.CreateTopic(context.Background(), testPartitions, 1, nil, k.Topic(tp))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tp, err, resp.Err)
		}
	}
	keyed, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keyed.Close)
	manual, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(manual.Close)
	return &cluster{k: k, keyed: keyed, manual: manual}
}

func (c *cluster) produce(t *testing.T, base, key string, v events.Event) {
	t.Helper()
	rec := &kgo.Record{Topic: c.k.Topic(base), Key: []byte(key)}
	if v != nil {
		b, err := events.Default().Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		rec.Value = b
	}
	if err := c.keyed.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", base, err)
	}
}

// fanOut produces one copy of v to every partition, as pdp-ingest does
// with policy changes and the scheduler with catch-up requests.
func (c *cluster) fanOut(t *testing.T, base, key string, v events.Event) {
	t.Helper()
	b, err := events.Default().Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for p := int32(0); p < testPartitions; p++ {
		recs = append(recs, &kgo.Record{Topic: c.k.Topic(base), Partition: p, Key: []byte(key), Value: b})
	}
	if err := c.manual.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("fan out to %s: %v", base, err)
	}
}

// reader accumulates a topic's committed records.
type reader struct {
	cl  *kgo.Client
	got []*kgo.Record
}

func (c *cluster) reader(t *testing.T, base string) *reader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.k.Brokers...), kgo.ConsumeTopics(c.k.Topic(base)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &reader{cl: cl}
}

// wait polls until the reader holds n records or the deadline passes, then
// lingers briefly so that records beyond n (duplicates) show too.
func (r *reader) wait(n int, deadline time.Duration) []*kgo.Record {
	end := time.Now().Add(deadline)
	for len(r.got) < n && time.Now().Before(end) {
		r.poll(500 * time.Millisecond)
	}
	r.poll(300 * time.Millisecond)
	return r.got
}

func (r *reader) poll(d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r.got = append(r.got, r.cl.PollFetches(ctx).Records()...)
}

func decodeMatches(t *testing.T, recs []*kgo.Record) []events.PolicyMatch {
	t.Helper()
	var out []events.PolicyMatch
	for _, rec := range recs {
		v, err := events.Default().Decode(context.Background(), rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		pm, ok := v.(*events.PolicyMatch)
		if !ok {
			t.Fatalf("policy.matches holds a %s", v.SchemaName())
		}
		if string(rec.Key) != pm.DeploymentID {
			t.Fatalf("match keyed %q for deployment %q", rec.Key, pm.DeploymentID)
		}
		out = append(out, *pm)
	}
	return out
}

func sortedLines(ms []events.PolicyMatch) []string {
	l := render(ms)
	sort.Strings(l)
	return l
}

func testEnv(k runtime.Kafka) runtime.Env {
	env := runtime.NewEnv(k, runtime.Consul{}, runtime.NewLogger(io.Discard, "error", false))
	env.Retry = runtime.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	env.TransactionTimeout = 5 * time.Second
	env.PollRecords = 50
	return env
}

// running is a stage run in the background.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(k runtime.Kafka) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- Stage().Run(ctx, testEnv(k)) }()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("stage stopped with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("stage did not stop")
	}
}

func change(id, changeID, old, version string, mc map[string]any) (*events.PolicyChange, *events.PolicyCatalogEntry) {
	body := policyBody(id, version, mc, nil)
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &events.PolicyChange{ChangeID: changeID, PolicyID: id, Action: events.ActionUpdated, OldVersion: &old,
			NewVersion: &version, Body: &body, ChangedAt: now},
		&events.PolicyCatalogEntry{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version, Body: body,
			Status: events.StatusValid, UpdatedAt: now}
}

// TestStageOnKafka runs the matcher against an in-process Kafka: component
// registrations and fanned-out policy changes give exactly one delta per
// affected component, a bad filter is dead-lettered with the reason, and
// a restarted matcher restores its state so that a change delivered again
// gives nothing while a new one still reaches every component.
func TestStageOnKafka(t *testing.T) {
	c := newCluster(t)
	matches := c.reader(t, topology.PolicyMatches)
	dlq := c.reader(t, runtime.DLQTopic(topology.StageMatcher))

	for _, e := range []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil), catalogEntry(multiA, "1", kv1), catalogEntry(multiB, "1", kv2)} {
		c.produce(t, topology.PolicyCatalog, e.PolicyID, e)
	}
	dcae := filter("f1", "DCAE.Config_multi.*", `{"key1":"value1"}`)
	comps := []*events.Component{
		comp("c1", "d1", []string{memID}),
		comp("c2", "d1", nil, dcae),
		comp("c3", "d2", []string{memID}, dcae),
		comp("c4", "d3", nil, filter("f1", "DCAE.Config_(?!VM).*", "")),
	}
	for _, cp := range comps {
		c.produce(t, topology.DeployComponents, cp.ComponentID, cp)
	}

	a := start(c.k)
	install := []string{
		"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@5",
		"d1 c2 +f1:DCAE.Config_multi_A@1",
		"d2 c3 +policy_ids:DCAE.Config_VM_MEMORY@5 +f1:DCAE.Config_multi_A@1",
	}
	if got := sortedLines(decodeMatches(t, matches.wait(3, 90*time.Second))); !slices.Equal(got, install) {
		a.stop(t)
		t.Fatalf("after registration:\n got  %q\n want %q", got, install)
	}
	dead := dlq.wait(1, 30*time.Second)
	if len(dead) != 1 || string(dead[0].Key) != "c4" {
		a.stop(t)
		t.Fatalf("dead letters %d, want the component with the bad filter", len(dead))
	}
	if reason := header(dead[0], runtime.HeaderError); !strings.Contains(reason, `filter_id "f1"`) || !strings.Contains(reason, "(?!VM)") {
		a.stop(t)
		t.Fatalf("dead letter reason %q does not name the filter and its expression", reason)
	}

	// pdp-ingest: the catalog entry and one copy of the change per partition.
	ch222, entry222 := change(memID, "ch-222", "5", "222", nil)
	c.produce(t, topology.PolicyCatalog, memID, entry222)
	c.fanOut(t, topology.PolicyChanges, memID, ch222)
	c.fanOut(t, topology.CatchupRequests, events.ScopeAll, &events.CatchupRequest{RequestID: "cu-1", Scope: events.ScopeAll,
		Reason: "test", RequestedAt: time.Now().UTC().Truncate(time.Millisecond)})
	afterChange := append(slices.Clone(install),
		"d1 c1 ~DCAE.Config_VM_MEMORY@222",
		"d2 c3 ~DCAE.Config_VM_MEMORY@222",
	)
	sort.Strings(afterChange)
	if got := sortedLines(decodeMatches(t, matches.wait(5, 60*time.Second))); !slices.Equal(got, afterChange) {
		a.stop(t)
		t.Fatalf("after the change (three copies) and a catch-up:\n got  %q\n want %q", got, afterChange)
	}
	a.stop(t)

	// The executor applied every delta to component.policies.
	for _, cp := range []*events.ComponentPolicies{
		collection("c1", "d1", pol(memID, "222", nil)),
		collection("c2", "d1", pol(multiA, "1", kv1)),
		collection("c3", "d2", pol(memID, "222", nil), pol(multiA, "1", kv1)),
	} {
		c.produce(t, topology.ComponentPolicies, cp.ComponentID, cp)
	}

	b := start(c.k)
	defer b.stop(t)
	// The same change delivered again, then a new one and an uninstall.
	ch222.ChangeID = "ch-222-again"
	c.fanOut(t, topology.PolicyChanges, memID, ch222)
	ch223, entry223 := change(memID, "ch-223", "222", "223", nil)
	c.produce(t, topology.PolicyCatalog, memID, entry223)
	c.fanOut(t, topology.PolicyChanges, memID, ch223)
	c.produce(t, topology.DeployComponents, "c2", nil)
	final := append(slices.Clone(afterChange),
		"d1 c1 ~DCAE.Config_VM_MEMORY@223",
		"d2 c3 ~DCAE.Config_VM_MEMORY@223",
		"d1 c2 uninstall -DCAE.Config_multi_A@1",
	)
	sort.Strings(final)
	if got := sortedLines(decodeMatches(t, matches.wait(len(final), 90*time.Second))); !slices.Equal(got, final) {
		t.Fatalf("after the restart:\n got  %q\n want %q", got, final)
	}
	ids := map[string]bool{}
	for _, pm := range decodeMatches(t, matches.got) {
		if ids[pm.UpdateID] {
			t.Fatalf("update_id %s used twice", pm.UpdateID)
		}
		ids[pm.UpdateID] = true
	}
}

// TestStageRebalanceKeepsOneDeltaPerComponent runs two matchers in one
// group: the partitions are split between them, and a fanned-out change
// still reaches every component exactly once.
func TestStageRebalanceKeepsOneDeltaPerComponent(t *testing.T) {
	c := newCluster(t)
	matches := c.reader(t, topology.PolicyMatches)
	c.produce(t, topology.PolicyCatalog, memID, catalogEntry(memID, "1", nil))
	var want []string
	for i := 0; i < 12; i++ {
		id := "comp-" + string(rune('a'+i))
		c.produce(t, topology.DeployComponents, id, comp(id, "dep-"+id, []string{memID}))
		want = append(want, "dep-"+id+" "+id+" +policy_ids:DCAE.Config_VM_MEMORY@1")
	}
	var wg sync.WaitGroup
	a := start(c.k)
	matches.wait(12, 90*time.Second)
	// The executor applied the installs.
	for i := 0; i < 12; i++ {
		id := "comp-" + string(rune('a'+i))
		c.produce(t, topology.ComponentPolicies, id, collection(id, "dep-"+id, pol(memID, "1", nil)))
	}
	b := start(c.k) // joins: the partitions are rebalanced and restored
	// Wait until both members own partitions, so that the change is
	// handled by both.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && !bothOwn(t, c.k) {
		time.Sleep(100 * time.Millisecond)
	}
	ch, entry := change(memID, "ch-2", "1", "2", nil)
	c.produce(t, topology.PolicyCatalog, memID, entry)
	c.fanOut(t, topology.PolicyChanges, memID, ch)
	for i := 0; i < 12; i++ {
		id := "comp-" + string(rune('a'+i))
		want = append(want, "dep-"+id+" "+id+" ~DCAE.Config_VM_MEMORY@2")
	}
	sort.Strings(want)
	got := decodeMatches(t, matches.wait(24, 90*time.Second))
	wg.Add(2)
	go func() { defer wg.Done(); a.stop(t) }()
	go func() { defer wg.Done(); b.stop(t) }()
	wg.Wait()
	if lines := sortedLines(got); !slices.Equal(lines, want) {
		t.Fatalf("with two members:\n got  %q\n want %q", lines, want)
	}
}

// bothOwn reports whether the matcher group has two members with
// partitions.
func bothOwn(t *testing.T, k runtime.Kafka) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	groups, err := kadm.NewClient(cl).DescribeGroups(ctx, Stage().GroupIn(k))
	if err != nil {
		return false
	}
	g, ok := groups[Stage().GroupIn(k)]
	if !ok || g.State != "Stable" {
		return false
	}
	owning := 0
	for _, m := range g.Members {
		if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
			owning++
		}
	}
	return owning == 2
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}
