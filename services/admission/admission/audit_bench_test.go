package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
)

// BenchmarkDeploymentDecided is the audit reports' refresh for one
// admitted deployment of a tenant among 1,000 policies over 100 tenants
// (ten each, one in ten in audit mode finding its flavor), as the stage
// does for every admitted request of a backlog.
func BenchmarkDeploymentDecided(b *testing.B) {
	var policies []*admit.Compiled
	for i := range 1000 {
		mode := "enforce"
		if i%10 == 0 {
			mode = "audit"
		}
		tenants := []string{fmt.Sprintf("t%d", i%100)}
		p, err := admit.CompilePolicy(&events.AppPolicy{PolicyID: fmt.Sprintf("p%04d", i), Mode: mode, TenantIDs: &tenants,
			ObjectModel: `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
		if err != nil {
			b.Fatal(err)
		}
		policies = append(policies, p)
	}
	r := NewReports()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		dep := fmt.Sprintf("d%d", i)
		req := fmt.Sprintf(`{"deployment_id":%q,"tenant":"t%d","applications":[{"name":"web","class":"com.example.Web","instances":1,"flavor":"m1.xlarge"}]}`, dep, i%100)
		v := &events.AdmissionVerdict{Admitted: true, RequestID: "r-" + dep, DeploymentID: dep, Tenant: fmt.Sprintf("t%d", i%100), Request: req}
		r.deploymentDecided(b.Context(), v, policies, now)
		if i%1000 == 999 {
			// The table reads the entries back, as the stage's does.
			r.rewind()
		}
	}
}
