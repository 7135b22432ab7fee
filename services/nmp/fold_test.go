package nmp

import (
	"strings"
	"testing"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/topology"
)

// World.Fold is the one set of rules the nmp-hub and the North API read
// node management by: a record under the wrong key, a package that is not
// semantic or has no SHA-256, a status of no known state and a value of
// another schema are refused, and the world keeps what it had.
func TestFoldRefusesWhatTheHubRefuses(t *testing.T) {
	w := NewWorld()
	node := &events.AgentNode{Org: "o", Node: "n1", Properties: `[{"name":"arch","value":"amd64"}]`, SoftwareVersion: "1.0.0"}
	if err := w.Fold(topology.AgentNodes, 2, "o/n1", node); err != nil {
		t.Fatal(err)
	}
	if n := w.Node("o/n1"); n == nil || n.Partition != 2 {
		t.Fatalf("node o/n1 folded as %+v, want it on partition 2", n)
	}
	sha := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, topic, key string
		v                events.Event
		want             string
	}{
		{"node under another key", topology.AgentNodes, "o/n2", node, "the key must be org/node"},
		{"NMP under another key", topology.NMPPolicies, "o/other", &events.NodeManagementPolicy{Org: "o", Name: "p", Enabled: true}, "the key must be org/name"},
		{"package under another key", topology.AgentPackages, "1.0.1", &events.AgentPackage{Version: "1.0.0", SHA256: sha}, "the key must be its version"},
		{"package not semantic", topology.AgentPackages, "1.0", &events.AgentPackage{Version: "1.0", SHA256: sha}, "semantic"},
		{"package without its sha256", topology.AgentPackages, "1.0.0", &events.AgentPackage{Version: "1.0.0", SHA256: "abc"}, "64 hex digits"},
		{"status of no known state", topology.AgentStatus, "o/n1", &events.AgentStatus{Org: "o", Node: "n1", Status: "exploded"}, "is not one of"},
		{"status under another key", topology.AgentStatus, "o/n2", &events.AgentStatus{Org: "o", Node: "n1", Status: StateSuccessful}, "the key must be org/node"},
		{"another schema", topology.AgentNodes, "o/n1", &events.AgentStatus{Org: "o", Node: "n1"}, "want a"},
	} {
		err := w.Fold(tc.topic, 0, tc.key, tc.v)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Fold = %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
	if n := w.Node("o/n1"); n == nil || n.Ev != node {
		t.Errorf("a refused record of o/n1 changed the world: %+v", n)
	}
	if w.Node("o/n2") != nil || w.Status("o/n1") != nil || w.Status("o/n2") != nil || w.Policy("o/p") != nil {
		t.Error("a refused record is in the world")
	}
}
