package segmenter

import (
	"fmt"
	"reflect"
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

const partitions = 3

// newCluster is an in-process Kafka with the segmenter's topics: the
// input takes whole deltas, several MiB; the output keeps the broker's
// default record limit, which every piece must fit.
func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	c := stagetest.NewCluster(t, partitions, topology.PolicySegments)
	c.CreateTopics(t, map[string]string{"max.message.bytes": topology.MaxMessageBytes},
		topology.PolicyMatches, topology.PolicyCatalog, topology.PolicyRollouts, topology.DLQ(topology.StageSegmenter))
	return c
}

// byReference is m as the matcher writes it, its policies named by
// reference, and the catalog entries pdp-ingest wrote for them; m's
// policies get their body_hash, as they come out of the segmenter.
func byReference(m *events.PolicyMatch) (*events.PolicyMatch, []*events.PolicyCatalogEntry) {
	var es []*events.PolicyCatalogEntry
	ref := func(p *events.Policy) events.Policy {
		p.BodyHash = policy.BodyHash(p.Body)
		es = append(es, &events.PolicyCatalogEntry{PolicyID: p.PolicyID, PolicyName: p.PolicyName, PolicyVersion: p.PolicyVersion,
			Body: p.Body, BodyHash: p.BodyHash, Status: events.StatusValid, UpdatedAt: time.UnixMilli(1).UTC(), Revision: 1})
		r := *p
		r.Body = ""
		return r
	}
	out := *m
	out.Components = make([]events.ComponentDelta, len(m.Components))
	for c := range m.Components {
		d := &m.Components[c]
		o := *d
		o.UpdatedPolicies = make([]events.Policy, len(d.UpdatedPolicies))
		for i := range d.UpdatedPolicies {
			o.UpdatedPolicies[i] = ref(&d.UpdatedPolicies[i])
		}
		o.AddedPolicies = make([]events.FilterMatch, len(d.AddedPolicies))
		for f := range d.AddedPolicies {
			o.AddedPolicies[f] = events.FilterMatch{FilterID: d.AddedPolicies[f].FilterID, Policies: make([]events.Policy, len(d.AddedPolicies[f].Policies))}
			for i := range d.AddedPolicies[f].Policies {
				o.AddedPolicies[f].Policies[i] = ref(&d.AddedPolicies[f].Policies[i])
			}
		}
		out.Components[c] = o
	}
	return &out, es
}

func TestStageCutsBigDeltasAndPassesSmallOnes(t *testing.T) {
	c := newCluster(t)
	const limit = 256 << 10
	small := &events.PolicyMatch{
		UpdateID: "u-small", DeploymentID: "dep-small", CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Components: []events.ComponentDelta{{ComponentID: "vm_2_9d982", UpdatedPolicies: []events.Policy{{
			PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
			Body: `{"config":{"min_memory":"8GB"},"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222"}`,
		}}}},
	}
	big := bigMatch(4, 3<<20, 60<<10)
	big.DeploymentID = "dep-big"
	tooBig := &events.PolicyMatch{UpdateID: "u-huge", DeploymentID: "dep-huge", Components: []events.ComponentDelta{{
		ComponentID: "c", UpdatedPolicies: []events.Policy{pol("DCAE.Config_huge", "3", 300<<10)},
	}}}
	var recs []*kgo.Record
	for _, m := range []*events.PolicyMatch{small, big, tooBig} {
		ref, es := byReference(m)
		for _, e := range es {
			recs = append(recs, c.Record(t, topology.PolicyCatalog, e.PolicyID, e))
		}
		c.ProduceCommitted(t, recs...)
		recs = append(recs[:0], c.Record(t, topology.PolicyMatches, m.DeploymentID, ref))
		c.ProduceRecords(t, recs...)
		recs = recs[:0]
	}
	stop := stagetest.Run(t, StageWith(Config{MaxSegmentBytes: limit}), stagetest.Env(c.Kafka))

	byDep := func(recs []*kgo.Record) map[string][]events.PolicySegment {
		out := map[string][]events.PolicySegment{}
		for _, r := range recs {
			s := *stagetest.Decode[*events.PolicySegment](t, r)
			if string(r.Key) != s.DeploymentID {
				t.Fatalf("segment of %s keyed %q", s.DeploymentID, r.Key)
			}
			if len(r.Value) > limit {
				t.Fatalf("segment %d/%d of %s is %d bytes, over %d", s.Index, s.Count, s.DeploymentID, len(r.Value), limit)
			}
			out[s.DeploymentID] = append(out[s.DeploymentID], s)
		}
		return out
	}
	complete := func(recs []*kgo.Record) bool {
		segs := byDep(recs)
		b := segs["dep-big"]
		return len(segs["dep-small"]) == 1 && len(b) > 0 && len(b) == int(b[0].Count)
	}
	out := c.ReadUntil(t, topology.PolicySegments, 60*time.Second, complete)
	dlq := c.Read(t, topology.DLQ(topology.StageSegmenter), 1, 30*time.Second)
	stop()

	segs := byDep(out)
	if s := segs["dep-small"]; len(s) != 1 || s[0].Index != 1 || s[0].Count != 1 || !reflect.DeepEqual(normalize(&events.PolicyMatch{Components: s[0].Components}), normalize(&events.PolicyMatch{Components: small.Components})) {
		t.Fatalf("small delta: got %+v, want one segment 1/1 with the delta", s)
	}
	b := segs["dep-big"]
	if len(b) < 2 {
		t.Fatalf("big delta: got %d segments, want several", len(b))
	}
	for i, s := range b {
		if s.Index != int32(i+1) || s.Count != int32(len(b)) || s.UpdateID != big.UpdateID {
			t.Fatalf("big delta: segment at position %d is %d/%d of %s, want %d/%d of %s", i, s.Index, s.Count, s.UpdateID, i+1, len(b), big.UpdateID)
		}
	}
	back, err := Assemble(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(byComponent(back), byComponent(big)) {
		t.Fatal("big delta: the segments on the topic do not reassemble to the original deltas")
	}
	if len(segs["dep-huge"]) != 0 {
		t.Fatalf("a delta that cannot be cut produced %d segments", len(segs["dep-huge"]))
	}
	if len(dlq) != 1 || string(dlq[0].Key) != "dep-huge" {
		t.Fatalf("got %d dead letters, want the one of dep-huge", len(dlq))
	}
	if reason := stagetest.Header(dlq[0], runtime.HeaderError); !strings.Contains(reason, "DCAE.Config_huge") || !strings.Contains(reason, ErrTooLarge.Error()) {
		t.Fatalf("dead letter reason %q does not say which policy does not fit", reason)
	}
}

// TestStageFillsReferencesFromTheCatalog runs the segmenter on matches as
// the matcher writes them, policies named by reference, with
// policy.catalog as pdp-ingest writes it: every body is filled in from the
// catalog (the latest when the catalog has moved on, none when the policy
// is gone) and a large delta is cut under the limit.
func TestStageFillsReferencesFromTheCatalog(t *testing.T) {
	c := newCluster(t)
	const limit = 256 << 10
	catalog := func(es ...*events.PolicyCatalogEntry) {
		var recs []*kgo.Record
		for _, e := range es {
			recs = append(recs, c.Record(t, topology.PolicyCatalog, e.PolicyID, e))
		}
		c.ProduceCommitted(t, recs...)
	}
	aE, a := version("DCAE.Config_a", "1", 2000)
	d1E, d1 := version("DCAE.Config_d", "1", 2000)
	d2E, _ := version("DCAE.Config_d", "2", 2000)
	goneE, gone := version("DCAE.Config_gone", "1", 2000)
	catalog(aE, d1E, goneE)
	// Then gone is removed, and version 2 of d committed after the
	// match naming version 1 was written.
	c.ProduceCommitted(t, c.Record(t, topology.PolicyCatalog, goneE.PolicyID, nil))
	catalog(d2E)
	big := refMatch()
	big.UpdateID, big.DeploymentID = "u-big", "dep-big"
	bodies := map[string]string{aE.PolicyID: aE.Body, d2E.PolicyID: d2E.Body}
	var bigEntries []*events.PolicyCatalogEntry
	for comp := 0; comp < 4; comp++ {
		d := events.ComponentDelta{ComponentID: fmt.Sprintf("comp-%d", comp)}
		for i := 0; i < 12; i++ {
			e, ref := version(fmt.Sprintf("DCAE.Config_big_%d_%d", comp, i), "1", 60<<10)
			bigEntries = append(bigEntries, e)
			bodies[e.PolicyID] = e.Body
			d.UpdatedPolicies = append(d.UpdatedPolicies, ref)
		}
		big.Components = append(big.Components, d)
	}
	catalog(bigEntries...)

	stop := stagetest.Run(t, StageWith(Config{MaxSegmentBytes: limit}), stagetest.Env(c.Kafka))
	// A version committed to the catalog while the stage runs, just before
	// the match naming it: the stage catches up with the catalog to find it.
	lateE, late := version("DCAE.Config_late", "1", 2000)
	bodies[lateE.PolicyID] = lateE.Body
	catalog(lateE)
	named := refMatch(
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{a, d1}},
		events.ComponentDelta{ComponentID: "c2", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{gone, late}}}},
	)
	match := func(m *events.PolicyMatch) *kgo.Record { return c.Record(t, topology.PolicyMatches, m.DeploymentID, m) }
	c.ProduceRecords(t, match(named), match(big))

	byDep := map[string][]events.PolicySegment{}
	c.ReadUntil(t, topology.PolicySegments, 60*time.Second, func(recs []*kgo.Record) bool {
		byDep = map[string][]events.PolicySegment{}
		for _, r := range recs {
			if len(r.Value) > limit {
				t.Fatalf("a segment of %s is %d bytes, over %d", r.Key, len(r.Value), limit)
			}
			s := *stagetest.Decode[*events.PolicySegment](t, r)
			byDep[s.DeploymentID] = append(byDep[s.DeploymentID], s)
		}
		b := byDep["dep-big"]
		return len(byDep["dep-1"]) == 1 && len(b) > 0 && len(b) == int(b[0].Count)
	})
	stop()

	got, err := Assemble(byDep["dep-1"])
	if err != nil {
		t.Fatal(err)
	}
	want := refMatch(
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{filled(a, aE),
			{PolicyID: d2E.PolicyID, PolicyName: d2E.PolicyName, PolicyVersion: "2", Body: d2E.Body, BodyHash: d2E.BodyHash}}},
		events.ComponentDelta{ComponentID: "c2", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{filled(late, lateE)}}}},
	)
	if !reflect.DeepEqual(byComponent(got), byComponent(want)) {
		t.Fatalf("dep-1 got %+v,\nwant a's body, d's latest (2), no gone, late's body", byComponent(got))
	}
	b := byDep["dep-big"]
	if len(b) < 10 {
		t.Fatalf("the 3 MB delta came out in %d pieces, want it cut under %d bytes", len(b), limit)
	}
	back, err := Assemble(b)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range back.Components {
		for _, p := range d.UpdatedPolicies {
			if p.Body != bodies[p.PolicyID] || p.BodyHash != policy.BodyHash(p.Body) {
				t.Fatalf("%s came out without the catalog's body", p.PolicyID)
			}
			n++
		}
	}
	if n != 48 {
		t.Fatalf("the pieces carry %d policies, want 48", n)
	}
}

// A tombstone on policy.matches means nothing: it is dead-lettered with
// the reason, not dropped, and the stage goes on.
func TestStageDeadLettersTombstone(t *testing.T) {
	c := newCluster(t)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	next := &events.PolicyMatch{UpdateID: "u-after", DeploymentID: "dep-after", CreatedAt: time.UnixMilli(1700000000000).UTC(),
		Components: []events.ComponentDelta{{ComponentID: "c", UpdatedPolicies: []events.Policy{pol("DCAE.Config_A", "1", 100)}}}}
	ref, es := byReference(next)
	c.ProduceCommitted(t, c.Record(t, topology.PolicyCatalog, es[0].PolicyID, es[0]))
	c.ProduceRecords(t, c.Record(t, topology.PolicyMatches, "dep-gone", nil), c.Record(t, topology.PolicyMatches, next.DeploymentID, ref))

	dlq := c.Read(t, topology.DLQ(topology.StageSegmenter), 1, 60*time.Second)
	if len(dlq) != 1 || string(dlq[0].Key) != "dep-gone" || dlq[0].Value != nil {
		t.Fatalf("got dead letters %v, want the tombstone of dep-gone", dlq)
	}
	if reason := stagetest.Header(dlq[0], runtime.HeaderError); !strings.Contains(reason, "is a tombstone (no value), which policy.matches never carries") {
		t.Errorf("dead letter reason %q does not say the tombstone is refused", reason)
	}
	if out := c.Read(t, topology.PolicySegments, 1, 60*time.Second); len(out) != 1 || string(out[0].Key) != next.DeploymentID {
		t.Fatalf("got %d segments, want the one of %s", len(out), next.DeploymentID)
	}
}
