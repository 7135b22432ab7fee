package agentnotifier

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// Budgets of the agent-notifier's costs in Consul per component notified
// (README.md, "Cost budget"), held by TestCostBudget. The claims and
// outcome records are shared by the components whose jobs wait at the
// same time (chains: lanes gather what is waiting, up to 128), so their
// counts vary from run to run with the timing: the budgets are the
// largest counts measured with a margin, all well under the one request
// per component that a round trip per component costs.
const (
	// budgetReadTxns bounds the read transactions (a get-tree of the
	// folder: items, event and claim) per component; measured 0.035 to
	// 0.059 (9 to 15 for 256).
	budgetReadTxns = 0.1
	// budgetClaimTxns bounds the claim transactions (check-and-set)
	// per component; a claim group is written after its read, so as
	// many as the reads.
	budgetClaimTxns = 0.1
	// budgetRecordTxns bounds the transactions recording outcomes
	// (check-and-set) per component: they are gathered as the webhooks
	// answer, a few at a time; measured 0.04 to 0.38 (10 to 98 for 256).
	budgetRecordTxns = 0.5
	// budgetRequests bounds every request to Consul per component,
	// those three and any other.
	budgetRequests = budgetReadTxns + budgetClaimTxns + budgetRecordTxns
	// budgetGetTreeOps and budgetCASOps bound the transaction operations
	// per component: one read of its folder, the check-and-set of its
	// claim and the one recording its outcome.
	budgetGetTreeOps = 1
	budgetCASOps     = 2
)

// TestCostBudget holds the agent-notifier to its budgets of Consul
// requests: one update reaching 256 components, each notified by a
// webhook, handed in as one poll. The webhooks answer once every
// component is claimed (the handler returned), so the claims and the
// outcome records are counted apart.
func TestCostBudget(t *testing.T) {
	const comps = 256
	consulCfg, consul := stagetest.Consul(t)
	release := make(chan struct{})
	var once sync.Once
	hooks := newHookServer(t, func(string) { <-release })
	ids := make([]string, comps)
	for i := range ids {
		ids[i] = fmt.Sprintf("cost-%03d", i)
	}
	holdGeneration(t, consul, 1, ids...)
	counter := consulkv.NewRequestCounter()
	consulCfg.Requests = counter
	cfg := testConfig(t)
	// The webhooks are held only until every component is claimed: a
	// lease long enough that no renewal of the notifications under way
	// falls in (their cost is TestRenewalsOfRunsUnderWayAreBatched's).
	cfg.Lease = 10 * time.Minute
	h := batchHandler(t, consulCfg, cfg)
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the handler's close waits for the webhooks
	ins := make([]runtime.Input, comps)
	for i, id := range ids {
		a := update(id, 1, webhook(hooks.URL+"/"+id))
		a.UpdateID = "cost-u1" // one update
		ins[i] = input(a)
	}

	before := counter.Counts()
	for i, oc := range h(context.Background(), ins) {
		if oc.Err != nil {
			t.Fatalf("input %d: %v", i, oc.Err)
		}
	}
	claimed := counter.Counts()
	once.Do(func() { close(release) })
	waitOutcomes(t, consul, "cost-", comps)
	recorded := counter.Counts()
	if n := hooks.total(); n != comps {
		t.Fatalf("%d webhook calls, want %d", n, comps)
	}
	if got := hooks.calls("/" + ids[0]); len(got) != 1 || got[0] != wantPayload(ids[0], 1) {
		t.Fatalf("webhook of %s got %q, want %s", ids[0], got, wantPayload(ids[0], 1))
	}

	claim, record, all := claimed.Since(before), recorded.Since(claimed), recorded.Since(before)
	per := func(n int64) float64 { return float64(n) / comps }
	reads, claims, records := claim.TxnsOf("kv get-tree"), claim.TxnsOf("kv cas"), record.TxnsOf("kv cas")
	t.Logf("one update, %d components notified by webhook: %d Consul requests (%.3f per component; budget %.2f): %d reads (%.3f; budget %.2f), %d claims (%.3f; budget %.2f), %d outcome records (%.3f; budget %.2f); target: %d of each, 128 components a transaction",
		comps, all.Total(), per(all.Total()), budgetRequests, reads, per(reads), budgetReadTxns, claims, per(claims), budgetClaimTxns, records, per(records), budgetRecordTxns,
		(comps+consulkv.MaxTxnOps-1)/consulkv.MaxTxnOps)
	t.Logf("until every component was claimed: %s", claim)
	t.Logf("then, as the webhooks answered: %s", record)
	if claim.Total() != reads+claims {
		t.Errorf("until every component was claimed: %d requests, want %d reads and %d claims alone: %s", claim.Total(), reads, claims, claim)
	}
	if record.Total() != records {
		t.Errorf("after the claims: %d requests, want %d outcome records alone: %s", record.Total(), records, record)
	}
	for _, b := range []struct {
		what   string
		n      int64
		budget float64
	}{
		{"Consul requests", all.Total(), budgetRequests},
		{"read transactions", reads, budgetReadTxns},
		{"claim transactions", claims, budgetClaimTxns},
		{"outcome record transactions", records, budgetRecordTxns},
		{"get-tree operations", all.OpsOf("kv get-tree"), budgetGetTreeOps},
		{"check-and-set operations", all.OpsOf("kv cas"), budgetCASOps},
		{"transaction operations", all.Ops(), budgetGetTreeOps + budgetCASOps},
	} {
		if r := per(b.n); r > b.budget {
			t.Errorf("%.3f %s per component notified, over the budget of %.2f: %s", r, b.what, b.budget, all)
		}
	}
}
