package segmenter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
)

// lagging is a catalog table behind the topic: Get answers from seen
// until WaitCaughtUp, then from committed, everything the topic holds.
type lagging struct {
	seen, committed map[string]*events.PolicyCatalogEntry
	waits           int
	err             error
}

func (l *lagging) Get(id string) (*events.PolicyCatalogEntry, bool) {
	m := l.seen
	if l.waits > 0 {
		m = l.committed
	}
	e, ok := m[id]
	return e, ok
}

func (l *lagging) WaitCaughtUp(context.Context) error {
	l.waits++
	return l.err
}

// entries indexes catalog entries by policy_id.
func entries(es ...*events.PolicyCatalogEntry) map[string]*events.PolicyCatalogEntry {
	out := map[string]*events.PolicyCatalogEntry{}
	for _, e := range es {
		out[e.PolicyID] = e
	}
	return out
}

// version is a policy version as pdp-ingest writes its catalog entry
// (body of about size bytes), and the reference to it the matcher sends.
func version(id, v string, size int) (*events.PolicyCatalogEntry, events.Policy) {
	b := body(id, v, size)
	h := policy.BodyHash(b)
	return &events.PolicyCatalogEntry{PolicyID: id, PolicyName: id + "." + v + ".xml", PolicyVersion: v, Body: b, BodyHash: h,
			Status: events.StatusValid, UpdatedAt: time.UnixMilli(1).UTC()},
		events.Policy{PolicyID: id, PolicyName: id + "." + v + ".xml", PolicyVersion: v, BodyHash: h}
}

func refMatch(comps ...events.ComponentDelta) *events.PolicyMatch {
	return &events.PolicyMatch{UpdateID: "u-1", DeploymentID: "dep-1", CreatedAt: time.UnixMilli(1).UTC(), Components: comps}
}

// filled is the reference with the entry's body in place.
func filled(ref events.Policy, e *events.PolicyCatalogEntry) events.Policy {
	ref.Body = e.Body
	return ref
}

func TestFillPutsTheNamedBodiesInPlace(t *testing.T) {
	aE, a := version("DCAE.Config_a", "3", 500)
	bE, b := version("DCAE.Config_b", "7", 800)
	cat := &lagging{seen: entries(aE, bE)}
	m := refMatch(
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{a},
			RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_old"}}},
		events.ComponentDelta{ComponentID: "c2", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{a, b}}}},
	)
	notes, err := Fill(context.Background(), cat, m)
	if err != nil {
		t.Fatal(err)
	}
	want := refMatch(
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{filled(a, aE)},
			RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_old"}}},
		events.ComponentDelta{ComponentID: "c2", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{filled(a, aE), filled(b, bE)}}}},
	)
	if !reflect.DeepEqual(m, want) || len(notes) != 0 {
		t.Fatalf("filled %+v, notes %+v; want every body in place and nothing to note", m, notes)
	}
	if cat.waits != 0 {
		t.Fatalf("waited %d times for a catalog that held every body", cat.waits)
	}
}

func TestFillWaitsOnceForALaggingCatalog(t *testing.T) {
	a1, _ := version("DCAE.Config_a", "1", 300)
	a2, a2ref := version("DCAE.Config_a", "2", 300)
	b1, _ := version("DCAE.Config_b", "1", 300)
	b2, b2ref := version("DCAE.Config_b", "2", 300)
	_, c1ref := version("DCAE.Config_c", "1", 300) // not read yet at all
	c1, _ := version("DCAE.Config_c", "1", 300)
	cat := &lagging{seen: entries(a1, b1), committed: entries(a2, b2, c1)}
	m := refMatch(events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{a2ref, b2ref},
		AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{c1ref}}}})
	notes, err := Fill(context.Background(), cat, m)
	if err != nil {
		t.Fatal(err)
	}
	if cat.waits != 1 {
		t.Fatalf("waited %d times, want once for the whole match", cat.waits)
	}
	d := m.Components[0]
	if got, want := d.UpdatedPolicies, []events.Policy{filled(a2ref, a2), filled(b2ref, b2)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("updated %+v, want the bodies the references name", got)
	}
	if got := d.AddedPolicies[0].Policies; !reflect.DeepEqual(got, []events.Policy{filled(c1ref, c1)}) {
		t.Fatalf("added %+v, want the body the reference names", got)
	}
	if len(notes) != 0 {
		t.Fatalf("notes %+v; the catalog caught up holds what was named", notes)
	}
}

func TestFillTakesTheLatestWhenTheCatalogHasMovedOn(t *testing.T) {
	a2, a2ref := version("DCAE.Config_a", "2", 300)
	a3, _ := version("DCAE.Config_a", "3", 300)
	// Version 3 was committed after the match naming version 2 was: the
	// catalog holds it before and after catching up.
	cat := &lagging{seen: entries(a3), committed: entries(a3)}
	m := refMatch(events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{a2ref}})
	notes, err := Fill(context.Background(), cat, m)
	if err != nil {
		t.Fatal(err)
	}
	if cat.waits != 1 {
		t.Fatalf("waited %d times, want once", cat.waits)
	}
	want := events.Policy{PolicyID: a3.PolicyID, PolicyName: a3.PolicyName, PolicyVersion: "3", Body: a3.Body, BodyHash: a3.BodyHash}
	if got := m.Components[0].UpdatedPolicies; !reflect.DeepEqual(got, []events.Policy{want}) {
		t.Fatalf("updated %+v, want the latest, version 3", got)
	}
	wantNote := Filled{ComponentID: "c1", PolicyID: a2.PolicyID, WantVersion: "2", WantHash: a2.BodyHash, GotVersion: "3", GotHash: a3.BodyHash}
	if !reflect.DeepEqual(notes, []Filled{wantNote}) {
		t.Fatalf("notes %+v, want %+v", notes, wantNote)
	}
}

func TestFillDropsAPolicyGoneFromTheCatalog(t *testing.T) {
	aE, a := version("DCAE.Config_a", "1", 300)
	_, gone := version("DCAE.Config_gone", "4", 300)
	errored := &events.PolicyCatalogEntry{PolicyID: "DCAE.Config_errored", Status: events.StatusErrored}
	_, erroredRef := version("DCAE.Config_errored", "1", 300)
	cat := &lagging{seen: entries(aE, errored), committed: map[string]*events.PolicyCatalogEntry{aE.PolicyID: aE, gone.PolicyID: nil, errored.PolicyID: errored}}
	m := refMatch(
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{gone, a}},
		events.ComponentDelta{ComponentID: "c2", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{gone, erroredRef}}, {FilterID: "g", Policies: []events.Policy{a}}}},
	)
	notes, err := Fill(context.Background(), cat, m)
	if err != nil {
		t.Fatal(err)
	}
	want := refMatch(
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{filled(a, aE)}},
		events.ComponentDelta{ComponentID: "c2", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{}}, {FilterID: "g", Policies: []events.Policy{filled(a, aE)}}}},
	)
	if !reflect.DeepEqual(normalize(m), normalize(want)) {
		t.Fatalf("filled %+v,\nwant %+v", m, want)
	}
	wantNotes := []Filled{
		{ComponentID: "c1", PolicyID: gone.PolicyID, WantVersion: "4", WantHash: gone.BodyHash, Dropped: true},
		{ComponentID: "c2", PolicyID: gone.PolicyID, WantVersion: "4", WantHash: gone.BodyHash, Dropped: true},
		{ComponentID: "c2", PolicyID: errored.PolicyID, WantVersion: "1", WantHash: erroredRef.BodyHash, Dropped: true},
	}
	if !reflect.DeepEqual(notes, wantNotes) {
		t.Fatalf("notes %+v,\nwant %+v", notes, wantNotes)
	}
}

// A policy the match carries with its body, or without a body_hash, is
// no reference: the match is refused for good, not retried.
func TestFillRefusesPoliciesThatAreNoReferences(t *testing.T) {
	aE, a := version("DCAE.Config_a", "1", 300)
	carried := filled(a, aE)
	hashless := a
	hashless.BodyHash = ""
	for name, p := range map[string]events.Policy{"with its body": carried, "without body_hash": hashless} {
		cat := &lagging{seen: entries(aE)}
		m := refMatch(events.ComponentDelta{ComponentID: "c1", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{p}}}})
		_, err := Fill(context.Background(), cat, m)
		if err == nil || !runtime.IsPermanent(err) || !strings.Contains(err.Error(), "DCAE.Config_a by no reference") {
			t.Errorf("a policy %s: got %v, want a permanent refusal naming it", name, err)
		}
	}
}

func TestFillFailsWhenTheCatalogCannotCatchUp(t *testing.T) {
	_, a := version("DCAE.Config_a", "1", 300)
	cat := &lagging{seen: entries(), err: errors.New("broker unreachable")}
	m := refMatch(events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{a}})
	if _, err := Fill(context.Background(), cat, m); err == nil || !errors.Is(err, cat.err) {
		t.Fatalf("got %v, want the catch-up's error", err)
	}
}

// The segmenter's whole job on a large delta: references to 10 MB of
// bodies come in, pieces that each fit the limit go out, and put back
// together they carry every body the catalog holds.
func TestFillThenSplitTenMegabytes(t *testing.T) {
	const limit = 1 << 20
	cat := &lagging{seen: map[string]*events.PolicyCatalogEntry{}}
	m := refMatch()
	total := 0
	for c := 0; c < 8; c++ {
		d := events.ComponentDelta{ComponentID: fmt.Sprintf("comp-%d", c)}
		for i := 0; i < 20; i++ {
			e, ref := version(fmt.Sprintf("DCAE.Config_p_%d_%d", c, i), "2", 64<<10)
			cat.seen[e.PolicyID] = e
			total += len(e.Body)
			if i%2 == 0 {
				d.UpdatedPolicies = append(d.UpdatedPolicies, ref)
			} else {
				if len(d.AddedPolicies) == 0 {
					d.AddedPolicies = []events.FilterMatch{{FilterID: "f"}}
				}
				d.AddedPolicies[0].Policies = append(d.AddedPolicies[0].Policies, ref)
			}
		}
		m.Components = append(m.Components, d)
	}
	if total < 10<<20 {
		t.Fatalf("the delta names %d bytes of bodies, want 10 MB", total)
	}
	if _, err := Fill(context.Background(), cat, m); err != nil {
		t.Fatal(err)
	}
	segs, err := Split(m, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 10 {
		t.Fatalf("got %d pieces, want the 10 MB cut into at least 10", len(segs))
	}
	for i := range segs {
		if n := encodedSize(t, &segs[i]); n > limit {
			t.Fatalf("piece %d/%d encodes to %d bytes, over the limit of %d", segs[i].Index, segs[i].Count, n, limit)
		}
	}
	back, err := Assemble(segs)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, d := range back.Components {
		ps := append([]events.Policy(nil), d.UpdatedPolicies...)
		for _, a := range d.AddedPolicies {
			ps = append(ps, a.Policies...)
		}
		for _, p := range ps {
			if e := cat.seen[p.PolicyID]; p.Body != e.Body || p.BodyHash != e.BodyHash {
				t.Fatalf("%s came out without the catalog's body", p.PolicyID)
			}
			got += len(p.Body)
		}
	}
	if got != total {
		t.Fatalf("the pieces carry %d bytes of bodies, want %d", got, total)
	}
}
