package executor

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/policyflow/policyflow/events"
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
	ca, cb := compact(a), compact(b)
	if unsafe.StringData(ca.Policies[0].Body) != unsafe.StringData(cb.Policies[0].Body) {
		t.Error("two compacted collections holding the same body keep two copies of it")
	}
	if ca.Policies[0] != a.Policies[0] {
		t.Errorf("compacted policy %+v, want %+v", ca.Policies[0], a.Policies[0])
	}
	if len(ca.UpdatedPolicies) != 0 || len(ca.RemovedPolicies) != 0 {
		t.Errorf("compacted collection keeps updated %v and removed %v", ca.UpdatedPolicies, ca.RemovedPolicies)
	}
	if ca.ComponentID != "c1" || ca.Generation != 3 || ca.UpdateID != "u1" || ca.ServiceComponentName != "c1" {
		t.Errorf("compacted collection lost its identity: %+v", ca)
	}
	if compact(nil) != nil {
		t.Error("compact(nil) is not nil")
	}
}
