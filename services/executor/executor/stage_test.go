package executor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// newCluster is an in-process Kafka with the executor's topics.
func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	c := stagetest.NewCluster(t, 3)
	c.CreateTopics(t, map[string]string{"max.message.bytes": topology.MaxMessageBytes},
		topology.PolicySegments, topology.DeployComponents, topology.ComponentPolicies, topology.DLQ(topology.StageExecutor))
	return c
}

func decodeCP(t *testing.T, rec *kgo.Record) *events.ComponentPolicies {
	t.Helper()
	return stagetest.Decode[*events.ComponentPolicies](t, rec)
}

func testEnv(c *stagetest.Cluster) runtime.Env {
	return stagetest.Env(c.Kafka)
}

func component(id, scn string) *events.Component {
	return &events.Component{
		ComponentID: id, DeploymentID: "dep-1", ServiceComponentName: scn,
		Notify:    events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/opt/app/reconfigure.sh"},
		Config:    "{}",
		UpdatedAt: time.UnixMilli(1000).UTC(),
	}
}

func vmMemory() events.Policy {
	return hashed(events.Policy{
		PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
		Body: `{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}`,
	})
}

func piece(update string, index, count int32, comps ...events.ComponentDelta) *events.PolicySegment {
	return &events.PolicySegment{UpdateID: update, DeploymentID: "dep-1", Index: index, Count: count, Components: comps, CreatedAt: time.UnixMilli(2000).UTC()}
}

func TestExecutorStage(t *testing.T) {
	c := newCluster(t)
	c.Produce(t, topology.DeployComponents, "c1", component("c1", "dcae-vm"))
	out := c.Reader(t, topology.ComponentPolicies)
	env := testEnv(c)
	stagetest.Run(t, Stage(), env)

	// A one-piece update: the component's first collection.
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u1", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{vmMemory()}}))
	recs := out.Until(1, 60*time.Second)
	if len(recs) != 1 {
		t.Fatalf("got %d component.policies records after u1, want 1", len(recs))
	}
	cp := decodeCP(t, recs[0])
	if string(recs[0].Key) != "c1" || cp.UpdateID != "u1" || cp.Generation != 1 || cp.ServiceComponentName != "dcae-vm" ||
		cp.DeploymentID != "dep-1" || cp.Notify.Kind != events.NotifyScript || cp.Uninstalled ||
		!reflect.DeepEqual(cp.Policies, []events.Policy{vmMemory()}) || !reflect.DeepEqual(cp.UpdatedPolicies, []events.Policy{ref(vmMemory())}) ||
		len(cp.RemovedPolicies) != 0 {
		t.Fatalf("u1 wrote %+v", cp)
	}

	// A three-piece update applies as one change: one record.
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 1, 3, events.ComponentDelta{ComponentID: "c1",
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_VM_MEMORY", PolicyVersion: ver("222")}}}))
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 2, 3, events.ComponentDelta{ComponentID: "c1",
		UpdatedPolicies: []events.Policy{pol("X", "1")}}))
	// The pieces so far are committed on their own, before the last one.
	waitCommitted(t, c, Stage().GroupIn(c.Kafka), topology.PolicySegments)
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 3, 3, events.ComponentDelta{ComponentID: "c1",
		AddedPolicies: []events.FilterMatch{{FilterID: "f1", Policies: []events.Policy{pol("Y", "2")}}}}))
	recs = out.Until(2, 60*time.Second)
	if len(recs) != 2 {
		t.Fatalf("got %d records after u2, want 2", len(recs))
	}
	cp = decodeCP(t, recs[1])
	if cp.UpdateID != "u2" || cp.Generation != 2 || !reflect.DeepEqual(ids(cp.Policies), []string{"X@1", "Y@2"}) ||
		!reflect.DeepEqual(ids(cp.UpdatedPolicies), []string{"X@1", "Y@2"}) || !reflect.DeepEqual(cp.RemovedPolicies, []events.Policy{vmMemory()}) {
		t.Fatalf("u2 wrote %+v", cp)
	}

	// A lower version changes nothing: no record.
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u3", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("Y", "1")}}))

	// A component registered after its update arrived: retried until
	// deploy.components has it.
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u4", 1, 1, events.ComponentDelta{ComponentID: "c2", UpdatedPolicies: []events.Policy{vmMemory()}}))
	// u4 failed for want of c2 (a retry is counted) after u3 was
	// handled; the final count below shows u3 wrote nothing.
	retries := env.Metrics.Retries.WithLabelValues(topology.StageExecutor)
	testkit.Eventually(t, 60*time.Second, func() error {
		if testutil.ToFloat64(retries) == 0 {
			return errors.New("u4 for the unregistered c2 was not retried")
		}
		return nil
	})
	out.Poll(500 * time.Millisecond)
	if len(out.Records()) != 2 {
		t.Fatalf("got %d records before c2 was registered, want 2 (u3 changes nothing, u4 waits)", len(out.Records()))
	}
	c.Produce(t, topology.DeployComponents, "c2", component("c2", "dcae-other"))
	recs = out.Until(3, 60*time.Second)
	if len(recs) != 3 {
		t.Fatalf("got %d records after c2 was registered, want 3", len(recs))
	}
	if cp = decodeCP(t, recs[2]); string(recs[2].Key) != "c2" || cp.UpdateID != "u4" || cp.Generation != 1 || cp.ServiceComponentName != "dcae-other" {
		t.Fatalf("u4 wrote %+v", cp)
	}

	// Uninstall: the component's tombstone, then the matcher's delta
	// removing all, marked uninstall (the executor must not depend on its
	// own view of deploy.components having read the tombstone yet).
	c.Produce(t, topology.DeployComponents, "c1", nil)
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u5", 1, 1, events.ComponentDelta{ComponentID: "c1", Uninstall: true,
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "X"}, {PolicyID: "Y"}}}))
	recs = out.Until(4, 60*time.Second)
	if len(recs) != 4 {
		t.Fatalf("got %d records after uninstall, want 4", len(recs))
	}
	cp = decodeCP(t, recs[3])
	if string(recs[3].Key) != "c1" || cp.UpdateID != "u5" || !cp.Uninstalled || cp.Generation != 3 || len(cp.Policies) != 0 ||
		cp.ServiceComponentName != "dcae-vm" || !reflect.DeepEqual(ids(cp.RemovedPolicies), []string{"X@1", "Y@2"}) {
		t.Fatalf("uninstall wrote %+v", cp)
	}
	// A malformed piece is dead-lettered with its reason; the stage goes on.
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u6", 4, 2))
	dlq := c.Reader(t, topology.DLQ(topology.StageExecutor)).Until(1, 60*time.Second)
	if len(dlq) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dlq))
	}
	for _, h := range dlq[0].Headers {
		if h.Key == runtime.HeaderError && !reflect.DeepEqual(h.Value, []byte(nil)) {
			t.Logf("dead letter reason: %s", h.Value)
		}
	}
	out.Poll(500 * time.Millisecond)
	if len(out.Records()) != 4 {
		t.Fatalf("got %d records in the end, want 4", len(out.Records()))
	}
}

// waitCommitted waits until the group committed every record of topic.
func waitCommitted(t *testing.T, c *stagetest.Cluster, group, topic string) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, 60*time.Second, func() error {
		ends, err := c.Admin.ListEndOffsets(ctx, c.Kafka.Topic(topic))
		if err != nil {
			t.Fatal(err)
		}
		offs, err := c.Admin.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			if got, ok := offs.Lookup(o.Topic, o.Partition); !ok || got.At < o.Offset {
				behind = append(behind, fmt.Sprintf("%d at %d of %d", o.Partition, got.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return fmt.Errorf("group %s did not commit %s: partitions %v", group, topic, behind)
		}
		return nil
	})
}

func TestExecutorRestoresUpdateCutByRestart(t *testing.T) {
	c := newCluster(t)
	c.Produce(t, topology.DeployComponents, "c1", component("c1", "dcae-vm"))
	out := c.Reader(t, topology.ComponentPolicies)
	first := Stage()
	stopFirst := stagetest.Run(t, first, testEnv(c))

	c.Produce(t, topology.PolicySegments, "dep-1", piece("u1", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{vmMemory()}}))
	if n := len(out.Until(1, 60*time.Second)); n != 1 {
		t.Fatalf("got %d records after u1, want 1", n)
	}
	// Two of three pieces are consumed and committed, then the member stops.
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 1, 3, events.ComponentDelta{ComponentID: "c1",
		RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_VM_MEMORY"}}}))
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 2, 3, events.ComponentDelta{ComponentID: "c1",
		UpdatedPolicies: []events.Policy{pol("X", "1")}}))
	waitCommitted(t, c, first.GroupIn(c.Kafka), topology.PolicySegments)
	stopFirst()

	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 3, 3, events.ComponentDelta{ComponentID: "c1",
		UpdatedPolicies: []events.Policy{pol("Z", "3")}}))
	stagetest.Run(t, Stage(), testEnv(c))
	recs := out.Until(2, 60*time.Second)
	out.Poll(time.Second)
	if len(out.Records()) != 2 {
		t.Fatalf("got %d records, want 2 (u1, then u2 once)", len(out.Records()))
	}
	cp := decodeCP(t, recs[1])
	if cp.UpdateID != "u2" || cp.Generation != 2 || !reflect.DeepEqual(ids(cp.Policies), []string{"X@1", "Z@3"}) ||
		!reflect.DeepEqual(ids(cp.RemovedPolicies), []string{"DCAE.Config_VM_MEMORY@222"}) {
		t.Fatalf("u2 after restart wrote %+v; want every piece's change", cp)
	}
}

// A plain delta for a component whose latest deploy.components record is
// its tombstone uninstalls it: deleted is not unknown (which would wait
// for a registration that never comes).
func TestDeltaForDeletedComponentUninstalls(t *testing.T) {
	c := newCluster(t)
	c.Produce(t, topology.DeployComponents, "c1", component("c1", "dcae-vm"))
	c.Produce(t, topology.DeployComponents, "c1", nil)
	c.Produce(t, topology.ComponentPolicies, "c1", &events.ComponentPolicies{
		ComponentID: "c1", DeploymentID: "dep-1", ServiceComponentName: "dcae-vm", UpdateID: "u1", Generation: 1,
		Policies: []events.Policy{vmMemory()}, UpdatedPolicies: []events.Policy{vmMemory()}, RemovedPolicies: []events.Policy{},
		Notify: events.NotifyTarget{Kind: events.NotifyNone}, UpdatedAt: time.UnixMilli(1000).UTC(),
	})
	out := c.Reader(t, topology.ComponentPolicies)
	stagetest.Run(t, Stage(), testEnv(c))
	c.Produce(t, topology.PolicySegments, "dep-1", piece("u2", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("X", "1")}}))
	recs := out.Until(2, 60*time.Second)
	if len(recs) != 2 {
		t.Fatalf("got %d component.policies records, want the collection and its uninstall", len(recs))
	}
	if cp := decodeCP(t, recs[1]); cp.UpdateID != "u2" || !cp.Uninstalled || cp.Generation != 2 || len(cp.Policies) != 0 ||
		!reflect.DeepEqual(cp.RemovedPolicies, []events.Policy{vmMemory()}) {
		t.Fatalf("u2 wrote %+v, want the uninstall of c1", cp)
	}
}

// A tombstone on policy.segments means nothing: it is dead-lettered with
// the reason, not dropped, and the stage goes on.
func TestTombstoneIsDeadLettered(t *testing.T) {
	c := newCluster(t)
	c.Produce(t, topology.DeployComponents, "c1", component("c1", "dcae-vm"))
	stagetest.Run(t, Stage(), testEnv(c))
	c.ProduceRecords(t, c.Record(t, topology.PolicySegments, "dep-1", nil),
		c.Record(t, topology.PolicySegments, "dep-1", piece("u1", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{vmMemory()}})))

	dlq := c.Read(t, topology.DLQ(topology.StageExecutor), 1, 60*time.Second)
	if len(dlq) != 1 || string(dlq[0].Key) != "dep-1" || dlq[0].Value != nil {
		for _, d := range dlq {
			t.Logf("dead letter %q: %s", d.Key, stagetest.Header(d, runtime.HeaderError))
		}
		t.Fatalf("got %d dead letters, want the tombstone of dep-1", len(dlq))
	}
	if reason := stagetest.Header(dlq[0], runtime.HeaderError); !strings.Contains(reason, "is a tombstone (no value), which policy.segments never carries") {
		t.Errorf("dead letter reason %q does not say the tombstone is refused", reason)
	}
	if out := c.Read(t, topology.ComponentPolicies, 1, 60*time.Second); len(out) != 1 || decodeCP(t, out[0]).UpdateID != "u1" {
		t.Fatalf("got %d collections, want the one of update u1", len(out))
	}
}

// ref is p as component.policies lists an updated policy: without its body.
func ref(p events.Policy) events.Policy {
	p.Body = ""
	return p
}
