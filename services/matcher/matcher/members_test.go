package matcher

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// TestMembersChangeNothingButSpeed runs the matcher with members added and
// removed while it works through a backlog of registrations, then sends a
// catch-up and a new version: every component is sent its install once, a
// catch-up finds nothing to send, and the new version reaches each
// component once, as an update — what one member sends. A member given a
// partition goes on from what its previous owner committed (the
// changelog, matcher.holdings), not from component.policies, which the
// executor has not written yet: restored from there, the new member sent
// every component of its partitions everything again.
func TestMembersChangeNothingButSpeed(t *testing.T) {
	const comps = 600
	c := newCluster(t)
	c.Produce(t, topology.PolicyCatalog, memID, catalogEntry(memID, "1", nil))
	var recs []*kgo.Record
	var want []string
	for i := range comps {
		id := fmt.Sprintf("comp-%03d", i)
		recs = append(recs, c.Record(t, topology.DeployComponents, id, comp(id, "dep-"+id, []string{memID})))
		want = append(want, "dep-"+id+" "+id+" +policy_ids:DCAE.Config_VM_MEMORY@1")
	}
	c.ProduceRecords(t, recs...)
	matches := c.Reader(t, topology.PolicyMatches)

	// Members join as the backlog is worked through, and the first one
	// leaves before it is done.
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 10
	stopA := stagetest.Run(t, Stage(), env)
	matches.Until(comps/6, 90*time.Second)
	stopB := stagetest.Run(t, Stage(), env)
	matches.Until(comps/3, 90*time.Second)
	stopC := stagetest.Run(t, Stage(), env)
	matches.Until(comps/2, 90*time.Second)
	stopA()
	matches.Until(comps, 90*time.Second)
	testkit.Eventually(t, 60*time.Second, testkit.Holds("two members own partitions", func() bool { return bothOwn(c) }))

	// A catch-up finds nothing to send; a new version reaches every
	// component once.
	fanOut(t, c, topology.CatchupRequests, events.ScopeAll, &events.CatchupRequest{RequestID: "cu-members", Scope: events.ScopeAll,
		Reason: "test", RequestedAt: time.Now().UTC().Truncate(time.Millisecond)})
	// Every partition compared before the new version comes, so that
	// none of them sends it as a catch-up.
	if n := len(c.Read(t, topology.CatchupProgress, testPartitions, 60*time.Second)); n != testPartitions {
		t.Fatalf("%d partitions reported the catch-up, want %d", n, testPartitions)
	}
	ch, entry := change(memID, "ch-2", "1", "2", nil)
	c.Produce(t, topology.PolicyCatalog, memID, entry)
	fanOut(t, c, topology.PolicyChanges, memID, ch)
	for i := range comps {
		id := fmt.Sprintf("comp-%03d", i)
		want = append(want, "dep-"+id+" "+id+" ~DCAE.Config_VM_MEMORY@2")
	}
	sort.Strings(want)
	got := wait(matches, len(want), 90*time.Second)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stopB() }()
	go func() { defer wg.Done(); stopC() }()
	wg.Wait()
	lines := sortedLines(decodeMatches(t, got))
	if diff := stagetest.CompareLines(map[string][]string{"deltas": lines}, map[string][]string{"deltas": want}); diff != "" {
		t.Fatalf("with members joining and leaving: %d deltas, want %d (one install and one update per component):%s", len(lines), len(want), diff)
	}
}
