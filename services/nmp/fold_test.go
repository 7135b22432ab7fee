package nmp

import (
	"strings"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// The folds are the one set of rules the nmp-hub and the North API read
// node management by: a record under the wrong key, a package that is not
// semantic or has no SHA-256 and a status of no known state are refused,
// and the world keeps what it had. (A value of another schema never
// reaches a fold: the runtime refuses it, see the nmp-hub's dead letters.)
func TestFoldRefusesWhatTheHubRefuses(t *testing.T) {
	w := NewWorld()
	node := &events.AgentNode{Org: "o", Node: "n1", Properties: `[{"name":"arch","value":"amd64"}]`, SoftwareVersion: "1.0.0"}
	if err := w.FoldNode("o/n1", 2, node); err != nil {
		t.Fatal(err)
	}
	if n := w.Node("o/n1"); n == nil || n.Partition != 2 {
		t.Fatalf("node o/n1 folded as %+v, want it on partition 2", n)
	}
	sha := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"node under another key", w.FoldNode("o/n2", 0, node), "the key must be org/node"},
		{"NMP under another key", w.FoldPolicy("o/other", &events.NodeManagementPolicy{Org: "o", Name: "p", Enabled: true}), "the key must be org/name"},
		{"package under another key", w.FoldPackage("1.0.1", &events.AgentPackage{Version: "1.0.0", SHA256: sha}), "the key must be its version"},
		{"package not semantic", w.FoldPackage("1.0", &events.AgentPackage{Version: "1.0", SHA256: sha}), "semantic"},
		{"package without its sha256", w.FoldPackage("1.0.0", &events.AgentPackage{Version: "1.0.0", SHA256: "abc"}), "64 hex digits"},
		{"status of no known state", w.FoldStatus("o/n1", &events.AgentStatus{Org: "o", Node: "n1", Status: "exploded"}), "is not one of"},
		{"status under another key", w.FoldStatus("o/n2", &events.AgentStatus{Org: "o", Node: "n1", Status: StateSuccessful}), "the key must be org/node"},
	} {
		if err := tc.err; err == nil || !strings.Contains(err.Error(), tc.want) {
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
