package executor

import (
	"fmt"
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

// Budgets of the executor's costs per unit of work (README.md, "Cost
// budget"), held by TestCostBudget.
const (
	// budgetRequestsPerRecord bounds the Kafka requests the executor
	// sends per policy.segments record, fetches and heartbeats left out
	// (they are paced by time, not by work): its transactions are per
	// poll, and a registered component's registration and collection are
	// read from memory. A round trip per record is at least 1.
	budgetRequestsPerRecord = 0.5
)

// TestCostBudget holds the executor to its budget: a backlog of updates of
// several deployments, some cut into two pieces, costs less than
// budgetRequestsPerRecord Kafka requests per input record, and writes
// exactly one component.policies record per component and update, in
// order, none twice.
func TestCostBudget(t *testing.T) {
	const (
		deployments = 4
		perDep      = 3  // components of each deployment
		updates     = 60 // per deployment, after the first
		cutEvery    = 5  // every fifth update comes in two pieces
	)
	c := newCluster(t)
	out := c.Reader(t, topology.ComponentPolicies)
	depID := func(d int) string { return "dep-" + strconv.Itoa(d) }
	compID := func(d, i int) string { return fmt.Sprintf("comp-%d-%d", d, i) }
	updID := func(d, v int) string { return fmt.Sprintf("u-%d-%d", d, v) }
	for d := range deployments {
		for i := range perDep {
			comp := component(compID(d, i), "scn-"+compID(d, i))
			comp.DeploymentID = depID(d)
			c.Produce(t, topology.DeployComponents, comp.ComponentID, comp)
		}
	}
	// The records of update v of deployment d: every component of d gets
	// version v of the deployment's policy, in one piece or two.
	update := func(d, v int) []*kgo.Record {
		var deltas []events.ComponentDelta
		for i := range perDep {
			deltas = append(deltas, events.ComponentDelta{ComponentID: compID(d, i),
				UpdatedPolicies: []events.Policy{pol("DCAE.Config_"+depID(d), strconv.Itoa(v))}})
		}
		pieces := [][]events.ComponentDelta{deltas}
		if v%cutEvery == 0 {
			pieces = [][]events.ComponentDelta{deltas[:1], deltas[1:]}
		}
		var recs []*kgo.Record
		for i, p := range pieces {
			s := piece(updID(d, v), int32(i+1), int32(len(pieces)), p...)
			s.DeploymentID = depID(d)
			recs = append(recs, c.Record(t, topology.PolicySegments, s.DeploymentID, s))
		}
		return recs
	}

	counter := runtime.NewRequestCounter()
	env := testEnv(c)
	env.Kafka.Hooks = append(env.Kafka.Hooks, counter)
	env.LagInterval = time.Hour // one read of the lag, at start
	stop := stagetest.Run(t, Stage(), env)
	// The first update of every deployment: each partition the backlog
	// comes to has had its first record (its state restored) before it.
	var first []*kgo.Record
	for d := range deployments {
		first = append(first, update(d, 1)...)
	}
	c.ProduceRecords(t, first...)
	if n := len(out.Until(deployments*perDep, 90*time.Second)); n != deployments*perDep {
		t.Fatalf("the first updates wrote %d collections, want %d", n, deployments*perDep)
	}

	// The backlog, written at once, the deployments' updates interleaved.
	var backlog []*kgo.Record
	for v := 2; v < 2+updates; v++ {
		for d := range deployments {
			backlog = append(backlog, update(d, v)...)
		}
	}
	before := counter.Counts()
	c.ProduceRecords(t, backlog...)
	last := 1 + updates
	// The update_ids written per component, in order.
	written := func(recs []*kgo.Record) map[string][]string {
		w := map[string][]string{}
		for _, r := range recs {
			cp := decodeCP(t, r)
			w[cp.ComponentID] = append(w[cp.ComponentID], cp.UpdateID)
		}
		return w
	}
	got := c.ReadUntil(t, topology.ComponentPolicies, 120*time.Second, func(recs []*kgo.Record) bool {
		w := written(recs)
		for d := range deployments {
			for i := range perDep {
				if ids := w[compID(d, i)]; len(ids) == 0 || ids[len(ids)-1] != updID(d, last) {
					return false
				}
			}
		}
		return true
	})
	costs := counter.Counts().Since(before)
	stop()
	perRecord := float64(costs.Work()) / float64(len(backlog))
	t.Logf("%d updates of %d deployments (%d cut in two) = %d input records, %d collections for %d components; Kafka requests %d besides fetches and heartbeats (%.3f per record; budget %.2f): %s",
		deployments*updates, deployments, deployments*updates/cutEvery, len(backlog), len(got)-deployments*perDep, deployments*perDep,
		costs.Work(), perRecord, budgetRequestsPerRecord, costs)

	// Records per change: each component was written every update of its
	// deployment once, in order, with the update's version and the
	// generation after the one before.
	w := written(got)
	for d := range deployments {
		var want []string
		for v := 1; v <= last; v++ {
			want = append(want, updID(d, v))
		}
		for i := range perDep {
			if ids := w[compID(d, i)]; !slices.Equal(ids, want) {
				t.Errorf("component %s was written updates %v, want each of %s's %d updates once, in order", compID(d, i), ids, depID(d), last)
			}
		}
	}
	gen := map[string]int64{}
	for _, r := range got {
		cp := decodeCP(t, r)
		gen[cp.ComponentID]++
		if cp.Generation != gen[cp.ComponentID] || len(cp.UpdatedPolicies) != 1 || cp.UpdatedPolicies[0].PolicyVersion != strconv.FormatInt(gen[cp.ComponentID], 10) {
			t.Errorf("component %s: update %s wrote generation %d with updated %v, want generation %d with version %[5]d",
				cp.ComponentID, cp.UpdateID, cp.Generation, ids(cp.UpdatedPolicies), gen[cp.ComponentID])
		}
	}
	if want := deployments * perDep * last; len(got) != want {
		t.Errorf("%d records on %s, want %d: one per component and update", len(got), topology.ComponentPolicies, want)
	}
	if perRecord > budgetRequestsPerRecord {
		t.Errorf("%.3f Kafka requests per input record, over the budget of %.2f: %s", perRecord, budgetRequestsPerRecord, costs)
	}
}
