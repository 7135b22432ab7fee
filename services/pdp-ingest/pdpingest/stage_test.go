package pdpingest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

const partitions = 3

var dlqTopic = topology.DLQ(topology.StagePDPIngest)

// newCluster is an in-process Kafka with pdp-ingest's topics.
func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	c := stagetest.NewCluster(t, partitions, topology.PDPNotifications, topology.PolicyChanges, dlqTopic)
	c.CreateTopics(t, map[string]string{"cleanup.policy": "compact"}, topology.PolicyCatalog)
	return c
}

// run starts pdp-ingest against the PDP at url; the returned func stops it
// and fails the test if it ended in error.
func run(t *testing.T, c *stagetest.Cluster, url string) func() {
	t.Helper()
	cfg := DefaultConfig()
	cfg.PDPURL = url
	cfg.PDPTimeout = 5 * time.Second
	cfg.CatchupOnStart, cfg.CatchupInterval = false, 0
	return stagetest.Run(t, StageWith(cfg), stagetest.Env(c.Kafka))
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
		out[string(r.Key)] = stagetest.Decode[*events.PolicyCatalogEntry](t, r)
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
		out = append(out, change{r.Partition, string(r.Key), stagetest.Decode[*events.PolicyChange](t, r)})
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
	c := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	stop := run(t, c, srv.URL)

	v5 := pdpBody(memID, "5", `{"min_memory":"2GB"}`)
	v222 := pdpBody(memID, "222", `{"min_memory":"8GB"}`)
	pdp.set(v5)
	c.Produce(t, topology.PDPNotifications, memID, loadedNote(memID, "5"))
	c.Read(t, topology.PolicyCatalog, 1, 60*time.Second)
	pdp.set(v5, v222)
	c.Produce(t, topology.PDPNotifications, memID, loadedNote(memID, "222"))

	cat := catalog(t, c.Read(t, topology.PolicyCatalog, 2, 60*time.Second))
	e := cat[memID]
	if e == nil || e.PolicyVersion != "222" || e.Status != events.StatusValid || e.PolicyName != memID+".222.xml" {
		t.Fatalf("catalog holds %+v for %s, want version 222, valid", e, memID)
	}
	if c := config(t, e); c["min_memory"] != "8GB" {
		t.Fatalf("catalog config is %v, want min_memory 8GB", c)
	}

	all := changes(t, c.Read(t, topology.PolicyChanges, 2*partitions, 60*time.Second))
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
		if second.Action != events.ActionUpdated || deref(second.OldVersion) != "5" || deref(second.NewVersion) != "222" {
			t.Fatalf("partition %d: second change %s %s -> %s, want UPDATED 5 -> 222", p, second.Action, deref(second.OldVersion), deref(second.NewVersion))
		}
		// The change names the catalog's new body by its hash and
		// carries what filters look at (policy.changes has no body).
		if second.PolicyName != memID+".222.xml" || second.MatchingConditions != `{"ConfigName":"vm_memory","ONAPName":"DCAE"}` ||
			second.BodyHash == "" || second.BodyHash != e.BodyHash || e.BodyHash != policy.BodyHash(e.Body) {
			t.Fatalf("partition %d: second change names %q conditions %s hash %q; want the header of the catalog's body (hash %q)",
				p, second.PolicyName, second.MatchingConditions, second.BodyHash, e.BodyHash)
		}
		if second.key != memID || second.ChangeID != perPartition(all)[0][1].ChangeID {
			t.Fatalf("partition %d: change keyed %q id %s, want key %s and the same change id on every partition", p, second.key, second.ChangeID, memID)
		}
	}

	// A restarted member restores the catalog: a replay changes nothing,
	// and removing 222 while the PDP still has 5 is an update back to 5.
	stop()
	run(t, c, srv.URL)
	c.Produce(t, topology.PDPNotifications, memID, loadedNote(memID, "222"))
	pdp.set(v5)
	c.Produce(t, topology.PDPNotifications, memID, &events.PdpNotification{NotificationID: "n-rm", Source: "pdp",
		RemovedPolicies: []events.UnloadedPolicy{{PolicyName: memID + ".222.xml", VersionNo: "222"}}})
	all = changes(t, c.Read(t, topology.PolicyChanges, 3*partitions, 60*time.Second))
	if len(all) != 3*partitions {
		t.Fatalf("after restart: got %d change records, want %d (the replay changes nothing, the removal is one change)", len(all), 3*partitions)
	}
	for p, cs := range perPartition(all) {
		last := cs[len(cs)-1]
		if last.Action != events.ActionUpdated || deref(last.OldVersion) != "222" || deref(last.NewVersion) != "5" {
			t.Fatalf("partition %d: change after the removal is %s %s -> %s, want UPDATED 222 -> 5", p, last.Action, deref(last.OldVersion), deref(last.NewVersion))
		}
	}
	cat = catalog(t, c.Read(t, topology.PolicyCatalog, 3, 30*time.Second))
	if e := cat[memID]; e == nil || e.PolicyVersion != "5" {
		t.Fatalf("catalog holds %+v, want version 5 back", e)
	}
}

func TestStageSplitsMultiPolicyNotification(t *testing.T) {
	c := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	ids := []string{"DCAE.Config_A", "DCAE.Config_B", "DCAE.Config_C"}
	var bodies []policy.Body
	for _, id := range ids {
		bodies = append(bodies, pdpBody(id, "1", `{"id":"`+id+`"}`))
	}
	pdp.set(bodies...)
	run(t, c, srv.URL)

	n := &events.PdpNotification{NotificationID: "n-multi", Source: "pdp", ReceivedAt: time.Now().UTC().Truncate(time.Millisecond)}
	for _, id := range ids {
		n.LoadedPolicies = append(n.LoadedPolicies, events.LoadedPolicy{PolicyName: id + ".1.xml", VersionNo: "1"})
	}
	c.Produce(t, topology.PDPNotifications, "pdp-batch", n)

	cat := catalog(t, c.Read(t, topology.PolicyCatalog, len(ids), 60*time.Second))
	for _, id := range ids {
		if e := cat[id]; e == nil || e.PolicyVersion != "1" || config(t, e)["id"] != id {
			t.Fatalf("catalog holds %+v for %s, want version 1 with its own config", e, id)
		}
	}
	all := changes(t, c.Read(t, topology.PolicyChanges, len(ids)*partitions, 60*time.Second))
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
	notes := c.Read(t, topology.PDPNotifications, 1+len(ids), 30*time.Second)
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
	c := newCluster(t)
	srv := httptest.NewServer(&fakePDP{})
	defer srv.Close()
	run(t, c, srv.URL)

	good := pdpBody(memID, "8", `{"min_memory":"4GB"}`)
	poisoned := pdpBody(memID, "8", `{"min_memory":"4GB"}`)
	poisoned["policyVersion"] = "999999"
	bad := []struct {
		id, body string
		says     []string
	}{
		{"n-big", jsonOf(t, pdpBody(memID, "7", `{"blob":"`+strings.Repeat("x", policy.MaxBodyBytes)+`"}`)),
			[]string{"over the limit of 524288 bytes"}},
		{"n-traversal", jsonOf(t, pdpBody("DCAE.Config_VM_/../../../evil", "2", `{"a":1}`)),
			[]string{`"DCAE.Config_VM_/../../../evil.2.xml"`, "character '/' at byte 15 is not allowed"}},
		{"n-poisoned", jsonOf(t, poisoned),
			[]string{`policyVersion "999999" is not the version 8 in its policyName`}},
		{"n-twice", strings.Replace(jsonOf(t, good), `"policyVersion":"8"`, `"policyVersion":"8","policyVersion":"999999"`, 1),
			[]string{`the key "policyVersion" appears twice`}},
	}
	for _, b := range bad {
		c.Produce(t, topology.PDPNotifications, memID, &events.PdpNotification{NotificationID: b.id, Source: "north-api", PushedBodies: []string{b.body}})
	}
	c.Produce(t, topology.PDPNotifications, memID, &events.PdpNotification{NotificationID: "n-good", Source: "north-api",
		PushedBodies: []string{jsonOf(t, good)}})

	dlq := c.Read(t, dlqTopic, len(bad), 60*time.Second)
	if len(dlq) != len(bad) {
		t.Fatalf("got %d dead letters, want %d", len(dlq), len(bad))
	}
	for i, b := range bad {
		reason := stagetest.Header(dlq[i], runtime.HeaderError)
		for _, want := range append([]string{b.id, "pushed_bodies[0]"}, b.says...) {
			if !strings.Contains(reason, want) {
				t.Errorf("dead letter %d reason %q does not say %q", i, reason, want)
			}
		}
		if string(dlq[i].Key) != memID {
			t.Errorf("dead letter keyed %q, want the original key", dlq[i].Key)
		}
	}
	// The refused bodies blocked nothing: the good push (version 8, which
	// the poisoned ones would have shadowed) is in the catalog.
	cat := catalog(t, c.Read(t, topology.PolicyCatalog, 1, 60*time.Second))
	if e := cat[memID]; e == nil || e.PolicyVersion != "8" {
		t.Fatalf("catalog holds %+v, want the good push (version 8) applied after the refused ones", e)
	}
}

func TestStageRetriesWhilePDPIsDownAndProcessesOnce(t *testing.T) {
	c := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	pdp.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`))
	pdp.down(http.StatusServiceUnavailable)
	run(t, c, srv.URL)

	c.Produce(t, topology.PDPNotifications, memID, loadedNote(memID, "5"))
	testkit.Eventually(t, 60*time.Second, func() error {
		if n := pdp.callCount(); n < 3 {
			return fmt.Errorf("the PDP was asked %d times while down, want retries", n)
		}
		return nil
	})
	if early := c.Read(t, topology.PolicyChanges, 1, 300*time.Millisecond); len(early) != 0 {
		t.Fatalf("%d changes committed while the PDP was down", len(early))
	}
	pdp.down(0)

	all := changes(t, c.Read(t, topology.PolicyChanges, partitions, 60*time.Second))
	if len(all) != partitions {
		t.Fatalf("got %d change records, want the one change copied to %d partitions", len(all), partitions)
	}
	for _, c := range all {
		if c.Action != events.ActionUpdated || deref(c.NewVersion) != "5" {
			t.Fatalf("change %s -> %s, want UPDATED to 5", c.Action, deref(c.NewVersion))
		}
	}
	cat := c.Read(t, topology.PolicyCatalog, 1, 30*time.Second)
	if len(cat) != 1 {
		t.Fatalf("catalog got %d records, want one", len(cat))
	}
	if dlq := c.Read(t, dlqTopic, 1, 300*time.Millisecond); len(dlq) != 0 {
		t.Fatalf("%d records dead-lettered; an unreachable PDP must be retried", len(dlq))
	}
}

// When a transaction aborts, the consumer is rewound to the last committed
// offset; the catalog entries decided in the aborted transaction were never
// written, so the same inputs must produce the same outputs again.
func TestRewoundInputIsDecidedAgain(t *testing.T) {
	c := newCluster(t)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	pdp.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`))
	cfg := DefaultConfig()
	cfg.PDPURL = srv.URL
	ctx := context.Background()
	g, err := newIngester(ctx, cfg, stagetest.Env(c.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if err := g.load(ctx, []int32{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	in := runtime.Msg[*events.PdpNotification]{
		Input: runtime.Input{Topic: topology.PDPNotifications, Partition: 1, Offset: 7, Key: []byte(memID), Raw: []byte{1}},
		Value: loadedNote(memID, "5"),
	}
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

// A tombstone and a record with headers but an empty value mean nothing
// on pdp.notifications: both are dead-lettered with the reason, never
// taken as an empty notification, and the stage goes on.
func TestStageDeadLettersTombstoneAndEmptyValue(t *testing.T) {
	c := newCluster(t)
	srv := httptest.NewServer(&fakePDP{})
	defer srv.Close()
	run(t, c, srv.URL)

	tombstone := c.Record(t, topology.PDPNotifications, "n-tombstone", nil)
	empty := c.Record(t, topology.PDPNotifications, "n-empty", nil)
	empty.Value = []byte{}
	empty.Headers = []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}}
	good := c.Record(t, topology.PDPNotifications, memID, &events.PdpNotification{NotificationID: "n-good", Source: "north-api",
		PushedBodies: []string{jsonOf(t, pdpBody(memID, "8", `{"min_memory":"4GB"}`))}})
	c.ProduceRecords(t, tombstone, empty, good)

	dlq := c.Read(t, dlqTopic, 2, 60*time.Second)
	if len(dlq) != 2 {
		t.Fatalf("got %d dead letters, want 2 (the tombstone and the empty value)", len(dlq))
	}
	byKey := map[string]*kgo.Record{}
	for _, d := range dlq {
		byKey[string(d.Key)] = d
	}
	if d := byKey["n-tombstone"]; d == nil || d.Value != nil ||
		!strings.Contains(stagetest.Header(d, runtime.HeaderError), "is a tombstone (no value), which pdp.notifications never carries") {
		t.Errorf("dead letter of the tombstone: %+v", d)
	}
	if d := byKey["n-empty"]; d == nil || d.Value == nil || len(d.Value) != 0 ||
		!strings.HasPrefix(stagetest.Header(d, runtime.HeaderError), "malformed record: the value is empty") ||
		stagetest.Header(d, "content-type") != "application/json" {
		t.Errorf("dead letter of the empty value: %+v (reason %q)", d, stagetest.Header(d, runtime.HeaderError))
	}
	cat := catalog(t, c.Read(t, topology.PolicyCatalog, 1, 60*time.Second))
	if e := cat[memID]; e == nil || e.PolicyVersion != "8" {
		t.Fatalf("catalog holds %+v, want the notification sent with the refused records applied", e)
	}
}

// A notification the PDP sent while pdp-ingest was down is never seen;
// the catch-up on start reads the PDP's full state, repairs the catalog
// (with the change downstream stages act on) and asks every matcher
// partition to compare the components. The periodic catch-up repairs a
// later miss the same way.
func TestCatchupRepairsMissedNotificationsOnStartAndPeriodically(t *testing.T) {
	c := newCluster(t)
	c.CreateTopics(t, nil, topology.CatchupRequests)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	pdp.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`), pdpBody(memID, "222", `{"min_memory":"8GB"}`))

	cfg := DefaultConfig()
	cfg.PDPURL = srv.URL
	cfg.PDPTimeout = 5 * time.Second
	cfg.CatchupOnStart, cfg.CatchupInterval = true, time.Second
	stop := stagetest.Run(t, StageWith(cfg), stagetest.Env(c.Kafka))
	defer stop()

	cat := catalog(t, c.Read(t, topology.PolicyCatalog, 1, 60*time.Second))
	if e := cat[memID]; e == nil || e.PolicyVersion != "222" || config(t, e)["min_memory"] != "8GB" {
		t.Fatalf("catalog after the catch-up on start: %+v, want version 222 with 8GB", e)
	}
	// Every partition's first request is the catch-up on start (periodic
	// ones may follow it).
	first := map[int32]*events.CatchupRequest{}
	c.ReadUntil(t, topology.CatchupRequests, 60*time.Second, func(recs []*kgo.Record) bool {
		for _, r := range recs {
			if first[r.Partition] == nil {
				first[r.Partition] = stagetest.Decode[*events.CatchupRequest](t, r)
			}
		}
		return len(first) == partitions
	})
	for p, req := range first {
		if req.Scope != events.ScopeAll || !strings.HasPrefix(req.Reason, "catch-up on start") || !strings.Contains(req.Reason, "1 policy differed") {
			t.Fatalf("first catch-up request on partition %d: %+v, want scope ALL, a catch-up on start that repaired 1 policy", p, req)
		}
	}
	ups := changes(t, c.Read(t, topology.PolicyChanges, partitions, 60*time.Second))
	for _, ch := range ups {
		if ch.Action != events.ActionUpdated || deref(ch.NewVersion) != "222" {
			t.Fatalf("change %+v, want UPDATED to 222", ch.PolicyChange)
		}
	}

	// The PDP withdraws version 222 and nobody tells pdp-ingest: the next
	// periodic catch-up moves the catalog to the remaining version 5.
	pdp.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`))
	cat = catalog(t, c.ReadUntil(t, topology.PolicyCatalog, 60*time.Second, func(recs []*kgo.Record) bool {
		e := catalog(t, recs)[memID]
		return e != nil && e.PolicyVersion == "5"
	}))
	if e := cat[memID]; config(t, e)["min_memory"] != "2GB" {
		t.Fatalf("catalog after the periodic catch-up: %+v, want version 5 with 2GB", e)
	}
}

// A policy the PDP stops listing while its removal notification is lost
// is removed by the next catch-up (a tombstone and a REMOVED change); an
// empty listing removes nothing and says so on catchup.progress.
func TestCatchupRemovesWhatThePDPNoLongerListsButNotOnAnEmptyAnswer(t *testing.T) {
	c := newCluster(t)
	c.CreateTopics(t, nil, topology.CatchupRequests, topology.CatchupProgress)
	pdp := &fakePDP{}
	srv := httptest.NewServer(pdp)
	defer srv.Close()
	a, b, gone := pdpBody(memID, "5", `{"min_memory":"2GB"}`), pdpBody("DCAE.Config_B", "1", `{"b":1}`), pdpBody("DCAE.Config_GONE", "3", `{"g":3}`)
	pdp.set(a, b, gone)

	cfg := DefaultConfig()
	cfg.PDPURL = srv.URL
	cfg.PDPTimeout = 5 * time.Second
	cfg.CatchupOnStart, cfg.CatchupInterval = true, time.Second
	stop := stagetest.Run(t, StageWith(cfg), stagetest.Env(c.Kafka))
	defer stop()

	cat := catalog(t, c.Read(t, topology.PolicyCatalog, 3, 60*time.Second))
	for id, e := range cat {
		if e.Source != events.SourcePDP {
			t.Fatalf("catalog entry %s from source %q, want %q", id, e.Source, events.SourcePDP)
		}
	}

	pdp.set(a, b)
	cat = catalog(t, c.ReadUntil(t, topology.PolicyCatalog, 60*time.Second, func(recs []*kgo.Record) bool {
		return slices.ContainsFunc(recs, func(r *kgo.Record) bool { return r.Value == nil && string(r.Key) == "DCAE.Config_GONE" })
	}))
	if len(cat) != 2 {
		t.Fatalf("catalog after the catch-up: %v, want the 2 policies the PDP lists", cat)
	}
	c.ReadUntil(t, topology.PolicyChanges, 60*time.Second, func(recs []*kgo.Record) bool {
		for _, ch := range changes(t, recs) {
			if ch.PolicyID == "DCAE.Config_GONE" && ch.Action == events.ActionRemoved {
				return true
			}
		}
		return false
	})

	pdp.set()
	var withheld *events.CatchupProgress
	c.ReadUntil(t, topology.CatchupProgress, 60*time.Second, func(recs []*kgo.Record) bool {
		for _, r := range recs {
			if p := stagetest.Decode[*events.CatchupProgress](t, r); p.Stage == events.ProgressPDPIngest && p.RemovalWithheld != nil {
				withheld = p
				return true
			}
		}
		return false
	})
	if withheld == nil {
		t.Fatal("no catch-up reported withheld removals after the PDP's listing went empty")
	}
	if withheld.Removed != 0 || !strings.Contains(*withheld.RemovalWithheld, "the PDP listed no policy for .* while the catalog holds 2 from it") {
		t.Fatalf("catch-up progress %+v (%s), want no removal and why", withheld, *withheld.RemovalWithheld)
	}
	// That catch-up wrote its notifications before its progress, and only
	// catch-ups (without transactions) write pdp.notifications here: every
	// notification sent so far is below the end offsets, and none but the
	// first catch-up's removes a policy.
	ends, err := c.Admin.ListEndOffsets(context.Background(), c.Kafka.Topic(topology.PDPNotifications))
	if err != nil {
		t.Fatal(err)
	}
	var sent int64
	ends.Each(func(o kadm.ListedOffset) { sent += o.Offset })
	for _, r := range c.Read(t, topology.PDPNotifications, int(sent), 60*time.Second) {
		for _, rm := range stagetest.Decode[*events.PdpNotification](t, r).RemovedPolicies {
			if id, _ := policy.PolicyID(rm.PolicyName); id != "DCAE.Config_GONE" {
				t.Fatalf("a catch-up sent the removal of %s after the PDP's listing went empty", rm.PolicyName)
			}
		}
	}
	// Every catalog record so far: the two policies are still there.
	if cat := catalog(t, c.Read(t, topology.PolicyCatalog, 0, time.Second)); len(cat) != 2 {
		t.Fatalf("catalog after a catch-up with an empty answer: %v, want both policies kept", cat)
	}
}
