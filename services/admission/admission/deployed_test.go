package admission

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/placement"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// haRequest is the ha-clusters example (12 VMs of 4 vCPU on 12 PMs of the
// example datacenter) as deployment dep of tenant t1.
func haRequest(t *testing.T, dep string) string {
	t.Helper()
	ha, err := os.ReadFile("../../placement/examples/ha-clusters.json")
	if err != nil {
		t.Fatal(err)
	}
	return `{"deployment_id":"` + dep + `","tenant":"t1","environment":"prod","applications":[{"name":"hadoop","class":"com.example.Hadoop","instances":12,"flavor":"m1.medium"}],` +
		strings.TrimPrefix(strings.TrimSpace(string(ha)), "{")
}

func exampleDatacenter(t *testing.T, c *stagetest.Cluster) {
	t.Helper()
	model, err := os.ReadFile("../../placement/examples/datacenter.json")
	if err != nil {
		t.Fatal(err)
	}
	c.Produce(t, topology.Datacenters, "dc-example", &events.Datacenter{DatacenterID: "dc-example", Model: string(model)})
}

func requestRecord(t *testing.T, c *stagetest.Cluster, dr *events.DeploymentRequest) *kgo.Record {
	return c.Record(t, topology.DeployRequests, topology.DeployRequestsKey, dr)
}

func deletion(id, dep, tenant string) *events.DeploymentRequest {
	return &events.DeploymentRequest{RequestID: id, DeploymentID: dep, Tenant: tenant, Action: events.ActionDelete, SubmittedAt: time.UnixMilli(1_700_000_000_000).UTC()}
}

// verdictsBy reads verdicts until want of them are read (tombstones
// skipped), by request id.
func verdictsBy(t *testing.T, r *stagetest.Reader, want int) map[string]*events.AdmissionVerdict {
	t.Helper()
	out := map[string]*events.AdmissionVerdict{}
	for _, rec := range r.Until(want, 60*time.Second) {
		if rec.Value == nil {
			continue
		}
		v := stagetest.Decode[*events.AdmissionVerdict](t, rec)
		out[v.RequestID] = v
	}
	return out
}

// TestStageRecordsDeploymentsAndRebuildsThem is the case: the
// ha-clusters deployment six times onto the example datacenter. Four
// fit; the stage is restarted (its state rebuilt from deploy.deployments
// alone); the fifth and sixth are denied naming the PM and its capacity.
// Deleting one releases its capacity and components, and the fifth then
// fits. Every admission and the deletion is billed.
func TestStageRecordsDeploymentsAndRebuildsThem(t *testing.T) {
	c := stagetest.NewCluster(t, 3, stageTopics...)
	exampleDatacenter(t, c)
	verdicts := c.Reader(t, topology.AdmissionVerdicts)
	var recs []*kgo.Record
	for _, dep := range []string{"ha-1", "ha-2", "ha-3", "ha-4"} {
		recs = append(recs, requestRecord(t, c, request("r-"+dep, dep, "t1", haRequest(t, dep))))
	}
	c.ProduceRecords(t, recs...)
	stop := stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	for id, v := range verdictsBy(t, verdicts, 4) {
		if !v.Admitted {
			t.Fatalf("%s denied on a datacenter with room: %v", id, v.Violations)
		}
	}
	deps := c.Read(t, topology.Deployments, 4, 30*time.Second)
	rec := stagetest.Decode[*events.Deployment](t, deps[0])
	if string(deps[0].Key) != rec.DeploymentID || rec.Tenant != "t1" || rec.Environment != "prod" || rec.Datacenter != "dc-example" || rec.VMs != 12 ||
		len(rec.Resources) != 12 || rec.Resources[0].ResourceID != "M11" || rec.Resources[0].Leaf != "r1-pm1" || rec.Resources[0].Demand[0] != 4 ||
		len(rec.Applications) != 1 || rec.Applications[0].Instances != 12 || len(rec.Components) != 1 {
		t.Errorf("deployment record = %+v", rec)
	}
	stop()

	// A new stage on the same data: what is deployed is read back.
	c.ProduceRecords(t,
		requestRecord(t, c, request("r-ha-5", "ha-5", "t1", haRequest(t, "ha-5"))),
		requestRecord(t, c, request("r-ha-6", "ha-6", "t1", haRequest(t, "ha-6"))))
	stop = stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	want := `tenant "t1": resources M11: leaf r1-pm1 is overloaded in vcpu: M11 demand 4, its capacity is 16, of which 16 is in use by deployments ha-1, ha-2, ha-3, ha-4; non-overload (rule placement.non-overload of policy non-overload)`
	got := verdictsBy(t, verdicts, 6)
	for _, id := range []string{"r-ha-5", "r-ha-6"} {
		v := got[id]
		if v == nil || v.Admitted || len(v.Violations) != 12 || v.Violations[0].Message != want {
			t.Errorf("verdict %s = %+v; want denied, first %q", id, v, want)
		}
	}

	// Deleting ha-1 releases it: its record, components and verdict go,
	// and ha-5 fits.
	c.ProduceRecords(t, requestRecord(t, c, deletion("del-1", "ha-1", "t1")))
	tombstoned := func(topic, key string, want int) {
		t.Helper()
		rs := c.ReadUntil(t, topic, 30*time.Second, func(rs []*kgo.Record) bool { return len(rs) >= want })
		for _, r := range rs {
			if string(r.Key) == key && r.Value == nil {
				return
			}
		}
		t.Errorf("deleting ha-1 wrote no tombstone of %s on %s", key, topic)
	}
	tombstoned(topology.Deployments, "ha-1", 5)
	tombstoned(topology.DeployComponents, "ha-1.hadoop", 5)
	c.ProduceRecords(t, requestRecord(t, c, request("r-ha-5b", "ha-5", "t1", haRequest(t, "ha-5"))))
	got = verdictsBy(t, verdicts, 8) // and ha-1's tombstone
	if v := got["r-ha-5b"]; v == nil || !v.Admitted {
		t.Errorf("ha-5 after ha-1 was deleted: %+v; want admitted", v)
	}
	bills := c.ReadUntil(t, topology.BillingEvents, 30*time.Second, func(rs []*kgo.Record) bool { return len(rs) == 6 })
	kinds := map[string]int{}
	for _, r := range bills {
		b := stagetest.Decode[*events.BillingEvent](t, r)
		kinds[b.DeploymentID+" "+b.Kind]++
		if b.Tenant != "t1" || b.Environment != "prod" || len(b.Applications) != 1 || b.Applications[0].Flavor != "m1.medium" || b.VMs != 12 {
			t.Errorf("billing event = %+v", b)
		}
	}
	if len(bills) != 6 || kinds["ha-1 deployment.deleted"] != 1 || kinds["ha-5 deployment.admitted"] != 1 || kinds["ha-6 deployment.admitted"] != 0 {
		t.Errorf("billing events: %v", kinds)
	}
	stop()
}

// TestStageRefusesAnotherTenantsDeletion: a deletion written for a
// deployment another tenant holds is dead-lettered, and the deployment
// stays.
func TestStageRefusesAnotherTenantsDeletion(t *testing.T) {
	c := stagetest.NewCluster(t, 1, stageTopics...)
	c.ProduceRecords(t,
		requestRecord(t, c, request("r1", "d1", "t1", `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"x.A"}]}`)),
		requestRecord(t, c, deletion("del", "d1", "t2")),
		requestRecord(t, c, deletion("del-none", "nobody", "t2")))
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	dlq := c.Read(t, topology.DLQ(topology.StageAdmission), 1, 60*time.Second)
	if string(dlq[0].Key) != topology.DeployRequestsKey {
		t.Errorf("dead letter keyed %q", dlq[0].Key)
	}
	if rs := c.Reader(t, topology.Deployments).Poll(2 * time.Second); len(rs) != 1 || rs[0].Value == nil {
		t.Errorf("deploy.deployments after another tenant's deletion: %d records", len(rs))
	}
}

// TestStageAdmitsOneOfTwoRacingRequests: two requests for the last
// capacity of a PM (16 vCPU each, on r1-pm1), submitted at once and
// decided by two stage members, are not both admitted: every request
// shares one key, so one member decides both, in order.
func TestStageAdmitsOneOfTwoRacingRequests(t *testing.T) {
	c := stagetest.NewCluster(t, 3, stageTopics...)
	exampleDatacenter(t, c)
	body := func(dep string) string {
		return `{"deployment_id":"` + dep + `","tenant":"t-` + dep + `","applications":[{"name":"db","class":"com.example.Db"}],"datacenter":"dc-example",
		  "resources":[{"id":"vm","kind":"vm","demand":[16,8,0]}],"placement":{"vm":"r1-pm1"}}`
	}
	verdicts := c.Reader(t, topology.AdmissionVerdicts)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	// Both members in the group, each holding partitions, before the
	// requests race: otherwise one member alone decides them.
	group := Stage().GroupIn(c.Kafka)
	testkit.Eventually(t, 30*time.Second, testkit.Named("two members with partitions in "+group, func() error {
		gs, err := c.Admin.DescribeGroups(t.Context(), group)
		if err != nil {
			return err
		}
		g := gs[group]
		if g.State != "Stable" || len(g.Members) != 2 {
			return fmt.Errorf("group %s is %s with %d members", group, g.State, len(g.Members))
		}
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); !ok || len(a.Topics) == 0 {
				return fmt.Errorf("member %s holds no partition", m.MemberID)
			}
		}
		return nil
	}))
	var wg sync.WaitGroup
	for _, dep := range []string{"race-a", "race-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.ProduceRecords(t, requestRecord(t, c, request("r-"+dep, dep, "t-"+dep, body(dep))))
		}()
	}
	wg.Wait()
	admitted := 0
	for _, v := range verdictsBy(t, verdicts, 2) {
		if v.Admitted {
			admitted++
		} else if len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, "leaf r1-pm1 is overloaded in vcpu: vm demand 16, its capacity is 16, of which 16 is in use by deployments of other tenants") {
			t.Errorf("denial = %v", v.Violations)
		}
	}
	if admitted != 1 {
		t.Errorf("%d of the two racing requests admitted; want exactly one", admitted)
	}
}

// TestRewoundForgetsAbortedDecisions: what a decision folds into the
// tables at once (its deployment, its components) is dropped when its
// transaction aborts, and what the topics hold stays.
func TestRewoundForgetsAbortedDecisions(t *testing.T) {
	c := stagetest.NewCluster(t, 1, stageTopics...)
	c.Produce(t, topology.Deployments, "kept", &events.Deployment{DeploymentID: "kept", Tenant: "t1", Applications: []events.DeployedApplication{},
		Resources: []events.PlacedResource{}, Links: []events.LinkUse{}, Components: []string{}})
	r := &stageConfig{}
	st := r.stage()
	_, closeStage, err := st.Setup(t.Context(), stagetest.Env(c.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStage()
	outs, err := Decide(t.Context(), request("r1", "phantom", "t1", `{"deployment_id":"phantom","tenant":"t1","applications":[{"name":"a","class":"x.A"}]}`), nil,
		State{Policies: nil, Datacenters: func(string) (*placement.Model, bool) { return nil, false }, Owners: NewNames(), Deployed: admit.DeployedSet{}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The stage's own admitter, as the handler left it after deciding.
	a := r.run.Load()
	a.took(outs)
	if _, ok := a.deps.Get("phantom"); !ok || len(a.names.Deployment("phantom")) != 1 {
		t.Fatal("the decision was not folded in")
	}
	if err := st.Rewound(t.Context(), stagetest.Env(c.Kafka), map[string][]int32{}); err != nil {
		t.Fatal(err)
	}
	a = r.run.Load()
	if _, ok := a.deps.Get("phantom"); ok || len(a.names.Deployment("phantom")) != 0 {
		t.Error("the aborted decision's deployment is still counted after Rewound")
	}
	if _, ok := a.deps.Get("kept"); !ok {
		t.Error("the committed deployment is gone after Rewound")
	}
}

// TestRemoveWithdrawsSettingsPolicies: deleting a deployment removes each
// component's settings policy admission.<component_id> from the catalog,
// in the deletion's outputs (its transaction): a removal on
// pdp.notifications for the deployment's tenant, keyed by the policy,
// from the admission source, naming a version after the admitted one.
func TestRemoveWithdrawsSettingsPolicies(t *testing.T) {
	ctx := context.Background()
	dr := request("r1", "d1", "t1", `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"x.A"},{"name":"b","class":"x.B"}]}`)
	now := time.UnixMilli(1_700_000_000_500).UTC()
	outs, err := Decide(ctx, dr, nil, State{Owners: NewNames(), Deployed: admit.DeployedSet{}}, now)
	if err != nil {
		t.Fatal(err)
	}
	names, deps := NewNames(), admit.DeployedSet{}
	pushed := map[string]int64{}
	for _, o := range outs {
		switch v := o.Value.(type) {
		case *events.Component:
			names.ApplyComponent(string(o.Key), v)
		case *events.Deployment:
			deps[string(o.Key)] = v
		case *events.PdpNotification:
			c, err := policy.Check([]byte(v.PushedBodies[0]))
			if err != nil {
				t.Fatal(err)
			}
			pushed[c.PolicyID], _ = policy.ParseVersion(c.PolicyVersion)
		}
	}
	if len(pushed) != 2 {
		t.Fatalf("settings policies pushed: %v", pushed)
	}
	del := deletion("del-1", "d1", "t1")
	del.SubmittedAt = now.Add(time.Second)
	outs, err = Remove(del, names, deps, nil, now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for _, o := range outs {
		n, ok := o.Value.(*events.PdpNotification)
		if o.Topic != topology.PDPNotifications || !ok {
			continue
		}
		if len(n.RemovedPolicies) != 1 || len(n.PushedBodies) != 0 || len(n.LoadedPolicies) != 0 || n.Tenant != "t1" || n.Source != events.NotifierAdmission {
			t.Fatalf("removal %+v", n)
		}
		id, v, err := policy.CheckName(n.RemovedPolicies[0].PolicyName)
		if err != nil || id != string(o.Key) || v <= pushed[id] || n.RemovedPolicies[0].VersionNo != strconv.FormatInt(v, 10) {
			t.Fatalf("removal of %s keyed %s, version %d (pushed %d): %v", id, o.Key, v, pushed[id], err)
		}
		removed[id] = true
	}
	if !removed["admission.d1.a"] || !removed["admission.d1.b"] || len(removed) != 2 {
		t.Errorf("the deletion removes settings policies %v; want admission.d1.a and admission.d1.b", removed)
	}
}

// TestRemoveRefusedByRequiredApplication: the stage refuses a deletion
// that would leave an environment with deployments but without its
// required application: its one output is a denied verdict naming the
// rule, and nothing is tombstoned.
func TestRemoveRefusedByRequiredApplication(t *testing.T) {
	p, err := admit.Compile("need-mon", []byte(`{"application":"io.policyflow.Monitoring","?":{"type":"io.policyflow.admission.RequiredApplication"}}`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	deps := admit.DeployedSet{}
	names := NewNames()
	for _, js := range []string{
		`{"deployment_id":"mon","tenant":"t1","environment":"e1","applications":[{"name":"mon","class":"io.policyflow.Monitoring"}]}`,
		`{"deployment_id":"web","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web"}]}`,
	} {
		req, err := admit.ParseRequest([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		deps[req.DeploymentID] = admit.Record("r-"+req.DeploymentID, req, placement.Use{}, []string{req.DeploymentID + "." + req.Applications[0].Name}, time.Now())
		names.ApplyComponent(req.DeploymentID+"."+req.Applications[0].Name, &events.Component{ComponentID: req.DeploymentID + "." + req.Applications[0].Name, DeploymentID: req.DeploymentID, Tenant: "t1"})
	}
	outs, err := Remove(deletion("del-mon", "mon", "t1"), names, deps, []*admit.Compiled{p}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v, refused := deletionRefused(outs)
	if !refused || outs[0].Topic != topology.AdmissionVerdicts || string(outs[0].Key) != "mon" || v.RequestID != "del-mon" || len(v.Violations) != 1 ||
		!strings.Contains(v.Violations[0].Message, `environment "e1": deleting deployment mon would leave it without io.policyflow.Monitoring`) {
		t.Fatalf("deleting mon: %+v; want only a denied verdict", outs)
	}
	// web goes without a word; then mon is the environment's last.
	if outs, err := Remove(deletion("del-web", "web", "t1"), names, deps, []*admit.Compiled{p}, time.Now()); err != nil || len(outs) < 3 {
		t.Fatalf("deleting web: %v %+v", err, outs)
	}
	delete(deps, "web")
	if outs, err := Remove(deletion("del-mon2", "mon", "t1"), names, deps, []*admit.Compiled{p}, time.Now()); err != nil || len(outs) < 3 {
		t.Fatalf("deleting mon, the last of e1: %v %+v", err, outs)
	}
}
