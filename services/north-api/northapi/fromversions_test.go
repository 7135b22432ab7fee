package northapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// An NMP's version guard: a malformed fromVersions is refused at publish
// with 400 naming the field, a good one is answered in canonical form,
// and a node's directive carries the guard to its agent (both answers
// checked against openapi.json).
func TestNMPVersionGuard(t *testing.T) {
	s := newStack(t, nil)
	code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/g", `{"constraints": ["arch == amd64"], "agentUpgradePolicy": {"fromVersions": ">=1.2 <2.0.0"}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(raw), "agentUpgradePolicy.fromVersions") {
		t.Fatalf("a malformed guard: %d %s, want 400 naming agentUpgradePolicy.fromVersions", code, raw)
	}
	code, body, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nmps/g", `{"constraints": ["arch == amd64"], "agentUpgradePolicy": {"fromVersions": "  >=1.2.0   <2.0.0"}}`)
	if code != http.StatusOK {
		t.Fatalf("PUT NMP: %d %s", code, raw)
	}
	doc, _ := body["nmp"].(map[string]any)
	up, _ := doc["agentUpgradePolicy"].(map[string]any)
	if up["fromVersions"] != ">=1.2.0 <2.0.0" {
		t.Fatalf("the answer's guard: %s", raw)
	}

	tok := s.registerNode(t, "acme", "nG")
	d := &events.AgentDirective{Org: "acme", Node: "nG", DirectiveID: "dG", Policy: "acme/g", Action: nmp.ActionUpgrade, TargetVersion: "1.1.0",
		StartAt: time.Unix(100, 0), IssuedAt: time.Unix(100, 0), Conflicts: []string{}, FromVersions: ">=1.2.0 <2.0.0"}
	s.Produce(t, topology.AgentDirectives, "acme/nG", d)
	testkit.Eventually(t, 10*time.Second, func() error {
		code, body, raw, _ := s.callAs(t, tok, http.MethodGet, "/v1/orgs/acme/nodes/nG/directive", nil)
		if code != http.StatusOK || body["fromVersions"] != ">=1.2.0 <2.0.0" {
			return fmt.Errorf("the node's directive: %d %s", code, raw)
		}
		return nil
	})
}
