package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// testPartitions is the partition count of every topic in these tests.
const testPartitions = 3

// consulAgent is one Consul dev agent shared by the package's tests; each
// test uses its own service component names.
var consulAgent struct {
	once sync.Once
	addr string
	cmd  *exec.Cmd
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if c := consulAgent.cmd; c != nil && c.Process != nil {
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
		}
	}
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

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
			return filepath.Join(dir, ".cache", "bin", "consul")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test directory: cannot find .cache/bin/consul; set PF_CONSUL_BIN")
		}
		dir = parent
	}
}

// startConsul starts (once) a Consul dev agent on free loopback ports and
// returns its HTTP address.
func startConsul(t *testing.T) string {
	t.Helper()
	consulAgent.once.Do(func() {
		bin := consulBinary(t)
		if _, err := os.Stat(bin); err != nil {
			consulAgent.err = fmt.Errorf("consul binary %s: %w (build it: cd tools/consul && go build -o ../../.cache/bin/consul github.com/hashicorp/consul)", bin, err)
			return
		}
		httpPort := freePort(t)
		consulAgent.addr = "127.0.0.1:" + strconv.Itoa(httpPort)
		logf, err := os.CreateTemp("", "northapi-consul-*.log")
		if err != nil {
			consulAgent.err = err
			return
		}
		cmd := exec.Command(bin, "agent", "-dev",
			"-http-port", strconv.Itoa(httpPort), "-dns-port", "-1", "-grpc-port", "-1",
			"-serf-lan-port", strconv.Itoa(freePort(t)), "-serf-wan-port", strconv.Itoa(freePort(t)),
			"-server-port", strconv.Itoa(freePort(t)), "-bind", "127.0.0.1", "-client", "127.0.0.1")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			consulAgent.err = fmt.Errorf("start consul: %w", err)
			return
		}
		consulAgent.cmd = cmd
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			if consulLeader(consulAgent.addr) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		out, _ := os.ReadFile(logf.Name())
		consulAgent.err = fmt.Errorf("consul at %s elected no leader within 90s; its log:\n%s", consulAgent.addr, out)
	})
	if consulAgent.err != nil {
		t.Fatal(consulAgent.err)
	}
	return consulAgent.addr
}

// consulLeader reports whether the agent at addr answers and has a leader.
func consulLeader(addr string) bool {
	resp, err := http.Get("http://" + addr + "/v1/status/leader")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && len(bytes.Trim(bytes.TrimSpace(b), `"`)) > 0
}

// stack is a North API on an in-process Kafka and the shared Consul.
type stack struct {
	kafka  runtime.Kafka
	adm    *kadm.Client
	prod   *kgo.Client
	consul *capi.Client
	server *Server
	url    string
}

// newStack starts a kfake cluster with the topics, optionally seeds it
// (before the server starts reading), then starts the North API.
func newStack(t *testing.T, seed func(s *stack), skipTopics ...string) *stack {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	k := runtime.Kafka{Brokers: c.ListenAddrs(), Prefix: "napi.", FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(k.Topic("unused")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, base := range []string{topology.PDPNotifications, topology.PolicyCatalog, topology.DeployComponents, topology.CatchupRequests, topology.ComponentApplied} {
		if slices.Contains(skipTopics, base) {
			continue
		}
		resp, err := adm.CreateTopic(context.Background(), testPartitions, 1, nil, k.Topic(base))
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", base, err, resp.Err)
		}
	}
	consulAddr := startConsul(t)
	ccfg := capi.DefaultConfig()
	ccfg.Address = consulAddr
	cc, err := capi.NewClient(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{kafka: k, adm: adm, prod: cl, consul: cc}
	if seed != nil {
		seed(s)
	}
	env := runtime.NewEnv(k, runtime.Consul{Addr: consulAddr}, runtime.NewLogger(io.Discard, "error", false))
	srv, err := New(env, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("view reader: %v", err)
		}
		srv.Close()
	})
	s.server, s.url = srv, ts.URL
	if len(skipTopics) == 0 {
		s.waitReady(t)
	}
	return s
}

func (s *stack) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the North API did not become ready within 60s")
}

// produceEvent writes an event (nil: tombstone) keyed by key.
func (s *stack) produceEvent(t *testing.T, base, key string, ev events.Event) {
	t.Helper()
	var value []byte
	if ev != nil {
		var err error
		if value, err = events.Default().Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	rec := &kgo.Record{Topic: s.kafka.Topic(base), Key: []byte(key), Value: value}
	if err := s.prod.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", base, err)
	}
}

// produceCommitted writes events in one transaction, as pdp-ingest does,
// so partitions end in a transaction marker.
func (s *stack) produceCommitted(t *testing.T, base string, keyed map[string]events.Event) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.kafka.Brokers...), kgo.TransactionalID("seed-"+base))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for key, ev := range keyed {
		var value []byte
		if ev != nil {
			if value, err = events.Default().Encode(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: s.kafka.Topic(base), Key: []byte(key), Value: value}).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", base, err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// records reads a topic from the start until want records arrived (or a
// generous deadline passed), then lingers briefly for extra ones.
func (s *stack) records(t *testing.T, base string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.kafka.Brokers...), kgo.ConsumeTopics(s.kafka.Topic(base)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		out = append(out, cl.PollFetches(ctx).Records()...)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	out = append(out, cl.PollFetches(ctx).Records()...)
	cancel()
	return out
}

func decode[T events.Event](t *testing.T, rec *kgo.Record, v T) T {
	t.Helper()
	if err := events.Default().DecodeInto(context.Background(), rec.Value, v); err != nil {
		t.Fatalf("decode record at %s[%d]@%d: %v", rec.Topic, rec.Partition, rec.Offset, err)
	}
	return v
}

// call sends a request with a JSON (or raw string) body and returns the
// status and the decoded JSON answer.
func (s *stack) call(t *testing.T, method, path string, body any) (int, map[string]any, []byte) {
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
	resp, err := http.DefaultClient.Do(req)
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
		t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
	}
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
