package devstack

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
)

// consulBinary returns the consul binary, skipping the test when it is
// absent on a developer machine; under CI (env CI set) `make test` builds it
// first, so its absence fails the test.
func consulBinary(t *testing.T) string {
	t.Helper()
	bin, err := ConsulBinary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but there is no consul binary: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	return bin
}

func consulClient(t *testing.T, a *ConsulAgent) *consulapi.Client {
	t.Helper()
	c, err := consulapi.NewClient(&consulapi.Config{Address: a.Addr})
	if err != nil {
		t.Fatalf("consul client for %s: %v", a.Addr, err)
	}
	return c
}

func TestConsulAgentServesKVUntilStopped(t *testing.T) {
	bin := consulBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	a, err := StartConsul(ctx, ConsulOptions{Binary: bin, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("StartConsul: %v", err)
	}
	defer a.Stop()
	// Its Serf LAN and server RPC listeners are named, for a dev stack to
	// keep webhooks away from them, and they are the agent's.
	if len(a.Internal) != 2 {
		t.Fatalf("internal listeners %v, want Serf LAN and server RPC", a.Internal)
	}
	for _, addr := range a.Internal {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("the agent's internal listener %s does not answer: %v", addr, err)
		}
		c.Close()
	}

	kv := consulClient(t, a).KV()
	key, val := consulkv.ItemKey("dcae_svc", "DCAE.Config_VM_MEMORY"), []byte(`{"policy_id":"DCAE.Config_VM_MEMORY"}`)
	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: val}, nil); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	got, _, err := kv.Get(key, nil)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	if got == nil || string(got.Value) != string(val) {
		t.Fatalf("get %s = %v, want %s", key, got, val)
	}
	// The readiness probe leaves nothing behind.
	keys, _, err := kv.Keys("", "", nil)
	if err != nil {
		t.Fatalf("list keys: %v", err)
	}
	if len(keys) != 1 || keys[0] != key {
		t.Errorf("keys in a fresh agent after one put: %v, want [%s]", keys, key)
	}
	// The UI is served at the address the banner of `policyctl dev` prints.
	resp, err := http.Get("http://" + a.Addr + "/ui/")
	if err != nil {
		t.Fatalf("get UI: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /ui/ answered %s, want 200", resp.Status)
	}

	if err := a.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-a.Done():
	default:
		t.Fatal("agent process still running after Stop")
	}
	if _, _, err := kv.Get(key, nil); err == nil {
		t.Fatalf("agent at %s still answers after Stop", a.Addr)
	}
	if _, err := os.Stat(a.LogFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary log %s of a -dev agent still exists after Stop (stat error %v)", a.LogFile, err)
	}
}

func TestConsulKVSurvivesRestartOnDataDir(t *testing.T) {
	bin := consulBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()

	a, err := StartConsul(ctx, ConsulOptions{Binary: bin, DataDir: dir})
	if err != nil {
		t.Fatalf("StartConsul on %s: %v", dir, err)
	}
	key := consulkv.EventKey("dcae_svc")
	if _, err := consulClient(t, a).KV().Put(&consulapi.KVPair{Key: key, Value: []byte(`{"action":"gathered"}`)}, nil); err != nil {
		a.Stop()
		t.Fatalf("put %s: %v", key, err)
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	// The second agent gets other ports; the data dir alone carries the KV.
	a, err = StartConsul(ctx, ConsulOptions{Binary: bin, DataDir: dir})
	if err != nil {
		t.Fatalf("restart StartConsul on %s: %v", dir, err)
	}
	defer a.Stop()
	got, _, err := consulClient(t, a).KV().Get(key, nil)
	if err != nil {
		t.Fatalf("get %s after restart: %v", key, err)
	}
	if got == nil || string(got.Value) != `{"action":"gathered"}` {
		t.Fatalf("get %s after restart = %v, want the value put before", key, got)
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("Stop after restart: %v", err)
	}
	if _, err := os.Stat(a.LogFile); err != nil {
		t.Errorf("agent log in the data dir: %v", err)
	}
}

func TestConsulBinaryNamesTheFix(t *testing.T) {
	t.Setenv("PF_CONSUL_BIN", t.TempDir()+"/no-such-consul")
	_, err := ConsulBinary()
	if err == nil {
		t.Fatal("ConsulBinary accepted a PF_CONSUL_BIN that does not exist")
	}
	t.Setenv("PF_CONSUL_BIN", "")
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir())
	_, err = ConsulBinary()
	if err == nil || !strings.Contains(err.Error(), "make consul") {
		t.Fatalf("ConsulBinary outside a checkout with no consul on PATH: %v, want an error that says to run `make consul`", err)
	}
}
