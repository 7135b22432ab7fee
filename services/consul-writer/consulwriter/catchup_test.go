package consulwriter

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// catchups sends catch-up requests to every partition of catchup.requests,
// as the North API does, and waits for their progress.
type catchups struct {
	c        *stagetest.Cluster
	manual   *kgo.Client
	progress *stagetest.Reader
}

func newCatchups(t *testing.T, c *stagetest.Cluster) *catchups {
	t.Helper()
	manual, err := kgo.NewClient(kgo.SeedBrokers(c.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(manual.Close)
	return &catchups{c: c, manual: manual, progress: c.Reader(t, topology.CatchupProgress)}
}

// run asks catch-up id of each of partitions and returns the progress
// of each.
func (cu *catchups) run(t *testing.T, id string, partitions int32) []*events.CatchupProgress {
	t.Helper()
	var reqs []*kgo.Record
	for p := range partitions {
		r := cu.c.Record(t, topology.CatchupRequests, "catchup", &events.CatchupRequest{RequestID: id, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.Now().UTC()})
		r.Partition = p
		reqs = append(reqs, r)
	}
	if err := cu.manual.ProduceSync(context.Background(), reqs...).FirstErr(); err != nil {
		t.Fatalf("produce the catch-up requests %s: %v", id, err)
	}
	var out []*events.CatchupProgress
	deadline := time.Now().Add(60 * time.Second)
	for len(out) < int(partitions) && time.Now().Before(deadline) {
		out = out[:0]
		for _, r := range cu.progress.Until(len(cu.progress.Records())+1, time.Second) {
			if p := stagetest.Decode[*events.CatchupProgress](t, r); p.RequestID == id {
				out = append(out, p)
			}
		}
	}
	if len(out) != int(partitions) {
		t.Fatalf("catch-up %s: progress of %d partitions, want %d", id, len(out), partitions)
	}
	return out
}

// differed is the number of folders a catch-up wrote back.
func differed(ps []*events.CatchupProgress) int64 {
	var n int64
	for _, p := range ps {
		n += p.Differed
	}
	return n
}

// A catch-up finds and repairs each kind of change made by hand to a
// folder, each by the check that sees it: an item edited (its index
// moved) or deleted (its index check fails), the event key edited (its
// index moved), an item added (the listing of a prefix shared with other
// components, among them one whose name extends the changed one's). It
// reads only the folder changed, lists no folder alone, and leaves the
// others as they are.
func TestCatchupRepairsEachHandChange(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	counter := consulkv.NewRequestCounter()
	consulCfg.Requests = counter
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	cu := newCatchups(t, c)
	stagetest.Run(t, StageWith(Config{Consul: consulCfg}), stagetest.Env(c.Kafka))

	names := []string{"hand-edit", "hand-delete", "hand-add", "hand-add-x", "hand-event", "hand-none"}
	recs := map[string]*events.ComponentPolicies{}
	for _, n := range names {
		recs[n] = component(n, n, "u1", 1, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "1"))
		c.Produce(t, topology.ComponentPolicies, n, recs[n])
	}
	if got := len(applied.Until(len(names), 60*time.Second)); got != len(names) {
		t.Fatalf("%d component.applied records, want %d", got, len(names))
	}
	kv := consul.KV()
	put := func(key, value string) func() error {
		return func() error { _, err := kv.Put(&api.KVPair{Key: key, Value: []byte(value)}, nil); return err }
	}
	cases := []struct {
		name   string
		scn    string
		change func() error
		keys   int32  // written back, the event's included
		action string // of the event written back
	}{
		{"an item edited by hand", "hand-edit", put(consulkv.ItemKey("hand-edit", "P0"), `{"edited":"by hand"}`), 2, consulkv.ActionGathered},
		{"an item deleted by hand", "hand-delete", func() error { _, err := kv.Delete(consulkv.ItemKey("hand-delete", "P1"), nil); return err }, 2, consulkv.ActionGathered},
		{"an item added by hand", "hand-add", put(consulkv.ItemKey("hand-add", "ADDED"), `{}`), 2, consulkv.ActionGathered},
		// The event no longer says which generation the folder holds: it
		// is written again as an update.
		{"the event key edited by hand", "hand-event", put(consulkv.EventKey("hand-event"), `{"edited":"by hand"}`), 1, consulkv.ActionUpdated},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			others := map[string]map[string]uint64{}
			for _, n := range names {
				if n != tc.scn {
					others[n] = stagetest.ModifyIndexes(t, consul, consulkv.Folder(n))
				}
			}
			if err := tc.change(); err != nil {
				t.Fatal(err)
			}
			before, seen := counter.Counts(), len(applied.Records())
			prog := cu.run(t, fmt.Sprintf("hand-%d", i), 3)
			cost := counter.Counts().Since(before)
			if n := differed(prog); n != 1 {
				t.Errorf("the catch-up wrote back %d folders, want 1", n)
			}
			got := applied.Until(seen+1, 10*time.Second)[seen:] // written with the progress, before it
			if extra := applied.Poll(time.Second); len(extra) > 0 {
				got = append(got, extra...)
			}
			if len(got) != 1 {
				t.Fatalf("%d component.applied records after the catch-up, want 1", len(got))
			}
			a := decodeApplied(t, got[0])
			if a.ComponentID != tc.scn || a.KeysWritten != tc.keys {
				t.Fatalf("applied of the catch-up: component %s, %d keys written; want %s, %d", a.ComponentID, a.KeysWritten, tc.scn, tc.keys)
			}
			checkFolder(t, consul, recs[tc.scn], tc.action)
			checkItemIndexes(t, consul, a)
			for n, want := range others {
				if after := stagetest.ModifyIndexes(t, consul, consulkv.Folder(n)); !reflect.DeepEqual(after, want) {
					t.Errorf("folder %s changed by the catch-up: %v, then %v", n, want, after)
				}
			}
			// One shared listing a partition at most, no folder listed
			// alone; the changed folder read in a get-tree transaction.
			if cost.Of(consulkv.KVKeys) > 3 || cost.Of(consulkv.KVList) != 0 || cost.OpsOf("kv get-tree") != 1 {
				t.Errorf("the catch-up cost %s; want a keys listing a partition at most, no list, one get-tree", cost)
			}
			t.Logf("catch-up: %s", cost)
		})
	}
	// Nothing changed since: nothing read, nothing written.
	before := counter.Counts()
	if n := differed(cu.run(t, "hand-none", 3)); n != 0 {
		t.Fatalf("a catch-up of folders in agreement wrote back %d folders", n)
	}
	if cost := counter.Counts().Since(before); cost.OpsOf("kv get-tree") != 0 || cost.Of(consulkv.KVKeys) > 3 {
		t.Fatalf("a catch-up of folders in agreement cost %s; want no get-tree, a keys listing a partition at most", cost)
	}
}

// A component whose last component.applied was written before item
// indexes were kept is checked as before: its event key's index, then a
// keys listing of its items alone; an item edited by hand is repaired,
// and the repair's record names the indexes, so that the next catch-up
// needs no listing of it alone.
func TestCatchupOfRecordsWithoutItemIndexes(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	counter := consulkv.NewRequestCounter()
	consulCfg.Requests = counter
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	cu := newCatchups(t, c)
	stagetest.Run(t, StageWith(Config{Consul: consulCfg}), stagetest.Env(c.Kafka))

	names := []string{"old-a", "old-b", "old-c"}
	recs := map[string]*events.ComponentPolicies{}
	for _, n := range names {
		recs[n] = component(n, n, "u1", 1, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "1"))
		c.Produce(t, topology.ComponentPolicies, n, recs[n])
	}
	got := applied.Until(len(names), 60*time.Second)
	if len(got) != len(names) {
		t.Fatalf("%d component.applied records, want %d", len(got), len(names))
	}
	// The same records as an older consul-writer wrote them.
	for _, r := range got {
		a := decodeApplied(t, r)
		a.ItemIndexes = nil
		c.Produce(t, topology.ComponentApplied, a.ComponentID, a)
	}
	applied.Until(2*len(names), 60*time.Second)

	before := counter.Counts()
	if n := differed(cu.run(t, "old-1", 3)); n != 0 {
		t.Fatalf("a catch-up of folders in agreement wrote back %d folders", n)
	}
	// The event keys checked, each folder's items listed alone.
	if cost := counter.Counts().Since(before); cost.OpsOf("kv check-index") != int64(len(names)) || cost.Of(consulkv.KVKeys) != int64(len(names)) || cost.OpsOf("kv get-tree") != 0 {
		t.Fatalf("the catch-up cost %s; want the %d event keys checked and the %[2]d folders' items listed alone, no get-tree", cost, len(names))
	}

	key := consulkv.ItemKey("old-b", "P1")
	if _, err := consul.KV().Put(&api.KVPair{Key: key, Value: []byte(`{"edited":"by hand"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	if n := differed(cu.run(t, "old-2", 3)); n != 1 {
		t.Fatalf("the catch-up wrote back %d folders, want 1", n)
	}
	recs2 := applied.Until(2*len(names)+1, 60*time.Second)
	a := decodeApplied(t, recs2[len(recs2)-1])
	if a.ComponentID != "old-b" || !a.CatchUp || a.KeysWritten != 2 {
		t.Fatalf("applied of the repair %+v, want old-b, catch_up, the item and the event written", a)
	}
	checkFolder(t, consul, recs["old-b"], consulkv.ActionGathered)
	checkItemIndexes(t, consul, a)

	before = counter.Counts()
	if n := differed(cu.run(t, "old-3", 3)); n != 0 {
		t.Fatalf("a catch-up of folders in agreement wrote back %d folders", n)
	}
	// old-b's event and items checked, and its items listed in a range
	// of its own; the two others as before.
	if cost := counter.Counts().Since(before); cost.OpsOf("kv check-index") != int64(len(names)+2) || cost.Of(consulkv.KVKeys) != int64(len(names)) || cost.OpsOf("kv get-tree") != 0 {
		t.Fatalf("the catch-up cost %s; want %d keys checked (old-b's 3 and 2 event keys) and %d listings, no get-tree", cost, len(names)+2, len(names))
	}
}

// The catch-up requests of a poll for distinct partitions are handled at
// once: their folders checked in shared check-index transactions and each
// prefix listed once for all; a second request for a partition is
// handled after them, on its own. Each request has its own progress.
func TestCatchupOfPartitionsAtOnce(t *testing.T) {
	consulCfg, _ := stagetest.Consul(t)
	counter := consulkv.NewRequestCounter()
	consulCfg.Requests = counter
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	stop := stagetest.Run(t, StageWith(Config{Consul: consulCfg}), stagetest.Env(c.Kafka))
	const comps = 150
	for i := range comps {
		n := fmt.Sprintf("once-%03d", i)
		c.Produce(t, topology.ComponentPolicies, n, component(n, n, "u1", 1, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "1")))
	}
	got := applied.Until(comps, 60*time.Second)
	if len(got) != comps {
		t.Fatalf("%d component.applied records, want %d", len(got), comps)
	}
	stop()
	perPartition := map[int32]int{}
	for _, r := range got {
		perPartition[r.Partition]++
	}

	w := &writer{cfg: Config{Consul: consulCfg}}
	if _, _, err := w.setup(context.Background(), stagetest.Env(c.Kafka)); err != nil {
		t.Fatal(err)
	}
	msg := func(p int32, id string) runtime.Msg[*events.CatchupRequest] {
		return runtime.Msg[*events.CatchupRequest]{
			Input: runtime.Input{Topic: topology.CatchupRequests, Partition: p, Key: []byte(id)},
			Value: &events.CatchupRequest{RequestID: id, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.Now().UTC()},
		}
	}
	ms := []runtime.Msg[*events.CatchupRequest]{msg(0, "all"), msg(1, "all"), msg(2, "all"), msg(1, "again")}
	before := counter.Counts()
	outs := w.repair(context.Background(), ms)
	cost := counter.Counts().Since(before)
	for k, o := range outs {
		if o.Err != nil || len(o.Outputs) != 1 {
			t.Fatalf("request %d: %d outputs, %v; want its progress alone", k, len(o.Outputs), o.Err)
		}
		p, ok := o.Outputs[0].Value.(*events.CatchupProgress)
		if !ok || p.RequestID != ms[k].Value.RequestID || p.Partition != ms[k].Partition || p.Compared != int64(perPartition[ms[k].Partition]) || p.Differed != 0 {
			t.Fatalf("request %d: progress %+v, want %d folders of partition %d compared, none differed", k, o.Outputs[0].Value, perPartition[ms[k].Partition], ms[k].Partition)
		}
	}
	txns := func(n int) int64 { return int64((3*n + consulkv.MaxTxnOps - 1) / consulkv.MaxTxnOps) }
	if want := txns(comps) + txns(perPartition[1]); cost.TxnsOf("kv check-index") != want || cost.Of(consulkv.KVKeys) != 2 {
		t.Fatalf("the catch-up cost %s; want %d check-index transactions (%d for the three partitions at once, %d for partition 1 again) and 2 listings",
			cost, want, txns(comps), txns(perPartition[1]))
	}
}
