package matcher

import (
	"reflect"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// TestPreview: a change previewed on components and what they have gives
// the deltas the stage's OnChange gives for the same state: an update for
// a holder by id, an addition for a filter that matches the new version,
// a removal for a holder whose filter no longer matches; a tenant's
// policy goes to no other tenant's component.
func TestPreview(t *testing.T) {
	const id = "DCAE.Config_P"
	cur := catalogEntry(id, "1", map[string]any{"ONAPName": "DCAE", "ConfigName": "a"})
	ch := updated(id, "1", "2", map[string]any{"ONAPName": "DCAE", "ConfigName": "b"})
	f := func(configName string) events.PolicyFilter {
		x := filter("f", "DCAE.Config_.*", "")
		x.ConfigName = configName
		return x
	}
	other := comp("c-other", "d", []string{id})
	other.Tenant = "t2"
	comps := []*events.Component{comp("c-id", "d", []string{id}), comp("c-b", "d", nil, f("b")), comp("c-a", "d", nil, f("a")), other}
	h := headerOf(cur.Body)
	held := func(cid string) *events.ComponentPolicies {
		return &events.ComponentPolicies{ComponentID: cid, DeploymentID: "d", Policies: []events.Policy{{PolicyID: id, PolicyVersion: "1", BodyHash: h.BodyHash}}}
	}
	has := map[string]*events.ComponentPolicies{"c-id": held("c-id"), "c-a": held("c-a")}
	ds, err := Preview(ownedEntry("t1", catalogEntry(id, "1", map[string]any{"ONAPName": "DCAE", "ConfigName": "a"})), ownedChange("t1", updated(id, "1", "2", map[string]any{"ONAPName": "DCAE", "ConfigName": "b"})), comps, has)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range ds {
		switch {
		case len(d.AddedPolicies) > 0:
			got[d.ComponentID] = "added"
		case len(d.UpdatedPolicies) > 0:
			got[d.ComponentID] = "updated " + d.UpdatedPolicies[0].PolicyVersion
		case len(d.RemovedPolicies) > 0:
			got[d.ComponentID] = "removed " + *d.RemovedPolicies[0].PolicyVersion
		}
	}
	// Tenant t1's policy: none of these components may hold it
	// (policy.MayHold), and those that have it lose it.
	if want := map[string]string{"c-id": "removed 1", "c-a": "removed 1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("t1's policy previewed on global components and t2's: %v, want %v", got, want)
	}
	ds, err = Preview(cur, ch, comps, has)
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]string{}
	for _, d := range ds {
		switch {
		case len(d.AddedPolicies) > 0:
			got[d.ComponentID] = "added"
		case len(d.UpdatedPolicies) > 0:
			got[d.ComponentID] = "updated " + d.UpdatedPolicies[0].PolicyVersion
		case len(d.RemovedPolicies) > 0:
			got[d.ComponentID] = "removed " + *d.RemovedPolicies[0].PolicyVersion
		}
	}
	want := map[string]string{"c-id": "updated 2", "c-b": "added", "c-a": "removed 1", "c-other": "added"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("preview: %v, want %v", got, want)
	}
}
