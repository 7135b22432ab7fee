package segmenter

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Budgets of the segmenter's costs per unit of work (README.md, "Cost
// budget"), held by TestCostBudget.
const (
	// budgetRequestsPerRecord bounds the Kafka requests the segmenter
	// sends per policy.matches record, fetches and heartbeats left out
	// (they are paced by time, not by work): its transactions are per
	// poll, a reference the catalog holds is filled in without asking
	// the brokers anything, and the matches that miss their body wait for
	// the catalog as of their poll, one listing of its ends per poll. A
	// round trip per record is at least 1.
	budgetRequestsPerRecord = 0.5
)

// TestCostBudget holds the segmenter to its budget: a backlog of matches
// naming their policies by reference costs less than
// budgetRequestsPerRecord Kafka requests per input record, and gives
// exactly the segments the matches need: one per small match, and for a
// large one as many pieces as its policies fill at the limit, no more.
// Among the matches are those of a burst of versions of one policy, which
// the catalog has moved past by the time they are read: each misses its
// body and waits for the catalog, once per poll.
func TestCostBudget(t *testing.T) {
	const (
		limit    = 256 << 10
		policies = 20
		small    = 300
		burst    = 100 // versions of one policy, changed in a row
		// The large delta: bigComps components of bigPolicies policies
		// of bigBody bytes each. Four bodies fit under the limit with
		// their envelope, five do not: it needs bigPieces pieces.
		bigComps, bigPolicies, bigBody = 4, 12, 60 << 10
		bigPieces                      = bigComps * bigPolicies / 4
	)
	c := newCluster(t)
	segments := c.Reader(t, topology.PolicySegments)
	// The catalog, as pdp-ingest commits it before the changes the
	// matches come from: the small policies and the large delta's.
	var catalog []*kgo.Record
	refs := make([]events.Policy, policies)
	for i := range refs {
		var e *events.PolicyCatalogEntry
		e, refs[i] = version(fmt.Sprintf("DCAE.Config_small_%d", i), "1", 2000)
		catalog = append(catalog, c.Record(t, topology.PolicyCatalog, e.PolicyID, e))
	}
	big := refMatch()
	big.UpdateID, big.DeploymentID = "u-big", "dep-big"
	for comp := range bigComps {
		d := events.ComponentDelta{ComponentID: fmt.Sprintf("comp-big-%d", comp)}
		for i := range bigPolicies {
			e, ref := version(fmt.Sprintf("DCAE.Config_big_%d_%d", comp, i), "1", bigBody)
			catalog = append(catalog, c.Record(t, topology.PolicyCatalog, e.PolicyID, e))
			d.UpdatedPolicies = append(d.UpdatedPolicies, ref)
		}
		big.Components = append(big.Components, d)
	}
	// The burst: every version's entry was committed before its change,
	// so the catalog holds the last one when the matches are read.
	var bursts []events.Policy
	for v := 1; v <= burst; v++ {
		e, ref := version("DCAE.Config_burst", fmt.Sprint(v), 2000)
		catalog = append(catalog, c.Record(t, topology.PolicyCatalog, e.PolicyID, e))
		bursts = append(bursts, ref)
	}
	c.ProduceCommitted(t, catalog...)
	match := func(i int) *kgo.Record {
		m := refMatch(events.ComponentDelta{ComponentID: fmt.Sprintf("comp-%d", i), UpdatedPolicies: []events.Policy{refs[i%policies]}})
		m.UpdateID, m.DeploymentID = fmt.Sprintf("u-%d", i), fmt.Sprintf("dep-%d", i)
		return c.Record(t, topology.PolicyMatches, m.DeploymentID, m)
	}

	counter := runtime.NewRequestCounter()
	env := stagetest.Env(c.Kafka)
	env.Kafka.Hooks = append(env.Kafka.Hooks, counter)
	env.LagInterval = time.Hour // one read of the lag, at start
	stop := stagetest.Run(t, StageWith(Config{MaxSegmentBytes: limit}), env)
	c.ProduceRecords(t, match(small)) // a deployment of its own, outside the backlog
	if n := len(segments.Until(1, 90*time.Second)); n != 1 {
		t.Fatalf("the first match gave %d segments, want 1", n)
	}

	// The backlog, written at once: small matches of as many
	// deployments, the large one among them, and the burst's matches of
	// one deployment.
	backlog := make([]*kgo.Record, 0, small+1+burst)
	for i := range small {
		backlog = append(backlog, match(i))
		if i == small/2 {
			backlog = append(backlog, c.Record(t, topology.PolicyMatches, big.DeploymentID, big))
		}
	}
	for i, ref := range bursts {
		m := refMatch(events.ComponentDelta{ComponentID: "comp-burst", UpdatedPolicies: []events.Policy{ref}})
		m.UpdateID, m.DeploymentID = fmt.Sprintf("u-burst-%d", i+1), "dep-burst"
		backlog = append(backlog, c.Record(t, topology.PolicyMatches, m.DeploymentID, m))
	}
	before := counter.Counts()
	c.ProduceRecords(t, backlog...)
	byDep := func(recs []*kgo.Record) map[string][]events.PolicySegment {
		out := map[string][]events.PolicySegment{}
		for _, r := range recs {
			s := *stagetest.Decode[*events.PolicySegment](t, r)
			out[s.DeploymentID] = append(out[s.DeploymentID], s)
		}
		return out
	}
	got := c.ReadUntil(t, topology.PolicySegments, 120*time.Second, func(recs []*kgo.Record) bool {
		segs := byDep(recs)
		if b := segs[big.DeploymentID]; len(b) == 0 || len(b) < int(b[0].Count) || len(segs["dep-burst"]) < burst {
			return false
		}
		for i := range small {
			if len(segs[fmt.Sprintf("dep-%d", i)]) == 0 {
				return false
			}
		}
		return true
	})
	costs := counter.Counts().Since(before)
	stop()
	inputs := len(backlog)
	perRecord := float64(costs.Work()) / float64(inputs)
	segs := byDep(got)
	t.Logf("%d matches (%d small, 1 of %d policies of %d KiB, %d of a burst), %d segments; Kafka requests %d besides fetches and heartbeats (%.3f per record; budget %.2f): %s",
		inputs, small, bigComps*bigPolicies, bigBody>>10, burst, len(got)-1, costs.Work(), perRecord, budgetRequestsPerRecord, costs)

	// Records per match: one segment per small match, bigPieces for the
	// large one, none twice.
	for i := range small {
		dep := fmt.Sprintf("dep-%d", i)
		if s := segs[dep]; len(s) != 1 || s[0].Count != 1 || s[0].UpdateID != fmt.Sprintf("u-%d", i) {
			t.Errorf("%s: %d segments, want the one of its match", dep, len(s))
		}
	}
	if b := segs[big.DeploymentID]; len(b) != bigPieces {
		t.Errorf("the large delta came out in %d pieces, want %d (%d bodies of %d KiB, four to a piece of at most %d KiB)",
			len(b), bigPieces, bigComps*bigPolicies, bigBody>>10, limit>>10)
	} else {
		for i, s := range b {
			if s.Index != int32(i+1) || s.Count != bigPieces {
				t.Errorf("piece at position %d is %d/%d, want %d/%d", i, s.Index, s.Count, i+1, bigPieces)
			}
		}
	}
	// The burst's matches each carry the catalog's latest body, one
	// segment each, in order.
	for i, s := range segs["dep-burst"] {
		if s.UpdateID != fmt.Sprintf("u-burst-%d", i+1) || s.Count != 1 || len(s.Components) != 1 || len(s.Components[0].UpdatedPolicies) != 1 ||
			s.Components[0].UpdatedPolicies[0].PolicyVersion != fmt.Sprint(burst) {
			t.Errorf("burst segment at position %d: %s %d/%d, want u-burst-%d 1/1 with version %d", i, s.UpdateID, s.Index, s.Count, i+1, burst)
			break
		}
	}
	if want := 1 + small + bigPieces + burst; len(got) != want {
		t.Errorf("%d segments on %s, want %d: the first match's, one per small match, %d pieces and one per match of the burst",
			len(got), topology.PolicySegments, want, bigPieces)
	}
	if perRecord > budgetRequestsPerRecord {
		t.Errorf("%.3f Kafka requests per input record, over the budget of %.2f: %s", perRecord, budgetRequestsPerRecord, costs)
	}
}
