package admission

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/placement"
	"github.com/policyflow/policyflow/topology"
)

// auditState folds admission.audit records into its latest entries, by
// key.
func auditState(t *testing.T, recs []*kgo.Record) map[string]*events.AuditEntry {
	out := map[string]*events.AuditEntry{}
	for _, r := range recs {
		if r.Value == nil {
			delete(out, string(r.Key))
			continue
		}
		out[string(r.Key)] = stagetest.Decode[*events.AuditEntry](t, r)
	}
	return out
}

func keysOf(m map[string]*events.AuditEntry) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}

// TestStageKeepsAuditReports: a policy in audit mode gets a persisted
// report of the admitted deployments it would deny, built when the
// policy is written, extended when a deployment is decided, and
// shrunk when a deployment no longer violates it or is deleted, or the
// policy is deleted. The deployments are read from the record of what is
// deployed (deploy.deployments): these have no verdict at all, as when
// admission.verdicts was compacted, and one record predates records
// carrying their request.
func TestStageKeepsAuditReports(t *testing.T) {
	c := stagetest.NewCluster(t, 1, stageTopics...)
	deployed := func(dep, tenant, flavor string) *events.Deployment {
		req := &admit.Request{DeploymentID: dep, Tenant: tenant, Applications: []admit.Application{{Name: "web", Class: "com.example.Web", Instances: 1, Flavor: flavor}}}
		return admit.Record("old-"+dep, req, placement.Use{}, []string{dep + ".web"}, time.Now())
	}
	old := deployed("d-old", "t1", "m1.xlarge")
	old.Request = "" // written before records carried their request
	c.Produce(t, topology.Deployments, "d-old", old)
	c.Produce(t, topology.Deployments, "d-t2", deployed("d-t2", "t2", "m1.large"))
	c.Produce(t, topology.Deployments, "d-small", deployed("d-small", "t1", "m1.small"))
	c.Produce(t, topology.AppPolicies, "flavor", &events.AppPolicy{PolicyID: "flavor", Mode: "audit",
		ObjectModel: `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))

	wait := func(what, want string) map[string]*events.AuditEntry {
		t.Helper()
		var state map[string]*events.AuditEntry
		c.ReadUntil(t, topology.AdmissionAudit, 60*time.Second, func(recs []*kgo.Record) bool {
			state = auditState(t, recs)
			return keysOf(state) == want
		})
		if got := keysOf(state); got != want {
			t.Fatalf("%s: report entries %q, want %q", what, got, want)
		}
		return state
	}
	state := wait("policy written", "flavor/d-old flavor/d-t2")
	if e := state["flavor/d-old"]; e.Tenant != "t1" || e.RequestID != "old-d-old" || len(e.Findings) != 1 ||
		e.Findings[0].Message != `tenant "t1": application "web" (com.example.Web): flavor m1.xlarge is larger than m1.medium, the largest allowed to applications not approved (rule flavor-limit of policy flavor)` {
		t.Errorf("entry of d-old = %+v", e)
	}

	// A deployment admitted (audit mode) joins the report; one whose new
	// request complies leaves it.
	c.ProduceRecords(t,
		c.Record(t, topology.DeployRequests, "d-new", request("r1", "d-new", "t1", `{"deployment_id":"d-new","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`)),
		c.Record(t, topology.DeployRequests, "d-t2", request("r2", "d-t2", "t2", `{"deployment_id":"d-t2","tenant":"t2","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.small"}]}`)),
	)
	wait("deployments decided", "flavor/d-new flavor/d-old")

	// A verdict's tombstone changes nothing: the record of what is
	// deployed says what runs. A deleted deployment (its record's
	// tombstone) leaves the report in the deletion's transaction.
	c.ProduceRecords(t, &kgo.Record{Topic: c.Kafka.Topic(topology.AdmissionVerdicts), Key: []byte("d-new")})
	c.ProduceRecords(t, requestRecord(t, c, deletion("del-old", "d-old", "t1")))
	c.ReadUntil(t, topology.Deployments, 60*time.Second, func(recs []*kgo.Record) bool {
		return len(recs) > 0 && string(recs[len(recs)-1].Key) == "d-old" && recs[len(recs)-1].Value == nil
	})
	wait("deployment deleted", "flavor/d-new")

	// The policy replaced to allow m1.large: the report is rebuilt.
	c.Produce(t, topology.AppPolicies, "flavor", &events.AppPolicy{PolicyID: "flavor", Mode: "audit",
		ObjectModel: `{"maxFlavor":"m1.large","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	wait("policy replaced", "")
	c.Produce(t, topology.AppPolicies, "flavor", &events.AppPolicy{PolicyID: "flavor", Mode: "audit",
		ObjectModel: `{"maxFlavor":"m1.tiny","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	wait("policy tightened", "flavor/d-new flavor/d-small flavor/d-t2")
	// Deleted: its report goes.
	c.ProduceRecords(t, &kgo.Record{Topic: c.Kafka.Topic(topology.AppPolicies), Key: []byte("flavor")})
	wait("policy deleted", "")
}

// An entry written in a transaction that aborted is written again when
// the deployment is decided again; one committed is not written twice.
func TestReportsWriteAgainAfterAnAbort(t *testing.T) {
	r := NewReports()
	p := compiled(t, "flavor", `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`)
	v := &events.AdmissionVerdict{RequestID: "r1", DeploymentID: "d1", Tenant: "t1", Admitted: true,
		Request: `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","instances":1,"flavor":"m1.large"}]}`}
	now := time.Now()
	if outs := r.deploymentDecided(t.Context(), v, []*admit.Compiled{p}, now); len(outs) != 1 || string(outs[0].Key) != "flavor/d1" {
		t.Fatalf("first decision: %+v", outs)
	}
	if outs := r.deploymentDecided(t.Context(), v, []*admit.Compiled{p}, now); len(outs) != 0 {
		t.Errorf("the same decision again, before the abort: %+v", outs)
	}
	r.rewind()
	outs := r.deploymentDecided(t.Context(), v, []*admit.Compiled{p}, now)
	if len(outs) != 1 {
		t.Fatalf("after the abort: %+v, want the entry written again", outs)
	}
	r.ApplyEntry("flavor/d1", outs[0].Value.(*events.AuditEntry))
	r.rewind()
	if outs := r.deploymentDecided(t.Context(), v, []*admit.Compiled{p}, now); len(outs) != 0 {
		t.Errorf("after it committed: %+v", outs)
	}
}

func compiled(t *testing.T, id, model string) *admit.Compiled {
	t.Helper()
	c, err := admit.CompilePolicy(&events.AppPolicy{PolicyID: id, ObjectModel: model, Mode: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// BenchmarkReportRebuild times the rebuild of one policy's report over
// 10,000 admitted deployments, a tenth of which it would deny: what a
// policy written costs the stage's transaction.
func BenchmarkReportRebuild(b *testing.B) {
	r := NewReports()
	for i := range 10000 {
		flavor := "m1.small"
		if i%10 == 0 {
			flavor = "m1.xlarge"
		}
		dep := fmt.Sprintf("d%05d", i)
		r.ApplyDeployment(dep, &events.Deployment{RequestID: "r" + dep, DeploymentID: dep, Tenant: "t1",
			Request: fmt.Sprintf(`{"deployment_id":%q,"tenant":"t1","applications":[{"name":"web","class":"com.example.Web","instances":1,"flavor":%q}]}`, dep, flavor)})
	}
	p, err := admit.CompilePolicy(&events.AppPolicy{PolicyID: "flavor", Mode: "audit", ObjectModel: `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		r.rewind()
		if outs := r.policyChanged(b.Context(), "flavor", p, time.Now()); len(outs) != 1000 {
			b.Fatalf("%d entries, want 1000", len(outs))
		}
	}
}

// TestDecidedRemovesEntryOfPolicyNoLongerApplying: a deployment decided
// again has the entry of a policy that no longer applies to its tenant
// removed, whether that entry was read from admission.audit or written
// by this stage and not read back yet, while a deployment holding no
// entry writes none for such a policy.
func TestDecidedRemovesEntryOfPolicyNoLongerApplying(t *testing.T) {
	other, err := admit.CompilePolicy(&events.AppPolicy{PolicyID: "other", Mode: "audit", TenantIDs: &[]string{"t2"},
		ObjectModel: `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	if err != nil {
		t.Fatal(err)
	}
	req := `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","instances":1,"flavor":"m1.xlarge"}]}`
	v := &events.AdmissionVerdict{Admitted: true, RequestID: "r2", DeploymentID: "d1", Tenant: "t1", Request: req}
	old := &events.AuditEntry{PolicyID: "other", DeploymentID: "d1", RequestID: "r1", Tenant: "t1", Findings: []events.AuditFinding{{Rule: "flavor-limit"}}}
	for _, how := range []string{"committed", "pending", "none"} {
		r := NewReports()
		switch how {
		case "committed":
			r.ApplyEntry(events.AuditKey("other", "d1"), old)
		case "pending":
			r.entryOutput("other", "d1", old)
		}
		outs := r.deploymentDecided(t.Context(), v, []*admit.Compiled{other}, time.Now())
		if how == "none" {
			if len(outs) != 0 {
				t.Errorf("%s: outputs %+v, want none", how, outs)
			}
			continue
		}
		if len(outs) != 1 || string(outs[0].Key) != "other/d1" || outs[0].Value != nil {
			t.Errorf("%s: outputs %+v, want the tombstone of other/d1", how, outs)
		}
		if r.has("other", "d1") {
			t.Errorf("%s: the entry is still held", how)
		}
	}
}

// TestPolicyNarrowedRemovesEntries: a policy rewritten to apply to
// other tenants removes its entries for the deployments it no longer
// applies to, read back or not yet, and adds none for them.
func TestPolicyNarrowedRemovesEntries(t *testing.T) {
	other, err := admit.CompilePolicy(&events.AppPolicy{PolicyID: "p", Mode: "audit", TenantIDs: &[]string{"t2"},
		ObjectModel: `{"maxFlavor":"m1.medium","?":{"type":"io.policyflow.admission.FlavorLimit"}}`})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReports()
	for _, dep := range []string{"d1", "d2", "d3"} {
		req := &admit.Request{DeploymentID: dep, Tenant: "t1", Applications: []admit.Application{{Name: "web", Class: "com.example.Web", Instances: 1, Flavor: "m1.xlarge"}}}
		r.ApplyDeployment(dep, admit.Record("r-"+dep, req, placement.Use{}, []string{dep + ".web"}, time.Now()))
	}
	old := &events.AuditEntry{PolicyID: "p", RequestID: "r", Tenant: "t1", Findings: []events.AuditFinding{{Rule: "flavor-limit"}}}
	r.ApplyEntry(events.AuditKey("p", "d1"), old)
	r.entryOutput("p", "d2", old)
	outs := r.policyChanged(t.Context(), "p", other, time.Now())
	var got []string
	for _, o := range outs {
		got = append(got, fmt.Sprintf("%s=%v", o.Key, o.Value != nil))
	}
	if want := "p/d1=false p/d2=false"; strings.Join(got, " ") != want {
		t.Errorf("outputs %q, want %q", got, want)
	}
}
