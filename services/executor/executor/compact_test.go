package executor

import (
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// TestCompactSharesBodies checks what keeps the executor's memory flat in
// the number of components: two components' collections that hold the
// same policy, decoded separately, share one copy of its body once
// compacted, and the updated and removed policies are not kept.
func TestCompactSharesBodies(t *testing.T) {
	body := `{"config":` + strings.Repeat(`"x"`, 300) + `}`
	collection := func(id string) *events.ComponentPolicies {
		p := pol("A", "2")
		// A copy of its own, as every decoded record has.
		p.Body = string([]byte(body))
		return &events.ComponentPolicies{ComponentID: id, DeploymentID: "dep-1", ServiceComponentName: id, UpdateID: "u1",
			Generation: 3, Policies: []events.Policy{p}, UpdatedPolicies: []events.Policy{p}, RemovedPolicies: []events.Policy{pol("B", "1")}}
	}
	a, b := collection("c1"), collection("c2")
	if unsafe.StringData(a.Policies[0].Body) == unsafe.StringData(b.Policies[0].Body) {
		t.Fatal("the test's bodies share memory before compact; it would prove nothing")
	}
	ca, cb := compacted(a), compacted(b)
	if unsafe.StringData(ca.Policies[0].Body) != unsafe.StringData(cb.Policies[0].Body) {
		t.Error("two compacted collections holding the same body keep two copies of it")
	}
	if ca.Policies[0] != a.Policies[0] {
		t.Errorf("compacted policy %+v, want %+v", ca.Policies[0], a.Policies[0])
	}
	if len(ca.UpdatedPolicies) != 0 || len(ca.RemovedPolicies) != 0 {
		t.Errorf("compacted collection keeps updated %v and removed %v", ca.UpdatedPolicies, ca.RemovedPolicies)
	}
	if ca.ComponentID != "c1" || ca.Generation != 3 || ca.ServiceComponentName != "c1" || ca.DeploymentID != "dep-1" {
		t.Errorf("compacted collection lost its identity: %+v", ca)
	}
	if compacted(nil) != nil {
		t.Error("compact(nil) is not nil")
	}
}

// TestCompactNamesPoliciesByBodyHash: the shared copy of a version of a
// policy is found by its body_hash, but never gives a policy another
// body: one whose body_hash names another body keeps its own (shared with
// the others that hold the same), as does one without a body_hash; and a
// body no collection holds any more is not kept.
func TestCompactNamesPoliciesByBodyHash(t *testing.T) {
	decoded := func(p events.Policy) *events.ComponentPolicies {
		// Every string a copy of its own, as decoded.
		p = events.Policy{PolicyID: string([]byte(p.PolicyID)), PolicyName: string([]byte(p.PolicyName)), PolicyVersion: string([]byte(p.PolicyVersion)),
			Body: string([]byte(p.Body)), BodyHash: string([]byte(p.BodyHash)), Revision: p.Revision}
		return &events.ComponentPolicies{ComponentID: "c", DeploymentID: "dep-1", Generation: 1, Policies: []events.Policy{p}}
	}
	sharesWith := func(a, b events.Policy) bool {
		return unsafe.StringData(a.Body) == unsafe.StringData(b.Body) && unsafe.StringData(a.PolicyID) == unsafe.StringData(b.PolicyID) &&
			unsafe.StringData(a.BodyHash) == unsafe.StringData(b.BodyHash)
	}
	genuine := at(pol("HASH.A", "1"), 7)
	other := genuine
	other.Body = `{"policyName":"HASH.A.1.xml","config":{"not":"the body its hash names"}}`
	hashless := genuine
	hashless.Body, hashless.BodyHash = `{"policyName":"HASH.A.1.xml","config":{"no":"hash"}}`, ""

	r1, r2 := compacted(decoded(genuine)).Policies[0], compacted(decoded(genuine)).Policies[0]
	o1, o2 := compacted(decoded(other)).Policies[0], compacted(decoded(other)).Policies[0]
	h1, h2 := compacted(decoded(hashless)).Policies[0], compacted(decoded(hashless)).Policies[0]
	for _, c := range []struct {
		name     string
		got      [2]events.Policy
		want     events.Policy
		sameAsR1 bool
	}{
		{"the same version", [2]events.Policy{r1, r2}, genuine, true},
		{"a body its body_hash does not name", [2]events.Policy{o1, o2}, other, false},
		{"a body without a body_hash", [2]events.Policy{h1, h2}, hashless, false},
	} {
		if c.got[0] != c.want || c.got[1] != c.want {
			t.Errorf("%s: compacted as %+v and %+v, want %+v", c.name, c.got[0], c.got[1], c.want)
		}
		if !sharesWith(c.got[0], c.got[1]) {
			t.Errorf("%s: two collections keep two copies", c.name)
		}
		if c.sameAsR1 != (unsafe.StringData(c.got[0].Body) == unsafe.StringData(r1.Body)) {
			t.Errorf("%s: shares its body with the version's first body: %v, want %v", c.name, !c.sameAsR1, c.sameAsR1)
		}
	}

	// Nothing holds this one's body once its collection goes.
	gone := at(pol("HASH.GONE", "1"), 1)
	compactAndDrop(decoded(gone))
	goruntime.GC()
	shared.Lock()
	defer shared.Unlock()
	for k, e := range shared.policies {
		if k.id == gone.PolicyID && e.body.Value() != nil {
			t.Errorf("the body of %s is kept after the collection that held it went", gone.PolicyID)
		}
	}
}

//go:noinline
func compactAndDrop(cp *events.ComponentPolicies) { compact(cp.ComponentID, cp, nil) }

// TestRegistrationKeepsWhatNextReads checks the executor's view of
// deploy.components: what it keeps of a registration gives the same
// collection as the record itself, shares no memory with the decoded record
// (which would keep the decoder's slabs alive), and leaves out the filters,
// policy ids and config, which the executor never reads.
func TestRegistrationKeepsWhatNextReads(t *testing.T) {
	for _, scn := range []string{"scn-c1", "c1"} {
		full := component("c1", scn)
		full.DeploymentID, full.Tenant = "dep-1", "acme"
		full.Notify = events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://hook/c1", TimeoutMs: 500}
		full.PolicyIDs = []string{"A", "B"}
		full.PolicyFilters = []events.PolicyFilter{{FilterID: "f", PolicyName: "DCAE.*"}}
		full.Config = strings.Repeat("x", 2048)
		reg, err := registration(runtime.Msg[*events.Component]{Input: runtime.Input{Key: []byte("c1")}, Value: full}, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		for name, s := range map[string]string{"service_component_name": reg.scn, "webhook_url": reg.notify.WebhookURL} {
			if s != "" && (unsafe.StringData(s) == unsafe.StringData(full.ServiceComponentName) || unsafe.StringData(s) == unsafe.StringData(full.Notify.WebhookURL)) {
				t.Errorf("%s: %s shares memory with the decoded record", scn, name)
			}
		}
		kept := reg.component("c1")
		if kept.PolicyIDs != nil || kept.PolicyFilters != nil || kept.Config != "" {
			t.Errorf("registration keeps what the executor never reads: ids %v, filters %v, config of %d bytes", kept.PolicyIDs, kept.PolicyFilters, len(kept.Config))
		}
		if kept.ComponentID != "c1" || kept.ServiceComponentName != scn || kept.DeploymentID != "dep-1" || kept.Notify != full.Notify {
			t.Errorf("%s: kept %+v, want the record's id, deployment, service_component_name and notify target", scn, kept)
		}
		d := Delta{ComponentDelta: events.ComponentDelta{ComponentID: "c1", AddedPolicies: []events.FilterMatch{{FilterID: "f", Policies: []events.Policy{pol("A", "1")}}}},
			UpdateID: "u1", DeploymentID: "dep-1"}
		want, err := Next(nil, full, d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Next(nil, kept, d)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Next from the kept registration\n %+v\nwant (from the record)\n %+v", got, want)
		}
	}
}

// TestCompactSharesPolicyLists: components holding the same policies
// share one compacted list; another version of one of them is another
// list; and a change computed from a shared list leaves the other holders'
// collections as they were.
func TestCompactSharesPolicyLists(t *testing.T) {
	collection := func(id, versionB string) *events.ComponentPolicies {
		ps := []events.Policy{pol("A", "1"), pol("B", versionB)}
		for i := range ps {
			ps[i].Body = string([]byte(ps[i].Body)) // a copy of its own, as decoded
		}
		return &events.ComponentPolicies{ComponentID: id, DeploymentID: "dep-1", ServiceComponentName: id, UpdateID: "u1", Generation: 1, Policies: ps}
	}
	a, b, c := compacted(collection("c1", "1")), compacted(collection("c2", "1")), compacted(collection("c3", "2"))
	if &a.Policies[0] != &b.Policies[0] {
		t.Error("two components holding the same policies keep two lists")
	}
	if &a.Policies[0] == &c.Policies[0] {
		t.Error("components holding other versions share a list")
	}
	if !reflect.DeepEqual(a.Policies, collection("c1", "1").Policies) || !reflect.DeepEqual(c.Policies, collection("c3", "2").Policies) {
		t.Errorf("shared lists differ from the collections: %+v, %+v", a.Policies, c.Policies)
	}
	before := slices.Clone(b.Policies)
	d := Delta{ComponentDelta: events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("A", "2")},
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B"}}}, UpdateID: "u2", DeploymentID: "dep-1"}
	comp := component("c1", "c1")
	comp.DeploymentID = "dep-1"
	if _, err := Next(a, comp, d); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.Policies, before) {
		t.Errorf("a change of c1 changed c2's shared list: %+v, was %+v", b.Policies, before)
	}
}

// TestCompactAfterKeepsEachRunsPolicies: in a run of collections (the
// writes of one update), those that hold the same policies share one
// list, the one compact gives them on their own, and one that holds
// others than the collection before it keeps its own.
func TestCompactAfterKeepsEachRunsPolicies(t *testing.T) {
	collection := func(id, versionA string) *events.ComponentPolicies {
		ps := []events.Policy{pol("RUN.A", versionA), pol("RUN.B", "1")}
		for i := range ps {
			ps[i].Body = string([]byte(ps[i].Body)) // a copy of its own, as decoded
		}
		return &events.ComponentPolicies{ComponentID: id, DeploymentID: "dep-1", ServiceComponentName: id, Generation: 1, Policies: ps}
	}
	var last lastList
	run := []*events.ComponentPolicies{collection("c1", "1"), collection("c2", "1"), collection("c3", "2"), collection("c4", "1")}
	var lists [][]events.Policy
	for _, cp := range run {
		k := compactAfter(&last, cp.ComponentID, cp, nil)
		if !reflect.DeepEqual(k.policies, cp.Policies) {
			t.Errorf("%s kept %v, want %v", cp.ComponentID, k.policies, cp.Policies)
		}
		lists = append(lists, k.policies)
	}
	alone := compact("c5", collection("c5", "2"), nil).policies
	if &lists[0][0] != &lists[1][0] || &lists[0][0] != &lists[3][0] || &lists[2][0] != &alone[0] {
		t.Error("collections of a run that hold the same policies keep more than one list")
	}
	if &lists[1][0] == &lists[2][0] {
		t.Error("a collection of a run took the list of the one before it, which holds other policies")
	}
}

// compacted is cp as the executor keeps it, with no registration known,
// read back as Next reads it.
func compacted(cp *events.ComponentPolicies) *events.ComponentPolicies {
	if cp == nil {
		return nil
	}
	return compact(cp.ComponentID, cp, nil).collection(cp.ComponentID)
}

// TestCompactSharesWithTheRegistration: a kept collection whose
// service_component_name or notify target are the registration's shares
// them with it, keeps none of the decoded record's memory, and reads back
// as what was committed; one whose service_component_name is its id
// keeps no copy of it.
func TestCompactSharesWithTheRegistration(t *testing.T) {
	for _, scn := range []string{"scn-c1", "c1"} {
		comp := component("c1", scn)
		comp.DeploymentID = "dep-1"
		comp.Notify = events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://hook/c1", TimeoutMs: 500}
		reg, err := registration(runtime.Msg[*events.Component]{Input: runtime.Input{Key: []byte("c1")}, Value: comp}, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		p := pol("A", "1")
		cp := &events.ComponentPolicies{ComponentID: "c1", DeploymentID: "dep-1", ServiceComponentName: string([]byte(scn)), UpdateID: "u1",
			Generation: 2, Policies: []events.Policy{p}, Notify: comp.Notify, UpdatedAt: time.UnixMilli(1000).UTC()}
		cp.Notify.WebhookURL = string([]byte(cp.Notify.WebhookURL)) // as decoded: a copy of its own
		k := compact("c1", cp, reg)
		if k.notify != &reg.notify {
			t.Errorf("%s: the kept collection copies the registration's notify target", scn)
		}
		switch {
		case scn == "c1" && (!k.scnIsID || k.scn != ""):
			t.Errorf("%s: keeps a copy of its service_component_name, its id", scn)
		case scn != "c1" && unsafe.StringData(k.scn) != unsafe.StringData(reg.scn):
			t.Errorf("%s: keeps a service_component_name of its own, not the registration's", scn)
		}
		want := &events.ComponentPolicies{ComponentID: "c1", DeploymentID: "dep-1", ServiceComponentName: scn, Generation: 2,
			Policies: []events.Policy{p}, Notify: comp.Notify}
		if got := k.collection("c1"); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read back\n %+v\nwant\n %+v", scn, got, want)
		}
		// Another notify target than the registration's is the
		// collection's own, copied.
		cp.Notify.TimeoutMs = 900
		if k := compact("c1", cp, reg); k.notify == &reg.notify || *k.notify != cp.Notify ||
			unsafe.StringData(k.notify.WebhookURL) == unsafe.StringData(cp.Notify.WebhookURL) {
			t.Errorf("%s: a notify target other than the registration's kept as %+v", scn, k.notify)
		}
	}
}
