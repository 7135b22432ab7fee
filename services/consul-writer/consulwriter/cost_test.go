package consulwriter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/topology"
)

// Budgets of the consul-writer's costs in Consul per component (README.md,
// "Cost budget"), held by TestCostBudget.
const (
	// budgetWriteRequests bounds the Consul requests per component of a
	// backlog of new collections. A chunk of up to maxChunk (64)
	// components is read in one get-tree transaction and written in
	// shared transactions of up to 128 operations: with 2 policies, 3
	// operations a component, 42 components a transaction, so 3
	// requests per 64 components (0.047) when the chunks are full. A
	// round trip per component is at least 1.
	budgetWriteRequests = 0.1
	// budgetWriteOps bounds the transaction operations per component of
	// the same backlog: the get-tree of its folder, a set per policy (2)
	// and the check-and-set of its event.
	budgetWriteOps = 4
	// budgetCatchupOps bounds the transaction operations per component
	// of a catch-up that finds every folder as last written: a
	// check-index of its event key and of each of its items (2
	// policies). Its requests are bounded by the rule in TestCostBudget:
	// those operations 128 to a transaction, a transaction more per
	// partition at most, and a keys listing per prefix range.
	budgetCatchupOps = 3
)

// TestCostBudget holds the consul-writer to its budgets of Consul
// requests: a backlog of new collections of many components, then a
// catch-up of every partition that finds nothing changed, counted by
// request kind and transaction operation (consulkv.RequestCounter).
func TestCostBudget(t *testing.T) {
	const comps = 512
	consulCfg, consul := stagetest.Consul(t)
	counter := consulkv.NewRequestCounter()
	consulCfg.Requests = counter
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)

	// The backlog waits before the stage starts, as after a burst: a new
	// collection of 2 policies for each component.
	recs := make([]*events.ComponentPolicies, comps)
	krecs := make([]*kgo.Record, comps)
	for i := range recs {
		recs[i] = component(fmt.Sprintf("cost-%03d", i), fmt.Sprintf("cost-%03d", i), "u1", 1, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "1"))
		krecs[i] = c.Record(t, topology.ComponentPolicies, recs[i].ComponentID, recs[i])
	}
	c.ProduceRecords(t, krecs...)
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 5000 // the runtime's default, not the tests' 50
	stagetest.Run(t, StageWith(Config{Consul: consulCfg}), env)
	got := applied.Until(comps, 120*time.Second)
	if len(got) != comps {
		t.Fatalf("got %d component.applied records, want %d", len(got), comps)
	}
	write := counter.Counts()
	perPartition := map[int32]int{}
	for _, r := range got {
		perPartition[r.Partition]++
		if a := decodeApplied(t, r); a.KeysWritten != 3 {
			t.Fatalf("component %s: %d keys written, want 3 (2 policies and the event)", a.ComponentID, a.KeysWritten)
		}
	}
	checkFolder(t, consul, recs[comps-1], consulkv.ActionGathered)

	// A catch-up on every partition, as the North API sends one: every
	// folder is as the stage wrote it.
	manual, err := kgo.NewClient(kgo.SeedBrokers(c.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	before := counter.Counts()
	var reqs []*kgo.Record
	for p := range int32(3) {
		r := c.Record(t, topology.CatchupRequests, "cost", &events.CatchupRequest{RequestID: "cost-catchup", Scope: events.ScopeAll, Reason: "test", RequestedAt: time.Now().UTC()})
		r.Partition = p
		reqs = append(reqs, r)
	}
	if err := manual.ProduceSync(context.Background(), reqs...).FirstErr(); err != nil {
		t.Fatalf("produce the catch-up requests: %v", err)
	}
	progress := c.Read(t, topology.CatchupProgress, len(reqs), 60*time.Second)
	catchup := counter.Counts().Since(before)
	compared := 0
	for _, r := range progress {
		p := stagetest.Decode[*events.CatchupProgress](t, r)
		if p.Differed != 0 || p.KeysWritten != 0 {
			t.Errorf("catch-up of partition %d: %d folders differed, %d keys written; want none", p.Partition, p.Differed, p.KeysWritten)
		}
		compared += int(p.Compared)
	}
	if compared != comps {
		t.Fatalf("the catch-up compared %d folders, want %d", compared, comps)
	}
	if extra := applied.Poll(time.Second); len(extra) != 0 {
		t.Fatalf("the catch-up of folders in agreement emitted %d component.applied records", len(extra))
	}
	// The bound: the check-index operations (policies + 1 per
	// component), 128 to a transaction, on each partition apart at most
	// (so a transaction more per partition at most than 3 × 512 / 128;
	// requests that come in one poll share them), and a keys listing per
	// prefix range. A partition's components weigh 15 keys each in a
	// range (their 2 items, event, claim and config, times the 3
	// partitions whose components share the prefixes), at most 189 × 15
	// = 2,835 here, under rangeKeys: one range a partition at most.
	maxTxns := 0
	for _, n := range perPartition {
		maxTxns += (n*budgetCatchupOps + consulkv.MaxTxnOps - 1) / consulkv.MaxTxnOps
	}
	maxListings := len(perPartition)
	maxRequests := maxTxns + maxListings

	per := func(n int64) float64 { return float64(n) / comps }
	t.Logf("write path, %d components of 2 policies (polls of up to %d records): %d Consul requests (%.3f per component; budget %.2f), %d transaction operations (%.2f per component; budget %d): %s",
		comps, env.PollRecords, write.Total(), per(write.Total()), budgetWriteRequests, write.Ops(), per(write.Ops()), budgetWriteOps, write)
	t.Logf("catch-up with nothing changed, %d components on %d partitions %v: %d Consul requests (%.4f per component; bound %d: %d check-index transactions and %d listings, %.4f per component), %d transaction operations (%.2f per component; budget %d): %s",
		comps, len(perPartition), perPartition, catchup.Total(), per(catchup.Total()), maxRequests, maxTxns, maxListings, per(int64(maxRequests)), catchup.Ops(), per(catchup.Ops()), budgetCatchupOps, catchup)
	if r := per(write.Total()); r > budgetWriteRequests {
		t.Errorf("write path: %.3f Consul requests per component, over the budget of %.2f: %s", r, budgetWriteRequests, write)
	}
	if r := per(write.Ops()); r > budgetWriteOps {
		t.Errorf("write path: %.2f transaction operations per component, over the budget of %d: %s", r, budgetWriteOps, write)
	}
	if n := write.Total() - write.Of(consulkv.Txn); n != 0 {
		t.Errorf("write path: %d Consul requests besides transactions, want none (the item indexes come with the writes' results): %s", n, write)
	}
	if n := catchup.TxnsOf("kv check-index"); n > int64(maxTxns) || n != catchup.Of(consulkv.Txn) {
		t.Errorf("catch-up with nothing changed: %d check-index transactions of %d in all, want them all and at most %d: %s", n, catchup.Of(consulkv.Txn), maxTxns, catchup)
	}
	if n := catchup.Of(consulkv.KVKeys); n > int64(maxListings) {
		t.Errorf("catch-up with nothing changed: %d keys listings, over %d (a prefix range a partition): %s", n, maxListings, catchup)
	}
	if n := catchup.Total(); n > int64(maxRequests) || n != catchup.Of(consulkv.Txn)+catchup.Of(consulkv.KVKeys) {
		t.Errorf("catch-up with nothing changed: %d Consul requests (%.3f per component), over the bound of %d (%.4f): %s", n, per(n), maxRequests, per(int64(maxRequests)), catchup)
	}
	if r := per(catchup.Ops()); r > budgetCatchupOps {
		t.Errorf("catch-up with nothing changed: %.2f transaction operations per component, over the budget of %d: %s", r, budgetCatchupOps, catchup)
	}
}
