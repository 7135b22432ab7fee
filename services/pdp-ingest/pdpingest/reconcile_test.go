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
	e, _ := entry(c, "", time.Now())
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
	v5 := pdpBody(memID, "5", `{"min_memory":"2GB"}`)
	v222 := pdpBody(memID, "222", `{"min_memory":"8GB"}`)
	o1 := pdpBody(other, "1", `{"a":"b"}`)
	o1edited := pdpBody(other, "1", `{"a":"c"}`)
	bad := pdpBody(other, "2", "") // config is empty: Check refuses it
	errored := catalogOf(t, o1)
	errored.Status = events.StatusErrored

	cases := []struct {
		name    string
		pdp     []policy.Body
		catalog []*events.PolicyCatalogEntry
		want    map[string]string // policy_id → version named as loaded
		reason  string            // part of the first difference's reason
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
		{name: "pushed policy the PDP never had is left alone", pdp: []policy.Body{v222},
			catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222), catalogOf(t, pdpBody(pushed, "3", `{"x":"y"}`))}},
		{name: "PDP's latest invalid, catalog valid", pdp: []policy.Body{o1, bad}, catalog: []*events.PolicyCatalogEntry{catalogOf(t, o1)},
			want: map[string]string{other: "2"}, reason: "is invalid"},
		{name: "both errored", pdp: []policy.Body{o1, bad}, catalog: []*events.PolicyCatalogEntry{errored}},
		{name: "catalog errored, PDP valid", pdp: []policy.Body{o1}, catalog: []*events.PolicyCatalogEntry{errored},
			want: map[string]string{other: "1"}, reason: "marks it errored"},
		{name: "PDP has nothing", pdp: nil, catalog: []*events.PolicyCatalogEntry{catalogOf(t, v222)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cat := map[string]*events.PolicyCatalogEntry{}
			for _, e := range tc.catalog {
				cat[e.PolicyID] = e
			}
			now := time.Now().UTC()
			keyed, diffs := Reconcile(rawBodies(t, tc.pdp...), cat, "run-1", now)
			if len(keyed) != len(tc.want) || len(diffs) != len(tc.want) {
				t.Fatalf("got %d notifications and %d differences, want %d: %+v", len(keyed), len(diffs), len(tc.want), diffs)
			}
			for _, k := range keyed {
				v, ok := tc.want[k.PolicyID]
				n := k.Notification
				if !ok || len(n.LoadedPolicies) != 1 || n.LoadedPolicies[0].VersionNo != v || n.Source != SourceCatchup ||
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
			if tc.reason != "" && !strings.Contains(diffs[0].Reason, tc.reason) {
				t.Fatalf("reason %q does not say %q", diffs[0].Reason, tc.reason)
			}
		})
	}
}
