// Package nodemgmt_test runs node management end to end on the chosen
// backend: the nmp-hub stage, the North API with its package store, and a
// fleet of reference edge agents (tools/edge-agent: processes on the
// embedded backend, containers of an image built FROM scratch on the
// containers backend), and checks what an operator would: each node's
// reported status, the NMP's status, the directives and what the agents'
// install commands ran.
package nodemgmt_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/nmp-hub/nmphub"
	"github.com/policyflow/policyflow/services/north-api/apicheck"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

func TestMain(m *testing.M) { backend.Main(m) }

// hub is the hub side under a test's own topic prefix.
type hub struct {
	t          *testing.T
	api        string
	admin      string // admin token
	agent      string // agent token
	key        ed25519.PrivateKey
	control    string // what the install script reads and writes
	packageDir string // where the North API stores the packages
	installCmd string
	containers bool // agents run as containers of agentImage
	agents     map[string]*agentProc
	mu         sync.Mutex
	// client sends the test's requests to the API; every exchange is
	// checked against the API's OpenAPI document, and the test fails for
	// each one that differs from it.
	client *http.Client
	// agentAPI is where the edge agents find the hub: a proxy to api that
	// checks their exchanges against the OpenAPI document too.
	agentAPI string
}

var (
	buildOnce sync.Once
	agentBin  string
	buildErr  error
)

// edgeAgent builds tools/edge-agent once per test binary.
func edgeAgent(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "edge-agent-bin")
		if err != nil {
			buildErr = err
			return
		}
		agentBin = filepath.Join(dir, "edge-agent")
		for _, b := range []struct{ out, pkg string }{
			{agentBin, "github.com/policyflow/policyflow/tools/edge-agent"},
			{filepath.Join(dir, "installer"), "github.com/policyflow/policyflow/integration/nodemgmt/installer"},
		} {
			cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return agentBin
}

// installScript (and, in containers, the installer command) records each install in <control>/installed-<node> and
// fails when <control>/fail-<node>-<version> exists; it hangs while
// <control>/hang-<node>-<version> exists.
const installScript = `#!/bin/sh
C=%q
while [ -f "$C/hang-$PF_NODE-$3" ]; do sleep 0.05; done
echo "$1 $3" >> "$C/installed-$PF_NODE"
if [ -f "$C/fail-$PF_NODE-$3" ]; then echo "cannot install $3" >&2; exit 3; fi
exit 0
`

// agentImage is the image of the edge agents on the containers backend:
// FROM scratch, the edge-agent and the installer.
const agentImage = "policyflow-test/edge-agent:dev"

var (
	imageOnce sync.Once
	imageErr  error
)

func buildAgentImage(t *testing.T) {
	t.Helper()
	imageOnce.Do(func() {
		dir := filepath.Dir(agentBin)
		df := "FROM scratch\nCOPY edge-agent installer /\nENTRYPOINT [\"/edge-agent\"]\n"
		if imageErr = os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); imageErr != nil {
			return
		}
		if out, err := exec.Command("docker", "build", "-q", "-t", agentImage, dir).CombinedOutput(); err != nil {
			imageErr = fmt.Errorf("docker build %s: %v\n%s", agentImage, err, out)
		}
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
}

func start(t *testing.T) *hub {
	t.Helper()
	edgeAgent(t)
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, 3)
	env := runtime.NewEnv(b.Kafka(prefix), runtime.NewLogger(os.Stderr, "warn", true))
	env.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	env.SessionTimeout = 6 * time.Second
	env.TransactionTimeout = 10 * time.Second
	h := &hub{t: t, control: t.TempDir(), packageDir: t.TempDir(), agents: map[string]*agentProc{},
		client: apicheck.Client(t, northapi.OpenAPI())}
	// On the containers backend the agents are containers too (host
	// network, so they reach the North API this process serves).
	if b.Kind == backend.KindContainers {
		buildAgentImage(t)
		h.containers = true
		if err := os.Chmod(h.control, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if h.admin, err = auth.NewToken(); err != nil {
		t.Fatal(err)
	}
	if h.agent, err = auth.NewToken(); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.File{Tokens: []auth.Entry{
		{Name: "admin", Role: auth.RoleAdmin, SHA256: auth.Hash(h.admin)},
		{Name: "fleet", Role: auth.RoleAgent, Tenant: "acme", SHA256: auth.Hash(h.agent)},
	}}.Set()
	if err != nil {
		t.Fatal(err)
	}
	// Packages are signed; the agents trust the public key (in the
	// control directory, which containers see as /control).
	priv, pub, err := nmp.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	if h.key, err = nmp.ParseSigningKey(priv); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.control, "signing.pub"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	h.installCmd = filepath.Join(h.control, "install.sh")
	if err := os.WriteFile(h.installCmd, []byte(fmt.Sprintf(installScript, h.control)), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.api = "http://" + ln.Addr().String()
	target, err := url.Parse(h.api)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = apicheck.Wrap(t, northapi.OpenAPI(), nil)
	agentProxy := httptest.NewServer(proxy)
	t.Cleanup(agentProxy.Close) // after the agents stop (below)
	h.agentAPI = agentProxy.URL
	ops := httptest.NewServer(env.Handler(nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		if err := runtime.RunStages(ctx, env, nmphub.Stage()); err != nil && ctx.Err() == nil {
			t.Errorf("nmp-hub: %v", err)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		if err := northapi.ServeListener(ctx, env, ln, northapi.Options{Consul: b.Consul(), Tokens: tokens, PackageDir: h.packageDir}); err != nil && ctx.Err() == nil {
			t.Errorf("north api: %v", err)
		}
	}()
	t.Cleanup(func() {
		h.mu.Lock()
		for _, a := range h.agents {
			a.stop(syscall.SIGTERM)
		}
		h.mu.Unlock()
		cancel()
		<-done
		<-done
		ops.Close()
	})
	testkit.Eventually(t, 2*time.Minute, testkit.Named("nmp-hub and North API ready", func() error {
		resp, err := http.Get(ops.URL + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		// The North API's own word last: its views (agent packages, nodes,
		// NMPs) may join the stages' health only once its reader reached
		// the brokers.
		resp2, err := h.client.Get(h.api + "/healthcheck")
		if err != nil {
			return err
		}
		defer resp2.Body.Close()
		var health struct {
			Status string `json:"status"`
		}
		if err := json.NewDecoder(resp2.Body).Decode(&health); err != nil || health.Status != "ok" {
			return fmt.Errorf("North API /healthcheck: %+v (%v)", health, err)
		}
		return nil
	}))
	return h
}

func (h *hub) do(method, path string, body any) (int, []byte) {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, h.api+path, r)
	req.Header.Set("Content-Type", "application/json")
	auth.SetBearer(req, h.admin)
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (h *hub) must(method, path string, body any) []byte {
	h.t.Helper()
	code, out := h.do(method, path, body)
	if code/100 != 2 {
		h.t.Fatalf("%s %s: %d %s", method, path, code, out)
	}
	return out
}

// publishPackage uploads an agent package of a version, signed with the
// key the agents trust, and answers the file the hub stores it in.
func (h *hub) publishPackage(version string) string {
	h.t.Helper()
	return h.publishSigned(version, h.key)
}

// publishSigned uploads an agent package of a version signed with key,
// and answers the file the hub stores it in.
func (h *hub) publishSigned(version string, key ed25519.PrivateKey) string {
	h.t.Helper()
	pkg, err := nmp.BuildPackage(nmp.Manifest{Version: version, ConfigVersion: version}, map[string][]byte{
		"packages/agent.bin": []byte("agent " + version), "config/agent.cfg": []byte("HUB=" + h.api),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	req, _ := http.NewRequest(http.MethodPost, h.api+"/v1/agentpackages?sha256="+hex.EncodeToString(sum[:]), bytes.NewReader(pkg))
	auth.SetBearer(req, h.admin)
	sig, keyID := nmp.SignPackage(key, version, hex.EncodeToString(sum[:]))
	req.Header.Set(api.SignatureHeader, sig)
	req.Header.Set(api.SigningKeyHeader, keyID)
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		h.t.Fatalf("upload %s: %d %s", version, resp.StatusCode, out)
	}
	return filepath.Join(h.packageDir, hex.EncodeToString(sum[:])+".tar.gz")
}

// agentProc is one running edge agent.
type agentProc struct {
	node, dir string
	cmd       *exec.Cmd
	container string // the container's id, on the containers backend
	done      chan struct{}
}

func (a *agentProc) stop(sig syscall.Signal) {
	if a.container != "" {
		name := "TERM"
		if sig == syscall.SIGKILL {
			name = "KILL"
		}
		_ = exec.Command("docker", "kill", "-s", name, a.container).Run()
		_ = exec.Command("docker", "wait", a.container).Run()
		return
	}
	if a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(sig)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// startAgent runs an edge agent for a node at a version (the version is
// used only when its state directory is new).
func (h *hub) startAgent(node, version, arch string, dir string) *agentProc {
	h.t.Helper()
	if dir == "" {
		dir = filepath.Join(h.control, "state-"+node)
	}
	if h.containers {
		return h.startContainer(node, version, arch, dir)
	}
	cmd := exec.Command(agentBin, "--hub", h.agentAPI, "--org", "acme", "--node", node, "--version", version,
		"--state-dir", dir, "--properties", fmt.Sprintf(`[{"name":"arch","value":%q}]`, arch),
		"--install-cmd", h.installCmd, "--poll-wait", "5s", "--log-level", "info",
		"--insecure", "--trusted-key", filepath.Join(h.control, "signing.pub"))
	cmd.Env = append(os.Environ(), "PF_TOKEN="+h.agent)
	f, err := os.Create(filepath.Join(h.control, "log-"+node))
	if err != nil {
		h.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	a := &agentProc{node: node, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(a.done) }()
	h.mu.Lock()
	h.agents[node] = a
	h.mu.Unlock()
	return a
}

// startContainer runs an edge agent in a container of agentImage, with
// the control directory at /control.
func (h *hub) startContainer(node, version, arch, dir string) *agentProc {
	h.t.Helper()
	rel, err := filepath.Rel(h.control, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		h.t.Fatalf("state dir %s is not under the control dir", dir)
	}
	out, err := exec.Command("docker", "run", "-d", "--network", "host", "-v", h.control+":/control", "-e", "PF_TOKEN="+h.agent,
		agentImage, "--hub", h.agentAPI, "--org", "acme", "--node", node, "--version", version,
		"--state-dir", "/control/"+rel, "--properties", fmt.Sprintf(`[{"name":"arch","value":%q}]`, arch),
		"--install-cmd", "/installer", "--poll-wait", "5s", "--log-level", "info",
		"--insecure", "--trusted-key", "/control/signing.pub").CombinedOutput()
	if err != nil {
		h.t.Fatalf("docker run edge agent %s: %v\n%s", node, err, out)
	}
	a := &agentProc{node: node, dir: dir, container: strings.TrimSpace(string(out)), done: make(chan struct{})}
	h.t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", a.container).Run() })
	h.mu.Lock()
	h.agents[node] = a
	h.mu.Unlock()
	return a
}

// agentLog is what a node's agent logged.
func (h *hub) agentLog(node string) []byte {
	h.mu.Lock()
	a := h.agents[node]
	h.mu.Unlock()
	if a != nil && a.container != "" {
		out, _ := exec.Command("docker", "logs", a.container).CombinedOutput()
		return out
	}
	b, _ := os.ReadFile(filepath.Join(h.control, "log-"+node))
	return b
}

// nodeStatus is a node's last report as the API answers it.
type nodeStatus struct {
	Policy          string `json:"policy"`
	Status          string `json:"status"`
	SoftwareVersion string `json:"softwareVersion"`
	PreviousVersion string `json:"previousVersion"`
	Error           string `json:"error"`
	AgentVersion    struct {
		Package      json.RawMessage `json:"package"`
		Failed       string          `json:"failed"`
		UpgradeStart *time.Time      `json:"upgradeStart"`
		UpgradeEnd   *time.Time      `json:"upgradeEnd"`
	} `json:"agentVersion"`
}

func (h *hub) status(node string) (nodeStatus, bool) {
	h.t.Helper()
	code, out := h.do(http.MethodGet, "/v1/orgs/acme/nodes/"+node+"/status", nil)
	var s nodeStatus
	if code != 200 {
		return s, false
	}
	if err := json.Unmarshal(out, &s); err != nil {
		h.t.Fatal(err)
	}
	return s, true
}

// waitStatus waits until the node reports state at version.
func (h *hub) waitStatus(node, state, version string) nodeStatus {
	h.t.Helper()
	var s nodeStatus
	testkit.Eventually(h.t, time.Minute, testkit.Named(fmt.Sprintf("%s reports %q at %s", node, state, version), func() error {
		var ok bool
		s, ok = h.status(node)
		if !ok || s.Status != state || s.SoftwareVersion != version {
			return fmt.Errorf("status %+v\nagent log:\n%s", s, tail(h.agentLog(node)))
		}
		return nil
	}))
	return s
}

func tail(b []byte) string {
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// installLines are the "<dir> <version>" lines node's script ran.
func (h *hub) installLines(node string) []string {
	b, _ := os.ReadFile(filepath.Join(h.control, "installed-"+node))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func (h *hub) mark(kind, node, version string) string {
	p := filepath.Join(h.control, kind+"-"+node+"-"+version)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func manifestVersion(t *testing.T, raw json.RawMessage) string {
	var m struct {
		Version string `json:"version"`
	}
	_ = json.Unmarshal(raw, &m)
	return m.Version
}

func (h *hub) nmpStatus(name string) api.NMPStatus {
	h.t.Helper()
	var st api.NMPStatus
	if err := json.Unmarshal(h.must(http.MethodGet, "/v1/orgs/acme/nmps/"+name+"/status", nil), &st); err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *hub) directive(node string) api.DirectiveAnswer {
	h.t.Helper()
	var d api.DirectiveAnswer
	if err := json.Unmarshal(h.must(http.MethodGet, "/v1/orgs/acme/nodes/"+node+"/directive", nil), &d); err != nil {
		h.t.Fatal(err)
	}
	return d
}

func amd64NMP(version string, extra map[string]any) map[string]any {
	m := map[string]any{"enabled": true, "constraints": []string{"arch == amd64"},
		"agentUpgradePolicy": map[string]any{"atLeastVersion": version, "start": "now", "duration": 2}}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
