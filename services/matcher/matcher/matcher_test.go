package matcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// t0 is when the tests' catalogs were read; changes come after it.
var t0 = time.Date(2018, 8, 27, 10, 0, 0, 0, time.UTC)

// policyBody is a policy_body as the PDP returns it from /getConfig.
func policyBody(id, version string, mc map[string]any, config map[string]any) string {
	if config == nil {
		config = map[string]any{"v": version}
	}
	b := map[string]any{
		"policyName":          id + "." + version + ".xml",
		"policyVersion":       version,
		"policyConfigStatus":  "CONFIG_RETRIEVED",
		"policyConfigMessage": "Config Retrieved! ",
		"type":                "JSON",
		"config":              config,
		"responseAttributes":  map[string]any{},
		"property":            nil,
	}
	if mc != nil {
		b["matchingConditions"] = mc
	}
	data, err := json.Marshal(b)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func catalogEntry(id, version string, mc map[string]any) *events.PolicyCatalogEntry {
	return &events.PolicyCatalogEntry{
		PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version,
		Body: policyBody(id, version, mc, nil), Status: events.StatusValid, UpdatedAt: t0,
	}
}

var changeSeq int

func strp(s string) *string { return &s }

// headerOf is the header pdp-ingest gives a body.
func headerOf(body string) policy.Header {
	h, err := policy.HeaderOf(body)
	if err != nil {
		panic(err)
	}
	return h
}

// updated is an UPDATED change as pdp-ingest writes it: the new version's
// header, no body.
func updated(id, old, version string, mc map[string]any) *events.PolicyChange {
	changeSeq++
	h := headerOf(policyBody(id, version, mc, nil))
	ch := &events.PolicyChange{
		ChangeID: fmt.Sprintf("ch-%d", changeSeq), PolicyID: id, Action: events.ActionUpdated,
		NewVersion: strp(version), PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash,
		ChangedAt: t0.Add(time.Duration(changeSeq) * time.Second),
	}
	if old != "" {
		ch.OldVersion = strp(old)
	}
	return ch
}

// changedAt is ch changed at t.
func changedAt(ch *events.PolicyChange, t time.Time) *events.PolicyChange {
	ch.ChangedAt = t
	return ch
}

func removed(id, old string) *events.PolicyChange {
	changeSeq++
	return &events.PolicyChange{
		ChangeID: fmt.Sprintf("ch-%d", changeSeq), PolicyID: id, Action: events.ActionRemoved,
		OldVersion: strp(old), ChangedAt: t0.Add(time.Duration(changeSeq) * time.Second),
	}
}

// atRev is ch at catalog revision rev.
func atRev(ch *events.PolicyChange, rev int64) *events.PolicyChange {
	ch.Revision = rev
	return ch
}

// entryAt is a catalog entry at catalog revision rev.
func entryAt(e *events.PolicyCatalogEntry, rev int64) *events.PolicyCatalogEntry {
	e.Revision = rev
	return e
}

func errored(id, old string) *events.PolicyChange {
	changeSeq++
	return &events.PolicyChange{
		ChangeID: fmt.Sprintf("ch-%d", changeSeq), PolicyID: id, Action: events.ActionErrored,
		OldVersion: strp(old), Error: strp("policyConfigStatus is CONFIG_NOT_FOUND"),
		ChangedAt: t0.Add(time.Duration(changeSeq) * time.Second),
	}
}

func filter(id, policyName string, attrs string) events.PolicyFilter {
	if attrs == "" {
		attrs = "{}"
	}
	return events.PolicyFilter{FilterID: id, PolicyName: policyName, ConfigAttributes: attrs}
}

func comp(id, dep string, ids []string, filters ...events.PolicyFilter) *events.Component {
	return &events.Component{
		ComponentID: id, DeploymentID: dep, ServiceComponentName: "scn-" + id,
		PolicyIDs: ids, PolicyFilters: filters, Config: "{}", UpdatedAt: t0,
		Notify: events.NotifyTarget{Kind: events.NotifyNone},
	}
}

// ownedEntry, ownedChange and ofTenant give a catalog entry, a change
// and a component to tenant.
func ownedEntry(tenant string, e *events.PolicyCatalogEntry) *events.PolicyCatalogEntry {
	e.Tenant = tenant
	return e
}

func ownedChange(tenant string, ch *events.PolicyChange) *events.PolicyChange {
	ch.Tenant = tenant
	return ch
}

func ofTenant(tenant string, c *events.Component) *events.Component {
	c.Tenant = tenant
	return c
}

func collection(id, dep string, policies ...events.Policy) *events.ComponentPolicies {
	return &events.ComponentPolicies{ComponentID: id, DeploymentID: dep, Policies: policies, UpdatedAt: t0,
		Notify: events.NotifyTarget{Kind: events.NotifyNone}}
}

// pol is a policy of a collection as the executor writes it.
func pol(id, version string, mc map[string]any) events.Policy {
	b := policyBody(id, version, mc, nil)
	return events.Policy{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version, Body: b, BodyHash: policy.BodyHash(b)}
}

// render writes matches the way an operator reads them: one line per
// component delta, "<deployment> <component>[ catch-up][ uninstall]" then "+filter:P@v"
// for added, "~P@v" for updated and "-P@v" for removed policies ("=" for
// an empty delta).
func render(ms []events.PolicyMatch) []string {
	var out []string
	for _, m := range ms {
		for _, d := range m.Components {
			line := m.DeploymentID + " " + d.ComponentID
			if m.CatchUp {
				line += " catch-up"
			}
			if d.Uninstall {
				line += " uninstall"
			}
			n := 0
			for _, r := range d.RemovedPolicies {
				v := "?"
				if r.PolicyVersion != nil {
					v = *r.PolicyVersion
				}
				line += " -" + r.PolicyID + "@" + v
				n++
			}
			for _, u := range d.UpdatedPolicies {
				line += " ~" + u.PolicyID + "@" + u.PolicyVersion
				n++
			}
			for _, a := range d.AddedPolicies {
				for _, p := range a.Policies {
					line += " +" + a.FilterID + ":" + p.PolicyID + "@" + p.PolicyVersion
					n++
				}
			}
			if n == 0 {
				line += " ="
			}
			out = append(out, line)
		}
	}
	return out
}

type step struct {
	name    string
	do      func(m *Matcher) ([]events.PolicyMatch, error)
	want    []string
	wantErr string // substring of the refusal
}

func onChange(ch *events.PolicyChange) func(*Matcher) ([]events.PolicyMatch, error) {
	return func(m *Matcher) ([]events.PolicyMatch, error) { return m.OnChange(0, ch) }
}

func onComponent(c *events.Component) func(*Matcher) ([]events.PolicyMatch, error) {
	return func(m *Matcher) ([]events.PolicyMatch, error) { return m.OnComponent(0, c.ComponentID, c) }
}

func onTombstone(id string) func(*Matcher) ([]events.PolicyMatch, error) {
	return func(m *Matcher) ([]events.PolicyMatch, error) { return m.OnComponent(0, id, nil) }
}

func onCatchup(dep string) func(*Matcher) ([]events.PolicyMatch, error) {
	return func(m *Matcher) ([]events.PolicyMatch, error) {
		req := &events.CatchupRequest{RequestID: "cu", Scope: events.ScopeAll, Reason: "test", RequestedAt: t0}
		if dep != "" {
			req.Scope, req.DeploymentID = events.ScopeDeployment, &dep
		}
		return m.OnCatchup(0, req)
	}
}

// setup is the state before a scenario's steps: catalog records, component
// definitions and collections as restored from Kafka.
type setup struct {
	catalog []*events.PolicyCatalogEntry
	comps   []*events.Component
	has     []*events.ComponentPolicies
}

func newMatcher(t *testing.T, s setup) *Matcher {
	t.Helper()
	m := New()
	n := 0
	m.NewID = func() string { n++; return fmt.Sprintf("u%d", n) }
	m.Now = func() time.Time { return t0 }
	for _, e := range s.catalog {
		if err := m.ApplyCatalog(e.PolicyID, e, t0); err != nil {
			t.Fatalf("apply catalog %s: %v", e.PolicyID, err)
		}
	}
	p := NewPartition()
	for _, c := range s.comps {
		_ = p.Restore(c.ComponentID, c) // a refused definition is a case under test
	}
	for _, h := range s.has {
		p.RestoreHas(h.ComponentID, h)
	}
	m.Assign(0, p)
	return m
}

const (
	memID  = "DCAE.Config_VM_MEMORY"
	storID = "DCAE.Config_VM_STORAGE"
	multiA = "DCAE.Config_multi_A"
	multiB = "DCAE.Config_multi_B"
	other  = "ONAP.Config_other"
	// The admission stage's settings policies of two tenants.
	globexSettings = "admission.dep-globex.web"
	acmeSettings   = "admission.dep-acme.web"
)

var (
	kv1 = map[string]any{"ONAPName": "DCAE", "key1": "value1"}
	kv2 = map[string]any{"ONAPName": "DCAE", "key1": "value2"}
)

func TestMatcherScenarios(t *testing.T) {
	dcaeFilter := filter("storage_policies", "DCAE.Config_.*", `{"key1": "value1"}`)
	tests := []struct {
		name  string
		setup setup
		steps []step
	}{
		{
			name: "seed: component wanting DCAE.Config_VM_MEMORY by id gets 5, then 222 as updated",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil)},
			},
			steps: []step{
				{name: "install gathers version 5", do: onComponent(comp("vm_2_9d982", "alex-game_depl", []string{memID})),
					want: []string{"alex-game_depl vm_2_9d982 +policy_ids:DCAE.Config_VM_MEMORY@5"}},
				{name: "policy-update to 222", do: onChange(updated(memID, "5", "222", nil)),
					want: []string{"alex-game_depl vm_2_9d982 ~DCAE.Config_VM_MEMORY@222"}},
				{name: "the same change delivered again", do: onChange(updated(memID, "5", "222", nil))},
				{name: "an older change delivered late", do: onChange(updated(memID, "4", "5", nil))},
			},
		},
		{
			name: "seed: restored component that has 5 gets 222 as updated",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil)},
				comps:   []*events.Component{comp("vm_2_9d982", "alex-game_depl", []string{memID})},
				has:     []*events.ComponentPolicies{collection("vm_2_9d982", "alex-game_depl", pol(memID, "5", nil))},
			},
			steps: []step{
				{name: "policy-update to 222", do: onChange(updated(memID, "5", "222", nil)),
					want: []string{"alex-game_depl vm_2_9d982 ~DCAE.Config_VM_MEMORY@222"}},
				{name: "a catch-up finds nothing to do", do: onCatchup("")},
			},
		},
		{
			name: "revisions: the newest version withdrawn, the remaining older one comes back as an update",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{entryAt(catalogEntry(memID, "5", nil), 10)},
			},
			steps: []step{
				{name: "install gathers version 5", do: onComponent(comp("c1", "d1", []string{memID})),
					want: []string{"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@5"}},
				{name: "222 at revision 20", do: onChange(atRev(updated(memID, "5", "222", nil), 20)),
					want: []string{"d1 c1 ~DCAE.Config_VM_MEMORY@222"}},
				{name: "222 withdrawn: 5 again at revision 30", do: onChange(atRev(updated(memID, "222", "5", nil), 30)),
					want: []string{"d1 c1 ~DCAE.Config_VM_MEMORY@5"}},
				{name: "a lagging copy of the change to 222 changes nothing", do: onChange(atRev(updated(memID, "5", "222", nil), 20))},
				{name: "a removal older than the version in force changes nothing", do: onChange(atRev(removed(memID, "222"), 25))},
				{name: "a newer removal removes", do: onChange(atRev(removed(memID, "5"), 40)),
					want: []string{"d1 c1 -DCAE.Config_VM_MEMORY@5"}},
				{name: "a change decided before the removal does not bring it back", do: onChange(atRev(updated(memID, "5", "223", nil), 35))},
				{name: "a later change does", do: onChange(atRev(updated(memID, "", "223", nil), 50)),
					want: []string{"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@223"}},
			},
		},
		{
			name: "tenants: a component gets global policies and its tenant's, never another tenant's, by id or by filter",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{
					catalogEntry(memID, "5", nil),
					ownedEntry("globex", catalogEntry(globexSettings, "1", nil)),
				},
			},
			steps: []step{
				{name: "acme asks for everything and for globex's settings by id: global only",
					do:   onComponent(ofTenant("acme", comp("acme-c", "acme-d", []string{globexSettings}, filter("all", ".*", "")))),
					want: []string{"acme-d acme-c +all:DCAE.Config_VM_MEMORY@5"}},
				{name: "globex asks for everything: global and its own",
					do:   onComponent(ofTenant("globex", comp("globex-c", "globex-d", nil, filter("all", ".*", "")))),
					want: []string{"globex-d globex-c +all:DCAE.Config_VM_MEMORY@5 +all:admission.dep-globex.web@1"}},
				{name: "a new version of globex's settings goes to globex only",
					do:   onChange(ownedChange("globex", updated(globexSettings, "1", "2", nil))),
					want: []string{"globex-d globex-c ~admission.dep-globex.web@2"}},
				{name: "acme's own settings go to acme only",
					do:   onChange(ownedChange("acme", updated(acmeSettings, "", "1", nil))),
					want: []string{"acme-d acme-c +all:admission.dep-acme.web@1"}},
				{name: "a catch-up finds nothing to do", do: onCatchup("")},
				{name: "a component with no tenant gets global policies only",
					do:   onComponent(comp("ops-c", "ops-d", []string{acmeSettings}, filter("all", ".*", ""))),
					want: []string{"ops-d ops-c +all:DCAE.Config_VM_MEMORY@5"}},
			},
		},
		{
			name: "tenants: a restored component caught up gets no other tenant's policy",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{
					catalogEntry(memID, "5", nil),
					ownedEntry("globex", catalogEntry(globexSettings, "1", nil)),
				},
				comps: []*events.Component{ofTenant("acme", comp("acme-c", "acme-d", []string{globexSettings}, filter("all", ".*", "")))},
				has:   []*events.ComponentPolicies{collection("acme-c", "acme-d", pol(globexSettings, "1", nil))},
			},
			steps: []step{
				{name: "the catch-up takes globex's settings away and gives the global policy", do: onCatchup(""),
					want: []string{"acme-d acme-c catch-up -admission.dep-globex.web@1 +all:DCAE.Config_VM_MEMORY@5"}},
			},
		},
		{
			name: "filter policyName DCAE.Config_.* with configAttributes gains and loses policies",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{
					catalogEntry(multiA, "1", kv1),
					catalogEntry(multiB, "1", kv2),
					catalogEntry(other, "1", kv1),
				},
			},
			steps: []step{
				{name: "install selects only the policy whose matchingConditions match", do: onComponent(comp("c1", "d1", nil, dcaeFilter)),
					want: []string{"d1 c1 +storage_policies:DCAE.Config_multi_A@1"}},
				{name: "B's new version now has key1=value1: gained", do: onChange(updated(multiB, "1", "2", kv1)),
					want: []string{"d1 c1 +storage_policies:DCAE.Config_multi_B@2"}},
				{name: "A's new version has key1=value2: lost", do: onChange(updated(multiA, "1", "2", kv2)),
					want: []string{"d1 c1 -DCAE.Config_multi_A@1"}},
				{name: "A matches again: gained at its new version", do: onChange(updated(multiA, "2", "3", kv1)),
					want: []string{"d1 c1 +storage_policies:DCAE.Config_multi_A@3"}},
				{name: "A's newer version still matches: updated", do: onChange(updated(multiA, "3", "4", kv1)),
					want: []string{"d1 c1 ~DCAE.Config_multi_A@4"}},
				{name: "A's latest version is invalid: the valid one stays", do: onChange(errored(multiA, "4"))},
				{name: "a policy outside the scope changes: nothing", do: onChange(updated(other, "1", "2", kv1))},
				{name: "matchingConditions with key1 as a number do not match the string", do: onChange(updated(multiB, "2", "3",
					map[string]any{"ONAPName": "DCAE", "key1": 1})),
					want: []string{"d1 c1 -DCAE.Config_multi_B@2"}},
			},
		},
		{
			name: "removal from the catalog removes, by id and by filter",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "3", nil), catalogEntry(multiA, "7", kv1)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID}, dcaeFilter)},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(memID, "3", nil), pol(multiA, "7", kv1))},
			},
			steps: []step{
				{name: "policy wanted by id removed", do: onChange(removed(memID, "3")), want: []string{"d1 c1 -DCAE.Config_VM_MEMORY@3"}},
				{name: "policy selected by the filter removed", do: onChange(removed(multiA, "7")), want: []string{"d1 c1 -DCAE.Config_multi_A@7"}},
				{name: "removal delivered again", do: onChange(removed(multiA, "7"))},
				{name: "a removed policy created again is added", do: onChange(updated(memID, "", "1", nil)),
					want: []string{"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@1"}},
			},
		},
		{
			name: "a policy wanted by id and matched by filters is listed once",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(multiA, "1", kv1), catalogEntry(multiB, "1", kv1)},
			},
			steps: []step{
				{name: "install", do: onComponent(comp("c1", "d1", []string{multiA},
					filter("f1", "DCAE.Config_multi_B", ""), filter("f2", "DCAE.Config_multi.*", ""))),
					want: []string{"d1 c1 +policy_ids:DCAE.Config_multi_A@1 +f1:DCAE.Config_multi_B@1"}},
				{name: "update of the policy wanted both ways", do: onChange(updated(multiA, "1", "2", kv1)),
					want: []string{"d1 c1 ~DCAE.Config_multi_A@2"}},
				{name: "a new policy only the second filter selects", do: onChange(updated("DCAE.Config_multi_C", "", "1", kv1)),
					want: []string{"d1 c1 +f2:DCAE.Config_multi_C@1"}},
			},
		},
		{
			name: "catch-up sends only what differs, flagged catch-up",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "9", nil), catalogEntry(storID, "4", nil), catalogEntry(multiA, "2", kv1)},
				comps: []*events.Component{
					comp("c1", "d1", []string{memID}),
					comp("c2", "d1", []string{memID, storID}),
					comp("c3", "d2", nil, dcaeFilter),
					comp("c4", "d2", []string{storID}),
				},
				has: []*events.ComponentPolicies{
					collection("c1", "d1", pol(memID, "9", nil)),
					collection("c2", "d1", pol(memID, "8", nil)),
					collection("c3", "d2", pol(multiA, "2", kv1), pol("DCAE.Config_gone", "1", kv1)),
				},
			},
			steps: []step{
				{name: "catch-up of all", do: onCatchup(""), want: []string{
					"d1 c2 catch-up ~DCAE.Config_VM_MEMORY@9 +policy_ids:DCAE.Config_VM_STORAGE@4",
					"d2 c3 catch-up -DCAE.Config_gone@1",
					"d2 c4 catch-up +policy_ids:DCAE.Config_VM_STORAGE@4",
				}},
				{name: "a second catch-up finds nothing", do: onCatchup("")},
			},
		},
		{
			name: "catch-up of one deployment",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "9", nil)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID}), comp("c2", "d2", []string{memID})},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(memID, "8", nil)), collection("c2", "d2", pol(memID, "8", nil))},
			},
			steps: []step{
				{name: "d2 only", do: onCatchup("d2"), want: []string{"d2 c2 catch-up ~DCAE.Config_VM_MEMORY@9"}},
				{name: "then all: d1 only", do: onCatchup(""), want: []string{"d1 c1 catch-up ~DCAE.Config_VM_MEMORY@9"}},
			},
		},
		{
			name: "catch-up writes the collection of a component that never had one, even empty",
			setup: setup{
				comps: []*events.Component{comp("c1", "d1", []string{memID})},
			},
			steps: []step{
				{name: "catch-up", do: onCatchup(""), want: []string{"d1 c1 catch-up ="}},
				{name: "again", do: onCatchup("")},
			},
		},
		{
			name: "an uncompilable regular expression is refused with the reason",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(multiA, "1", kv1)},
			},
			steps: []step{
				{name: "lookahead is not RE2", do: onComponent(comp("c1", "d1", nil, filter("f1", "DCAE.Config_(?!x).*", ""))),
					wantErr: `filter_id "f1"`},
				{name: "the refused component is not registered", do: onChange(updated(multiA, "1", "2", kv1))},
				{name: "a valid definition registers", do: onComponent(comp("c1", "d1", nil, filter("f1", "DCAE.Config_multi.*", ""))),
					want: []string{"d1 c1 +f1:DCAE.Config_multi_A@2"}},
				{name: "a refused redefinition keeps the valid one", do: onComponent(comp("c1", "d1", nil, filter("f1", "DCAE.Config_[", ""))),
					wantErr: "missing closing ]"},
				{name: "the valid definition still matches", do: onChange(updated(multiA, "2", "3", kv1)),
					want: []string{"d1 c1 ~DCAE.Config_multi_A@3"}},
				{name: "configAttributes that are not a JSON object", do: onComponent(comp("c2", "d1", nil, filter("f1", "DCAE.*", `["a"]`))),
					wantErr: "want a JSON object"},
			},
		},
		{
			name: "tombstone removes everything once and the component is forgotten",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "3", nil), catalogEntry(multiA, "7", kv1)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID}, dcaeFilter), comp("c2", "d1", []string{memID})},
				has: []*events.ComponentPolicies{
					collection("c1", "d1", pol(memID, "3", nil), pol(multiA, "7", kv1)),
					collection("c2", "d1", pol(memID, "3", nil)),
				},
			},
			steps: []step{
				{name: "tombstone", do: onTombstone("c1"), want: []string{"d1 c1 uninstall -DCAE.Config_VM_MEMORY@3 -DCAE.Config_multi_A@7"}},
				{name: "tombstone again", do: onTombstone("c1")},
				{name: "changes no longer reach it", do: onChange(updated(memID, "3", "4", nil)),
					want: []string{"d1 c2 ~DCAE.Config_VM_MEMORY@4"}},
				{name: "nor catch-up", do: onCatchup("")},
			},
		},
		{
			name: "tombstone of a component deleted before the state was restored still uninstalls it",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "3", nil)},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(memID, "3", nil))},
			},
			steps: []step{
				{name: "changes leave it alone", do: onChange(updated(memID, "3", "4", nil))},
				{name: "catch-up leaves it alone", do: onCatchup("")},
				{name: "its tombstone", do: onTombstone("c1"), want: []string{"d1 c1 uninstall -DCAE.Config_VM_MEMORY@3"}},
			},
		},
		{
			name: "first registration sends an empty delta; an unchanged one sends nothing",
			steps: []step{
				{name: "nothing in the catalog yet", do: onComponent(comp("c1", "d1", []string{memID})), want: []string{"d1 c1 ="}},
				{name: "same definition again", do: onComponent(comp("c1", "d1", []string{memID}))},
				{name: "the policy appears", do: onChange(updated(memID, "", "1", nil)), want: []string{"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@1"}},
				{name: "component no longer wants it", do: onComponent(comp("c1", "d1", nil)), want: []string{"d1 c1 -DCAE.Config_VM_MEMORY@1"}},
				{name: "tombstone of a component with nothing", do: onTombstone("c1"), want: []string{"d1 c1 uninstall ="}},
			},
		},
		{
			name: "one change groups each deployment's components into one match",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "1", nil)},
				comps: []*events.Component{
					comp("b", "d1", []string{memID}), comp("a", "d1", nil, filter("f", "DCAE.Config_VM_.*", "")),
					comp("c", "d2", []string{memID}), comp("z", "d3", []string{storID}),
				},
				has: []*events.ComponentPolicies{
					collection("a", "d1", pol(memID, "1", nil)), collection("b", "d1", pol(memID, "1", nil)),
					collection("c", "d2", pol(memID, "1", nil)),
				},
			},
			steps: []step{
				{name: "update", do: func(m *Matcher) ([]events.PolicyMatch, error) {
					ms, err := m.OnChange(0, updated(memID, "1", "2", nil))
					if err == nil && len(ms) != 2 {
						return ms, fmt.Errorf("got %d matches, want one per deployment (2)", len(ms))
					}
					return ms, err
				}, want: []string{"d1 a ~DCAE.Config_VM_MEMORY@2", "d1 b ~DCAE.Config_VM_MEMORY@2", "d2 c ~DCAE.Config_VM_MEMORY@2"}},
			},
		},
		{
			name: "version fencing: a component never goes back to a lower version",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID})},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(memID, "7", nil))},
			},
			steps: []step{
				{name: "catch-up", do: onCatchup("")},
				{name: "redefinition", do: onComponent(comp("c1", "d1", []string{memID, storID}))},
				{name: "a newer version", do: onChange(updated(memID, "5", "8", nil)), want: []string{"d1 c1 ~DCAE.Config_VM_MEMORY@8"}},
			},
		},
		{
			name: "same version with another body is an update",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID})},
				has: []*events.ComponentPolicies{collection("c1", "d1", events.Policy{PolicyID: memID, PolicyName: memID + ".5.xml", PolicyVersion: "5",
					Body: policyBody(memID, "5", nil, map[string]any{"min_memory": "2GB"})})},
			},
			steps: []step{
				{name: "catch-up", do: onCatchup(""), want: []string{"d1 c1 catch-up ~DCAE.Config_VM_MEMORY@5"}},
			},
		},
		{
			name: "a change older than the refreshed catalog view does not move it back",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "6", nil)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID})},
			},
			steps: []step{
				{name: "lagging copy of the change to 5", do: onChange(updated(memID, "4", "5", nil)),
					want: []string{"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@6"}},
				{name: "lagging copy of the change to 6", do: onChange(updated(memID, "5", "6", nil))},
				{name: "lagging removal of version 5", do: onChange(removed(memID, "5"))},
			},
		},
		{
			name: "a withdrawn latest version moves the view back, but not components that have it",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "6", nil)},
				comps:   []*events.Component{comp("c1", "d1", []string{memID})},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(memID, "6", nil))},
			},
			steps: []step{
				{name: "6 withdrawn, 5 is the latest", do: onChange(updated(memID, "6", "5", nil))},
				{name: "a new component gets 5", do: onComponent(comp("c2", "d1", []string{memID})),
					want: []string{"d1 c2 +policy_ids:DCAE.Config_VM_MEMORY@5"}},
			},
		},
		{
			name: "a catalog tombstone is not undone by an older change",
			setup: setup{
				comps: []*events.Component{comp("c1", "d1", []string{memID})},
			},
			steps: []step{
				{name: "tombstone read after the removal", do: func(m *Matcher) ([]events.PolicyMatch, error) {
					if err := m.ApplyCatalog(memID, catalogEntry(memID, "4", nil), t0); err != nil {
						return nil, err
					}
					return nil, m.ApplyCatalog(memID, nil, t0.Add(time.Hour))
				}},
				{name: "the older update still queued", do: onChange(changedAt(updated(memID, "", "4", nil), t0.Add(time.Minute)))},
				{name: "the policy created again later", do: onChange(changedAt(updated(memID, "", "1", nil), t0.Add(2*time.Hour))),
					want: []string{"d1 c1 +policy_ids:DCAE.Config_VM_MEMORY@1"}},
			},
		},
		{
			name: "a component with a refused definition on record is left alone until its tombstone",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(multiA, "1", kv1)},
				comps:   []*events.Component{comp("c1", "d1", nil, filter("f1", "DCAE.(?i", ""))},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(multiA, "1", kv1))},
			},
			steps: []step{
				{name: "change", do: onChange(updated(multiA, "1", "2", kv1))},
				{name: "catch-up", do: onCatchup("")},
				{name: "tombstone", do: onTombstone("c1"), want: []string{"d1 c1 uninstall -DCAE.Config_multi_A@1"}},
			},
		},
		{
			name: "changing a component's filters gains and loses policies",
			setup: setup{
				catalog: []*events.PolicyCatalogEntry{catalogEntry(multiA, "1", kv1), catalogEntry(multiB, "1", kv2)},
				comps:   []*events.Component{comp("c1", "d1", nil, dcaeFilter)},
				has:     []*events.ComponentPolicies{collection("c1", "d1", pol(multiA, "1", kv1))},
			},
			steps: []step{
				{name: "attribute changed to value2", do: onComponent(comp("c1", "d1", nil, filter("storage_policies", "DCAE.Config_.*", `{"key1":"value2"}`))),
					want: []string{"d1 c1 -DCAE.Config_multi_A@1 +storage_policies:DCAE.Config_multi_B@1"}},
			},
		},
		{
			name: "bad inputs are refused",
			steps: []step{
				{name: "change without policy_id", do: onChange(&events.PolicyChange{ChangeID: "x", Action: events.ActionUpdated}), wantErr: "no policy_id"},
				{name: "update without header or body", do: onChange(&events.PolicyChange{ChangeID: "x", PolicyID: memID, Action: events.ActionUpdated}), wantErr: "no body_hash"},
				{name: "header of another policy", do: onChange(&events.PolicyChange{ChangeID: "x", PolicyID: memID, Action: events.ActionUpdated,
					NewVersion: strp("1"), PolicyName: storID + ".1.xml", MatchingConditions: "{}", BodyHash: "ab"}), wantErr: `not "DCAE.Config_VM_MEMORY"`},
				{name: "header without a version", do: onChange(&events.PolicyChange{ChangeID: "x", PolicyID: memID, Action: events.ActionUpdated,
					PolicyName: memID + ".1.xml", MatchingConditions: "{}", BodyHash: "ab"}), wantErr: "names no new version"},
				{name: "conditions that are no object", do: onChange(&events.PolicyChange{ChangeID: "x", PolicyID: memID, Action: events.ActionUpdated,
					NewVersion: strp("1"), PolicyName: memID + ".1.xml", MatchingConditions: "[1]", BodyHash: "ab"}), wantErr: "not an object"},
				{name: "update with a version but no header", do: onChange(&events.PolicyChange{ChangeID: "x", PolicyID: memID, Action: events.ActionUpdated,
					NewVersion: strp("1")}), wantErr: "no body_hash"},
				{name: "component without deployment", do: onComponent(comp("c1", "", nil)), wantErr: "no deployment_id"},
				{name: "component keyed by another id", do: func(m *Matcher) ([]events.PolicyMatch, error) {
					return m.OnComponent(0, "c2", comp("c1", "d1", nil))
				}, wantErr: `keyed "c2"`},
				{name: "deployment catch-up without deployment", do: func(m *Matcher) ([]events.PolicyMatch, error) {
					return m.OnCatchup(0, &events.CatchupRequest{RequestID: "r", Scope: events.ScopeDeployment})
				}, wantErr: "no deployment_id"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMatcher(t, tc.setup)
			for _, st := range tc.steps {
				ms, err := st.do(m)
				if st.wantErr != "" {
					if err == nil || !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), st.wantErr) {
						t.Fatalf("%s: got error %v, want a refusal mentioning %q", st.name, err, st.wantErr)
					}
					if len(ms) != 0 {
						t.Fatalf("%s: refused input produced %v", st.name, render(ms))
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if got := render(ms); !slices.Equal(got, st.want) {
					t.Fatalf("%s:\n got  %q\n want %q", st.name, got, st.want)
				}
				checkMatches(t, st.name, m, ms)
			}
		})
	}
}

// checkMatches asserts what every PolicyMatch must hold: a fresh update_id,
// one deployment, and policies named by reference: no body, the version
// and body_hash of the catalog's latest.
func checkMatches(t *testing.T, step string, m *Matcher, ms []events.PolicyMatch) {
	t.Helper()
	seen := map[string]bool{}
	for _, pm := range ms {
		if pm.UpdateID == "" || seen[pm.UpdateID] {
			t.Fatalf("%s: update_id %q empty or reused", step, pm.UpdateID)
		}
		seen[pm.UpdateID] = true
		if pm.DeploymentID == "" || len(pm.Components) == 0 || pm.CreatedAt.IsZero() {
			t.Fatalf("%s: incomplete match %+v", step, pm)
		}
		for _, d := range pm.Components {
			for _, a := range d.AddedPolicies {
				for _, p := range a.Policies {
					checkRef(t, step, m, p)
				}
			}
			for _, p := range d.UpdatedPolicies {
				checkRef(t, step, m, p)
			}
		}
	}
}

func checkRef(t *testing.T, step string, m *Matcher, p events.Policy) {
	t.Helper()
	latest, ok := m.Catalog().Lookup(p.PolicyID)
	if !ok || p != latest || p.Body != "" || p.BodyHash == "" {
		t.Fatalf("%s: policy %+v, want a reference (no body) to the catalog's %+v", step, p, latest)
	}
}

func TestSeedUpdateNamesTheNewBody(t *testing.T) {
	m := newMatcher(t, setup{
		catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "5", nil)},
		comps:   []*events.Component{comp("vm_2_9d982", "alex-game_depl", []string{memID})},
		has: []*events.ComponentPolicies{collection("vm_2_9d982", "alex-game_depl", events.Policy{PolicyID: memID,
			PolicyName: memID + ".5.xml", PolicyVersion: "5", Body: policyBody(memID, "5", nil, map[string]any{"min_memory": "2GB"})})},
	})
	h := headerOf(policyBody(memID, "222", nil, map[string]any{"min_memory": "8GB"}))
	ms, err := m.OnChange(0, &events.PolicyChange{ChangeID: "c", PolicyID: memID, Action: events.ActionUpdated,
		OldVersion: strp("5"), NewVersion: strp("222"), PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash,
		ChangedAt: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || len(ms[0].Components) != 1 || len(ms[0].Components[0].UpdatedPolicies) != 1 {
		t.Fatalf("got %q, want one updated policy", render(ms))
	}
	got := ms[0].Components[0].UpdatedPolicies[0]
	want := events.Policy{PolicyID: memID, PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222", BodyHash: h.BodyHash}
	if got != want {
		t.Fatalf("updated policy %+v, want the reference %+v", got, want)
	}
	if has := m.Partition(0).Has("vm_2_9d982"); has[memID] != "222" {
		t.Fatalf("after the update the component has %v, want version 222", has)
	}
	// Every partition's copy of the change after the first finds it in
	// force: nothing more is sent.
	if ms, err := m.OnChange(0, &events.PolicyChange{ChangeID: "c", PolicyID: memID, Action: events.ActionUpdated,
		OldVersion: strp("5"), NewVersion: strp("222"), PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash,
		ChangedAt: t0.Add(time.Second)}); err != nil || len(ms) != 0 {
		t.Fatalf("the change again: %q, %v; want nothing", render(ms), err)
	}
}

func TestNotOwnedPartition(t *testing.T) {
	m := newMatcher(t, setup{})
	if _, err := m.OnComponent(3, "c1", comp("c1", "d1", nil)); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("component of an unowned partition: %v, want ErrNotOwned", err)
	}
	// The catalog view still follows changes seen on any partition.
	if _, err := m.OnChange(3, updated(memID, "", "2", nil)); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("change on an unowned partition: %v, want ErrNotOwned", err)
	}
	if p, ok := m.Catalog().Lookup(memID); !ok || p.PolicyVersion != "2" {
		t.Fatalf("catalog view has %+v %v, want version 2", p, ok)
	}
	m.Drop(0)
	if got := m.Owned(); len(got) != 0 {
		t.Fatalf("owned %v after dropping every partition", got)
	}
}

func TestPartitionsAreIndependent(t *testing.T) {
	m := newMatcher(t, setup{catalog: []*events.PolicyCatalogEntry{catalogEntry(memID, "1", nil)}})
	m.Assign(1, NewPartition())
	if _, err := m.OnComponent(0, "a", comp("a", "d1", []string{memID})); err != nil {
		t.Fatal(err)
	}
	if _, err := m.OnComponent(1, "b", comp("b", "d2", []string{memID})); err != nil {
		t.Fatal(err)
	}
	// Every partition gets its own copy of a change: each copy must
	// produce the deltas of that partition's components only.
	ch := updated(memID, "1", "2", nil)
	for p, want := range map[int32]string{0: "d1 a ~DCAE.Config_VM_MEMORY@2", 1: "d2 b ~DCAE.Config_VM_MEMORY@2"} {
		ms, err := m.OnChange(p, ch)
		if err != nil {
			t.Fatal(err)
		}
		if got := render(ms); !slices.Equal(got, []string{want}) {
			t.Fatalf("partition %d: got %q, want %q", p, got, want)
		}
	}
}

// However big a deployment's delta, it is one PolicyMatch per deployment
// per cause: references are small, and cutting is the segmenter's.
func TestLargeDeltaIsOneMatchPerDeployment(t *testing.T) {
	var catalog []*events.PolicyCatalogEntry
	var had []events.Policy
	for i := 0; i < 40; i++ {
		id := fmt.Sprintf("DCAE.Config_big_%02d", i)
		catalog = append(catalog, &events.PolicyCatalogEntry{PolicyID: id, PolicyName: id + ".2.xml", PolicyVersion: "2",
			Body: policyBody(id, "2", kv1, map[string]any{"blob": strings.Repeat("x", 300<<10)}), Status: events.StatusValid})
		if i < 10 {
			had = append(had, pol(id, "1", kv1))
		}
	}
	for i := 0; i < 5; i++ {
		had = append(had, pol(fmt.Sprintf("DCAE.Config_gone_%d", i), "1", kv1))
	}
	m := newMatcher(t, setup{
		catalog: catalog,
		comps: []*events.Component{comp("c1", "d1", nil, filter("f1", "DCAE.Config_big_.*", "")), comp("c2", "d1", nil, filter("f1", "DCAE.Config_big_0.*", "")),
			comp("c3", "d2", nil, filter("f1", "DCAE.Config_big_1.*", ""))},
		has: []*events.ComponentPolicies{collection("c1", "d1", had...)},
	})
	ms, err := m.OnCatchup(0, &events.CatchupRequest{RequestID: "r", Scope: events.ScopeAll})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].DeploymentID != "d1" || ms[1].DeploymentID != "d2" || len(ms[0].Components) != 2 || len(ms[1].Components) != 1 {
		t.Fatalf("got %q, want one match for d1 (c1, c2) and one for d2 (c3)", render(ms))
	}
	checkMatches(t, "catch-up", m, ms)
	c1 := ms[0].Components[0]
	added := 0
	for _, a := range c1.AddedPolicies {
		added += len(a.Policies)
	}
	if len(c1.RemovedPolicies) != 5 || len(c1.UpdatedPolicies) != 10 || added != 30 {
		t.Fatalf("c1 got %d removed, %d updated, %d added; want 5, 10, 30", len(c1.RemovedPolicies), len(c1.UpdatedPolicies), added)
	}
	b, err := events.Default().Encode(&ms[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 16<<10 {
		t.Fatalf("the match of 12 MB of bodies encodes to %d bytes; references should take a few KiB", len(b))
	}
}

func TestCatalogApply(t *testing.T) {
	valid := catalogEntry(memID, "5", nil)
	erroredWithBody := &events.PolicyCatalogEntry{PolicyID: memID, PolicyName: memID + ".5.xml", PolicyVersion: "5",
		Body: valid.Body, Status: events.StatusErrored, Error: strp("version 6: config is empty")}
	erroredEmpty := &events.PolicyCatalogEntry{PolicyID: memID, Status: events.StatusErrored, Error: strp("config is empty")}
	tests := []struct {
		name    string
		records []*events.PolicyCatalogEntry // nil is a tombstone
		want    string                       // version in the view, "" when absent
		wantErr string
	}{
		{name: "valid entry", records: []*events.PolicyCatalogEntry{valid}, want: "5"},
		{name: "errored entry keeps the last valid body", records: []*events.PolicyCatalogEntry{valid, erroredWithBody}, want: "5"},
		{name: "errored entry without a body does not replace a valid one", records: []*events.PolicyCatalogEntry{valid, erroredEmpty}, want: "5"},
		{name: "errored entry without a body alone", records: []*events.PolicyCatalogEntry{erroredEmpty}},
		{name: "tombstone", records: []*events.PolicyCatalogEntry{valid, nil}},
		{name: "put after tombstone", records: []*events.PolicyCatalogEntry{valid, nil, catalogEntry(memID, "1", nil)}, want: "1"},
		{name: "body of another policy", records: []*events.PolicyCatalogEntry{{PolicyID: memID, Body: policyBody(storID, "1", nil, nil)}},
			wantErr: "policy_id \"DCAE.Config_VM_STORAGE\""},
		{name: "body that is not JSON", records: []*events.PolicyCatalogEntry{{PolicyID: memID, Body: "{"}}, wantErr: "decode policy_body"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCatalog()
			var err error
			for _, r := range tc.records {
				if err = c.Apply(memID, r, t0); err != nil {
					break
				}
			}
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want a refusal mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, ok := c.Lookup(memID)
			if got := p.PolicyVersion; ok != (tc.want != "") || got != tc.want {
				t.Fatalf("view holds %q (present %v), want %q", got, ok, tc.want)
			}
		})
	}
}
