package pdpingest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

func rawBodies(t *testing.T, bs ...policy.Body) []json.RawMessage {
	t.Helper()
	out := make([]json.RawMessage, len(bs))
	for i, b := range bs {
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = j
	}
	return out
}

// catalogOf is the catalog entry pdp-ingest writes for b.
func catalogOf(t *testing.T, b policy.Body) *events.PolicyCatalogEntry {
	t.Helper()
	sel := policy.SelectLatestRaw(rawBodies(t, b))
	c, ok := sel.Checked[mustID(t, b)]
	if !ok {
		t.Fatalf("body %v is not valid: %v", b, sel.Reasons)
	}
	e, _ := entry(c, "", events.SourcePDP, time.Now())
	return e
}

func mustID(t *testing.T, b policy.Body) string {
	t.Helper()
	id, err := b.PolicyID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestReconcileSendsOnlyWhatDiffers(t *testing.T) {
	const other = "DCAE.Config_OTHER"
	const pushed = "DCAE.Config_PUSHED"
	const third = "DCAE.Config_THIRD"
	v5 := pdpBody(memID, "5", `{"min_memory":"2GB"}`)
	v222 := pdpBody(memID, "222", `{"min_memory":"8GB"}`)
	o1 := pdpBody(other, "1", `{"a":"b"}`)
	o1edited := pdpBody(other, "1", `{"a":"c"}`)
	t1 := pdpBody(third, "1", `{"t":1}`)
	bad := pdpBody(other, "2", "") // config is empty: Check refuses it
	errored := catalogOf(t, o1)
	errored.Status = events.StatusErrored
	withSource := func(e *events.PolicyCatalogEntry, source string) *events.PolicyCatalogEntry {
		e.Source = source
		return e
	}
	admission := catalogOf(t, pdpBody(policy.AdmissionPrefix+"comp-1", "1", `{"s":1}`))

	cases := []struct {
		name     string
		pdp      []policy.Body
		catalog  []*events.PolicyCatalogEntry
		filter   string            // the catch-up's policyName; ".*" when empty
		share    float64           // the greatest share removed; 0.5 when 0
		want     map[string]string // policy_id → version named as loaded
		removed  []string          // policy_ids named as removed
		withheld string            // part of Withheld; "" for none
		reason   string            // part of the first difference's reason
	}{
		{name: "agrees", pdp: []policy.Body{v5, v222, o1}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1)}},
		{name: "missed notification: not in the catalog", pdp: []policy.Body{v5, o1}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, o1)},
			want: map[string]string{memID: "5"}, reason: "not in the catalog"},
		{name: "catalog behind", pdp: []policy.Body{v5, v222}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, v5)},
			want: map[string]string{memID: "222"}, reason: "the catalog holds version 5, the PDP 222"},
		{name: "withdrawn newest: catalog ahead", pdp: []policy.Body{v5}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222)},
			want: map[string]string{memID: "5"}, reason: "the catalog holds version 222, the PDP 5"},
		{name: "same version, other body", pdp: []policy.Body{o1edited}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, o1)},
			want: map[string]string{other: "1"}, reason: "differs from the PDP's"},
		{name: "PDP's latest invalid, catalog valid", pdp: []policy.Body{o1, bad}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, o1)},
			want: map[string]string{other: "2"}, reason: "is invalid"},
		{name: "both errored", pdp: []policy.Body{o1, bad}, catalog: []*events.PolicyCatalogEntry{errored}},
		{name: "catalog errored, PDP valid", pdp: []policy.Body{o1}, catalog: []*events.PolicyCatalogEntry{errored},
			want: map[string]string{other: "1"}, reason: "marks it errored"},
		{name: "entry the PDP agrees with is not read again for want of a source (every writer records one)", pdp: []policy.Body{o1}, catalog: []*events.PolicyCatalogEntry{withSource(catalogOf(t, o1), "")}},

		{name: "the PDP no longer lists a policy from it: removed", pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1)},
			removed: []string{other}, reason: "the PDP no longer lists it"},
		{name: "removed along with an update", pdp: []policy.Body{v222, t1},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v5), catalogOf(t, o1), catalogOf(t, t1)},
			want:    map[string]string{memID: "222"}, removed: []string{other}},
		{name: "outside the catch-up's filter: left alone", filter: `DCAE\.Config_VM_.*`, pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1)}},
		{name: "a bare policy_id filter covers only that policy", filter: other, pdp: []policy.Body{o1},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1)}},
		{name: "pushed policy the PDP never had is left alone", pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), withSource(catalogOf(t, pdpBody(pushed, "3", `{"x":"y"}`)), events.SourcePushed)}},
		{name: "entry without a recorded source is left alone", pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), withSource(catalogOf(t, o1), "")}},
		{name: "admission policies are never removed", pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), admission}},
		{name: "guard: more than the share at once removes nothing, updates still go", pdp: []policy.Body{v222},
			catalog:  []*events.PolicyCatalogEntry{catalogOf(t, v5), catalogOf(t, o1), catalogOf(t, t1)},
			want:     map[string]string{memID: "222"},
			withheld: "lacks 2 of the 3 catalog policies that came from it (67%), more than the 50%"},
		{name: "guard: a higher share lets it through", share: 0.7, pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1), catalogOf(t, t1)},
			removed: []string{other, third}},
		{name: "guard: pushed policies do not dilute the share", pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1), catalogOf(t, t1),
				withSource(catalogOf(t, pdpBody(pushed, "3", `{"x":"y"}`)), events.SourcePushed), admission},
			withheld: "lacks 2 of the 3"},
		{name: "guard: an empty answer removes nothing", pdp: nil, share: 1,
			catalog:  []*events.PolicyCatalogEntry{catalogOf(t, v222)},
			withheld: "the PDP listed no policy for .* while the catalog holds 1 from it"},
		{name: "guard: share 0 removes nothing", share: -1, pdp: []policy.Body{v222, o1},
			catalog:  []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, o1), catalogOf(t, t1)},
			withheld: "more than the 0% one catch-up may remove"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cat := map[string]*events.PolicyCatalogEntry{}
			for _, e := range tc.catalog {
				cat[e.PolicyID] = e
			}
			if tc.filter == "" {
				tc.filter = ".*"
			}
			filter, err := policy.CompileFilter(policy.Filter{PolicyName: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			switch tc.share {
			case 0:
				tc.share = 0.5
			case -1:
				tc.share = 0
			}
			now := time.Now().UTC()
			r := Reconcile(CatchupInput{Bodies: rawBodies(t, tc.pdp...), Catalog: cat, Filter: filter, MaxRemovalShare: tc.share, ID: "run-1", Now: now})
			if len(r.Notifications) != len(tc.want)+len(tc.removed) || r.Removed != len(tc.removed) {
				t.Fatalf("got %d notifications (%d removals), want %d updates and removals of %v: %+v", len(r.Notifications), r.Removed, len(tc.want), tc.removed, r.Differences)
			}
			if tc.withheld == "" && r.Withheld != "" || !strings.Contains(r.Withheld, tc.withheld) {
				t.Fatalf("withheld %q, want it to say %q", r.Withheld, tc.withheld)
			}
			withheld := 0
			for _, d := range r.Differences {
				if d.Remove && r.Withheld != "" {
					withheld++
				}
			}
			if r.updated() != len(tc.want) || r.withheldRemovals() != withheld {
				t.Fatalf("counted %d updates and %d withheld removals, want %d and %d", r.updated(), r.withheldRemovals(), len(tc.want), withheld)
			}
			var removed []string
			for _, k := range r.Notifications {
				n := k.Notification
				if n.Source != SourceCatchup {
					t.Fatalf("notification for %s from %q", k.PolicyID, n.Source)
				}
				if len(n.RemovedPolicies) > 0 {
					// The catalog's version, named as the PDP names a
					// removal.
					if len(n.LoadedPolicies) != 0 || len(n.RemovedPolicies) != 1 || n.RemovedPolicies[0].PolicyName != cat[k.PolicyID].PolicyName ||
						n.RemovedPolicies[0].VersionNo != cat[k.PolicyID].PolicyVersion {
						t.Fatalf("removal of %s: %+v, want its catalog version named as removed", k.PolicyID, n)
					}
					removed = append(removed, k.PolicyID)
				} else if v, ok := tc.want[k.PolicyID]; !ok || len(n.LoadedPolicies) != 1 || n.LoadedPolicies[0].VersionNo != v ||
					!strings.HasPrefix(n.LoadedPolicies[0].PolicyName, k.PolicyID+".") {
					t.Fatalf("notification for %s: %+v, want version %q of it loaded", k.PolicyID, n, v)
				}
				// The notification routes to its own policy_id without a
				// resend, as a PDP's would.
				r, err := RouteNotification([]byte(k.PolicyID), n)
				if err != nil || r.PolicyID != k.PolicyID || !r.AskPDP || len(r.Resend) != 0 {
					t.Fatalf("route of %+v: %+v, %v", n, r, err)
				}
			}
			if strings.Join(removed, ",") != strings.Join(tc.removed, ",") {
				t.Fatalf("removed %v, want %v", removed, tc.removed)
			}
			if tc.reason != "" && (len(r.Differences) == 0 || !strings.Contains(r.Differences[0].Reason, tc.reason)) {
				t.Fatalf("differences %+v: the first does not say %q", r.Differences, tc.reason)
			}
		})
	}
}

// A removal a catch-up sends is decided like the PDP's own: with no
// version left in the PDP the policy is tombstoned and a REMOVED change
// goes downstream; a policy the PDP still has is not removed.
func TestCatchupRemovalIsDecidedLikeAPDPRemoval(t *testing.T) {
	v5 := pdpBody(memID, "5", `{"min_memory":"2GB"}`)
	cur := catalogOf(t, v5)
	filter, _ := policy.CompileFilter(policy.Filter{PolicyName: ".*"})
	other := catalogOf(t, pdpBody("DCAE.Config_OTHER", "1", `{"a":1}`))
	r := Reconcile(CatchupInput{Bodies: rawBodies(t, pdpBody("DCAE.Config_OTHER", "1", `{"a":1}`)),
		Catalog: map[string]*events.PolicyCatalogEntry{memID: cur, other.PolicyID: other}, Filter: filter, MaxRemovalShare: 0.5, ID: "run-2", Now: time.Now()})
	if r.Removed != 1 || len(r.Notifications) != 1 {
		t.Fatalf("reconciliation %+v, want one removal", r)
	}
	route, err := RouteNotification([]byte(memID), r.Notifications[0].Notification)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		pdp    []policy.Body
		remove bool
	}{{"the PDP has no version left", nil, true}, {"the PDP still has it", []policy.Body{v5}, false}} {
		d, err := Decide(Request{Route: route, Current: cur, PDPBodies: rawBodies(t, tc.pdp...), Now: time.Now(), ChangeID: "c"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Remove != tc.remove || tc.remove && (d.Change == nil || d.Change.Action != events.ActionRemoved) || !tc.remove && d.Change != nil {
			t.Fatalf("%s: decision %+v, want removal %v", tc.name, d, tc.remove)
		}
	}
}
