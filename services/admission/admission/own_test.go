package admission

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// TestOwnWritesAreFoldedInWithoutDecoding: a record the run wrote
// (marked by ownWrites) is folded in from the value the run made, not
// decoded: its bytes here are not even Avro. A record another run wrote,
// or one with no mark, is decoded.
func TestOwnWritesAreFoldedInWithoutDecoding(t *testing.T) {
	c := stagetest.NewCluster(t, 1, topology.AdmissionVerdicts)
	env := stagetest.Env(c.Kafka)
	own, other := newOwnWrites(), newOwnWrites()

	mine := runtime.Output{Topic: topology.AdmissionVerdicts, Key: []byte("d1"), Value: &events.AdmissionVerdict{DeploymentID: "d1", Tenant: "t1"}}
	own.mark(&mine, ownWrite{})
	theirs := runtime.Output{Topic: topology.AdmissionVerdicts, Key: []byte("d2"), Value: &events.AdmissionVerdict{DeploymentID: "d2", Tenant: "t2"}}
	other.mark(&theirs, ownWrite{})
	mineRec := &kgo.Record{Topic: c.Kafka.Topic(topology.AdmissionVerdicts), Key: mine.Key, Value: []byte("not avro"), Headers: mine.Headers}
	theirsRec := c.Record(t, topology.AdmissionVerdicts, "d2", &events.AdmissionVerdict{DeploymentID: "d2", Tenant: "t2-decoded"})
	theirsRec.Headers = theirs.Headers
	plain := c.Record(t, topology.AdmissionVerdicts, "d3", &events.AdmissionVerdict{DeploymentID: "d3", Tenant: "t3"})
	// Another writer's record under another key, carrying a copy of
	// this run's header: decoded, not taken for d1's write.
	copied := c.Record(t, topology.AdmissionVerdicts, "d4", &events.AdmissionVerdict{DeploymentID: "d4", Tenant: "t4"})
	copied.Headers = mine.Headers
	c.ProduceRecords(t, copied, mineRec, theirsRec, plain)

	got := map[string]string{}
	known := map[string]bool{}
	var ts tables
	err := followOwn(env, &ts, topology.AdmissionVerdicts, own, func(dep string, v *events.AdmissionVerdict) {
		got[dep] = v.Tenant
	}, func(dep string, w ownWrite) {
		known[dep] = true
		got[dep] = w.value.(*events.AdmissionVerdict).Tenant
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.close()
	if err := ts.catchUp(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d1": "t1", "d2": "t2-decoded", "d3": "t3", "d4": "t4"}
	if !reflect.DeepEqual(got, want) || !known["d1"] || known["d2"] || known["d3"] || known["d4"] {
		t.Fatalf("folded in %v (known %v), want %v with only d1 known", got, known, want)
	}
	if n := own.pending(); n != 0 {
		t.Fatalf("%d writes still pending after being read back, want 0", n)
	}
}

// TestIndexesCopyDecodedStrings: what the indexes keep of a decoded
// record shares no memory with it (the decoder carves strings out of
// buffers shared with other records).
func TestIndexesCopyDecodedStrings(t *testing.T) {
	d := &events.Deployment{DeploymentID: "d1", Tenant: "t1", Environment: "prod", RequestID: "r1", Datacenter: "dc1", Request: "{}",
		Applications: []events.DeployedApplication{{Name: "a", Class: "x.A", Package: "p", Inherits: []string{"x.B"}, Flavor: "m1.small"}},
		Resources:    []events.PlacedResource{{ResourceID: "vm1", Kind: "vm", Leaf: "pm1", Demand: []float64{1}}},
		Links:        []events.LinkUse{{Vertex: "rack1", BytesPerSecond: 1}}, Components: []string{"d1.a"}, AdmittedAt: time.UnixMilli(1)}
	c := ownCopy(d)
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("copy %+v, want %+v", c, d)
	}
	var shared []string
	walkStrings(reflect.ValueOf(d).Elem(), reflect.ValueOf(c).Elem(), "Deployment", &shared)
	if len(shared) > 0 {
		t.Fatalf("the copy shares %v with the decoded record", shared)
	}

	n := NewNames()
	comp := &events.Component{ComponentID: "c1", DeploymentID: "d1", ServiceComponentName: "f1", Tenant: "t1"}
	n.ApplyComponent("c1", comp)
	n.ApplyVerdict("d1", &events.AdmissionVerdict{Tenant: comp.Tenant})
	h := n.comps["c1"]
	for _, p := range [][2]string{{h.tenant, comp.Tenant}, {h.folder, comp.ServiceComponentName}, {h.deployment, comp.DeploymentID}, {n.verdicts["d1"], comp.Tenant}} {
		if unsafe.StringData(p[0]) == unsafe.StringData(p[1]) {
			t.Fatalf("names keep %q of the record itself", p[0])
		}
	}
}

// walkStrings appends the path of every non-empty string of a that b
// holds in the same memory.
func walkStrings(a, b reflect.Value, path string, shared *[]string) {
	switch a.Kind() {
	case reflect.String:
		if a.Len() > 0 && unsafe.StringData(a.String()) == unsafe.StringData(b.String()) {
			*shared = append(*shared, path)
		}
	case reflect.Struct:
		for i := range a.NumField() {
			walkStrings(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name, shared)
		}
	case reflect.Slice:
		for i := range a.Len() {
			walkStrings(a.Index(i), b.Index(i), path, shared)
		}
	}
}

// TestKeptEntriesTellFindingsApart: what the reports keep of an entry is
// equal for entries of the same request and findings, and tells apart any
// other, also findings whose texts only split differently.
func TestKeptEntriesTellFindingsApart(t *testing.T) {
	entry := func(req string, fs ...events.AuditFinding) *events.AuditEntry {
		return &events.AuditEntry{PolicyID: "p", DeploymentID: "d", RequestID: req, Findings: fs}
	}
	base := entry("r1", events.AuditFinding{Rule: "ab", Object: "c", Message: "m"})
	if *keep(base) != *keep(entry("r1", events.AuditFinding{Rule: "ab", Object: "c", Message: "m"})) {
		t.Fatal("the same entry is kept differently")
	}
	for _, other := range []*events.AuditEntry{
		entry("r2", events.AuditFinding{Rule: "ab", Object: "c", Message: "m"}),
		entry("r1", events.AuditFinding{Rule: "a", Object: "bc", Message: "m"}),
		entry("r1", events.AuditFinding{Rule: "ab", Object: "c", Message: "m2"}),
		entry("r1", events.AuditFinding{Rule: "ab", Object: "c", Message: "m"}, events.AuditFinding{}),
		entry("r1"),
	} {
		if *keep(base) == *keep(other) {
			t.Errorf("%+v is kept as %+v is", other, base)
		}
	}
	if keep(nil) != nil {
		t.Error("no entry is kept as one")
	}
}
