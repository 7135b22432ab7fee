package pdpingest

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Budgets of pdp-ingest's costs per unit of work (README.md, "Cost
// budget"), held by TestCostBudget.
const (
	// budgetRequestsPerRecord bounds the Kafka requests pdp-ingest sends
	// per pdp.notifications record, fetches and heartbeats left out (they
	// are paced by time, not by work): its transactions are per poll, and
	// the catalog state of its partitions is read once, when they are
	// assigned, then kept in memory. A round trip per record is at least
	// 1.
	budgetRequestsPerRecord = 0.5
)

// TestCostBudget holds pdp-ingest to its budget: a backlog of pushed
// versions of many policies, some pushed twice, costs less than
// budgetRequestsPerRecord Kafka requests per input record, and each
// version that changes its policy writes exactly one policy.catalog
// record and one policy.changes record per partition of policy.changes
// (1 + partitions records), a version pushed again nothing.
func TestCostBudget(t *testing.T) {
	const (
		policies = 20
		versions = 15 // per policy, after the first
		again    = 10 // every tenth push is sent twice
	)
	c := newCluster(t)
	srv := httptest.NewServer(&fakePDP{}) // pushes do not ask the PDP
	defer srv.Close()
	policyID := func(i int) string { return "DCAE.Config_cost_" + strconv.Itoa(i) }
	push := func(i, v int) *kgo.Record {
		id := policyID(i)
		return c.Record(t, topology.PDPNotifications, id, &events.PdpNotification{
			NotificationID: fmt.Sprintf("n-%s-%d", id, v), Source: "north-api",
			PushedBodies: []string{jsonOf(t, pdpBody(id, strconv.Itoa(v), fmt.Sprintf(`{"v":%d}`, v)))},
		})
	}

	counter := runtime.NewRequestCounter()
	env := stagetest.Env(c.Kafka)
	env.Kafka.Hooks = append(env.Kafka.Hooks, counter)
	env.LagInterval = time.Hour // one read of the lag, at start
	cfg := DefaultConfig()
	cfg.PDPURL, cfg.PDPTimeout = srv.URL, 5*time.Second
	cfg.CatchupOnStart, cfg.CatchupInterval = false, 0
	stop := stagetest.Run(t, StageWith(cfg), env)
	catalogOut := c.Reader(t, topology.PolicyCatalog)
	// Version 1 of every policy: each partition has had records before
	// the backlog.
	var first []*kgo.Record
	for i := range policies {
		first = append(first, push(i, 1))
	}
	c.ProduceRecords(t, first...)
	if n := len(catalogOut.Until(policies, 90*time.Second)); n != policies {
		t.Fatalf("the first versions wrote %d catalog entries, want %d", n, policies)
	}

	// The backlog, written at once: versions 2 on of every policy,
	// interleaved, every tenth push sent twice in a row.
	var backlog []*kgo.Record
	pushes := 0
	for v := 2; v < 2+versions; v++ {
		for i := range policies {
			backlog = append(backlog, push(i, v))
			if pushes++; pushes%again == 0 {
				backlog = append(backlog, push(i, v))
			}
		}
	}
	changed := policies * versions // every version once; the second push changes nothing
	before := counter.Counts()
	c.ProduceRecords(t, backlog...)
	last := strconv.Itoa(1 + versions)
	got := c.ReadUntil(t, topology.PolicyChanges, 120*time.Second, func(recs []*kgo.Record) bool {
		seen := map[string]int{}
		for _, ch := range changes(t, recs) {
			if deref(ch.NewVersion) == last {
				seen[ch.PolicyID]++
			}
		}
		for i := range policies {
			if seen[policyID(i)] < partitions {
				return false
			}
		}
		return true
	})
	costs := counter.Counts().Since(before)
	stop()
	cat := c.Read(t, topology.PolicyCatalog, policies+changed, 30*time.Second)
	perRecord := float64(costs.Work()) / float64(len(backlog))
	t.Logf("%d notifications (%d versions of %d policies, %d pushed twice), %d catalog records and %d change copies; Kafka requests %d besides fetches and heartbeats (%.3f per record; budget %.2f): %s",
		len(backlog), changed, policies, len(backlog)-changed, len(cat)-policies, len(got)-policies*partitions,
		costs.Work(), perRecord, budgetRequestsPerRecord, costs)

	// Records per policy changed: one catalog entry per version, in order;
	// on every partition of policy.changes one change per version, in
	// order, the same change on each.
	wantVersions := make([]string, 0, 1+versions)
	for v := 1; v <= 1+versions; v++ {
		wantVersions = append(wantVersions, strconv.Itoa(v))
	}
	entries := map[string][]string{}
	for _, r := range cat {
		e := stagetest.Decode[*events.PolicyCatalogEntry](t, r)
		entries[e.PolicyID] = append(entries[e.PolicyID], e.PolicyVersion)
	}
	copies := map[string]map[int32][]string{} // policy -> partition -> versions
	changeIDs := map[string]map[string]int{}  // policy -> change_id -> copies
	for _, ch := range changes(t, got) {
		if copies[ch.PolicyID] == nil {
			copies[ch.PolicyID], changeIDs[ch.PolicyID] = map[int32][]string{}, map[string]int{}
		}
		copies[ch.PolicyID][ch.partition] = append(copies[ch.PolicyID][ch.partition], deref(ch.NewVersion))
		changeIDs[ch.PolicyID][ch.ChangeID]++
	}
	for i := range policies {
		id := policyID(i)
		if !slices.Equal(entries[id], wantVersions) {
			t.Errorf("%s: catalog entries of versions %v, want one of each of %v", id, entries[id], wantVersions)
		}
		for p := int32(0); p < partitions; p++ {
			if vs := copies[id][p]; !slices.Equal(vs, wantVersions) {
				t.Errorf("%s: partition %d of %s has changes to versions %v, want one to each of %v", id, p, topology.PolicyChanges, vs, wantVersions)
			}
		}
		for chID, n := range changeIDs[id] {
			if n != partitions {
				t.Errorf("%s: change %s has %d copies, want one per partition (%d)", id, chID, n, partitions)
			}
		}
	}
	if want := (policies + changed) * (1 + partitions); len(cat)+len(got) != want {
		t.Errorf("%d catalog records and %d change copies, want %d in all: 1 + %d per version that changed its policy",
			len(cat), len(got), want, partitions)
	}
	if perRecord > budgetRequestsPerRecord {
		t.Errorf("%.3f Kafka requests per input record, over the budget of %.2f: %s", perRecord, budgetRequestsPerRecord, costs)
	}
}
