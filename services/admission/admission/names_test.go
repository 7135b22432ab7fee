package admission

import (
	"fmt"
	"testing"

	"github.com/policyflow/policyflow/events"
)

func TestNamesFollowComponentsAndVerdicts(t *testing.T) {
	n := NewNames()
	comp := func(id, dep, scn, tenant string) *events.Component {
		return &events.Component{ComponentID: id, DeploymentID: dep, ServiceComponentName: scn, Tenant: tenant}
	}
	n.ApplyComponent("c1", comp("c1", "d1", "f1", "t1"))
	n.ApplyVerdict("d2", &events.AdmissionVerdict{DeploymentID: "d2", Tenant: "t2"})
	n.ApplyVerdict("d3", &events.AdmissionVerdict{DeploymentID: "d3"}) // no tenant: refused, holds nothing
	check := func(when, what string, got any, want string) {
		t.Helper()
		if s := fmt.Sprint(got); s != want {
			t.Errorf("%s: %s = %s, want %s", when, what, s, want)
		}
	}
	tenant := func(id string) string { t, ok := n.Component(id); return fmt.Sprintf("%q %v", t, ok) }
	check("registered", "component c1", tenant("c1"), `"t1" true`)
	check("registered", "folder f1", n.Folder("f1"), "[{c1 t1}]")
	check("registered", "deployment d1", n.Deployment("d1"), "[t1]")
	check("registered", "deployment d2", n.Deployment("d2"), "[t2]")
	check("registered", "deployment d3", n.Deployment("d3"), "[]")

	// c1 moves to folder f2 and deployment d2: f1 and d1 are free.
	n.ApplyComponent("c1", comp("c1", "d2", "f2", "t1"))
	check("moved", "folder f1", n.Folder("f1"), "[]")
	check("moved", "folder f2", n.Folder("f2"), "[{c1 t1}]")
	check("moved", "deployment d1", n.Deployment("d1"), "[]")
	check("moved", "deployment d2", n.Deployment("d2"), "[t1 t2]")

	n.ApplyComponent("c1", nil)
	check("deleted", "component c1", tenant("c1"), `"" false`)
	check("deleted", "folder f2", n.Folder("f2"), "[]")
	check("deleted", "deployment d2", n.Deployment("d2"), "[t2]")
}
