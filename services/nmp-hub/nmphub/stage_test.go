package nmphub

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

var t0 = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)

func newCluster(t *testing.T) *stagetest.Cluster {
	t.Helper()
	return stagetest.NewCluster(t, 3, topology.NMPPolicies, topology.AgentNodes, topology.AgentPackages,
		topology.AgentStatus, topology.AgentDirectives, topology.NMPRecompute, topology.DLQ(topology.StageNMPHub))
}

func policy(t *testing.T, name, body string, at time.Time) *events.NodeManagementPolicy {
	t.Helper()
	d, err := nmp.Decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	p, err := nmp.Build("acme", name, d, at)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func nodeRec(id, arch, version string) *events.AgentNode {
	return &events.AgentNode{Org: "acme", Node: id, Properties: `[{"name":"arch","value":"` + arch + `"}]`, SoftwareVersion: version, UpdatedAt: t0}
}

func pkg(v string) *events.AgentPackage {
	return &events.AgentPackage{Version: v, SHA256: strings.Repeat("a", 63) + v[len(v)-1:], Size: 10, Manifest: "{}", UploadedAt: t0}
}

// at is the latest directive of a key, empty when there is none.
func at(m map[string]*events.AgentDirective, k string) *events.AgentDirective {
	if d := m[k]; d != nil {
		return d
	}
	return &events.AgentDirective{}
}

// latest reads agent.directives until done holds for the latest directive
// of every key.
func latest(t *testing.T, c *stagetest.Cluster, done func(map[string]*events.AgentDirective) bool) map[string]*events.AgentDirective {
	t.Helper()
	var last map[string]*events.AgentDirective
	c.ReadUntil(t, topology.AgentDirectives, 20*time.Second, func(recs []*kgo.Record) bool {
		last = map[string]*events.AgentDirective{}
		for _, r := range recs {
			if r.Value == nil {
				last[string(r.Key)] = nil
				continue
			}
			last[string(r.Key)] = stagetest.Decode[*events.AgentDirective](t, r)
		}
		return done(last)
	})
	return last
}

func TestDirectivesFollowPoliciesNodesPackagesAndStatus(t *testing.T) {
	c := newCluster(t)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))

	c.Produce(t, topology.AgentPackages, "1.1.0", pkg("1.1.0"))
	c.Produce(t, topology.AgentNodes, "acme/n1", nodeRec("n1", "amd64", "1.0.0"))
	c.Produce(t, topology.AgentNodes, "acme/n2", nodeRec("n2", "arm64", "1.0.0"))
	c.Produce(t, topology.AgentNodes, "acme/n3", nodeRec("n3", "amd64", "1.1.0"))
	// No enabled NMP yet: every node is told so.
	got := latest(t, c, func(m map[string]*events.AgentDirective) bool { return len(m) == 3 })
	for k, d := range got {
		if d.Action != nmp.ActionNone {
			t.Fatalf("%s before any NMP: %+v", k, d)
		}
	}
	c.Produce(t, topology.NMPPolicies, "acme/amd", policy(t, "amd", `{"enabled":true,"constraints":["arch == amd64"],"agentUpgradePolicy":{"duration":60}}`, t0))
	got = latest(t, c, func(m map[string]*events.AgentDirective) bool {
		return m["acme/n1"] != nil && at(m, "acme/n1").Action == nmp.ActionUpgrade && at(m, "acme/n3").Action == nmp.ActionUpgrade
	})
	d := got["acme/n1"]
	if d.TargetVersion != "1.1.0" || d.Policy != "acme/amd" || d.StartAt.Before(t0) || d.StartAt.After(t0.Add(time.Minute)) {
		t.Fatalf("n1: %+v", d)
	}
	if got["acme/n2"].Action != nmp.ActionNone {
		t.Fatalf("n2 is arm64: %+v", got["acme/n2"])
	}
	// A newer package moves "current".
	c.Produce(t, topology.AgentPackages, "1.2.0", pkg("1.2.0"))
	got = latest(t, c, func(m map[string]*events.AgentDirective) bool { return at(m, "acme/n1").TargetVersion == "1.2.0" })
	if !got["acme/n1"].StartAt.Equal(d.StartAt) {
		t.Fatalf("the start moved from %v to %v", d.StartAt, got["acme/n1"].StartAt)
	}
	// A node whose properties change is recomputed.
	c.Produce(t, topology.AgentNodes, "acme/n2", nodeRec("n2", "amd64", "1.0.0"))
	latest(t, c, func(m map[string]*events.AgentDirective) bool { return at(m, "acme/n2").Action == nmp.ActionUpgrade })
	// An unregistered node's directive is tombstoned.
	c.ProduceRecords(t, &kgo.Record{Topic: c.Kafka.Topic(topology.AgentNodes), Key: []byte("acme/n3")})
	latest(t, c, func(m map[string]*events.AgentDirective) bool { v, ok := m["acme/n3"]; return ok && v == nil })
}

func TestConflictingPolicies(t *testing.T) {
	c := newCluster(t)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	c.Produce(t, topology.AgentPackages, "1.1.0", pkg("1.1.0"))
	c.Produce(t, topology.AgentPackages, "1.2.0", pkg("1.2.0"))
	c.Produce(t, topology.AgentNodes, "acme/n1", nodeRec("n1", "amd64", "1.0.0"))
	c.Produce(t, topology.AgentNodes, "acme/n2", nodeRec("n2", "amd64", "1.0.0"))
	c.Produce(t, topology.NMPPolicies, "acme/first", policy(t, "first", `{"enabled":true,"constraints":["arch == amd64"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0"}}`, t0))
	latest(t, c, func(m map[string]*events.AgentDirective) bool {
		return m["acme/n2"] != nil && at(m, "acme/n2").Policy == "acme/first"
	})
	// n1 enacts the first policy; n2 has not reported yet.
	c.Produce(t, topology.AgentStatus, "acme/n1", &events.AgentStatus{Org: "acme", Node: "n1", Policy: "acme/first", Status: nmp.StateSuccessful, SoftwareVersion: "1.1.0", ReportedAt: t0})
	c.Produce(t, topology.NMPPolicies, "acme/second", policy(t, "second", `{"enabled":true,"constraints":["arch == amd64"],"agentUpgradePolicy":{"atLeastVersion":"1.2.0"}}`, t0.Add(time.Minute)))
	got := latest(t, c, func(m map[string]*events.AgentDirective) bool {
		return at(m, "acme/n2").Policy == "acme/second" && len(at(m, "acme/n1").Conflicts) == 1
	})
	if n1 := got["acme/n1"]; n1.Policy != "acme/first" || n1.TargetVersion != "1.1.0" || !strings.Contains(n1.Conflicts[0], "acme/second: ignored") {
		t.Fatalf("n1, where first is enacted: %+v", n1)
	}
	if n2 := got["acme/n2"]; n2.TargetVersion != "1.2.0" || len(n2.Conflicts) != 1 || !strings.Contains(n2.Conflicts[0], "acme/first: ignored") {
		t.Fatalf("n2, where neither is enacted: %+v", n2)
	}
}

func TestThresholdPausesTheRollout(t *testing.T) {
	c := newCluster(t)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	c.Produce(t, topology.AgentPackages, "1.1.0", pkg("1.1.0"))
	for _, n := range []string{"n1", "n2", "n3"} {
		c.Produce(t, topology.AgentNodes, "acme/"+n, nodeRec(n, "amd64", "1.0.0"))
	}
	c.Produce(t, topology.NMPPolicies, "acme/p", policy(t, "p", `{"enabled":true,"constraints":["arch == amd64"],"agentUpgradePolicy":{},"failureThreshold":{"count":1}}`, t0))
	latest(t, c, func(m map[string]*events.AgentDirective) bool {
		return len(m) == 3 && at(m, "acme/n3").Action == nmp.ActionUpgrade
	})
	c.Produce(t, topology.AgentStatus, "acme/n1", &events.AgentStatus{Org: "acme", Node: "n1", Policy: "acme/p", Status: nmp.StateRollbackSuccessful, FailedVersion: "1.1.0", ReportedAt: t0})
	got := latest(t, c, func(m map[string]*events.AgentDirective) bool {
		return at(m, "acme/n2").Action == nmp.ActionPaused && at(m, "acme/n3").Action == nmp.ActionPaused
	})
	if !strings.Contains(got["acme/n2"].Reason, "1 nodes failed") {
		t.Fatalf("reason: %+v", got["acme/n2"])
	}
}

// Two members share the partitions; each node's directive is written by
// the owner of its partition and all are right.
func TestTwoMembers(t *testing.T) {
	c := newCluster(t)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	c.Produce(t, topology.AgentPackages, "1.1.0", pkg("1.1.0"))
	for i := range 20 {
		n := fmt.Sprint("n", i)
		c.Produce(t, topology.AgentNodes, "acme/"+n, nodeRec(n, "amd64", "1.0.0"))
	}
	c.Produce(t, topology.NMPPolicies, "acme/p", policy(t, "p", `{"enabled":true,"constraints":["arch == amd64"],"agentUpgradePolicy":{}}`, t0))
	latest(t, c, func(m map[string]*events.AgentDirective) bool {
		for i := range 20 {
			if at(m, fmt.Sprint("acme/n", i)).Action != nmp.ActionUpgrade {
				return false
			}
		}
		return true
	})
}

func TestBadRecordsAreDeadLettered(t *testing.T) {
	c := newCluster(t)
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	bad := policy(t, "bad", `{"constraints":["arch == amd64"]}`, t0)
	bad.Constraints = []string{"arch =="}
	c.Produce(t, topology.NMPPolicies, "acme/bad", bad)
	c.Produce(t, topology.AgentNodes, "acme/wrongkey", nodeRec("n1", "amd64", "1.0.0"))
	c.Produce(t, topology.AgentStatus, "acme/n1", &events.AgentStatus{Org: "acme", Node: "n1", Status: "exploded", ReportedAt: t0})
	// A record of another schema: the runtime refuses it, saying what it
	// holds and what the topic carries.
	c.Produce(t, topology.AgentNodes, "acme/n2", &events.AgentStatus{Org: "acme", Node: "n2", Status: nmp.StateSuccessful, ReportedAt: t0})
	dlq := c.Read(t, topology.DLQ(topology.StageNMPHub), 4, 20*time.Second)
	want := map[string]string{"acme/bad": "at position 7", "acme/wrongkey": "the key must be org/node", "acme/n1": "is not one of",
		"acme/n2": "is " + events.SchemaAgentStatus + ", want " + events.SchemaAgentNode}
	for _, r := range dlq {
		if why := stagetest.Header(r, runtime.HeaderError); !strings.Contains(why, want[string(r.Key)]) {
			t.Errorf("dead letter %s: %q, want %q", r.Key, why, want[string(r.Key)])
		}
		delete(want, string(r.Key))
	}
	if len(want) != 0 {
		t.Errorf("not dead-lettered: %v", want)
	}
}
