package northapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// testPartitions is the partition count of every topic in these tests.
const testPartitions = 3

// TestMain makes the reconfigure script components register with, runs
// the tests and stops the Consul agent they share; each test uses its own
// service component names.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "northapi-scripts")
	if err != nil {
		panic(err)
	}
	testScriptDir, testScript = dir, filepath.Join(dir, "reconfigure.sh")
	if err := os.WriteFile(testScript, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		panic(err)
	}
	code := stagetest.Main(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// testScriptDir is the script directory the tests' rules allow, and
// testScript an executable script in it.
var testScriptDir, testScript string

// testRegistration allows scripts from testScriptDir and webhooks to
// 127.0.0.1 and app.example.
func testRegistration() Registration {
	return Registration{Targets: notifytarget.Config{ScriptDirs: []string{testScriptDir}, WebhookAllow: []string{"127.0.0.1", "app.example"}}}
}

// testRules are testRegistration checked.
func testRules(t testing.TB) policyapi.ComponentRules {
	t.Helper()
	r, err := testRegistration().Rules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The tokens of the tests' tokens file, one per role (two tenants).
const (
	adminToken       = "test-token-admin"
	operatorToken    = "test-token-operator"
	readOnlyToken    = "test-token-read-only"
	tenantToken      = "test-token-tenant-t1"
	otherTenantToken = "test-token-tenant-t2"
	agentToken       = "test-token-agent"
	participantToken = "test-token-participant"
)

// testTokens is the tokens file of the tests.
func testTokens() auth.File {
	return auth.File{Tokens: []auth.Entry{
		{Name: "admin", Role: auth.RoleAdmin, SHA256: auth.Hash(adminToken)},
		{Name: "operator", Role: auth.RoleOperator, SHA256: auth.Hash(operatorToken)},
		{Name: "auditor", Role: auth.RoleReadOnly, SHA256: auth.Hash(readOnlyToken)},
		{Name: "deployer-t1", Role: auth.RoleTenant, Tenant: "t1", SHA256: auth.Hash(tenantToken)},
		{Name: "deployer-t2", Role: auth.RoleTenant, Tenant: "t2", SHA256: auth.Hash(otherTenantToken)},
		{Name: "edge-1", Role: auth.RoleAgent, SHA256: auth.Hash(agentToken)},
		{Name: "participant-1", Role: auth.RoleParticipant, SHA256: auth.Hash(participantToken)},
	}}
}

func testTokenSet(t *testing.T) *auth.Set {
	t.Helper()
	set, err := testTokens().Set()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// stack is a North API on an in-process Kafka and the shared Consul, with
// its ops listener (health, readiness, metrics) on a server of its own.
type stack struct {
	*stagetest.Cluster
	consul *capi.Client
	env    runtime.Env
	server *Server
	url    string
	ops    string
}

// newStack starts a kfake cluster with the topics but skipTopics,
// optionally seeds it (before the server starts reading), then starts the
// North API with the tests' tokens.
func newStack(t *testing.T, seed func(s *stack), skipTopics ...string) *stack {
	t.Helper()
	return newStackWith(t, Options{}, seed, skipTopics...)
}

// newStackWith is newStack with options; without Tokens (and not
// InsecureNoAuth) the server gets the tests' tokens.
func newStackWith(t *testing.T, opts Options, seed func(s *stack), skipTopics ...string) *stack {
	t.Helper()
	if opts.Tokens == nil && !opts.InsecureNoAuth {
		opts.Tokens = testTokenSet(t)
	}
	var topics []string
	for _, base := range []string{topology.PDPNotifications, topology.PolicyCatalog, topology.DeployComponents, topology.CatchupRequests, topology.ComponentApplied,
		topology.CatchupProgress, topology.ACMSync, topology.ACMRuntime, topology.ACMParticipant,
		topology.NMPPolicies, topology.AgentNodes, topology.AgentStatus, topology.AgentPackages, topology.AgentDirectives,
		topology.AppPolicies, topology.AdmissionVerdicts, topology.DeployRequests, topology.Datacenters, topology.Deployments, topology.AdmissionAudit, topology.PolicyRollouts} {
		if !slices.Contains(skipTopics, base) {
			topics = append(topics, base)
		}
	}
	c := stagetest.NewCluster(t, testPartitions, topics...)
	consulCfg, cc := stagetest.SharedConsul(t)
	s := &stack{Cluster: c, consul: cc}
	if seed != nil {
		seed(s)
	}
	env := stagetest.Env(c.Kafka)
	ownConsul := opts.Consul.Addr != ""
	if !ownConsul {
		opts.Consul = consulCfg
	}
	if opts.Registration.Targets.ScriptDirs == nil && opts.Registration.Targets.WebhookAllow == nil {
		opts.Registration = testRegistration()
	}
	srv, err := New(env, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	ops := httptest.NewServer(env.Handler(nil))
	t.Cleanup(func() {
		ts.Close()
		ops.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("view reader: %v", err)
		}
		srv.Close()
	})
	s.env, s.server, s.url, s.ops = env, srv, ts.URL, ops.URL
	if len(skipTopics) == 0 && !ownConsul {
		s.waitReady(t) // a test's own Consul may be down on purpose
	}
	return s
}

func (s *stack) waitReady(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, testkit.Named("the North API ready", func() error {
		resp, err := http.Get(s.ops + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz answers %d", resp.StatusCode)
		}
		return nil
	}))
}

// records reads a topic from the start until want records arrived (or a
// generous deadline passed), then lingers briefly for extra ones.
func (s *stack) records(t *testing.T, base string, want int) []*kgo.Record {
	t.Helper()
	return s.Read(t, base, want, 30*time.Second)
}

// call sends a request as admin with a JSON (or raw string) body and
// returns the status and the decoded JSON answer.
func (s *stack) call(t *testing.T, method, path string, body any) (int, map[string]any, []byte) {
	t.Helper()
	code, out, raw, _ := s.callAs(t, adminToken, method, path, body)
	return code, out, raw
}

// callAs is call with a token ("" for none) that also returns the
// answer's headers.
func (s *stack) callAs(t *testing.T, token, method, path string, body any) (int, map[string]any, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		auth.SetBearer(req, token)
	}
	resp, err := checkedClient(t).Do(req) // checked against openapi.json
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json; body %s", method, path, ct, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		// A list in a reference API's shape (the ACM runtime's
		// participants) is a JSON array: valid, with no fields here.
		var list []any
		if json.Unmarshal(raw, &list) != nil {
			t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
		}
	}
	return resp.StatusCode, out, raw, resp.Header
}

// opsGet reads a path of the ops listener.
func (s *stack) opsGet(t *testing.T, path string) (int, map[string]any, []byte) {
	t.Helper()
	resp, err := http.Get(s.ops + path)
	if err != nil {
		t.Fatalf("GET %s on the ops listener: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, raw
}

// wantError checks a 4xx/5xx answer carries a JSON error with every
// wanted fragment.
func wantError(t *testing.T, what string, code int, body map[string]any, wantCode int, fragments ...string) {
	t.Helper()
	msg, _ := body["error"].(string)
	if code != wantCode || msg == "" {
		t.Errorf("%s: status %d body %v, want %d with an error", what, code, body, wantCode)
		return
	}
	for _, f := range fragments {
		if !bytes.Contains([]byte(msg), []byte(f)) {
			t.Errorf("%s: error %q lacks %q", what, msg, f)
		}
	}
}

func putKV(t *testing.T, c *capi.Client, key string, value string) {
	t.Helper()
	if _, err := c.KV().Put(&capi.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
		t.Fatalf("consul put %s: %v", key, err)
	}
}
