package admit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/placement"
)

// deployedOf admits each request in turn against the ones before it and
// returns the set, as the stage keeps it.
func deployedOf(t *testing.T, reqs ...string) DeployedSet {
	t.Helper()
	set := DeployedSet{}
	for _, js := range reqs {
		r := mustRequest(t, js)
		set[r.DeploymentID] = Record("r-"+r.DeploymentID, r, placement.Use{}, nil, time.Unix(0, 0))
	}
	return set
}

func decideWith(t *testing.T, set DeployedSet, js string, ps ...*Compiled) Verdict {
	t.Helper()
	r := mustRequest(t, js)
	v, err := EvaluateDeployed(context.Background(), r, ps, set.For(r, nil))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRequiredApplicationCountsTheEnvironment: the seed's "make each
// deployed environment have a particular application" is per
// environment: a deployment into e1, which already runs the monitoring
// app from an earlier deployment of the tenant, is admitted; one into e2,
// or into another tenant's e1, is not.
func TestRequiredApplicationCountsTheEnvironment(t *testing.T) {
	p := mustCompile(t, "need-mon", `{"application":"io.policyflow.Monitoring","?":{"type":"io.policyflow.admission.RequiredApplication"}}`, "")
	set := deployedOf(t,
		`{"deployment_id":"mon","tenant":"t1","environment":"e1","applications":[{"name":"mon","class":"com.example.Zabbix","inherits":["io.policyflow.Monitoring"]}]}`)
	if v := decideWith(t, set, `{"deployment_id":"web","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web"}]}`, p); !v.Admitted {
		t.Errorf("web into e1, which runs monitoring already: %v", v.Violations)
	}
	for _, js := range []string{
		`{"deployment_id":"web","tenant":"t1","environment":"e2","applications":[{"name":"web","class":"com.example.Web"}]}`,
		`{"deployment_id":"web","tenant":"t2","environment":"e1","applications":[{"name":"web","class":"com.example.Web"}]}`,
		// The monitoring deployment replaced by one without it: its own
		// earlier record does not count.
		`{"deployment_id":"mon","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web"}]}`,
	} {
		v := decideWith(t, set, js, p)
		if v.Admitted || len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, "deploys no io.policyflow.Monitoring, which every environment must have, and no earlier deployment into it does") {
			t.Errorf("%s: verdict %+v; want denied for no monitoring", js, v)
		}
	}
}

// TestInstanceQuotaScopes: the quota per environment and per tenant
// counts what the tenant already runs there; the quota counts the VMs a
// placement carries.
func TestInstanceQuotaScopes(t *testing.T) {
	set := deployedOf(t,
		`{"deployment_id":"a","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web","instances":2}]}`,
		`{"deployment_id":"b","tenant":"t1","environment":"e2","applications":[{"name":"db","class":"com.example.Db","instances":2}]}`,
		`{"deployment_id":"c","tenant":"t2","environment":"e1","applications":[{"name":"web","class":"com.example.Web","instances":9}]}`)
	env := mustCompile(t, "q-env", `{"maxInstances":5,"scope":"environment","?":{"type":"io.policyflow.admission.InstanceQuota"}}`, "")
	ten := mustCompile(t, "q-ten", `{"maxInstances":6,"scope":"tenant","?":{"type":"io.policyflow.admission.InstanceQuota"}}`, "")
	three := `{"deployment_id":"d","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web","instances":3}]}`
	if v := decideWith(t, set, three, env); !v.Admitted {
		t.Errorf("2 + 3 instances in e1 under a quota of 5: %v", v.Violations)
	}
	four := strings.Replace(three, `"instances":3`, `"instances":4`, 1)
	v := decideWith(t, set, four, env)
	if want := `environment "e1": would run 6 instances (2 already deployed by a, 4 in this request); the quota is 5 per environment`; v.Admitted || len(v.Violations) != 1 || v.Violations[0].Object+": "+v.Violations[0].Message != want {
		t.Errorf("2 + 4 in e1: %+v; want %q", v.Violations, want)
	}
	// Replacing deployment a counts its new instances, not its old ones.
	if v := decideWith(t, set, strings.Replace(four, `"deployment_id":"d"`, `"deployment_id":"a"`, 1), env); !v.Admitted {
		t.Errorf("deployment a replaced with 4 instances: %v", v.Violations)
	}
	v = decideWith(t, set, three, ten)
	if want := `would run 7 instances (4 already deployed by a, b, 3 in this request); the quota is 6 per tenant`; v.Admitted || len(v.Violations) != 1 || v.Violations[0].Message != want {
		t.Errorf("tenant quota: %+v; want %q", v.Violations, want)
	}
	// The case: instances 1 with 12 VMs in its placement does not
	// pass a quota of 5 per application.
	per := mustCompile(t, "q-app", `{"maxInstances":5,"?":{"type":"io.policyflow.admission.InstanceQuota"}}`, "")
	ha, err := os.ReadFile("../../placement/examples/ha-clusters.json")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"deployment_id":"ha","tenant":"t1","environment":"e3","applications":[{"name":"web","class":"com.example.Web","instances":1}],` + strings.TrimPrefix(strings.TrimSpace(string(ha)), "{")
	v = decideWith(t, DeployedSet{}, body, per)
	if want := `asks for 12 instances (1, and 11 VMs of the placement no application accounts for); the quota is 5 per application`; v.Admitted || len(v.Violations) != 1 || v.Violations[0].Message != want {
		t.Errorf("1 instance with 12 VMs under a quota of 5: %+v; want %q", v.Violations, want)
	}
	v = decideWith(t, DeployedSet{}, body, env)
	if v.Admitted || !strings.Contains(v.Violations[0].Message, "would run 12 instances") {
		t.Errorf("environment quota with 12 VMs: %+v", v.Violations)
	}
	if _, err := Compile("bad", []byte(`{"maxInstances":5,"scope":"rack","?":{"type":"io.policyflow.admission.InstanceQuota"}}`), "", nil); err == nil || !strings.Contains(err.Error(), "objectModel.scope") {
		t.Errorf("scope rack: %v; want a 400 naming objectModel.scope", err)
	}
}

// TestInstanceNoticeCountsTheEnvironment: the over-quota notice adds
// what is deployed in the environment.
func TestInstanceNoticeCountsTheEnvironment(t *testing.T) {
	set := deployedOf(t, `{"deployment_id":"a","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web","instances":4}]}`)
	p := mustCompile(t, "note", `{"maxInstances":5,"?":{"type":"io.policyflow.admission.InstanceNotice"}}`, "")
	v := decideWith(t, set, `{"deployment_id":"d","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web","instances":2}]}`, p)
	if !v.Admitted || len(v.Warnings) != 1 || v.Warnings[0].Message != "spawns 6 instances (4 already deployed by a, 2 in this request), more than the 5 the notice is set at" {
		t.Errorf("notice: %+v", v)
	}
}

// TestRecordAndBilling: the record holds what was admitted, with the
// placement's resources and bandwidth; the billing event what it runs.
func TestRecordAndBilling(t *testing.T) {
	r := mustRequest(t, `{"deployment_id":"d","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web","instances":2,"flavor":"m1.small"}],
	  "datacenter":"dc","resources":[{"id":"vm","kind":"vm","demand":[4,8,0]},{"id":"vol","kind":"volume","demand":[0,0,300]}],"placement":{"vm":"r1-pm1","vol":"r1-sb1"}}`)
	rec := Record("r1", r, placement.Use{Links: map[string]float64{"tor1": 5, "r1-pm1": 5}}, []string{"d.web"}, time.Unix(10, 0))
	if rec.VMs != 1 || len(rec.Resources) != 2 || rec.Resources[0].Leaf != "r1-pm1" || rec.Resources[1].Demand[2] != 300 ||
		len(rec.Links) != 2 || rec.Links[0].Vertex != "r1-pm1" || rec.Applications[0].Instances != 2 || rec.Datacenter != "dc" {
		t.Errorf("record = %+v", rec)
	}
	u := UseOf(rec)
	if u.Leaves["r1-pm1"][0] != 4 || u.Leaves["r1-sb1"][2] != 300 || u.Links["tor1"] != 5 {
		t.Errorf("use of the record = %+v", u)
	}
	b := Billing(events.BillingDeleted, "r2", rec, time.Unix(20, 0))
	if b.Kind != events.BillingDeleted || b.EventID != "r2/deployment.deleted" || b.Tenant != "t1" || b.Environment != "e1" ||
		len(b.Applications) != 1 || b.Applications[0].Flavor != "m1.small" || b.Applications[0].Instances != 2 || b.VMs != 1 {
		t.Errorf("billing event = %+v", b)
	}
	if r.Instances() != 2 {
		t.Errorf("instances = %d; want 2 (the applications' 2 over 1 VM)", r.Instances())
	}
}

// BenchmarkDecideAgainst10000Deployments: what counting the deployed
// state costs one request when 10,000 deployments of 12 VMs each, of 100
// tenants, are on its datacenter of 10,000 PMs (12 deployments on each
// PM): cutting the set (DeployedSet.For), taking their use off the model
// (placement.Model.Remaining) and the placement check on it.
func BenchmarkDecideAgainst10000Deployments(b *testing.B) {
	benchDecide(b, func(set DeployedSet) DeployedState { return set })
}

// BenchmarkDecideAgainst10000DeploymentsLedger is the same decision on
// the running totals the stage keeps (Ledger): the tenant's deployments
// and the datacenter's usage are not summed again.
func BenchmarkDecideAgainst10000DeploymentsLedger(b *testing.B) {
	benchDecide(b, func(set DeployedSet) DeployedState {
		l := NewLedger()
		for id, e := range set {
			l.Apply(id, e)
		}
		return l
	})
}

func benchDecide(b *testing.B, state func(DeployedSet) DeployedState) {
	m, err := placement.Compile(placement.SyntheticDatacenter(100, 100))
	if err != nil {
		b.Fatal(err)
	}
	leaf := func(n int) string { n %= 10000; return fmt.Sprintf("r%d-pm%d", n/100, n%100) }
	request := func(dep, tenant string, first int, demand []float64) *Request {
		r := &Request{DeploymentID: dep, Tenant: tenant, Environment: "prod",
			Applications: []Application{{Name: "web", Class: "com.example.Web", Instances: 12}}}
		r.Datacenter, r.Placement = "synthetic", map[string]string{}
		for j := range 12 {
			id := fmt.Sprintf("vm%d", j)
			r.Resources = append(r.Resources, placement.Resource{ID: id, Kind: "vm", Demand: demand})
			r.Placement[id] = leaf(first + j)
		}
		return r
	}
	set := DeployedSet{}
	for i := range 10000 {
		r := request(fmt.Sprintf("d%d", i), fmt.Sprintf("t%d", i%100), i*12, []float64{1, 2})
		set[r.DeploymentID] = Record("r", r, placement.Use{}, nil, time.Unix(0, 0))
	}
	req := request("new", "t1", 0, []float64{4, 8})
	st := state(set)
	dcs := func(string) (*placement.Model, bool) { return m, true }
	b.ResetTimer()
	for range b.N {
		d := st.For(req, dcs)
		v := Verdict{Request: req}
		CheckPlacement(&v, dcs, d.Usage)
		if len(d.Tenant) != 100 || len(v.Violations) != 0 {
			b.Fatalf("%d deployments of the tenant, violations %v", len(d.Tenant), v.Violations)
		}
	}
}

// TestDeletionKeepsTheRequiredApplication: deleting the only deployment
// of an environment that runs the required application, while other
// deployments of the tenant remain in it, is refused naming them; the
// deletion is allowed when another deployment there runs it, when the
// deployment deleted does not run it, when nothing else remains in the
// environment, for another tenant's policy, and in audit mode (a
// warning).
func TestDeletionKeepsTheRequiredApplication(t *testing.T) {
	const model = `{"application":"io.policyflow.Monitoring","?":{"type":"io.policyflow.admission.RequiredApplication"}}`
	p := mustCompile(t, "need-mon", model, "")
	mon := `{"deployment_id":"mon","tenant":"t1","environment":"e1","applications":[{"name":"mon","class":"com.example.Zabbix","inherits":["io.policyflow.Monitoring"]}]}`
	web := `{"deployment_id":"web","tenant":"t1","environment":"e1","applications":[{"name":"web","class":"com.example.Web"}]}`
	set := deployedOf(t, mon, web,
		`{"deployment_id":"mon-e2","tenant":"t1","environment":"e2","applications":[{"name":"mon","class":"io.policyflow.Monitoring"}]}`,
		`{"deployment_id":"other","tenant":"t2","environment":"e1","applications":[{"name":"web","class":"com.example.Web"}]}`)
	del := func(set DeployedSet, dep string, ps ...*Compiled) Verdict {
		return EvaluateDeletion(set[dep], set.Others(set[dep]), ps)
	}
	v := del(set, "mon", p)
	want := `deleting deployment mon would leave it without io.policyflow.Monitoring, which every environment must have: web is still deployed in it and none runs io.policyflow.Monitoring; deploy io.policyflow.Monitoring there first, or delete it first`
	if v.Admitted || len(v.Violations) != 1 || v.Violations[0].Message != want || v.Violations[0].Rule != "required-application" || v.Violations[0].PolicyID != "need-mon" || v.Violations[0].Object != `environment "e1"` {
		t.Errorf("deleting mon: %+v; want refused: %s", v, want)
	}
	if v := del(set, "web", p); !v.Admitted {
		t.Errorf("deleting web, which does not run monitoring: %+v", v.Violations)
	}
	if v := del(set, "mon-e2", p); !v.Admitted {
		t.Errorf("deleting the last deployment of e2: %+v", v.Violations)
	}
	if v := del(set, "mon", mustCompile(t, "t2-only", model, "", "t2")); !v.Admitted {
		t.Errorf("another tenant's policy: %+v", v.Violations)
	}
	if v := del(set, "mon", mustCompile(t, "audit", model, ModeAudit)); !v.Admitted || len(v.Warnings) != 1 {
		t.Errorf("audit mode: %+v; want allowed with a warning", v)
	}
	both := deployedOf(t, mon, web, `{"deployment_id":"mon2","tenant":"t1","environment":"e1","applications":[{"name":"m","class":"io.policyflow.Monitoring"}]}`)
	if v := del(both, "mon", p); !v.Admitted {
		t.Errorf("deleting mon while mon2 runs monitoring in e1: %+v", v.Violations)
	}
}

// TestLedgerAgreesWithTheSet: the running totals give every decision
// what summing the set gives, as deployments are admitted, replaced
// (moving between datacenters and tenants' leaves) and deleted.
func TestLedgerAgreesWithTheSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	set, l := DeployedSet{}, NewLedger()
	record := func(dep, tenant, dc string, n int) *events.Deployment {
		r := &Request{DeploymentID: dep, Tenant: tenant, Environment: "e" + strconv.Itoa(rng.IntN(2)),
			Applications: []Application{{Name: "a", Class: "x.A", Instances: n}}}
		if dc != "" {
			r.Datacenter, r.Placement = dc, map[string]string{}
			for j := range n {
				id := "vm" + strconv.Itoa(j)
				r.Resources = append(r.Resources, placement.Resource{ID: id, Kind: "vm", Demand: []float64{float64(rng.IntN(4)), 0.1}})
				r.Placement[id] = "pm" + strconv.Itoa(rng.IntN(5))
			}
		}
		return Record("r"+strconv.Itoa(rng.IntN(1e9)), r, placement.Use{Links: map[string]float64{"r" + strconv.Itoa(rng.IntN(2)): 0.3}}, nil, time.Unix(int64(rng.IntN(1e6)), 0))
	}
	usageOf := func(u *placement.Usage) string { return u.String() }
	for i := range 2000 {
		dep := "d" + strconv.Itoa(rng.IntN(40))
		if rng.IntN(4) == 0 {
			delete(set, dep)
			l.Apply(dep, nil)
		} else {
			e := record(dep, "t"+strconv.Itoa(rng.IntN(3)), []string{"", "dc1", "dc2"}[rng.IntN(3)], 1+rng.IntN(3))
			set[dep] = e
			l.Apply(dep, e)
			if rng.IntN(2) == 0 {
				// The same record read back from the topic.
				back := *e
				back.AdmittedAt = e.AdmittedAt.Truncate(time.Millisecond)
				l.Apply(dep, &back)
				set[dep] = &back
			}
		}
		req := &Request{DeploymentID: "d" + strconv.Itoa(rng.IntN(40)), Tenant: "t" + strconv.Itoa(rng.IntN(3))}
		req.Datacenter = []string{"", "dc1", "dc2"}[rng.IntN(3)]
		want, got := set.For(req, nil), l.For(req, nil)
		if !slices.Equal(want.Tenant, got.Tenant) || usageOf(want.Usage) != usageOf(got.Usage) {
			t.Fatalf("step %d, request %+v:\n set    %d deployments, usage %s\n ledger %d deployments, usage %s", i, req, len(want.Tenant), usageOf(want.Usage), len(got.Tenant), usageOf(got.Usage))
		}
	}
}
