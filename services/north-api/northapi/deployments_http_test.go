package northapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/topology"
)

// TestDeleteDeploymentAndFreeCapacity: DELETE /v1/deployments/{id} is
// for the tenant that holds the deployment (or an operator), and queues
// a deletion on deploy.requests with the key every request has; the
// capacity a deployment uses is not free for POST /v1/placements nor for
// a dry run; a datacenter under deployments cannot be deleted or shrunk
// below what they use.
func TestDeleteDeploymentAndFreeCapacity(t *testing.T) {
	dc := placementExampleJSON(t, "datacenter.json")
	model, err := json.Marshal(dc)
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.Datacenters, "dc-example", &events.Datacenter{DatacenterID: "dc-example", Model: string(model), Created: time.Now(), Updated: time.Now()})
		s.Produce(t, topology.AdmissionVerdicts, "big", &events.AdmissionVerdict{RequestID: "r1", DeploymentID: "big", Tenant: "t1", Admitted: true,
			Request: `{"deployment_id":"big","tenant":"t1","applications":[{"name":"db","class":"com.example.Db","instances":1}]}`, Components: []string{"big.db"}, DecidedAt: time.Now()})
		s.Produce(t, topology.Deployments, "big", &events.Deployment{DeploymentID: "big", Tenant: "t1", Environment: "prod", RequestID: "r1",
			Applications: []events.DeployedApplication{{Name: "db", Class: "com.example.Db", Instances: 1}}, VMs: 1, Datacenter: "dc-example",
			Resources: []events.PlacedResource{{ResourceID: "vm", Kind: "vm", Leaf: "r1-pm1", Demand: []float64{16, 8, 0}}}, Components: []string{"big.db"}, AdmittedAt: time.Now()})
	})

	// A proposal keeps off r1-pm1, which big fills.
	one := map[string]any{"datacenter": "dc-example", "resources": []any{map[string]any{"id": "vm", "kind": "vm", "demand": []any{16, 8, 0}}}}
	code, out, raw, _ := s.callAs(t, tenantToken, http.MethodPost, "/v1/placements", one)
	if p, _ := out["placement"].(map[string]any); code != http.StatusOK || p["vm"] == nil || p["vm"] == "r1-pm1" {
		t.Fatalf("POST /v1/placements: %d %s; want a PM other than r1-pm1", code, raw)
	}
	// A dry run onto r1-pm1 is denied naming its capacity, and that
	// another tenant's deployment uses it, never which (big is t1's).
	req := map[string]any{"deployment_id": "small", "tenant": "t2", "applications": []any{map[string]any{"name": "web", "class": "com.example.Web"}},
		"datacenter": "dc-example", "resources": []any{map[string]any{"id": "vm", "kind": "vm", "demand": []any{4, 8, 0}}}, "placement": map[string]any{"vm": "r1-pm1"}}
	code, out, raw, _ = s.callAs(t, otherTenantToken, http.MethodPost, "/v1/deployments?dry_run=true", req)
	if vs, _ := out["violations"].([]any); code != http.StatusOK || out["admitted"] != false || len(vs) != 1 ||
		vs[0].(map[string]any)["message"] != `tenant "t2": resources vm: leaf r1-pm1 is overloaded in vcpu: vm demand 4, its capacity is 16, of which 16 is in use by deployments of other tenants; non-overload (rule placement.non-overload of policy non-overload)` {
		t.Fatalf("dry run onto a full PM: %d %s", code, raw)
	}

	// The datacenter cannot go, nor lose the capacity big uses.
	code, out, _ = s.call(t, http.MethodDelete, "/v1/datacenters/dc-example", nil)
	wantError(t, "DELETE a datacenter in use", code, out, http.StatusConflict, "datacenter dc-example is in use by deployments big")
	smaller := placementExampleJSON(t, "datacenter.json")
	smaller["location"].([]any)[2].(map[string]any)["capacity"] = []any{8, 64, 2000}
	code, out, _ = s.call(t, http.MethodPut, "/v1/datacenters/dc-example", smaller)
	wantError(t, "PUT a datacenter below its use", code, out, http.StatusConflict, "leaf r1-pm1: 16 vcpu in use by deployment big, its capacity would be 8")
	if code, _, raw = s.call(t, http.MethodPut, "/v1/datacenters/dc-example", dc); code != http.StatusOK {
		t.Fatalf("PUT the same model again: %d %s", code, raw)
	}

	// DELETE: 404 for what nobody holds, 403 for another tenant's, for
	// a reader.
	code, out, _, _ = s.callAs(t, tenantToken, http.MethodDelete, "/v1/deployments/nope", nil)
	wantError(t, "DELETE an unknown deployment", code, out, http.StatusNotFound, "deployment nope does not exist")
	// GET of a deployment with no verdict: a deleted one answers so too,
	// and the reason says it may have been deleted.
	code, out, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/v1/deployments/nope", nil)
	wantError(t, "GET an unknown deployment", code, out, http.StatusNotFound, "it was never submitted, it was deleted")
	code, out, _, _ = s.callAs(t, otherTenantToken, http.MethodDelete, "/v1/deployments/big", nil)
	wantError(t, "DELETE another tenant's deployment", code, out, http.StatusForbidden, `deployment big belongs to tenant "t1"`)
	code, out, _, _ = s.callAs(t, readOnlyToken, http.MethodDelete, "/v1/deployments/big", nil)
	wantError(t, "DELETE by read-only", code, out, http.StatusForbidden)
	code, out, _, _ = s.callAs(t, tenantToken, http.MethodDelete, "/v1/deployments/a..b", nil)
	wantError(t, "DELETE a bad id", code, out, http.StatusBadRequest)

	// The owner's DELETE, and an operator's on its behalf: deletions on
	// deploy.requests, in order with every request.
	code, out, raw, _ = s.callAs(t, tenantToken, http.MethodDelete, "/v1/deployments/big", nil)
	if code != http.StatusAccepted || out["status"] != "deleting" || out["tenant"] != "t1" {
		t.Fatalf("DELETE by the owner: %d %s", code, raw)
	}
	code, out, raw, _ = s.callAs(t, operatorToken, http.MethodDelete, "/v1/deployments/big", nil)
	if code != http.StatusAccepted || out["tenant"] != "t1" {
		t.Fatalf("DELETE by an operator: %d %s", code, raw)
	}
	recs := s.records(t, topology.DeployRequests, 2)
	for i, r := range recs {
		var dr events.DeploymentRequest
		if err := s.env.Codec.DecodeInto(t.Context(), r.Value, &dr); err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != topology.DeployRequestsKey || dr.Action != events.ActionDelete || dr.DeploymentID != "big" || dr.Tenant != "t1" || dr.Request != "" {
			t.Errorf("deploy.requests record %d %q = %+v", i, r.Key, dr)
		}
		if by := []string{"deployer-t1", "operator"}[i]; dr.SubmittedBy != by && !strings.Contains(dr.SubmittedBy, by) {
			t.Errorf("deletion %d submitted by %q; want %q", i, dr.SubmittedBy, by)
		}
	}
}

// TestDeleteDeploymentKeepsTheRequiredApplication: deleting the only
// deployment of an environment that runs the application a
// RequiredApplication policy requires, while another deployment of the
// tenant remains there, answers 409 naming the rule and what remains;
// the other deployment may go.
func TestDeleteDeploymentKeepsTheRequiredApplication(t *testing.T) {
	s := newStack(t, func(s *stack) {
		s.Produce(t, topology.AppPolicies, "need-mon", &events.AppPolicy{PolicyID: "need-mon", Name: "need-mon", Mode: "enforce",
			ObjectModel: `{"application": "io.policyflow.Monitoring", "?": {"type": "io.policyflow.admission.RequiredApplication"}}`})
		for dep, class := range map[string]string{"mon": "io.policyflow.Monitoring", "web": "com.example.Web"} {
			s.Produce(t, topology.AdmissionVerdicts, dep, &events.AdmissionVerdict{RequestID: "r-" + dep, DeploymentID: dep, Tenant: "t1", Admitted: true,
				Request:    `{"deployment_id":"` + dep + `","tenant":"t1","environment":"e1","applications":[{"name":"a","class":"` + class + `","instances":1}]}`,
				Components: []string{dep + ".a"}, DecidedAt: time.Now()})
			s.Produce(t, topology.Deployments, dep, &events.Deployment{DeploymentID: dep, Tenant: "t1", Environment: "e1", RequestID: "r-" + dep,
				Applications: []events.DeployedApplication{{Name: "a", Class: class, Instances: 1}}, Components: []string{dep + ".a"}, AdmittedAt: time.Now()})
		}
	})
	code, out, _, _ := s.callAs(t, tenantToken, http.MethodDelete, "/v1/deployments/mon", nil)
	wantError(t, "DELETE the environment's monitoring", code, out, http.StatusConflict,
		`deployment mon is not deleted: tenant "t1": environment "e1": deleting deployment mon would leave it without io.policyflow.Monitoring, which every environment must have: web is still deployed in it`,
		"(rule required-application of policy need-mon)")
	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodDelete, "/v1/deployments/web", nil); code != http.StatusAccepted {
		t.Fatalf("DELETE web: %d %s", code, raw)
	}
}
