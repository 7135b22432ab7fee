package notify

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulwriter/consulwrite"
	"github.com/policyflow/policyflow/services/executor/execute"
	"github.com/policyflow/policyflow/topology"
)

// waitCommitted waits until a group committed every record of a topic.
func (c *cluster) waitCommitted(t *testing.T, group, topic string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ends, err := c.adm.ListEndOffsets(ctx, c.k.Topic(topic))
		if err != nil {
			t.Fatal(err)
		}
		offs, err := c.adm.FetchOffsets(ctx, group)
		if err != nil {
			last = err // the group has not committed yet
			continue
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if got, ok := offs.Lookup(o.Topic, o.Partition); o.Offset > 0 && (!ok || got.At < o.Offset) {
				done = false
			}
		})
		if done {
			return
		}
	}
	t.Fatalf("group %s did not commit all of %s (last error: %v)", group, topic, last)
}

func folder(t *testing.T, c *api.Client, prefix string) map[string]uint64 {
	t.Helper()
	return snapshot(t, c, prefix)
}

// TestPolicyFlowToConsulAndScript runs the executor, the consul-writer and
// the agent-notifier together: an update for a component ends as its
// Consul folder and one run of its reconfigure script, and a replay of
// everything downstream of the executor changes nothing and notifies
// nobody.
func TestPolicyFlowToConsulAndScript(t *testing.T) {
	addr, consul := startConsul(t, 0)
	c := newCluster(t, topology.DeployComponents, topology.PolicySegments, topology.ComponentPolicies, topology.ComponentApplied,
		topology.DLQ(topology.StageExecutor), topology.DLQ(topology.StageConsulWriter), topology.DLQ(topology.StageAgentNotifier))
	rec := newRecorder(t)
	env := testEnv(c.k, addr)

	c.produce(t, topology.DeployComponents, "vm-1", &events.Component{
		ComponentID: "vm-1", DeploymentID: "dep-1", ServiceComponentName: "dcae-vm",
		Notify: events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: rec.script}, Config: "{}", UpdatedAt: time.UnixMilli(1).UTC(),
	})
	run(t, execute.Stage(), env)
	writer, notifier := consulwrite.Stage(), Stage()
	stopWriter := run(t, writer, env)
	stopNotifier := run(t, notifier, env)

	vm := vmMemory()
	c.produce(t, topology.PolicySegments, "dep-1", &events.PolicySegment{UpdateID: "u1", DeploymentID: "dep-1", Index: 1, Count: 1,
		Components: []events.ComponentDelta{{ComponentID: "vm-1", UpdatedPolicies: []events.Policy{vm}}}, CreatedAt: time.UnixMilli(2).UTC()})
	claim, _ := waitClaim(t, consul, "dcae-vm", "u1")
	if *claim.ExitCode != 0 || claim.Generation != 1 {
		t.Fatalf("claim %+v", claim)
	}

	item, _, err := consul.KV().Get("dcae-vm:policies/items/DCAE.Config_VM_MEMORY", nil)
	if err != nil || item == nil {
		t.Fatalf("item: %v %v", item, err)
	}
	var body map[string]any
	if err := json.Unmarshal(item.Value, &body); err != nil || !reflect.DeepEqual(body["config"], map[string]any{"min_memory": "8GB"}) {
		t.Fatalf("item value %s (%v), want the policy_body with config {\"min_memory\":\"8GB\"}", item.Value, err)
	}
	ev, _, err := consul.KV().Get("dcae-vm:policies/event", nil)
	if err != nil || ev == nil {
		t.Fatalf("event: %v %v", ev, err)
	}
	var event map[string]any
	if err := json.Unmarshal(ev.Value, &event); err != nil || event["action"] != "gathered" || event["update_id"] != "u1" ||
		event["policies_count"] != float64(1) || event["generation"] != float64(1) || event["timestamp"] == nil {
		t.Fatalf("event %s (%v)", ev.Value, err)
	}
	want := `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
		`"updated_policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
		`"removed_policies":[]}`
	if calls := rec.calls(t); len(calls) != 1 || len(calls[0]) != 2 || calls[0][0] != "policies" || calls[0][1] != want {
		t.Fatalf("script calls %q, want exactly one: [policies %s]", calls, want)
	}

	// Replay: the consul-writer and the agent-notifier start over without
	// offsets (groups of their own) and read everything again.
	c.waitCommitted(t, notifier.GroupIn(c.k), topology.ComponentApplied)
	stopWriter()
	stopNotifier()
	before := folder(t, consul, "dcae-vm:policies/")
	writer, notifier = consulwrite.Stage(), Stage()
	writer.Group, notifier.Group = "replayed-consul-writer", "replayed-agent-notifier"
	run(t, writer, env)
	run(t, notifier, env)
	c.waitCommitted(t, writer.GroupIn(c.k), topology.ComponentPolicies)
	c.waitCommitted(t, notifier.GroupIn(c.k), topology.ComponentApplied)
	ends, err := c.adm.ListEndOffsets(context.Background(), c.k.Topic(topology.ComponentApplied))
	if err != nil {
		t.Fatal(err)
	}
	var appliedRecords int64
	ends.Each(func(o kadm.ListedOffset) { appliedRecords += o.Offset })
	if appliedRecords != 2 {
		t.Fatalf("component.applied holds %d records, want 2 (u1 and its replay)", appliedRecords)
	}
	if after := folder(t, consul, "dcae-vm:policies/"); !reflect.DeepEqual(before, after) {
		t.Fatalf("replay changed Consul: ModifyIndex before %v, after %v", before, after)
	}
	if calls := rec.calls(t); len(calls) != 1 {
		t.Fatalf("%d script calls after the replay, want 1", len(calls))
	}
}
