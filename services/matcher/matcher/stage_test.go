package matcher

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

const testPartitions = 3

// newCluster is an in-process Kafka with the matcher's topics.
func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	return stagetest.NewCluster(t, testPartitions, topology.PolicyCatalog, topology.PolicyChanges, topology.DeployComponents,
		topology.CatchupRequests, topology.CatchupProgress, topology.ComponentPolicies, topology.MatcherHoldings, topology.PolicyMatches, topology.PolicyRollouts, topology.DLQ(topology.StageMatcher))
}

// fanOut produces one copy of v to every partition, as pdp-ingest does
// with policy changes and the scheduler with catch-up requests.
func fanOut(t *testing.T, c *stagetest.Cluster, base, key string, v events.Event) {
	t.Helper()
	manual, err := kgo.NewClient(kgo.SeedBrokers(c.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	var recs []*kgo.Record
	for p := int32(0); p < testPartitions; p++ {
		rec := c.Record(t, base, key, v)
		rec.Partition = p
		recs = append(recs, rec)
	}
	if err := manual.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("fan out to %s: %v", base, err)
	}
}

// wait reads until r holds n records or the deadline passes, then lingers
// so that records beyond n (duplicates) show too.
func wait(r *stagetest.Reader, n int, deadline time.Duration) []*kgo.Record {
	r.Until(n, deadline)
	r.Poll(stagetest.Linger)
	return r.Records()
}

func decodeMatches(t *testing.T, recs []*kgo.Record) []events.PolicyMatch {
	t.Helper()
	var out []events.PolicyMatch
	for _, rec := range recs {
		pm := stagetest.Decode[*events.PolicyMatch](t, rec)
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

// start runs a matcher until stop is called or the test ends.
func start(t *testing.T, c *stagetest.Cluster) (stop func()) {
	t.Helper()
	return stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
}

// change is what pdp-ingest writes for a new version: its catalog entry
// and the change naming it by header.
func change(id, changeID, old, version string, mc map[string]any) (*events.PolicyChange, *events.PolicyCatalogEntry) {
	body := policyBody(id, version, mc, nil)
	h := headerOf(body)
	now := time.Now().UTC().Truncate(time.Millisecond)
	return &events.PolicyChange{ChangeID: changeID, PolicyID: id, Action: events.ActionUpdated, OldVersion: &old,
			NewVersion: &version, PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash, ChangedAt: now},
		&events.PolicyCatalogEntry{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version, Body: body,
			BodyHash: h.BodyHash, Status: events.StatusValid, UpdatedAt: now}
}

// TestStageOnKafka runs the matcher against an in-process Kafka: component
// registrations and fanned-out policy changes give exactly one delta per
// affected component, a bad filter is dead-lettered with the reason, and
// a restarted matcher restores its state so that a change delivered again
// gives nothing while a new one still reaches every component.
func TestStageOnKafka(t *testing.T) {
	c := newCluster(t)
	matches := c.Reader(t, topology.PolicyMatches)
	dlq := c.Reader(t, topology.DLQ(topology.StageMatcher))

	for _, e := range []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil), catalogEntry(multiA, "1", kv1), catalogEntry(multiB, "1", kv2)} {
		c.Produce(t, topology.PolicyCatalog, e.PolicyID, e)
	}
	dcae := filter("f1", "DCAE.Config_multi.*", `{"key1":"value1"}`)
	comps := []*events.Component{
		comp("c1", "d1", []string{memID}),
		comp("c2", "d1", nil, dcae),
		comp("c3", "d2", []string{memID}, dcae),
		comp("c4", "d3", nil, filter("f1", "DCAE.Config_(?!VM).*", "")),
	}
	for _, cp := range comps {
		c.Produce(t, topology.DeployComponents, cp.ComponentID, cp)
	}

	stopA := start(t, c)
	install := []string{
		"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@5",
		"d1 c2 +f1:DCAE.Config_multi_A@1",
		"d2 c3 +policy_ids:DCAE.Config_VM_MEMORY@5 +f1:DCAE.Config_multi_A@1",
	}
	if got := sortedLines(decodeMatches(t, wait(matches, 3, 90*time.Second))); !slices.Equal(got, install) {
		t.Fatalf("after registration:\n got  %q\n want %q", got, install)
	}
	dead := wait(dlq, 1, 30*time.Second)
	if len(dead) != 1 || string(dead[0].Key) != "c4" {
		t.Fatalf("dead letters %d, want the component with the bad filter", len(dead))
	}
	if reason := stagetest.Header(dead[0], runtime.HeaderError); !strings.Contains(reason, `filter_id "f1"`) || !strings.Contains(reason, "(?!VM)") {
		t.Fatalf("dead letter reason %q does not name the filter and its expression", reason)
	}

	// pdp-ingest: the catalog entry and one copy of the change per partition.
	ch222, entry222 := change(memID, "ch-222", "5", "222", nil)
	c.Produce(t, topology.PolicyCatalog, memID, entry222)
	fanOut(t, c, topology.PolicyChanges, memID, ch222)
	fanOut(t, c, topology.CatchupRequests, events.ScopeAll, &events.CatchupRequest{RequestID: "cu-1", Scope: events.ScopeAll,
		Reason: "test", RequestedAt: time.Now().UTC().Truncate(time.Millisecond)})
	afterChange := append(slices.Clone(install),
		"d1 c1 ~DCAE.Config_VM_MEMORY@222",
		"d2 c3 ~DCAE.Config_VM_MEMORY@222",
	)
	sort.Strings(afterChange)
	if got := sortedLines(decodeMatches(t, wait(matches, 5, 60*time.Second))); !slices.Equal(got, afterChange) {
		t.Fatalf("after the change (three copies) and a catch-up:\n got  %q\n want %q", got, afterChange)
	}
	// Each partition reports what the catch-up compared there: the three
	// components, none of which differed after the change.
	var compared, differed int64
	seen := map[int32]bool{}
	for _, rec := range c.Read(t, topology.CatchupProgress, testPartitions, 60*time.Second) {
		pr := stagetest.Decode[*events.CatchupProgress](t, rec)
		if pr.RequestID != "cu-1" || pr.Stage != events.ProgressMatcher || string(rec.Key) != "cu-1" || seen[pr.Partition] {
			t.Fatalf("catch-up progress %+v (key %q), want one per partition from the matcher", pr, rec.Key)
		}
		seen[pr.Partition] = true
		compared, differed = compared+pr.Compared, differed+pr.Differed
	}
	if compared != 3 || differed != 0 {
		t.Fatalf("catch-up compared %d components, %d differed; want 3 and 0", compared, differed)
	}
	stopA()

	// The executor applied every delta to component.policies.
	for _, cp := range []*events.ComponentPolicies{
		collection("c1", "d1", pol(memID, "222", nil)),
		collection("c2", "d1", pol(multiA, "1", kv1)),
		collection("c3", "d2", pol(memID, "222", nil), pol(multiA, "1", kv1)),
	} {
		c.Produce(t, topology.ComponentPolicies, cp.ComponentID, cp)
	}

	start(t, c)
	// The same change delivered again, then a new one and an uninstall.
	ch222.ChangeID = "ch-222-again"
	fanOut(t, c, topology.PolicyChanges, memID, ch222)
	ch223, entry223 := change(memID, "ch-223", "222", "223", nil)
	c.Produce(t, topology.PolicyCatalog, memID, entry223)
	fanOut(t, c, topology.PolicyChanges, memID, ch223)
	c.Produce(t, topology.DeployComponents, "c2", nil)
	final := append(slices.Clone(afterChange),
		"d1 c1 ~DCAE.Config_VM_MEMORY@223",
		"d2 c3 ~DCAE.Config_VM_MEMORY@223",
		"d1 c2 uninstall -DCAE.Config_multi_A@1",
	)
	sort.Strings(final)
	if got := sortedLines(decodeMatches(t, wait(matches, len(final), 90*time.Second))); !slices.Equal(got, final) {
		t.Fatalf("after the restart:\n got  %q\n want %q", got, final)
	}
	// Every policy is named by reference: no body, the body_hash of the
	// catalog entry of its version.
	hashes := map[string]string{}
	for _, e := range []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil), catalogEntry(multiA, "1", kv1), entry222, entry223} {
		hashes[e.PolicyName] = policy.BodyHash(e.Body)
	}
	ids := map[string]bool{}
	for _, pm := range decodeMatches(t, matches.Records()) {
		if ids[pm.UpdateID] {
			t.Fatalf("update_id %s used twice", pm.UpdateID)
		}
		ids[pm.UpdateID] = true
		for _, d := range pm.Components {
			ps := slices.Clone(d.UpdatedPolicies)
			for _, a := range d.AddedPolicies {
				ps = append(ps, a.Policies...)
			}
			for _, p := range ps {
				if p.Body != "" || p.BodyHash == "" || p.BodyHash != hashes[p.PolicyName] {
					t.Fatalf("match %s names %s with body %d bytes and hash %q, want no body and hash %q",
						pm.UpdateID, p.PolicyName, len(p.Body), p.BodyHash, hashes[p.PolicyName])
				}
			}
		}
	}
}

// TestStageRebalanceKeepsOneDeltaPerComponent runs two matchers in one
// group: the partitions are split between them, and a fanned-out change
// still reaches every component exactly once.
func TestStageRebalanceKeepsOneDeltaPerComponent(t *testing.T) {
	c := newCluster(t)
	matches := c.Reader(t, topology.PolicyMatches)
	c.Produce(t, topology.PolicyCatalog, memID, catalogEntry(memID, "1", nil))
	var want []string
	for i := 0; i < 12; i++ {
		id := "comp-" + string(rune('a'+i))
		c.Produce(t, topology.DeployComponents, id, comp(id, "dep-"+id, []string{memID}))
		want = append(want, "dep-"+id+" "+id+" +policy_ids:DCAE.Config_VM_MEMORY@1")
	}
	var wg sync.WaitGroup
	stopA := start(t, c)
	wait(matches, 12, 90*time.Second)
	// The executor applied the installs.
	for i := 0; i < 12; i++ {
		id := "comp-" + string(rune('a'+i))
		c.Produce(t, topology.ComponentPolicies, id, collection(id, "dep-"+id, pol(memID, "1", nil)))
	}
	stopB := start(t, c) // joins: the partitions are rebalanced and restored
	// Wait until both members own partitions, so that the change is
	// handled by both.
	testkit.Eventually(t, 60*time.Second, testkit.Holds("both members own partitions", func() bool { return bothOwn(c) }))
	ch, entry := change(memID, "ch-2", "1", "2", nil)
	c.Produce(t, topology.PolicyCatalog, memID, entry)
	fanOut(t, c, topology.PolicyChanges, memID, ch)
	for i := 0; i < 12; i++ {
		id := "comp-" + string(rune('a'+i))
		want = append(want, "dep-"+id+" "+id+" ~DCAE.Config_VM_MEMORY@2")
	}
	sort.Strings(want)
	got := decodeMatches(t, wait(matches, 24, 90*time.Second))
	wg.Add(2)
	go func() { defer wg.Done(); stopA() }()
	go func() { defer wg.Done(); stopB() }()
	wg.Wait()
	if lines := sortedLines(got); !slices.Equal(lines, want) {
		t.Fatalf("with two members:\n got  %q\n want %q", lines, want)
	}
}

// bothOwn reports whether the matcher group has two members with
// partitions.
func bothOwn(c *stagetest.Cluster) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	group := Stage().GroupIn(c.Kafka)
	groups, err := c.Admin.DescribeGroups(ctx, group)
	if err != nil {
		return false
	}
	g, ok := groups[group]
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
