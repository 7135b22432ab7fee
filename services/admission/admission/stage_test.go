package admission

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/topology"
)

// stageTopics are the topics the admission stage reads and writes.
var stageTopics = []string{topology.DeployRequests, topology.PDPNotifications, topology.AdmissionVerdicts, topology.DeployComponents,
	topology.AppPolicies, topology.Datacenters, topology.Deployments, topology.BillingEvents, topology.AdmissionAudit, topology.AdmissionNotices, topology.DLQ(topology.StageAdmission)}

func request(id, dep, tenant, body string) *events.DeploymentRequest {
	return &events.DeploymentRequest{RequestID: id, DeploymentID: dep, Tenant: tenant, Request: body, SubmittedAt: time.UnixMilli(1_700_000_000_000).UTC()}
}

func TestStageAdmitsDeniesAndDeadLetters(t *testing.T) {
	c := stagetest.NewCluster(t, 3, stageTopics...)
	tenants := []string{"t1"}
	c.Produce(t, topology.AppPolicies, "flavor", &events.AppPolicy{
		PolicyID: "flavor", ObjectModel: `{"maxFlavor":"m1.medium","approvedApplications":["com.example.Analytics"],"?":{"type":"io.policyflow.admission.FlavorLimit"}}`,
		TenantIDs: &tenants, Mode: "enforce",
	})
	c.Produce(t, topology.AppPolicies, "image", &events.AppPolicy{
		PolicyID: "image", ObjectModel: `{"field":"image","value":"ubuntu-promoted","?":{"type":"io.policyflow.admission.DefaultOverride"}}`, Mode: "enforce",
	})
	// A policy written around the API that does not compile is left out.
	c.Produce(t, topology.AppPolicies, "broken", &events.AppPolicy{PolicyID: "broken", ObjectModel: `{"?":{"type":"nope"}}`})

	denied := request("r1", "d-big", "t1", `{"deployment_id":"d-big","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`)
	admitted := request("r2", "d-ok", "t1", `{"deployment_id":"d-ok","tenant":"t1","environment":"prod","applications":[{"name":"an","class":"com.example.Analytics","flavor":"m1.xlarge"}]}`)
	noTenant := request("r3", "d-nt", "", `{"deployment_id":"d-nt","applications":[{"name":"a","class":"x.A"}]}`)
	c.ProduceRecords(t,
		c.Record(t, topology.DeployRequests, "d-big", denied),
		c.Record(t, topology.DeployRequests, "d-ok", admitted),
		c.Record(t, topology.DeployRequests, "d-nt", noTenant),
		&kgo.Record{Topic: c.Kafka.Topic(topology.DeployRequests), Key: []byte("junk"), Value: []byte("not avro")},
	)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))

	verdicts := map[string]*events.AdmissionVerdict{}
	for _, r := range c.Read(t, topology.AdmissionVerdicts, 3, 60*time.Second) {
		v := stagetest.Decode[*events.AdmissionVerdict](t, r)
		if string(r.Key) != v.DeploymentID {
			t.Errorf("verdict of %s keyed %q", v.DeploymentID, r.Key)
		}
		verdicts[v.DeploymentID] = v
	}
	if v := verdicts["d-big"]; v == nil || v.Admitted || len(v.Violations) != 1 ||
		v.Violations[0].Message != `tenant "t1": application "web" (com.example.Web): flavor m1.large is larger than m1.medium, the largest allowed to applications not approved (rule flavor-limit of policy flavor)` {
		t.Errorf("verdict on d-big = %+v", v)
	}
	if v := verdicts["d-nt"]; v == nil || v.Admitted || len(v.Violations) != 1 || v.Violations[0].Rule != "request" {
		t.Errorf("verdict on d-nt = %+v", v)
	}
	v := verdicts["d-ok"]
	if v == nil || !v.Admitted || len(v.Components) != 1 || v.Components[0] != "d-ok.an" || len(v.Mutations) != 1 || v.Mutations[0].NewValue != `"ubuntu-promoted"` {
		t.Fatalf("verdict on d-ok = %+v", v)
	}
	comps := c.Read(t, topology.DeployComponents, 1, 30*time.Second)
	comp := stagetest.Decode[*events.Component](t, comps[0])
	if comp.ComponentID != "d-ok.an" || comp.Tenant != "t1" || comp.DeploymentID != "d-ok" || comp.ServiceComponentName != "d-ok.an" ||
		len(comp.PolicyIDs) != 1 || comp.PolicyIDs[0] != "admission.d-ok.an" ||
		comp.Config != `{"application":"an","environment":"prod","class":"com.example.Analytics","instances":1,"flavor":"m1.xlarge","image":"ubuntu-promoted"}` {
		t.Errorf("component = %+v", comp)
	}
	notes := c.Read(t, topology.PDPNotifications, 1, 30*time.Second)
	note := stagetest.Decode[*events.PdpNotification](t, notes[0])
	if string(notes[0].Key) != "admission.d-ok.an" || note.Tenant != "t1" || len(note.PushedBodies) != 1 ||
		note.PushedBodies[0] != `{"config":{"application":"an","class":"com.example.Analytics","environment":"prod","flavor":"m1.xlarge","image":"ubuntu-promoted","instances":1},"matchingConditions":{"ConfigName":"d-ok.an","ONAPName":"admission"},"policyConfigStatus":"CONFIG_RETRIEVED","policyName":"admission.d-ok.an.1700000000000.json","policyVersion":"1700000000000"}` {
		t.Errorf("settings policy %q = %+v", notes[0].Key, note)
	}
	dlq := c.Read(t, topology.DLQ(topology.StageAdmission), 1, 30*time.Second)
	if string(dlq[0].Key) != "junk" {
		t.Errorf("dead letter keyed %q", dlq[0].Key)
	}
}

// TestStageChecksPlacement: a request that names a datacenter stored on
// placement.datacenters has its placement checked; one naming a
// datacenter that is not there is denied with the reason.
func TestStageChecksPlacement(t *testing.T) {
	c := stagetest.NewCluster(t, 1, stageTopics...)
	model, err := os.ReadFile("../../placement/examples/datacenter.json")
	if err != nil {
		t.Fatal(err)
	}
	c.Produce(t, topology.Datacenters, "dc-example", &events.Datacenter{DatacenterID: "dc-example", Model: string(model)})
	// A model written around the API that does not validate is left out.
	c.Produce(t, topology.Datacenters, "dc-broken", &events.Datacenter{DatacenterID: "dc-broken", Model: `{"id":"dc-broken"}`})
	body := func(dep, dc, pm string) string {
		return `{"deployment_id":"` + dep + `","tenant":"t1","applications":[{"name":"db","class":"com.example.Db"}],"datacenter":"` + dc + `",
		  "resources":[{"id":"vm","kind":"vm","demand":[4,8,0]},{"id":"vol","kind":"volume","demand":[0,0,300]}],
		  "placement_policies":[{"id":"das","type":"hop-count-limit","mode":"hard","applies_to":["vm","vol"],"properties":{"hops":0}}],
		  "placement":{"vm":"r1-pm1","vol":"` + pm + `"}}`
	}
	c.ProduceRecords(t,
		c.Record(t, topology.DeployRequests, "d-local", request("r1", "d-local", "t1", body("d-local", "dc-example", "r1-pm1"))),
		c.Record(t, topology.DeployRequests, "d-remote", request("r2", "d-remote", "t1", body("d-remote", "dc-example", "r1-sb1"))),
		c.Record(t, topology.DeployRequests, "d-broken", request("r3", "d-broken", "t1", body("d-broken", "dc-broken", "r1-pm1"))),
	)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	verdicts := map[string]*events.AdmissionVerdict{}
	for _, r := range c.Read(t, topology.AdmissionVerdicts, 3, 60*time.Second) {
		v := stagetest.Decode[*events.AdmissionVerdict](t, r)
		verdicts[v.DeploymentID] = v
	}
	if v := verdicts["d-local"]; v == nil || !v.Admitted {
		t.Errorf("verdict on d-local = %+v", v)
	}
	if v := verdicts["d-remote"]; v == nil || v.Admitted || len(v.Violations) != 1 ||
		v.Violations[0].Message != `tenant "t1": resources vm, vol: vm and vol are 2 network hops apart (r1-pm1 to r1-sb1); hop-count limit 0 (the same host: direct attached) (rule placement.hop-count-limit of policy das)` {
		t.Errorf("verdict on d-remote = %+v", v)
	}
	if v := verdicts["d-broken"]; v == nil || v.Admitted || len(v.Violations) != 1 || v.Violations[0].Rule != "placement.datacenter" {
		t.Errorf("verdict on d-broken = %+v", v)
	}
}

func TestCatchUpCoversTheRequestsWrittenBeforeIt(t *testing.T) {
	began := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	ends := map[int32]int64{0: 10, 1: 0}
	for _, c := range []struct {
		name      string
		ts        time.Time
		partition int32
		offset    int64
		want      bool
	}{
		{"stamped more than the clock skew before the catch-up", began.Add(-ClockSkew - time.Millisecond), 2, 99, true},
		{"stamped within the clock skew, written before the catch-up", began.Add(-time.Second), 0, 9, true},
		{"stamped within the clock skew, written after the catch-up", began.Add(-time.Second), 0, 10, false},
		{"stamped after the catch-up began", began.Add(time.Second), 0, 10, false},
		{"a partition that was empty when the catch-up began", began, 1, 0, false},
		{"a partition the catch-up did not list", began, 2, 0, false},
		{"no catch-up yet", began, 0, 0, false},
	} {
		b, e := began, ends
		if c.name == "no catch-up yet" {
			b, e = time.Time{}, nil
		}
		if got := covers(b, e, c.ts, c.partition, c.offset); got != c.want {
			t.Errorf("%s: covers = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStageRefusesAnotherTenantsNames: a request written straight onto
// deploy.requests that would take over another tenant's component (its
// id, or its Consul folder) is denied naming the owner, and one for
// another tenant's deployment is dead-lettered, its verdict not written
// over the owner's.
func TestStageRefusesAnotherTenantsNames(t *testing.T) {
	c := stagetest.NewCluster(t, 1, stageTopics...)
	c.Produce(t, topology.AdmissionVerdicts, "gx.prod", &events.AdmissionVerdict{RequestID: "g1", DeploymentID: "gx.prod", Tenant: "globex", Admitted: true,
		Violations: []events.AdmissionFinding{}, Warnings: []events.AdmissionFinding{}, Mutations: []events.AdmissionMutation{}, Request: "{}",
		Components: []string{"gx.prod.web"}, Policies: []string{}})
	c.Produce(t, topology.DeployComponents, "gx.prod.web", &events.Component{ComponentID: "gx.prod.web", DeploymentID: "gx.prod", ServiceComponentName: "gx.prod.web",
		Tenant: "globex", PolicyIDs: []string{"admission.gx.prod.web"}, PolicyFilters: []events.PolicyFilter{}, Notify: events.NotifyTarget{Kind: events.NotifyNone}, Config: "{}", Generation: 1})
	app := func(name, scn string) string {
		return `{"name":"` + name + `","package":"a.b","class":"a.b.C","properties":{"db_password":"attacker"},"component":{"service_component_name":"` + scn + `","notify":{"kind":"none"}}}`
	}
	c.ProduceRecords(t,
		c.Record(t, topology.DeployRequests, "gx", request("r1", "gx", "acme", `{"deployment_id":"gx","tenant":"acme","applications":[`+app("prod.web", "gx.prod.web")+`]}`)),
		c.Record(t, topology.DeployRequests, "gx", request("r2", "gx", "acme", `{"deployment_id":"gx","tenant":"acme","applications":[`+app("web", "gx.prod.web")+`]}`)),
		c.Record(t, topology.DeployRequests, "gx.prod", request("r3", "gx.prod", "acme", `{"deployment_id":"gx.prod","tenant":"acme","applications":[`+app("web", "gx.prod.web")+`]}`)),
		c.Record(t, topology.DeployRequests, "ac", request("r4", "ac", "acme", `{"deployment_id":"ac","tenant":"acme","applications":[`+app("web", "ac-web")+`]}`)),
		c.Record(t, topology.DeployRequests, "ac2", request("r5", "ac2", "globex", `{"deployment_id":"ac2","tenant":"globex","applications":[`+app("web", "ac-web")+`]}`)),
	)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	byRequest := map[string]*events.AdmissionVerdict{}
	for _, r := range c.Read(t, topology.AdmissionVerdicts, 5, 60*time.Second) {
		v := stagetest.Decode[*events.AdmissionVerdict](t, r)
		byRequest[v.RequestID] = v
	}
	if v := byRequest["r1"]; v == nil || v.Admitted || len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, `applications[0].name: "prod.web" holds a '.'`) {
		t.Errorf("verdict on the dotted name = %+v; want denied for the '.' in the name", v)
	}
	if v := byRequest["r2"]; v == nil || v.Admitted || len(v.Violations) != 1 ||
		v.Violations[0].Message != `tenant "acme": application "web": service_component_name gx.prod.web is the Consul folder of component gx.prod.web of tenant "globex", not of tenant "acme" (rule names of policy names)` {
		t.Errorf("verdict on the folder takeover = %+v; want denied naming tenant globex", v)
	}
	if v := byRequest["r3"]; v != nil {
		t.Errorf("a verdict on another tenant's deployment was written: %+v", v)
	}
	if v := byRequest["r4"]; v == nil || !v.Admitted {
		t.Errorf("verdict on acme's own new deployment = %+v; want admitted", v)
	}
	// r5 is decided after r4 in the same run: r4's folder counts at once.
	if v := byRequest["r5"]; v == nil || v.Admitted || len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, `component ac.web of tenant "acme"`) {
		t.Errorf("verdict on globex's request for acme's new folder = %+v; want denied naming tenant acme", v)
	}
	dlq := c.Read(t, topology.DLQ(topology.StageAdmission), 1, 30*time.Second)
	if string(dlq[0].Key) != "gx.prod" {
		t.Errorf("dead letter keyed %q; want gx.prod", dlq[0].Key)
	}
	comps := c.Read(t, topology.DeployComponents, 2, 30*time.Second)
	for _, r := range comps {
		if comp := stagetest.Decode[*events.Component](t, r); comp.ComponentID == "gx.prod.web" && comp.Tenant != "globex" {
			t.Errorf("component gx.prod.web now registered to %q", comp.Tenant)
		}
	}
}
