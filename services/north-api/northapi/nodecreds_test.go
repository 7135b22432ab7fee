package northapi

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

var nodeBody = map[string]any{"properties": []any{map[string]any{"name": "arch", "value": "amd64"}}, "softwareVersion": "1.0.0"}

// registerNode registers org/node with the org token and returns the
// node's own token from the answer.
func (s *stack) registerNode(t *testing.T, org, node string) string {
	t.Helper()
	code, body, raw, _ := s.callAs(t, agentToken, http.MethodPut, "/v1/orgs/"+org+"/nodes/"+node, nodeBody)
	tok, _ := body["token"].(string)
	if code != http.StatusOK || !auth.IsNodeToken(tok) {
		t.Fatalf("register %s/%s with the org token: %d %s, want 200 with the node's own token", org, node, code, raw)
	}
	return tok
}

// A node's own token acts for its node only: node A's token cannot read
// node B's directive or status, report B's status, register B again or
// delete it; the org token only registers new nodes. An operator
// rotates and revokes a node's token.
func TestNodeTokensActForTheirOwnNodeOnly(t *testing.T) {
	s := newStack(t, nil)
	tokA := s.registerNode(t, "acme", "nA")
	tokB := s.registerNode(t, "acme", "nB")
	d := &events.AgentDirective{Org: "acme", Node: "nB", DirectiveID: "dB", Policy: "acme/p", Action: nmp.ActionUpgrade, TargetVersion: "1.1.0",
		StartAt: time.Unix(100, 0), IssuedAt: time.Unix(100, 0), Conflicts: []string{}}
	s.Produce(t, topology.AgentDirectives, "acme/nB", d)
	testkit.Eventually(t, 10*time.Second, func() error {
		if code, _, raw, _ := s.callAs(t, tokB, http.MethodGet, "/v1/orgs/acme/nodes/nB/directive", nil); code != http.StatusOK {
			return fmt.Errorf("node B reading its own directive: %d %s", code, raw)
		}
		return nil
	})
	report := map[string]any{"policy": "acme/p", "status": "failed", "agentVersion": map[string]any{"failed": "1.1.0"}}
	if code, _, raw, _ := s.callAs(t, tokB, http.MethodPut, "/v1/orgs/acme/nodes/nB/status", map[string]any{"policy": "acme/p", "status": "successful"}); code != http.StatusOK {
		t.Fatalf("node B reporting its own status: %d %s", code, raw)
	}
	statusRecords := len(s.Read(t, topology.AgentStatus, 1, 10*time.Second))

	for _, tc := range []struct {
		what, token, method, path string
		body                      any
		code                      int
		fragment                  string
	}{
		{"A reads B's directive", tokA, http.MethodGet, "/v1/orgs/acme/nodes/nB/directive", nil, 403, "own node only"},
		{"A reports B failed", tokA, http.MethodPut, "/v1/orgs/acme/nodes/nB/status", report, 403, "own node only"},
		{"A reads B's status", tokA, http.MethodGet, "/v1/orgs/acme/nodes/nB/status", nil, 403, "own node only"},
		{"A deletes B", tokA, http.MethodDelete, "/v1/orgs/acme/nodes/nB", nil, 403, "own node only"},
		{"A registers B", tokA, http.MethodPut, "/v1/orgs/acme/nodes/nB", nodeBody, 403, "own node only"},
		{"A registers a new node", tokA, http.MethodPut, "/v1/orgs/acme/nodes/nC", nodeBody, 403, "own node only"},
		{"A in another org", tokA, http.MethodGet, "/v1/orgs/other/nodes/nA/directive", nil, 403, "acts for org acme"},
		{"the org token reads B's directive", agentToken, http.MethodGet, "/v1/orgs/acme/nodes/nB/directive", nil, 403, "org token"},
		{"the org token reports B failed", agentToken, http.MethodPut, "/v1/orgs/acme/nodes/nB/status", report, 403, "org token"},
		{"the org token deletes B", agentToken, http.MethodDelete, "/v1/orgs/acme/nodes/nB", nil, 403, "org token"},
		{"the org token registers B again", agentToken, http.MethodPut, "/v1/orgs/acme/nodes/nB", nodeBody, 409, "has its own token"},
		{"A rotates B's token", tokA, http.MethodPost, "/v1/orgs/acme/nodes/nB/token", nil, 403, "may not call"},
		{"the org token revokes B's token", agentToken, http.MethodDelete, "/v1/orgs/acme/nodes/nB/token", nil, 403, "may not call"},
	} {
		code, body, _, _ := s.callAs(t, tc.token, tc.method, tc.path, tc.body)
		wantError(t, tc.what, code, body, tc.code, tc.fragment)
	}
	// B's next report is the marker: a refused report, had it been
	// written, would come before it (same key, same partition).
	marker := map[string]any{"policy": "acme/marker", "status": "successful"}
	if code, _, raw, _ := s.callAs(t, tokB, http.MethodPut, "/v1/orgs/acme/nodes/nB/status", marker); code != http.StatusOK {
		t.Fatalf("node B reporting its own status again: %d %s", code, raw)
	}
	recs := s.ReadUntil(t, topology.AgentStatus, 10*time.Second, func(got []*kgo.Record) bool {
		return len(got) > 0 && stagetest.Decode[*events.AgentStatus](t, got[len(got)-1]).Policy == "acme/marker"
	})
	if len(recs) != statusRecords+1 {
		t.Errorf("refused reports wrote status records: %d before B's next report, want %d", len(recs)-1, statusRecords)
	}

	// A node's own token does what its node needs, without a new token.
	if code, body, raw, _ := s.callAs(t, tokA, http.MethodPut, "/v1/orgs/acme/nodes/nA", nodeBody); code != http.StatusOK || body["token"] != nil {
		t.Fatalf("A registers itself again: %d %s, want 200 without a new token", code, raw)
	}
	if code, _, raw, _ := s.callAs(t, tokA, http.MethodPut, "/v1/orgs/acme/nodes/nA/status", map[string]any{"status": "successful"}); code != http.StatusOK {
		t.Fatalf("A reports its own status: %d %s", code, raw)
	}

	// agent.nodes holds the tokens' hashes, never the tokens.
	for _, rec := range s.Read(t, topology.AgentNodes, 3, 10*time.Second) {
		if bytes.Contains(rec.Value, []byte("pfn_")) {
			t.Errorf("record %s holds a token", rec.Key)
		}
		if n := stagetest.Decode[*events.AgentNode](t, rec); string(rec.Key) == "acme/nA" && n.TokenSHA256 != auth.Hash(tokA) {
			t.Errorf("record %s: token_sha256 %q, want the hash of A's token", rec.Key, n.TokenSHA256)
		}
	}

	// Rotation: the old token stops working, the new one works.
	code, body, raw := s.call(t, http.MethodPost, "/v1/orgs/acme/nodes/nA/token", nil)
	newA, _ := body["token"].(string)
	if code != http.StatusOK || !auth.IsNodeToken(newA) || newA == tokA {
		t.Fatalf("rotate A: %d %s", code, raw)
	}
	code, body, _, _ = s.callAs(t, tokA, http.MethodGet, "/v1/orgs/acme/nodes/nA/directive", nil)
	wantError(t, "A's old token after rotation", code, body, 401, "not one of")
	if code, _, raw, _ := s.callAs(t, newA, http.MethodPut, "/v1/orgs/acme/nodes/nA/status", map[string]any{"status": "successful"}); code != http.StatusOK {
		t.Fatalf("A's new token: %d %s", code, raw)
	}
	code, body, _ = s.call(t, http.MethodPost, "/v1/orgs/acme/nodes/nobody/token", nil)
	wantError(t, "rotate an unknown node", code, body, 404, "not registered")

	// Revocation: B's token stops working; the org token may register B
	// again, which issues a new one.
	if code, _, raw := s.call(t, http.MethodDelete, "/v1/orgs/acme/nodes/nB/token", nil); code != http.StatusOK {
		t.Fatalf("revoke B: %d %s", code, raw)
	}
	code, body, _, _ = s.callAs(t, tokB, http.MethodGet, "/v1/orgs/acme/nodes/nB/directive", nil)
	wantError(t, "B's token after revocation", code, body, 401, "not one of")
	if newB := s.registerNode(t, "acme", "nB"); newB == tokB {
		t.Fatal("re-registration after revocation issued the revoked token")
	}
	// Deleting a node ends its token.
	if code, _, raw, _ := s.callAs(t, newA, http.MethodDelete, "/v1/orgs/acme/nodes/nA", nil); code != http.StatusOK {
		t.Fatalf("A deletes itself: %d %s", code, raw)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if code, _, _, _ := s.callAs(t, newA, http.MethodGet, "/v1/orgs/acme/nodes/nA/directive", nil); code != http.StatusUnauthorized {
			return fmt.Errorf("A's token after its node was deleted: %d, want 401", code)
		}
		return nil
	})
	if !strings.HasPrefix(tokA, "pfn_") {
		t.Errorf("node token %q lacks the pfn_ prefix", tokA)
	}
}
