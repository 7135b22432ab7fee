package matcher

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Budgets of the matcher's costs per unit of work (README.md, "Cost
// budget"), held by TestCostBudget.
const (
	// budgetRequestsPerRecord bounds the Kafka requests the matcher
	// sends per input record, fetches and heartbeats left out (they are
	// paced by time, not by work): its transactions and the listing of
	// policy.rollouts' ends are per poll. A round trip per record is at
	// least 1.
	budgetRequestsPerRecord = 0.5
)

// TestCostBudget holds the matcher to its budget: a backlog of policy
// changes (each fanned out to every partition, as pdp-ingest writes them)
// costs less than budgetRequestsPerRecord Kafka requests per input record,
// and gives exactly one delta per component and change, none twice.
func TestCostBudget(t *testing.T) {
	const (
		comps   = 12
		changes = 200
	)
	c := newCluster(t)
	matches := c.Reader(t, topology.PolicyMatches)
	c.Produce(t, topology.PolicyCatalog, memID, catalogEntry(memID, "1", nil))
	for i := range comps {
		id := "comp-" + strconv.Itoa(i)
		c.Produce(t, topology.DeployComponents, id, comp(id, "dep-"+id, []string{memID}))
	}
	// A rollout of another policy: the table is not empty, and each
	// change is decided with the rollouts in force.
	c.Produce(t, topology.PolicyRollouts, storID, &events.PolicyRollout{RolloutID: "r-1", PolicyID: storID, Version: "2", State: rollout.StateRunning, Steps: []float64{0.5, 1}})

	counter := runtime.NewRequestCounter()
	env := stagetest.Env(c.Kafka)
	env.Kafka.Hooks = append(env.Kafka.Hooks, counter)
	env.LagInterval = time.Hour // one read of the lag, at start
	stop := stagetest.Run(t, Stage(), env)
	wait(matches, comps, 90*time.Second)

	// The backlog, as pdp-ingest writes it: one copy of each change per
	// partition (the change carries what the matcher needs of its
	// version), all written at once.
	manual, err := kgo.NewClient(kgo.SeedBrokers(c.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	var changeRecs []*kgo.Record
	for v := 2; v < 2+changes; v++ {
		ch, _ := change(memID, fmt.Sprintf("ch-%d", v), strconv.Itoa(v-1), strconv.Itoa(v), nil)
		for p := int32(0); p < testPartitions; p++ {
			rec := c.Record(t, topology.PolicyChanges, memID, ch)
			rec.Partition = p
			changeRecs = append(changeRecs, rec)
		}
	}
	before := counter.Counts()
	if err := manual.ProduceSync(context.Background(), changeRecs...).FirstErr(); err != nil {
		t.Fatalf("produce the changes: %v", err)
	}
	last := strconv.Itoa(1 + changes)
	// What each component was sent, in order, as "version" lines.
	sent := func(recs []*kgo.Record) map[string][]string {
		out := map[string][]string{}
		for _, pm := range decodeMatches(t, recs) {
			for _, d := range pm.Components {
				for _, u := range d.UpdatedPolicies {
					out[d.ComponentID] = append(out[d.ComponentID], u.PolicyVersion)
				}
			}
		}
		return out
	}
	got := c.ReadUntil(t, topology.PolicyMatches, 120*time.Second, func(recs []*kgo.Record) bool {
		s := sent(recs)
		for i := range comps {
			if vs := s["comp-"+strconv.Itoa(i)]; len(vs) == 0 || vs[len(vs)-1] != last {
				return false
			}
		}
		return true
	})
	costs := counter.Counts().Since(before)
	stop()
	perRecord := float64(costs.Work()) / float64(len(changeRecs))
	t.Logf("%d changes × %d partitions = %d input records, %d deltas for %d components; Kafka requests %d besides fetches and heartbeats (%.3f per record; budget %.2f): %s",
		changes, testPartitions, len(changeRecs), len(got)-comps, comps, costs.Work(), perRecord, budgetRequestsPerRecord, costs)
	// Records per change: a component is sent a version at most once,
	// never an older one after a newer, and ends on the last.
	for id, vs := range sent(got) {
		for i := 1; i < len(vs); i++ {
			if a, b := atoi(t, vs[i-1]), atoi(t, vs[i]); b <= a {
				t.Errorf("component %s was sent version %d after %d", id, b, a)
			}
		}
		if vs[len(vs)-1] != last {
			t.Errorf("component %s ends on version %s, want %s", id, vs[len(vs)-1], last)
		}
	}
	if n := len(got) - comps; n > comps*changes {
		t.Errorf("%d deltas for %d changes of %d components: more than one per component and change", n, changes, comps)
	}
	if perRecord > budgetRequestsPerRecord {
		t.Errorf("%.3f Kafka requests per input record, over the budget of %.2f: %s", perRecord, budgetRequestsPerRecord, costs)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("version %q: %v", s, err)
	}
	return n
}
