package segmenter

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// membersLimit is the segment limit of TestMembersChangeNothingButSpeed:
// small, so that an update of a few KiB is cut into pieces.
const membersLimit = 4 << 10

// TestMembersChangeNothingButSpeed runs the segmenter on one backlog of
// matches, complete before the first member starts, with one member and
// with members joining and leaving while it works through it: every
// deployment is written the same segments in the same order — the same
// update, piece i/n, components and policies with their versions and
// bodies — as one member writes.
func TestMembersChangeNothingButSpeed(t *testing.T) {
	catalog, matches, aborted := membersBacklog(t)
	run := func(t *testing.T, members, want int) (map[string][]string, int) {
		c := newCluster(t)
		var recs []*kgo.Record
		for _, e := range catalog {
			var ev events.Event
			if e.entry != nil {
				ev = e.entry
			}
			recs = append(recs, c.Record(t, topology.PolicyCatalog, e.key, ev))
		}
		c.ProduceCommitted(t, recs...)
		// The backlog's halves, and between them a transaction of the
		// matcher that a rebalance aborted: its matches are not input.
		half := func(ms []*events.PolicyMatch) []*kgo.Record {
			var recs []*kgo.Record
			for _, m := range ms {
				recs = append(recs, c.Record(t, topology.PolicyMatches, m.DeploymentID, m))
			}
			return recs
		}
		c.ProduceRecords(t, half(matches[:len(matches)/2])...)
		c.ProduceAborted(t, half(aborted)...)
		c.ProduceRecords(t, half(matches[len(matches)/2:])...)
		out := c.Reader(t, topology.PolicySegments)
		env := func() runtime.Env {
			env := stagetest.Env(c.Kafka)
			env.PollRecords = 10
			return env
		}
		stage := func() runtime.Stage { return StageWith(Config{MaxSegmentBytes: membersLimit}) }
		got, ms := c.Members(t, members, stage, env, out, want)
		t.Logf("members=%d: %d segments of %d matches; %v", members, len(got), len(matches), ms)
		lines := segmentLines(t, got)
		var ofAborted []string
		for _, l := range lines {
			for _, s := range l {
				if strings.Contains(s, abortedUpdate) {
					ofAborted = append(ofAborted, s[:min(60, len(s))])
				}
			}
		}
		if len(ofAborted) > 0 {
			t.Errorf("members=%d: %d segments of matches whose transaction was aborted (%d aborted matches), such as %q",
				members, len(ofAborted), len(aborted), ofAborted[:min(3, len(ofAborted))])
		}
		return lines, len(got)
	}

	var ref map[string][]string
	var refCount int
	t.Run("1 member", func(t *testing.T) {
		ref, refCount = run(t, 1, 0)
		pieces := 0
		for _, l := range ref {
			for _, s := range l {
				if !strings.Contains(s, " 1/1 ") {
					pieces++
				}
			}
		}
		if pieces == 0 || refCount <= len(matches) {
			t.Fatalf("one member wrote %d segments of %d matches, none a piece of a larger one: the backlog cuts nothing", refCount, len(matches))
		}
	})
	if ref == nil {
		t.FailNow()
	}
	for _, members := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d members", members), func(t *testing.T) {
			got, n := run(t, members, refCount)
			if diff := stagetest.CompareLines(got, ref); diff != "" {
				t.Fatalf("%d members wrote %d segments, one member %d:\n%s", members, n, refCount, diff)
			}
		})
	}
}

type catalogRecord struct {
	key   string
	entry *events.PolicyCatalogEntry // nil: a tombstone
}

// abortedUpdate marks the update_id of the matches of an aborted
// transaction.
const abortedUpdate = "-aborted-"

// membersBacklog is policy.catalog and a backlog of matches naming its
// policies by reference: 150 deployments of 3 components, 4 updates each —
// an install, an update cut into pieces, an update naming a version the
// catalog has moved past and a policy it no longer holds, and removals
// with a policy every deployment shares. aborted are matches of a
// transaction the matcher aborted, two per deployment of 10 components
// each: several hundred KiB, more than one fetch of the segmenter takes
// (runtime.DefaultFetchMaxBytes).
func membersBacklog(t *testing.T) (catalog []catalogRecord, matches, aborted []*events.PolicyMatch) {
	t.Helper()
	const (
		deployments = 150
		comps       = 3
	)
	var cat []catalogRecord
	ref := func(id, v string, size int) events.Policy {
		e, r := version(id, v, size)
		cat = append(cat, catalogRecord{id, e})
		return r
	}
	shared := ref("DCAE.Config_shared", "1", 300)
	at := time.UnixMilli(1700000000000).UTC()
	var ms []*events.PolicyMatch
	for d := range deployments {
		dep := fmt.Sprintf("dep-%03d", d)
		match := func(u int, deltas ...events.ComponentDelta) *events.PolicyMatch {
			return &events.PolicyMatch{UpdateID: fmt.Sprintf("%s-u%d", dep, u), DeploymentID: dep, CatchUp: u == 4,
				CreatedAt: at.Add(time.Duration(u) * time.Second), Components: deltas}
		}
		comp := func(c int) string { return fmt.Sprintf("%s-c%d", dep, c) }
		var install, big, moved, removals []events.ComponentDelta
		a := ref(fmt.Sprintf("DCAE.Config_a_%03d", d), "1", 400)
		old := ref(fmt.Sprintf("DCAE.Config_m_%03d", d), "1", 400)  // the catalog moves on to 2
		gone := ref(fmt.Sprintf("DCAE.Config_g_%03d", d), "1", 400) // the catalog removes it
		for c := range comps {
			install = append(install, events.ComponentDelta{ComponentID: comp(c), UpdatedPolicies: []events.Policy{a},
				AddedPolicies: []events.FilterMatch{{FilterID: "svc", Policies: []events.Policy{shared}}}})
			var ps []events.Policy
			for i := range 4 {
				ps = append(ps, ref(fmt.Sprintf("DCAE.Config_b_%03d_%d_%d", d, c, i), "1", 900))
			}
			big = append(big, events.ComponentDelta{ComponentID: comp(c), UpdatedPolicies: ps[:2],
				AddedPolicies: []events.FilterMatch{{FilterID: "svc", Policies: ps[2:]}}})
			moved = append(moved, events.ComponentDelta{ComponentID: comp(c), UpdatedPolicies: []events.Policy{old, gone}})
			removals = append(removals, events.ComponentDelta{ComponentID: comp(c), RemovedPolicies: []events.RemovedPolicy{
				{PolicyID: a.PolicyID, PolicyVersion: ptr("1")}, {PolicyID: shared.PolicyID}}})
		}
		removals = append(removals, events.ComponentDelta{ComponentID: comp(comps), Uninstall: true,
			RemovedPolicies: []events.RemovedPolicy{{PolicyID: a.PolicyID}}})
		ms = append(ms, match(1, install...), match(2, big...), match(3, moved...), match(4, removals...))
		for u := range 2 {
			m := match(5, nil...)
			m.UpdateID = fmt.Sprintf("%s%s%d", dep, abortedUpdate, u)
			for c := range 10 {
				// Component ids that do not compress, so that the
				// matches take as many bytes on the wire as in memory.
				sum := sha256.Sum256([]byte(fmt.Sprintf("%s-%d-%d", dep, u, c)))
				id := comp(c) + "-" + strings.Repeat(hex.EncodeToString(sum[:]), 4)
				m.Components = append(m.Components, events.ComponentDelta{ComponentID: id, UpdatedPolicies: []events.Policy{a},
					AddedPolicies: []events.FilterMatch{{FilterID: "svc", Policies: []events.Policy{shared}}}})
			}
			aborted = append(aborted, m)
		}
		ref(old.PolicyID, "2", 400)
		cat = append(cat, catalogRecord{key: gone.PolicyID})
	}
	return cat, ms, aborted
}

// segmentLines are the segments of each deployment, in the order written,
// each as one line: its update, piece i/n and catch-up, then every
// component with its removed, updated and added policies (version,
// body_hash and the hash of the body carried).
func segmentLines(t *testing.T, recs []*kgo.Record) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range recs {
		s := stagetest.Decode[*events.PolicySegment](t, r)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s %d/%d catch_up=%t created=%d", s.DeploymentID, s.UpdateID, s.Index, s.Count, s.CatchUp, s.CreatedAt.UnixMilli())
		pol := func(p events.Policy) string {
			return fmt.Sprintf("%s@%s#%s/%s", p.PolicyID, p.PolicyVersion, short(p.BodyHash), short(policy.BodyHash(p.Body)))
		}
		for _, d := range s.Components {
			fmt.Fprintf(&b, " | %s", d.ComponentID)
			if d.Uninstall {
				b.WriteString(" uninstall")
			}
			for _, rp := range d.RemovedPolicies {
				v := "*"
				if rp.PolicyVersion != nil {
					v = *rp.PolicyVersion
				}
				fmt.Fprintf(&b, " -%s@%s", rp.PolicyID, v)
			}
			for _, p := range d.UpdatedPolicies {
				b.WriteString(" ~" + pol(p))
			}
			for _, fm := range d.AddedPolicies {
				for _, p := range fm.Policies {
					fmt.Fprintf(&b, " +%s:%s", fm.FilterID, pol(p))
				}
			}
		}
		out[string(r.Key)] = append(out[string(r.Key)], b.String())
	}
	return out
}

func short(h string) string { return h[:min(8, len(h))] }
