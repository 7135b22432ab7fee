package notify

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// consulBinary finds the Consul the tests run: $PF_CONSUL_BIN, else
// .cache/bin/consul at the repository root.
func consulBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PF_CONSUL_BIN"); p != "" {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			p := filepath.Join(dir, ".cache", "bin", "consul")
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("no Consul binary at %s: build it with `make consul` or set PF_CONSUL_BIN", p)
			}
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the working directory, and PF_CONSUL_BIN is not set")
		}
		dir = parent
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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

// startConsul runs `consul agent -dev` on loopback (on httpPort, or a free
// port when 0) until the test ends, and returns its HTTP address once it
// has a leader and accepts KV writes.
func startConsul(t *testing.T, httpPort int) (addr string, client *api.Client) {
	t.Helper()
	bin := consulBinary(t)
	if httpPort == 0 {
		httpPort = freePort(t)
	}
	addr = "127.0.0.1:" + strconv.Itoa(httpPort)
	out := &lockedBuffer{}
	cmd := exec.Command(bin, "agent", "-dev", "-node=policyflow-test", "-disable-host-node-id",
		"-bind=127.0.0.1", "-client=127.0.0.1",
		"-http-port="+strconv.Itoa(httpPort), "-serf-lan-port="+strconv.Itoa(freePort(t)),
		"-server-port="+strconv.Itoa(freePort(t)), "-serf-wan-port=-1", "-dns-port=-1",
		"-grpc-port=-1", "-grpc-tls-port=-1", "-hcl=disable_update_check = true")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = addr
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("consul agent exited before it was ready:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		last = func() error {
			leader, err := client.Status().Leader()
			if err != nil {
				return err
			}
			if leader == "" {
				return errors.New("no leader yet")
			}
			if _, err := client.KV().Put(&api.KVPair{Key: "_probe", Value: []byte("ok")}, nil); err != nil {
				return err
			}
			_, err = client.KV().Delete("_probe", nil)
			return err
		}()
		if last == nil {
			return addr, client
		}
	}
	t.Fatalf("consul agent on %s not ready: %v\n%s", addr, last, out.String())
	return "", nil
}

// snapshot is every key of a folder with its ModifyIndex.
func snapshot(t *testing.T, c *api.Client, prefix string) map[string]uint64 {
	t.Helper()
	pairs, _, err := c.KV().List(prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, p := range pairs {
		out[p.Key] = p.ModifyIndex
	}
	return out
}

func mustGet(t *testing.T, c *api.Client, key string) *api.KVPair {
	t.Helper()
	p, _, err := c.KV().Get(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatalf("Consul has no key %s", key)
	}
	return p
}
