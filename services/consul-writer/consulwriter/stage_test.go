package consulwriter

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// newCluster is an in-process Kafka with the consul-writer's topics.
func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	c := stagetest.NewCluster(t, 3)
	c.CreateTopics(t, map[string]string{"max.message.bytes": topology.MaxMessageBytes},
		topology.ComponentPolicies, topology.ComponentApplied, topology.DLQ(topology.StageConsulWriter))
	c.CreateTopics(t, nil, topology.CatchupRequests, topology.CatchupProgress)
	return c
}

func decodeApplied(t *testing.T, rec *kgo.Record) *events.ComponentApplied {
	t.Helper()
	return stagetest.Decode[*events.ComponentApplied](t, rec)
}

func mustGet(t *testing.T, c *api.Client, key string) *api.KVPair {
	t.Helper()
	p, _, err := c.KV().Get(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatalf("Consul has no key %s", key)
	}
	return p
}

func vmMemory() events.Policy {
	return events.Policy{
		PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
		Body: `{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","policyConfigStatus":"CONFIG_RETRIEVED","config":{"min_memory":"8GB"}}`,
	}
}

func collection(update string, gen int64, ps ...events.Policy) *events.ComponentPolicies {
	return &events.ComponentPolicies{
		ComponentID: "c1", DeploymentID: "d1", ServiceComponentName: "dcae-vm", UpdateID: update, Generation: gen,
		Policies: ps, UpdatedPolicies: ps, Notify: events.NotifyTarget{Kind: events.NotifyNone},
		UpdatedAt: time.UnixMilli(1000).UTC(),
	}
}

// eventOf reads and parses the event key of scn.
func eventOf(t *testing.T, c *api.Client, scn string) (map[string]any, *api.KVPair) {
	t.Helper()
	p := mustGet(t, c, consulkv.EventKey(scn))
	var m map[string]any
	if err := json.Unmarshal(p.Value, &m); err != nil {
		t.Fatalf("event %s is not JSON: %v", p.Value, err)
	}
	return m, p
}

func TestConsulWriterStage(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	stagetest.Run(t, StageWith(Config{Consul: consulCfg}), stagetest.Env(c.Kafka))

	// First collection, by a catch-up.
	first := collection("u1", 1, vmMemory())
	first.CatchUp = true
	c.Produce(t, topology.ComponentPolicies, "c1", first)
	recs := applied.Until(1, 60*time.Second)
	if len(recs) != 1 {
		t.Fatalf("got %d component.applied records, want 1", len(recs))
	}
	item := mustGet(t, consul, consulkv.ItemKey("dcae-vm", "DCAE.Config_VM_MEMORY"))
	var body map[string]any
	if err := json.Unmarshal(item.Value, &body); err != nil {
		t.Fatalf("item value %s is not JSON: %v", item.Value, err)
	}
	if !reflect.DeepEqual(body["config"], map[string]any{"min_memory": "8GB"}) || body["policyName"] != "DCAE.Config_VM_MEMORY.222.xml" {
		t.Fatalf("item value %s, want the policy_body with config {\"min_memory\":\"8GB\"}", item.Value)
	}
	ev, evPair := eventOf(t, consul, "dcae-vm")
	if len(ev) != 5 || ev["action"] != "gathered" || ev["update_id"] != "u1" || ev["policies_count"] != float64(1) || ev["generation"] != float64(1) {
		t.Fatalf("event %s, want gathered u1 with 1 policy, generation 1", evPair.Value)
	}
	if ts, err := time.Parse(time.RFC3339, ev["timestamp"].(string)); err != nil || time.Since(ts) > time.Hour {
		t.Fatalf("event timestamp %v: %v", ev["timestamp"], err)
	}
	// component.applied names the policies; their bodies are in Consul.
	a := decodeApplied(t, recs[0])
	if string(recs[0].Key) != "c1" || a.UpdateID != "u1" || a.Action != "gathered" || !a.CatchUp || a.ConsulIndex != int64(evPair.ModifyIndex) ||
		a.PoliciesCount != 1 || a.PoliciesBytes != int64(len(vmMemory().Body)) || a.KeysWritten != 2 || a.Generation != 1 || a.Uninstalled ||
		!reflect.DeepEqual(a.PolicyRefs, []events.PolicyRef{vmMemory().Ref()}) || !reflect.DeepEqual(a.UpdatedRefs, []events.PolicyRef{vmMemory().Ref()}) {
		t.Fatalf("applied %+v (event index %d)", a, evPair.ModifyIndex)
	}
	checkItemIndexes(t, consul, a)
	if bytes.Contains(recs[0].Value, []byte(`"min_memory"`)) {
		t.Fatalf("component.applied carries the policy body: %q", recs[0].Value)
	}

	// An update writes only what changed.
	x := events.Policy{PolicyID: "X", PolicyName: "X.1.xml", PolicyVersion: "1", Body: `{"policyName":"X.1.xml","config":{"x":true}}`}
	rec2 := collection("u2", 2, vmMemory(), x)
	rec2.UpdatedPolicies = []events.Policy{x}
	c.Produce(t, topology.ComponentPolicies, "c1", rec2)
	recs = applied.Until(2, 60*time.Second)
	if len(recs) != 2 {
		t.Fatalf("got %d applied records after u2, want 2", len(recs))
	}
	if again := mustGet(t, consul, item.Key); again.ModifyIndex != item.ModifyIndex {
		t.Fatalf("unchanged item rewritten: ModifyIndex %d -> %d", item.ModifyIndex, again.ModifyIndex)
	}
	ev, evPair = eventOf(t, consul, "dcae-vm")
	if ev["action"] != "updated" || ev["update_id"] != "u2" || ev["policies_count"] != float64(2) || ev["generation"] != float64(2) {
		t.Fatalf("event after u2: %s", evPair.Value)
	}
	if a = decodeApplied(t, recs[1]); a.Action != "updated" || a.CatchUp || a.KeysWritten != 2 || a.ConsulIndex != int64(evPair.ModifyIndex) ||
		!reflect.DeepEqual(a.PolicyRefs, events.Refs([]events.Policy{vmMemory(), x})) || !reflect.DeepEqual(a.UpdatedRefs, []events.PolicyRef{x.Ref()}) {
		t.Fatalf("applied after u2: %+v", a)
	}
	checkItemIndexes(t, consul, a) // the item left as it was, with its index as read

	// Replays change nothing in Consul; the same update is reported again,
	// an older one is not.
	before := stagetest.ModifyIndexes(t, consul, consulkv.Folder("dcae-vm"))
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u1", 1, vmMemory()))
	c.Produce(t, topology.ComponentPolicies, "c1", rec2)
	recs = applied.Until(3, 60*time.Second)
	applied.Poll(time.Second)
	if len(applied.Records()) != 3 {
		t.Fatalf("got %d applied records after the replays, want 3", len(applied.Records()))
	}
	if after := stagetest.ModifyIndexes(t, consul, consulkv.Folder("dcae-vm")); !reflect.DeepEqual(before, after) {
		t.Fatalf("replay changed Consul: ModifyIndex before %v, after %v", before, after)
	}
	if a = decodeApplied(t, recs[2]); a.UpdateID != "u2" || a.Generation != 2 || a.ConsulIndex != int64(evPair.ModifyIndex) || a.Action != "updated" {
		t.Fatalf("replayed applied %+v", a)
	}
	checkItemIndexes(t, consul, a)

	// A policy Consul cannot hold is dead-lettered with the reason.
	huge := events.Policy{PolicyID: "HUGE", PolicyVersion: "1", Body: `{"blob":"` + strings.Repeat("h", consulkv.MaxValueBytes) + `"}`}
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u3", 3, vmMemory(), huge))
	dlq := c.Reader(t, topology.DLQ(topology.StageConsulWriter)).Until(1, 60*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dlq))
	}
	reason := stagetest.Header(dlq[0], runtime.HeaderError)
	if !strings.Contains(reason, "HUGE") || !strings.Contains(reason, "512 KiB") {
		t.Fatalf("dead letter reason %q does not name the policy and the limit", reason)
	}

	// Uninstall deletes the folder.
	un := collection("u4", 4)
	un.Uninstalled = true
	un.RemovedPolicies = []events.Policy{vmMemory(), x}
	c.Produce(t, topology.ComponentPolicies, "c1", un)
	recs = applied.Until(4, 60*time.Second)
	if len(recs) != 4 {
		t.Fatalf("got %d applied records after uninstall, want 4", len(recs))
	}
	if left := stagetest.ModifyIndexes(t, consul, consulkv.Folder("dcae-vm")); len(left) != 0 {
		t.Fatalf("folder left after uninstall: %v", left)
	}
	// Removed policies come with their last bodies: Consul no longer
	// holds them.
	if a = decodeApplied(t, recs[3]); !a.Uninstalled || a.Action != ActionUninstalled || a.UpdateID != "u4" || a.KeysWritten != 3 ||
		len(a.PolicyRefs) != 0 || !reflect.DeepEqual(a.RemovedPolicies, []events.Policy{vmMemory(), x}) {
		t.Fatalf("uninstall applied %+v", a)
	}
}

func TestConsulWriterTenMegabyteCollection(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	stagetest.Run(t, StageWith(Config{Consul: consulCfg}), stagetest.Env(c.Kafka))

	// A first small collection, so the big one is an update of it.
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u1", 1, vmMemory()))
	if n := len(applied.Until(1, 60*time.Second)); n != 1 {
		t.Fatalf("got %d applied records, want 1", n)
	}
	const n, size = 100, 100_000
	var ps []events.Policy
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("DCAE.Config_BIG_%03d", i)
		ps = append(ps, events.Policy{PolicyID: id, PolicyName: id + ".1.xml", PolicyVersion: "1",
			Body: fmt.Sprintf(`{"policyName":"%s.1.xml","policyVersion":"1","config":{"i":%d,"blob":"%s"}}`, id, i, strings.Repeat("z", size))})
	}
	// A reader of the event key sees the "updating" marker of u-big
	// before its final event (seen when the reader is fast enough).
	seen := make(chan []string, 1)
	go func() {
		var actions []string
		var index uint64
		deadline := time.Now().Add(180 * time.Second)
		for time.Now().Before(deadline) {
			p, meta, err := consul.KV().Get(consulkv.EventKey("dcae-vm"), &api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second})
			if err != nil {
				break
			}
			index = meta.LastIndex
			if p == nil {
				continue
			}
			e, err := consulkv.ParseEvent(p.Value)
			if err != nil || e.UpdateID != "u-big" {
				continue
			}
			if len(actions) == 0 || actions[len(actions)-1] != e.Action {
				actions = append(actions, e.Action)
			}
			if e.Action == consulkv.ActionUpdated {
				break
			}
		}
		seen <- actions
	}()
	start := time.Now()
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u-big", 2, ps...))
	recs := applied.Until(2, 180*time.Second)
	took := time.Since(start)
	if len(recs) != 2 {
		t.Fatalf("got %d applied records after the 10 MB collection, want 2", len(recs))
	}
	ev, evPair := eventOf(t, consul, "dcae-vm")
	if ev["action"] != "updated" || ev["update_id"] != "u-big" || ev["policies_count"] != float64(n) || ev["generation"] != float64(2) {
		t.Fatalf("event after the 10 MB collection: %s", evPair.Value)
	}
	pairs, _, err := consul.KV().List(consulkv.ItemsPrefix("dcae-vm"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pairs) != n {
		t.Fatalf("%d items in Consul, want %d (the old one deleted)", len(pairs), n)
	}
	indexes := map[uint64]bool{}
	total := 0
	for _, p := range pairs {
		i, err := strconv.Atoi(strings.TrimPrefix(p.Key, consulkv.ItemsPrefix("dcae-vm")+"DCAE.Config_BIG_"))
		if err != nil || string(p.Value) != ps[i].Body {
			t.Fatalf("item %s holds %d bytes, not its policy_body", p.Key, len(p.Value))
		}
		total += len(p.Value)
		indexes[p.ModifyIndex] = true
		// Every item was written after the first collection's event and
		// no later than the final event.
		if p.ModifyIndex <= evPair.CreateIndex || p.ModifyIndex > evPair.ModifyIndex {
			t.Fatalf("item %s written at index %d, outside %d .. %d (first event .. final event)", p.Key, p.ModifyIndex, evPair.CreateIndex, evPair.ModifyIndex)
		}
	}
	if len(indexes) < 2 {
		t.Fatalf("items written in %d transaction(s), want several", len(indexes))
	}
	actions := <-seen
	if len(actions) == 0 || actions[len(actions)-1] != consulkv.ActionUpdated || len(actions) > 2 || len(actions) == 2 && actions[0] != consulkv.ActionUpdating {
		t.Fatalf("a reader of the event key saw %v for u-big, want [updating updated] (or [updated] when too slow to see the marker)", actions)
	}
	t.Logf("a reader of the event key saw %v", actions)
	a := decodeApplied(t, recs[1])
	if a.UpdateID != "u-big" || a.PoliciesCount != n || a.KeysWritten != n+2 || a.ConsulIndex != int64(evPair.ModifyIndex) {
		t.Fatalf("applied %+v", a)
	}
	checkItemIndexes(t, consul, a) // reported by the transactions of several steps
	t.Logf("10 MB collection: %d keys (%d bytes) in %d transactions, %.1f s from produce to component.applied, %.0f keys/s, %.1f MB/s",
		n, total, len(indexes), took.Seconds(), float64(n+2)/took.Seconds(), float64(total)/1e6/took.Seconds())

	// Many small keys: the writer's rate in keys per second.
	var small []events.Policy
	for i := 0; i < 2000; i++ {
		id := fmt.Sprintf("DCAE.Config_SMALL_%04d", i)
		small = append(small, events.Policy{PolicyID: id, PolicyName: id + ".1.xml", PolicyVersion: "1",
			Body: fmt.Sprintf(`{"policyName":"%s.1.xml","policyVersion":"1","config":{"i":%d}}`, id, i)})
	}
	start = time.Now()
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u-small", 3, small...))
	if got := len(applied.Until(3, 180*time.Second)); got != 3 {
		t.Fatalf("got %d applied records after 2000 small policies, want 3", got)
	}
	took = time.Since(start)
	if keys := stagetest.ModifyIndexes(t, consul, consulkv.ItemsPrefix("dcae-vm")); len(keys) != 2000 {
		t.Fatalf("%d items, want 2000", len(keys))
	}
	t.Logf("2000 small policies (+100 deletions): %.1f s from produce to component.applied, %.0f keys/s", took.Seconds(), 2102/took.Seconds())
}

// TestConsulWriterWaitsForConsul runs the stage configured by its flags,
// as runtime.Main runs it, on a Consul agent that starts late.
func TestConsulWriterWaitsForConsul(t *testing.T) {
	port := stagetest.FreePort(t)
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	s := Stage()
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"--consul-addr", "127.0.0.1:" + strconv.Itoa(port)}); err != nil {
		t.Fatal(err)
	}
	env := stagetest.Env(c.Kafka)
	stagetest.Run(t, s, env)
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u1", 1, vmMemory()))
	applied.Until(1, 2*time.Second)
	if len(applied.Records()) != 0 {
		t.Fatalf("applied emitted while Consul is down: %d records", len(applied.Records()))
	}
	// It holds its partitions, yet is not ready: nothing reaches Consul.
	why := func() string { return env.Health.Detail()[topology.StageConsulWriter].Reason }
	testkit.Eventually(t, 30*time.Second, func() error {
		if len(env.Health.Detail()[topology.StageConsulWriter].Partitions) == 0 {
			return errors.New("with Consul down, the consul-writer holds no partitions")
		}
		return nil
	})
	if d := env.Health.Detail()[topology.StageConsulWriter]; len(d.Partitions) == 0 || d.Ready || !strings.Contains(d.Reason, "Consul does not answer") {
		t.Fatalf("with Consul down, the consul-writer's readiness is %+v; want not ready, holding its partitions, saying Consul does not answer", d)
	}
	_, consul := stagetest.ConsulOn(t, port)
	if n := len(applied.Until(1, 90*time.Second)); n != 1 {
		t.Fatalf("got %d applied records once Consul is up, want 1", n)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if w := why(); w != "" {
			return fmt.Errorf("Consul is up, yet the consul-writer is not ready: %s", w)
		}
		return nil
	})
	ev, _ := eventOf(t, consul, "dcae-vm")
	if ev["update_id"] != "u1" {
		t.Fatalf("event %v", ev)
	}
}

// A catch-up repairs a folder edited by hand: the edited and deleted items
// are written back, a stray item is deleted, the rest is not touched; a
// folder that agrees with its collection is left alone and reported
// nowhere.
func TestCatchupRepairsDriftedFolder(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)
	stagetest.Run(t, StageWith(Config{Consul: consulCfg}), stagetest.Env(c.Kafka))

	x := events.Policy{PolicyID: "X", PolicyName: "X.1.xml", PolicyVersion: "1", Body: `{"policyName":"X.1.xml","config":{"x":true}}`}
	y := events.Policy{PolicyID: "Y", PolicyName: "Y.4.xml", PolicyVersion: "4", Body: `{"policyName":"Y.4.xml","config":{"y":4}}`}
	c.Produce(t, topology.ComponentPolicies, "c1", collection("u1", 1, vmMemory(), x, y))
	applied.Until(1, 60*time.Second)
	folder := consulkv.Folder("dcae-vm")
	kv := consul.KV()
	memKey, xKey, yKey, stray := consulkv.ItemKey("dcae-vm", vmMemory().PolicyID), consulkv.ItemKey("dcae-vm", "X"), consulkv.ItemKey("dcae-vm", "Y"), consulkv.ItemKey("dcae-vm", "STRAY")
	untouched := mustGet(t, consul, yKey).ModifyIndex

	// By hand: one item edited, one deleted, one added.
	for _, p := range []*api.KVPair{{Key: memKey, Value: []byte(`{"config":{"min_memory":"1GB"}}`)}, {Key: stray, Value: []byte(`{}`)}} {
		if _, err := kv.Put(p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Delete(xKey, nil); err != nil {
		t.Fatal(err)
	}
	catchup := func(id string) {
		c.Produce(t, topology.CatchupRequests, "c1", &events.CatchupRequest{RequestID: id, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.Now().UTC()})
	}
	catchup("r1")
	recs := applied.Until(2, 60*time.Second)
	a := decodeApplied(t, recs[1])
	if !a.CatchUp || a.Generation != 1 || a.UpdateID != "u1" || a.KeysWritten != 4 {
		t.Fatalf("applied of the repair: %+v, want catch_up, generation 1, 3 items and the event written", a)
	}
	if got := mustGet(t, consul, memKey).Value; string(got) != vmMemory().Body {
		t.Fatalf("edited item is %s after the catch-up, want %s", got, vmMemory().Body)
	}
	if got := mustGet(t, consul, xKey).Value; string(got) != x.Body {
		t.Fatalf("deleted item is %s after the catch-up, want %s", got, x.Body)
	}
	if p, _, err := kv.Get(stray, nil); err != nil || p != nil {
		t.Fatalf("stray item after the catch-up: %v %v", p, err)
	}
	if got := mustGet(t, consul, yKey).ModifyIndex; got != untouched {
		t.Fatalf("an item that agreed was rewritten: ModifyIndex %d -> %d", untouched, got)
	}
	prog := stagetest.Decode[*events.CatchupProgress](t, c.Read(t, topology.CatchupProgress, 1, 60*time.Second)[0])
	if prog.RequestID != "r1" || prog.Stage != events.ProgressConsulWriter || prog.Compared != 1 || prog.Differed != 1 || prog.KeysWritten != 4 {
		t.Fatalf("catch-up progress %+v, want r1: 1 folder compared, 1 written back with 4 keys", prog)
	}

	// A folder in agreement: nothing written, nothing reported. The
	// barrier is a third catch-up after another edit, whose repair is the
	// next record of c1 on component.applied.
	before := stagetest.ModifyIndexes(t, consul, folder)
	catchup("r2")
	if _, err := kv.Delete(yKey, nil); err != nil {
		t.Fatal(err)
	}
	catchup("r3")
	recs = applied.Until(3, 60*time.Second)
	if len(recs) != 3 {
		t.Fatalf("%d applied records, want 3", len(recs))
	}
	if a := decodeApplied(t, recs[2]); !a.CatchUp || a.KeysWritten != 2 {
		t.Fatalf("applied of the third catch-up: %+v, want the deleted item and the event written", a)
	}
	after := stagetest.ModifyIndexes(t, consul, folder)
	for k, i := range before {
		if k != yKey && k != consulkv.EventKey("dcae-vm") && after[k] != i {
			t.Fatalf("key %s rewritten by a catch-up of a folder in agreement: %d -> %d", k, i, after[k])
		}
	}

	// Only the event key edited by hand: the items agree, but the folder
	// is not as last written, so it is read and the event written back.
	eventKey := consulkv.EventKey("dcae-vm")
	if _, err := kv.Put(&api.KVPair{Key: eventKey, Value: []byte(`{"edited":"by hand"}`)}, nil); err != nil {
		t.Fatal(err)
	}
	catchup("r4")
	recs = applied.Until(4, 60*time.Second)
	if len(recs) != 4 {
		t.Fatalf("%d applied records, want 4", len(recs))
	}
	if got := mustGet(t, consul, eventKey).Value; strings.Contains(string(got), "by hand") {
		t.Fatalf("event key after the catch-up: %s, want the consul-writer's event again", got)
	}
}
