package policyapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/pdp-ingest/pdpingest"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/rollout"
)

// checkedBody is a pushed body of DCAE.Config_X at version v with
// matchingConditions mc and config cfg, as policy.Check accepts it.
func checkedBody(t *testing.T, v int, mc map[string]any, cfg map[string]any) policy.Checked {
	t.Helper()
	b, _ := json.Marshal(map[string]any{
		"policyName": fmt.Sprintf("DCAE.Config_X.%d.xml", v), "policyVersion": fmt.Sprint(v),
		"policyConfigStatus": "CONFIG_RETRIEVED", "matchingConditions": mc, "config": cfg,
	})
	c, err := policy.Check(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// loadedEntry is the catalog view's entry of c.
func loadedEntry(c policy.Checked, rev int64) *catalogEntry {
	return &catalogEntry{PolicyID: c.PolicyID, PolicyName: c.PolicyName, PolicyVersion: c.PolicyVersion, Status: events.StatusValid,
		Body: c.JSON, BodyHash: c.Header().BodyHash, Revision: rev, source: events.SourcePushed, updatedAt: time.Unix(1, 0)}
}

func whatIfComp(id, tenant string, ids []string, filters ...events.PolicyFilter) *events.Component {
	if filters == nil {
		filters = []events.PolicyFilter{}
	}
	return &events.Component{ComponentID: id, DeploymentID: "dep-" + id, ServiceComponentName: "scn-" + id, Tenant: tenant,
		PolicyIDs: ids, PolicyFilters: filters, Generation: 1}
}

// holding says component has version v (of body c) in Consul.
func holding(c policy.Checked) *appliedState {
	return &appliedState{Policies: map[string]appliedPolicy{c.PolicyID: {Version: c.PolicyVersion, BodyHash: c.Header().BodyHash}}}
}

// TestWhatIfOfAPush: a push of version 6 over the loaded 5 is decided
// and matched as pdp-ingest and the matcher would: a holder by id is
// updated, a component whose filter matches the new conditions is added,
// one whose filter matched only the old conditions loses it, one that
// holds the new version already is unchanged, one that never matched is
// left out; the diff names the changed fields.
func TestWhatIfOfAPush(t *testing.T) {
	v5 := checkedBody(t, 5, map[string]any{"ONAPName": "DCAE", "ConfigName": "old"}, map[string]any{"limit": 1})
	v6 := checkedBody(t, 6, map[string]any{"ONAPName": "DCAE", "ConfigName": "new"}, map[string]any{"limit": 2})
	loaded := loadedEntry(v5, 10)
	comps := []*events.Component{
		whatIfComp("c-byid", "", []string{"DCAE.Config_X"}),
		whatIfComp("c-new", "", nil, events.PolicyFilter{FilterID: "f", PolicyName: "DCAE.Config_.*", ConfigName: "new"}),
		whatIfComp("c-old", "", nil, events.PolicyFilter{FilterID: "f", PolicyName: "DCAE.Config_.*", ConfigName: "old"}),
		whatIfComp("c-has6", "", []string{"DCAE.Config_X"}),
		whatIfComp("c-other", "", []string{"DCAE.Other"}),
	}
	applied := map[string]*appliedState{"c-byid": holding(v5), "c-old": holding(v5), "c-has6": holding(v6)}
	out := newWhatIf()
	out.PolicyID, out.Version = v6.PolicyID, v6.PolicyVersion
	out.diff(loaded.Body, v6.JSON, false)
	whatIfOf(&out, loaded, pdpingest.Request{Route: pdpingest.Route{PolicyID: v6.PolicyID, Pushed: []policy.Checked{v6}}, Now: time.Unix(2, 0), ChangeID: "x"},
		comps, func(id string) (*appliedState, bool) { a, ok := applied[id]; return a, ok })
	five := "5"
	want := []WhatIfComponent{
		{ComponentID: "c-byid", ServiceComponentName: "scn-c-byid", DeploymentID: "dep-c-byid", Change: ChangeUpdated, FromVersion: &five},
		{ComponentID: "c-new", ServiceComponentName: "scn-c-new", DeploymentID: "dep-c-new", Change: ChangeAdded},
		{ComponentID: "c-old", ServiceComponentName: "scn-c-old", DeploymentID: "dep-c-old", Change: ChangeRemoved, FromVersion: &five},
	}
	if !reflect.DeepEqual(out.Components, want) || out.Count != 3 || out.Unchanged != 1 || len(out.Refused) != 0 {
		t.Errorf("what-if: %+v", out)
	}
	var paths []string
	for _, op := range out.Diff {
		paths = append(paths, op.Op+" "+op.Path)
	}
	wantPaths := []string{"replace /config/limit", "replace /matchingConditions/ConfigName", "replace /policyName", "replace /policyVersion"}
	if !reflect.DeepEqual(paths, wantPaths) {
		t.Errorf("diff %v, want %v", paths, wantPaths)
	}
}

// TestWhatIfOfRefusedByPDPIngest: the same version with another body is
// what pdp-ingest refuses; the what-if says so and changes nothing.
func TestWhatIfOfRefusedByPDPIngest(t *testing.T) {
	v5 := checkedBody(t, 5, map[string]any{"ONAPName": "DCAE"}, map[string]any{"limit": 1})
	v5b := checkedBody(t, 5, map[string]any{"ONAPName": "DCAE"}, map[string]any{"limit": 9})
	out := newWhatIf()
	out.PolicyID = v5.PolicyID
	whatIfOf(&out, loadedEntry(v5, 3), pdpingest.Request{Route: pdpingest.Route{PolicyID: v5.PolicyID, Pushed: []policy.Checked{v5b}}},
		[]*events.Component{whatIfComp("c1", "", []string{"DCAE.Config_X"})}, func(string) (*appliedState, bool) { return holding(v5), true })
	if len(out.Refused) != 1 || out.Refused[0].By != ByPDPIngest || out.Count != 0 || out.Unchanged != 1 {
		t.Errorf("what-if: %+v", out)
	}
}

// TestWhatIfOfATenant: a tenant's what-if holds only its components
// (visibleComponents), and a tenant's component never gets another
// tenant's policy.
func TestWhatIfOfATenant(t *testing.T) {
	v1 := checkedBody(t, 1, map[string]any{"ONAPName": "DCAE"}, map[string]any{"limit": 1})
	all := []*events.Component{
		whatIfComp("a-t1", "t1", []string{"DCAE.Config_X"}),
		whatIfComp("b-t2", "t2", []string{"DCAE.Config_X"}),
		whatIfComp("c-global", "", []string{"DCAE.Config_X"}),
	}
	run := func(p auth.Principal) []string {
		out := newWhatIf()
		out.PolicyID = v1.PolicyID
		whatIfOf(&out, nil, pdpingest.Request{Route: pdpingest.Route{PolicyID: v1.PolicyID, Pushed: []policy.Checked{v1}}},
			visibleComponents(p, all), func(string) (*appliedState, bool) { return nil, false })
		var ids []string
		for _, c := range out.Components {
			ids = append(ids, c.ComponentID)
		}
		return ids
	}
	if got := run(auth.Principal{Name: "t2", Role: auth.RoleTenant, Tenant: "t2"}); !reflect.DeepEqual(got, []string{"b-t2"}) {
		t.Errorf("tenant t2 sees %v, want only b-t2", got)
	}
	if got := run(auth.Principal{Name: "op", Role: auth.RoleOperator}); !reflect.DeepEqual(got, []string{"a-t1", "b-t2", "c-global"}) {
		t.Errorf("an operator sees %v, want every component", got)
	}
}

// BenchmarkWhatIfOf is a what-if over 10,000 components: half want the
// policy by policy_id and hold the loaded version, half select it through
// one of 100 filters.
func BenchmarkWhatIfOf(b *testing.B) {
	t := &testing.T{}
	v5 := checkedBody(t, 5, map[string]any{"ONAPName": "DCAE", "ConfigName": "c7"}, map[string]any{"limit": 1})
	v6 := checkedBody(t, 6, map[string]any{"ONAPName": "DCAE", "ConfigName": "c7"}, map[string]any{"limit": 2})
	loaded := loadedEntry(v5, 10)
	var comps []*events.Component
	applied := map[string]*appliedState{}
	for i := range 10000 {
		id := fmt.Sprintf("c%05d", i)
		if i%2 == 0 {
			comps = append(comps, whatIfComp(id, "", []string{v5.PolicyID}))
			applied[id] = holding(v5)
			continue
		}
		comps = append(comps, whatIfComp(id, "", nil, events.PolicyFilter{FilterID: "f", PolicyName: "DCAE.Config_.*", ConfigName: fmt.Sprintf("c%d", i%100)}))
	}
	req := pdpingest.Request{Route: pdpingest.Route{PolicyID: v6.PolicyID, Pushed: []policy.Checked{v6}}, Now: time.Unix(2, 0), ChangeID: "x"}
	b.ResetTimer()
	for range b.N {
		out := newWhatIf()
		out.PolicyID = v6.PolicyID
		whatIfOf(&out, loaded, req, comps, func(id string) (*appliedState, bool) { a, ok := applied[id]; return a, ok })
		if out.Count != 5000+100 {
			b.Fatalf("count %d", out.Count)
		}
	}
}

// TestWhatIfOfANotificationForATenantsPolicy: a PDP notification may not
// change a tenant's policy; pdp-ingest's refusal is in the what-if.
func TestWhatIfOfANotificationForATenantsPolicy(t *testing.T) {
	v1 := checkedBody(t, 1, map[string]any{"ONAPName": "DCAE"}, map[string]any{"limit": 1})
	loaded := loadedEntry(v1, 2)
	loaded.Tenant = "t1"
	b, err := pdpBody(policy.LoadedPolicy{PolicyName: "DCAE.Config_X.2.xml", VersionNo: "2", Matches: map[string]string{"ONAPName": "DCAE"}}, loaded)
	if err != nil {
		t.Fatal(err)
	}
	out := newWhatIf()
	out.PolicyID = v1.PolicyID
	whatIfOf(&out, loaded, pdpingest.Request{Route: pdpingest.Route{PolicyID: v1.PolicyID, AskPDP: true}, PDPBodies: []json.RawMessage{loaded.Body, b}},
		[]*events.Component{whatIfComp("c1", "t1", []string{v1.PolicyID})}, func(string) (*appliedState, bool) { return holding(v1), true })
	if len(out.Refused) != 1 || out.Refused[0].By != ByPDPIngest || !strings.Contains(out.Refused[0].Reason, `belongs to tenant "t1"`) || out.Count != 0 {
		t.Errorf("what-if: %+v", out)
	}
}

// TestFirstCohortNamesItsComponents: a planned what-if names the
// components of the first step (the first MaxCohortIDs by component_id)
// and counts them all; a component losing the policy is not among them.
func TestFirstCohortNamesItsComponents(t *testing.T) {
	steps := []float64{0.5, 1}
	var comps []WhatIfComponent
	var want []string
	for i := 0; i < 500; i++ {
		id := fmt.Sprintf("c%04d", i)
		change := ChangeUpdated
		if i%50 == 0 {
			change = ChangeRemoved
		}
		comps = append(comps, WhatIfComponent{ComponentID: id, Change: change})
		if change != ChangeRemoved && rollout.InCohort(id, steps, 0) {
			want = append(want, id)
		}
	}
	first, changing := firstCohort(comps, steps)
	if changing != 490 || first.Count != len(want) || len(want) <= MaxCohortIDs || !first.Truncated ||
		!reflect.DeepEqual(first.ComponentIDs, want[:MaxCohortIDs]) {
		t.Fatalf("first cohort %+v of %d changing, want %d components, the first %d named", first, changing, len(want), MaxCohortIDs)
	}
	first, _ = firstCohort(comps[:20], steps)
	if first.Truncated || first.Count != len(first.ComponentIDs) || first.Count == 0 {
		t.Fatalf("first cohort of 20 components %+v", first)
	}
}
