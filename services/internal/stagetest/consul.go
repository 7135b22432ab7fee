package stagetest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
)

// consulReadyTimeout bounds how long an agent may take to elect itself
// leader and accept writes.
const consulReadyTimeout = 90 * time.Second

// errNoConsul says that there is no Consul binary to run.
var errNoConsul = errors.New("no Consul binary: build it with `make consul` or set PF_CONSUL_BIN")

// Consul runs a Consul dev agent on free loopback ports until the test
// ends, and returns how to reach it and a client of it, once it has a
// leader and accepts KV writes. The agent is $PF_CONSUL_BIN, else
// .cache/bin/consul in the directory holding go.work. Without it the test
// is skipped, or fails when the environment variable CI is set.
func Consul(t testing.TB) (consulkv.Config, *consulapi.Client) {
	t.Helper()
	return ConsulOn(t, 0)
}

// ConsulOn is Consul serving HTTP on httpPort of 127.0.0.1 (a free port
// when 0), for tests that point a stage at the address before the agent
// runs.
func ConsulOn(t testing.TB, httpPort int) (consulkv.Config, *consulapi.Client) {
	t.Helper()
	a, err := startConsul(consulBinary(t), httpPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	return consulkv.Config{Addr: a.addr}, a.client
}

// shared is the agent of SharedConsul.
var shared struct {
	mu      sync.Mutex
	running bool // Main is running the tests
	started bool
	agent   *consulAgent
	err     error
}

// SharedConsul is Consul with one agent for every test of the package that
// asks for it: tests sharing it keep to keys of their own. The package's
// TestMain must run its tests through Main, which stops the agent.
func SharedConsul(t testing.TB) (consulkv.Config, *consulapi.Client) {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.running {
		t.Fatal("stagetest.SharedConsul needs the package's TestMain to call stagetest.Main")
	}
	if !shared.started {
		bin := consulBinary(t) // skips (or fails) every test asking when there is none
		shared.started = true
		shared.agent, shared.err = startConsul(bin, 0)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return consulkv.Config{Addr: shared.agent.addr}, shared.agent.client
}

// Main runs a package's tests, then stops the agent of SharedConsul, and
// returns the exit code: func TestMain(m *testing.M) { os.Exit(stagetest.Main(m)) }.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.running = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.agent != nil {
		shared.agent.stop()
	}
	return code
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func freePort() (int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

// freePorts returns n distinct ports free on 127.0.0.1 a moment ago. Each
// listener is held until all are picked: closed one by one, the kernel
// may hand the same port out twice, and an agent given one port for two
// uses does not start.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port on 127.0.0.1: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ModifyIndexes returns every key under prefix with its ModifyIndex: two
// equal snapshots mean nothing was written in between.
func ModifyIndexes(t testing.TB, c *consulapi.Client, prefix string) map[string]uint64 {
	t.Helper()
	pairs, _, err := c.KV().List(prefix, nil)
	if err != nil {
		t.Fatalf("list Consul keys under %s: %v", prefix, err)
	}
	out := map[string]uint64{}
	for _, p := range pairs {
		out[p.Key] = p.ModifyIndex
	}
	return out
}

// consulBinary returns the agent binary, skipping the test without one
// (failing it under CI, where `make test` builds it first).
func consulBinary(t testing.TB) string {
	t.Helper()
	bin, err := findConsul()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set: %v", err)
		}
		t.Skipf("skipped: %v", err)
	}
	return bin
}

// findConsul looks for $PF_CONSUL_BIN, else .cache/bin/consul in the
// directory above the working directory that holds go.work.
func findConsul() (string, error) {
	if p := os.Getenv("PF_CONSUL_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%w (PF_CONSUL_BIN: %w)", errNoConsul, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			p := filepath.Join(dir, ".cache", "bin", "consul")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("%w (%w)", errNoConsul, err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w (no go.work above the working directory to find .cache/bin/consul in)", errNoConsul)
		}
		dir = parent
	}
}

// consulAgent is a running `consul agent -dev`.
type consulAgent struct {
	addr   string
	client *consulapi.Client
	cmd    *exec.Cmd
	exited chan struct{}
	out    *lockedBuffer
}

// startConsul runs bin as a dev agent on loopback, HTTP on httpPort (a
// free one when 0), and returns once it has a leader and accepts KV
// writes.
func startConsul(bin string, httpPort int) (*consulAgent, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(ports); i++ {
		if ports[i] == httpPort { // the caller's port, free until the agent takes it
			ports[i] = ports[0]
		}
	}
	if httpPort == 0 {
		httpPort = ports[0]
	}
	a := &consulAgent{addr: "127.0.0.1:" + strconv.Itoa(httpPort), exited: make(chan struct{}), out: &lockedBuffer{}}
	a.cmd = exec.Command(bin, "agent", "-dev", "-node=policyflow-test", "-disable-host-node-id",
		"-bind=127.0.0.1", "-client=127.0.0.1",
		"-http-port="+strconv.Itoa(httpPort), "-serf-lan-port="+strconv.Itoa(ports[1]),
		"-server-port="+strconv.Itoa(ports[2]), "-serf-wan-port=-1", "-dns-port=-1",
		"-grpc-port=-1", "-grpc-tls-port=-1", "-hcl=disable_update_check = true")
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the Consul agent %s: %w", bin, err)
	}
	go func() { _ = a.cmd.Wait(); close(a.exited) }()
	cfg := consulapi.DefaultNonPooledConfig()
	cfg.Address = a.addr
	client, err := consulapi.NewClient(cfg)
	if err != nil {
		a.stop()
		return nil, fmt.Errorf("create a client of the Consul agent at %s: %w", a.addr, err)
	}
	a.client = client
	deadline := time.Now().Add(consulReadyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-a.exited:
			return nil, fmt.Errorf("the Consul agent at %s exited before it was ready:\n%s", a.addr, a.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if last = a.ready(); last == nil {
			return a, nil
		}
	}
	a.stop()
	return nil, fmt.Errorf("the Consul agent at %s was not ready within %s: %w\n%s", a.addr, consulReadyTimeout, last, a.out.String())
}

// ready reports why the agent cannot serve the tests yet, or nil.
func (a *consulAgent) ready() error {
	leader, err := a.client.Status().Leader()
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	if _, err := a.client.KV().Put(&consulapi.KVPair{Key: "_probe", Value: []byte("ok")}, nil); err != nil {
		return err
	}
	_, err = a.client.KV().Delete("_probe", nil)
	return err
}

// stop interrupts the agent and waits for it to exit, killing it when it
// takes too long.
func (a *consulAgent) stop() {
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// lockedBuffer collects the agent's output for failure messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
