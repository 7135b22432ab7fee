package agentnotifier

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consul-writer/consulwriter"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/executor/executor"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// dataEnds returns, per partition, the offset after a topic's last record
// (transaction markers excluded: a group's committed offset stops there).
// The topic must not be written meanwhile.
func dataEnds(t *testing.T, c *stagetest.Cluster, topic string) map[int32]int64 {
	t.Helper()
	r := c.Reader(t, topic)
	out := map[int32]int64{}
	for quiet := 0; quiet < 3; {
		recs := r.Poll(500 * time.Millisecond)
		if len(recs) == 0 {
			quiet++
		}
		for _, r := range recs {
			out[r.Partition] = max(out[r.Partition], r.Offset+1)
		}
	}
	return out
}

// waitCommitted waits until a group committed every record of a topic.
func waitCommitted(t *testing.T, c *stagetest.Cluster, group, topic string) {
	t.Helper()
	ends := dataEnds(t, c, topic)
	testkit.Eventually(t, 60*time.Second, func() error {
		offs, err := c.Admin.FetchOffsets(context.Background(), group)
		if err != nil {
			return fmt.Errorf("group %s did not commit all of %s: %w", group, topic, err) // the group has not committed yet
		}
		for p, end := range ends {
			if got, ok := offs.Lookup(c.Kafka.Topic(topic), p); !ok || got.At < end {
				return fmt.Errorf("group %s did not commit all of %s: partition %d at %d of %d", group, topic, p, got.At, end)
			}
		}
		return nil
	})
}

// TestPolicyFlowToConsulAndScript runs the executor, the consul-writer and
// the agent-notifier together: an update for a component ends as its
// Consul folder and one run of its reconfigure script, and a replay of
// everything downstream of the executor changes nothing and notifies
// nobody.
func TestPolicyFlowToConsulAndScript(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.DeployComponents, topology.PolicySegments, topology.ComponentPolicies, topology.ComponentApplied,
		topology.DLQ(topology.StageExecutor), topology.DLQ(topology.StageConsulWriter), topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	rec := newRecorder(t, scripts)
	env := stagetest.Env(c.Kafka)

	c.Produce(t, topology.DeployComponents, "vm-1", &events.Component{
		ComponentID: "vm-1", DeploymentID: "dep-1", ServiceComponentName: "dcae-vm",
		Notify: events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: rec.script}, Config: "{}", UpdatedAt: time.UnixMilli(1).UTC(),
	})
	stagetest.Run(t, executor.Stage(), env)
	writer, notifier := consulwriter.StageWith(consulwriter.Config{Consul: consulCfg}), stageOn(t, consulCfg, scripts)
	stopWriter := stagetest.Run(t, writer, env)
	stopNotifier := stagetest.Run(t, notifier, env)

	// As the segmenter sends them: bodies with their body_hash.
	vm := vmMemory()
	vm.BodyHash = policy.BodyHash(vm.Body)
	c.Produce(t, topology.PolicySegments, "dep-1", &events.PolicySegment{UpdateID: "u1", DeploymentID: "dep-1", Index: 1, Count: 1,
		Components: []events.ComponentDelta{{ComponentID: "vm-1", UpdatedPolicies: []events.Policy{vm}}}, CreatedAt: time.UnixMilli(2).UTC()})
	claim, _ := waitClaim(t, consul, "dcae-vm", "u1")
	if *claim.ExitCode != 0 || claim.Generation != 1 {
		t.Fatalf("claim %+v", claim)
	}

	item, _, err := consul.KV().Get(consulkv.ItemKey("dcae-vm", "DCAE.Config_VM_MEMORY"), nil)
	if err != nil || item == nil {
		t.Fatalf("item: %v %v", item, err)
	}
	var body map[string]any
	if err := json.Unmarshal(item.Value, &body); err != nil || !reflect.DeepEqual(body["config"], map[string]any{"min_memory": "8GB"}) {
		t.Fatalf("item value %s (%v), want the policy_body with config {\"min_memory\":\"8GB\"}", item.Value, err)
	}
	ev, _, err := consul.KV().Get(consulkv.EventKey("dcae-vm"), nil)
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

	// A 10 MB change for one component, in ten pieces, applies as one
	// change: one collection, one event, written in several transactions.
	const pieces, perPiece = 10, 10
	for i := int32(1); i <= pieces; i++ {
		var ps []events.Policy
		for j := 0; j < perPiece; j++ {
			id := fmt.Sprintf("DCAE.Config_BIG_%02d_%02d", i, j)
			body := fmt.Sprintf(`{"policyName":"%s.1.xml","policyVersion":"1","config":{"blob":"%s"}}`, id, strings.Repeat("z", 100_000))
			ps = append(ps, events.Policy{PolicyID: id, PolicyName: id + ".1.xml", PolicyVersion: "1", Body: body, BodyHash: policy.BodyHash(body)})
		}
		c.Produce(t, topology.PolicySegments, "dep-1", &events.PolicySegment{UpdateID: "u-big", DeploymentID: "dep-1", Index: i, Count: pieces,
			Components: []events.ComponentDelta{{ComponentID: "vm-1", AddedPolicies: []events.FilterMatch{{FilterID: "big", Policies: ps}}}},
			CreatedAt:  time.UnixMilli(3).UTC()})
	}
	claim, _ = waitClaim(t, consul, "dcae-vm", "u-big")
	ev, _, err = consul.KV().Get(consulkv.EventKey("dcae-vm"), nil)
	if err != nil || ev == nil {
		t.Fatalf("event: %v %v", ev, err)
	}
	if err := json.Unmarshal(ev.Value, &event); err != nil || event["action"] != "updated" || event["update_id"] != "u-big" ||
		event["policies_count"] != float64(1+pieces*perPiece) || event["generation"] != float64(2) {
		t.Fatalf("event after the 10 MB change %s (%v)", ev.Value, err)
	}
	items, _, err := consul.KV().List(consulkv.ItemsPrefix("dcae-vm"), nil)
	if err != nil || len(items) != 1+pieces*perPiece {
		t.Fatalf("%d items (%v), want %d", len(items), err, 1+pieces*perPiece)
	}
	txns := map[uint64]bool{}
	for _, it := range items {
		if strings.Contains(it.Key, "BIG") {
			txns[it.ModifyIndex] = true
		}
	}
	if len(txns) < 2 {
		t.Fatalf("the 10 MB change was written in %d transaction(s), want several", len(txns))
	}
	// Linux takes at most 128 KiB in one argument: the script cannot be
	// given this notification; the claim says so and nothing is retried.
	if *claim.ExitCode != -1 || !strings.Contains(claim.Stderr, "128 KiB") {
		t.Fatalf("claim of the 10 MB notification %+v", claim)
	}

	// Replay: the consul-writer and the agent-notifier start over without
	// offsets (groups of their own) and read everything again.
	waitCommitted(t, c, notifier.GroupIn(c.Kafka), topology.ComponentApplied)
	stopWriter()
	stopNotifier()
	before := stagetest.ModifyIndexes(t, consul, consulkv.Folder("dcae-vm"))
	writer, notifier = consulwriter.StageWith(consulwriter.Config{Consul: consulCfg}), stageOn(t, consulCfg, scripts)
	writer.Group, notifier.Group = "replayed-consul-writer", "replayed-agent-notifier"
	stagetest.Run(t, writer, env)
	stagetest.Run(t, notifier, env)
	waitCommitted(t, c, writer.GroupIn(c.Kafka), topology.ComponentPolicies)
	waitCommitted(t, c, notifier.GroupIn(c.Kafka), topology.ComponentApplied)
	ends, err := c.Admin.ListEndOffsets(context.Background(), c.Kafka.Topic(topology.ComponentApplied))
	if err != nil {
		t.Fatal(err)
	}
	var appliedRecords int64
	ends.Each(func(o kadm.ListedOffset) { appliedRecords += o.Offset })
	// u1 is older than what Consul holds: skipped; u-big is reported again.
	if appliedRecords != 3 {
		t.Fatalf("component.applied holds %d records, want 3 (u1, u-big and the replay of u-big)", appliedRecords)
	}
	if after := stagetest.ModifyIndexes(t, consul, consulkv.Folder("dcae-vm")); !reflect.DeepEqual(before, after) {
		t.Fatalf("replay changed Consul: ModifyIndex before %v, after %v", before, after)
	}
	if calls := rec.calls(t); len(calls) != 1 {
		t.Fatalf("%d script calls after the replay, want 1", len(calls))
	}
}
