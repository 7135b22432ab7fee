package executor

import (
	"reflect"
	"testing"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

func ver(s string) *string { return &s }

// hashed is p as the segmenter sends it: with its body_hash.
func hashed(p events.Policy) events.Policy {
	p.BodyHash = policy.BodyHash(p.Body)
	return p
}

// at is p at catalog revision rev.
func at(p events.Policy, rev int64) events.Policy {
	p.Revision = rev
	return p
}

func TestApply(t *testing.T) {
	changed := pol("A", "2")
	changed.Body = `{"policyName":"A.2.xml","policyVersion":"2","config":{"v":"other"}}`
	changed = hashed(changed)
	cases := []struct {
		name                      string
		current                   []events.Policy
		delta                     events.ComponentDelta
		collection, upd, removedW []string
	}{
		{
			name:       "first collection",
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{pol("B", "1"), pol("A", "3")}},
			collection: []string{"A@3", "B@1"}, upd: []string{"A@3", "B@1"}, removedW: []string{},
		},
		{
			name:       "newer version replaces",
			current:    []events.Policy{pol("A", "2"), pol("B", "1")},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{pol("A", "10")}},
			collection: []string{"A@10", "B@1"}, upd: []string{"A@10"}, removedW: []string{},
		},
		{
			name:       "lower version never replaces",
			current:    []events.Policy{pol("A", "10")},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{pol("A", "9")}},
			collection: []string{"A@10"}, upd: []string{}, removedW: []string{},
		},
		{
			name:       "revisions: a withdrawn newest version's older one, at a greater revision, replaces it",
			current:    []events.Policy{at(pol("A", "222"), 20)},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{at(pol("A", "5"), 30)}},
			collection: []string{"A@5"}, upd: []string{"A@5"}, removedW: []string{},
		},
		{
			name:       "revisions: a lower revision never replaces, whatever its version",
			current:    []events.Policy{at(pol("A", "5"), 30)},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{at(pol("A", "222"), 20)}},
			collection: []string{"A@5"}, upd: []string{}, removedW: []string{},
		},
		{
			name:    "revisions: a removal of an older revision is skipped",
			current: []events.Policy{at(pol("A", "5"), 30)},
			delta: events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{
				{PolicyID: "A", PolicyVersion: ver("222"), Revision: 20}}},
			collection: []string{"A@5"}, upd: []string{}, removedW: []string{},
		},
		{
			name:    "revisions: a removal of the revision held removes",
			current: []events.Policy{at(pol("A", "5"), 30)},
			delta: events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{
				{PolicyID: "A", PolicyVersion: ver("5"), Revision: 30}}},
			collection: []string{}, upd: []string{}, removedW: []string{"A@5"},
		},
		{
			name:       "same version and body_hash is no change",
			current:    []events.Policy{hashed(pol("A", "2"))},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{hashed(pol("A", "2"))}},
			collection: []string{"A@2"}, upd: []string{}, removedW: []string{},
		},
		{
			name:       "same version with another body_hash is taken (catch-up correction)",
			current:    []events.Policy{hashed(pol("A", "2"))},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{hashed(changed)}},
			collection: []string{"A@2"}, upd: []string{"A@2"}, removedW: []string{},
		},
		{
			name:    "added by filters",
			current: []events.Policy{pol("A", "1")},
			delta: events.ComponentDelta{AddedPolicies: []events.FilterMatch{
				{FilterID: "f1", Policies: []events.Policy{pol("C", "1")}},
				{FilterID: "f2", Policies: []events.Policy{pol("C", "1"), pol("D", "7")}},
			}},
			collection: []string{"A@1", "C@1", "D@7"}, upd: []string{"C@1", "D@7"}, removedW: []string{},
		},
		{
			name:       "removal",
			current:    []events.Policy{pol("A", "1"), pol("B", "4")},
			delta:      events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B", PolicyVersion: ver("4")}, {PolicyID: "missing"}}},
			collection: []string{"A@1"}, upd: []string{}, removedW: []string{"B@4"},
		},
		{
			name:       "removal of an older version is skipped",
			current:    []events.Policy{pol("B", "5")},
			delta:      events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B", PolicyVersion: ver("4")}}},
			collection: []string{"B@5"}, upd: []string{}, removedW: []string{},
		},
		{
			name:       "removal without version removes",
			current:    []events.Policy{pol("B", "5")},
			delta:      events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B"}}},
			collection: []string{}, upd: []string{}, removedW: []string{"B@5"},
		},
		{
			name:    "remove then re-add in one delta ends with the policy",
			current: []events.Policy{pol("B", "5")},
			delta: events.ComponentDelta{
				RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B", PolicyVersion: ver("5")}},
				UpdatedPolicies: []events.Policy{pol("B", "6")},
			},
			collection: []string{"B@6"}, upd: []string{"B@6"}, removedW: []string{},
		},
		{
			name:       "remove then re-add the same policy is no change",
			current:    []events.Policy{pol("B", "5")},
			delta:      events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B"}}, UpdatedPolicies: []events.Policy{pol("B", "5")}},
			collection: []string{"B@5"}, upd: []string{}, removedW: []string{},
		},
		{
			name:       "integer versions compare as numbers",
			current:    []events.Policy{pol("A", "9")},
			delta:      events.ComponentDelta{UpdatedPolicies: []events.Policy{pol("A", "10")}},
			collection: []string{"A@10"}, upd: []string{"A@10"}, removedW: []string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]events.Policy(nil), tc.current...)
			coll, upd, rem := Apply(tc.current, tc.delta)
			if got := ids(coll); !reflect.DeepEqual(got, tc.collection) {
				t.Errorf("collection %v, want %v", got, tc.collection)
			}
			if got := ids(upd); !reflect.DeepEqual(got, tc.upd) {
				t.Errorf("updated %v, want %v", got, tc.upd)
			}
			if got := ids(rem); !reflect.DeepEqual(got, tc.removedW) {
				t.Errorf("removed %v, want %v", got, tc.removedW)
			}
			if !reflect.DeepEqual(before, tc.current) {
				t.Errorf("Apply changed its input collection")
			}
		})
	}
}

func TestApplyRemovedCarriesLastBody(t *testing.T) {
	cur := []events.Policy{pol("B", "5")}
	_, _, rem := Apply(cur, events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B"}}})
	if len(rem) != 1 || rem[0] != cur[0] {
		t.Fatalf("removed %+v, want the last body %+v", rem, cur[0])
	}
}

func TestCheckDelta(t *testing.T) {
	bad := []events.ComponentDelta{
		{UpdatedPolicies: []events.Policy{{PolicyName: "x", Body: "{}"}}},
		{UpdatedPolicies: []events.Policy{{PolicyID: "x"}}},
		{AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{{Body: "{}"}}}}},
		{RemovedPolicies: []events.RemovedPolicy{{}}},
		{UpdatedPolicies: []events.Policy{{PolicyID: "x", Body: "{}"}}},
		{AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{{PolicyID: "x", Body: "{}"}}}}},
	}
	for i, d := range bad {
		if err := checkDelta(d); err == nil {
			t.Errorf("delta %d accepted: %+v", i, d)
		}
	}
	if err := checkDelta(events.ComponentDelta{UpdatedPolicies: []events.Policy{pol("A", "1")}}); err != nil {
		t.Errorf("good delta refused: %v", err)
	}
}
