package restarts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
	"github.com/policyflow/policyflow/topology"
)

func TestMain(m *testing.M) { backend.Main(m) }

// northAPI is the North API's binary, a process of the stack like the
// stages.
const northAPI = "north-api"

// processes are the stack's processes, in pipeline order.
var processes = []string{topology.StagePDPIngest, topology.StageMatcher, topology.StageSegmenter,
	topology.StageExecutor, topology.StageConsulWriter, topology.StageAgentNotifier, northAPI}

// partitions is how many partitions every topic of a test gets.
const partitions = 3

// sessionTimeout is the stages' --session-timeout: short, so that a
// member that never comes back is replaced soon; a restarted static
// member takes its partitions back at once anyway.
const sessionTimeout = 6 * time.Second

// settle bounds every wait for what the components should end up seeing:
// generous, the machines that run these suites are slow and busy.
const settle = 2 * time.Minute

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds the stages and the North API of this checkout, once per
// test binary, and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := devstack.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if binDir, buildErr = os.MkdirTemp("", "restarts-bin"); buildErr != nil {
			return
		}
		args := []string{"build", "-o", binDir + string(filepath.Separator)}
		for _, p := range processes {
			args = append(args, "./"+p)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = filepath.Join(root, "services")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// stack is the policy flow of one test: every stage and the North API as
// processes of their own on the backend's Kafka (under the test's topic
// prefix) and Consul, a PDP simulator and the components' webhooks in the
// test process.
type stack struct {
	t      *testing.T
	kafka  runtime.Kafka
	consul string // Consul's address
	kv     *consulapi.Client
	bin    string
	logs   string // each process's log, <name>.log
	// scripts is the directory the agent-notifier may run scripts from.
	scripts string
	// notifyConcurrency, when set, is the agent-notifier's
	// --notify-concurrency.
	notifyConcurrency int
	// notifyAttempts, when set, is the agent-notifier's
	// --notify-attempts.
	notifyAttempts int

	mu    sync.Mutex
	procs map[string]*devstack.StageProc
	ops   map[string]string // each process's ops address, kept across restarts

	api, token string
	pdp        *pdp.Server
	base       string // the PDP simulator and the webhooks
	hooks      *hooks
	producer   *kgo.Client
	// tag makes the test's service_component_names its own.
	tag string
}

// newStack starts every process of the stack and waits until each is
// ready; opts change the stack's settings first.
func newStack(t *testing.T, opts ...func(*stack)) *stack {
	t.Helper()
	bin := binaries(t)
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, partitions)
	s := &stack{t: t, kafka: b.Kafka(prefix), consul: b.ConsulAddr, bin: bin, logs: t.TempDir(), scripts: t.TempDir(),
		procs: map[string]*devstack.StageProc{}, ops: map[string]string{}, pdp: pdp.NewServer(), hooks: newHooks(),
		tag: strings.TrimSuffix(prefix, ".")}
	for _, o := range opts {
		o(s)
	}
	var err error
	if s.kv, err = (consulkv.Config{Addr: s.consul}).Client(); err != nil {
		t.Fatal(err)
	}
	kopts, err := s.kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	if s.producer, err = kgo.NewClient(append(kopts, kgo.RecordPartitioner(runtime.Partitioner()))...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.producer.Close)

	mux := http.NewServeMux()
	mux.HandleFunc("/hook/", s.hooks.serve)
	mux.Handle("/", s.pdp.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.base = "http://" + ln.Addr().String()

	tok, err := devstack.EnsureDevToken(filepath.Join(s.logs, "api"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = tok.Token
	addrs := freeAddrs(t, len(processes)+1)
	for i, name := range processes {
		s.ops[name] = addrs[i]
	}
	s.api = "http://" + addrs[len(processes)]
	t.Cleanup(s.close)
	for _, name := range processes {
		s.start(name)
	}
	for _, name := range processes {
		s.ready(name)
	}
	return s
}

// freeAddrs returns n loopback addresses free now, all different: each
// is held until all are found, so that no two processes get the same one.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free loopback port: %v", err)
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out
}

// args are a process's own flags. Each stage is a static member
// (--instance-id <stage>-0), as a StatefulSet pod is, so that it takes
// its partitions back as soon as it is started again.
func (s *stack) args(name string) []string {
	if name == northAPI {
		return []string{"--api-addr", strings.TrimPrefix(s.api, "http://"), "--tokens-file", filepath.Join(s.logs, "api", devstack.TokensFileName)}
	}
	args := []string{"--session-timeout", sessionTimeout.String(), "--instance-id", name + "-0"}
	switch name {
	case topology.StagePDPIngest:
		args = append(args, "--pdp-url", s.base)
	case topology.StageAgentNotifier:
		args = append(args, "--webhook-allow", "127.0.0.1", "--script-dir", s.scripts)
		if s.notifyConcurrency > 0 {
			args = append(args, "--notify-concurrency", strconv.Itoa(s.notifyConcurrency))
		}
		if s.notifyAttempts > 0 {
			args = append(args, "--notify-attempts", strconv.Itoa(s.notifyAttempts))
		}
	}
	return args
}

// start runs a process of the stack, on the ops address it had before.
func (s *stack) start(name string) {
	s.t.Helper()
	s.mu.Lock()
	ops := s.ops[name]
	s.mu.Unlock()
	p, err := devstack.StartStage(devstack.StageOptions{BinDir: s.bin, Name: name, LogFile: filepath.Join(s.logs, name+".log"),
		Kafka: s.kafka, ConsulAddr: s.consul, HTTPAddr: ops, LogLevel: "info", Args: s.args(name)})
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.procs[name], s.ops[name] = p, p.HTTPAddr
	s.mu.Unlock()
}

func (s *stack) proc(name string) *devstack.StageProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

// ready waits until a stage's /readyz shows it holding partitions (the
// North API: until its /healthcheck answers).
func (s *stack) ready(name string) {
	s.t.Helper()
	if name != northAPI {
		s.eventually(name+" holds its partitions", func() error { return s.holding(name) })
		return
	}
	p := s.proc(name)
	if err := devstack.WaitHTTP(context.Background(), s.api+"/healthcheck", settle); err != nil {
		s.t.Fatal(errors.Join(fmt.Errorf("%s not ready: %w", name, err), p.Exited()))
	}
	if err := p.Exited(); err != nil {
		s.t.Fatalf("%v (another process answers on its address)", err)
	}
}

// holding says why a stage's process does not hold partitions now: it
// exited, or its /readyz is not ready or shows none for the stage.
func (s *stack) holding(name string) error {
	p := s.proc(name)
	if err := p.Exited(); err != nil {
		return err
	}
	resp, err := http.Get("http://" + p.HTTPAddr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Detail map[string]runtime.StageHealth `json:"detail"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("/readyz %d: %w", resp.StatusCode, err)
	}
	if d := r.Detail[name]; resp.StatusCode != http.StatusOK || len(d.Partitions) == 0 {
		return fmt.Errorf("/readyz %d: %+v", resp.StatusCode, r.Detail)
	}
	return nil
}

// stop drains a stage (SIGTERM) as an orchestrator does.
func (s *stack) stop(name string) { s.proc(name).Stop() }

// kill ends a stage at once (SIGKILL), as a crash does.
func (s *stack) kill(name string) { s.proc(name).Kill() }

// restart starts a stopped or killed stage again, waits until its /readyz
// shows it holding partitions again, its work taken back, logs how long
// that took, and returns when it was started.
func (s *stack) restart(name string) (began time.Time) {
	s.t.Helper()
	began = time.Now()
	s.start(name)
	s.eventually(name+" holds its partitions again", func() error { return s.holding(name) })
	s.t.Logf("the %s held its partitions again %s after it was started", name, time.Since(began).Round(time.Millisecond))
	return began
}

// close stops every process; when the test failed, it logs the tail of
// each process's log.
func (s *stack) close() {
	s.mu.Lock()
	procs := make([]*devstack.StageProc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	devstack.StopAll(procs)
	if s.t.Failed() {
		for _, name := range processes {
			s.t.Logf("--- %s.log ---\n%s", name, devstack.Tail(filepath.Join(s.logs, name+".log"), 3000))
		}
	}
}

// slow is how long a wait may take before eventually logs it.
const slow = 5 * time.Second

// eventually polls check until it succeeds, failing the test with its
// last error after settle, and logs a wait that took longer than slow.
func (s *stack) eventually(what string, check func() error) {
	s.t.Helper()
	began := time.Now()
	testkit.Eventually(s.t, settle, testkit.Named(what, check))
	if took := time.Since(began); took > slow {
		s.t.Logf("%s took %s", what, took.Round(time.Millisecond))
	}
}

// scn is a component's service_component_name: the test's tag and its
// id, so that tests sharing a Consul agent keep apart and every key of a
// test starts with its tag.
func (s *stack) scn(component string) string { return s.tag + "-" + component }

// register deploys components that each want policies and are notified
// by notify(component), as the deployment system does: a record on
// deploy.components.
func (s *stack) register(components []string, policies []string, notify func(component string) events.NotifyTarget) {
	s.t.Helper()
	codec := events.Default()
	now := time.Now().UTC()
	var recs []*kgo.Record
	for _, c := range components {
		v, err := codec.Encode(&events.Component{ComponentID: c, DeploymentID: "dep-" + c, ServiceComponentName: s.scn(c),
			Tenant: "restarts", PolicyIDs: policies, Config: "{}", Generation: 1, UpdatedAt: now, Notify: notify(c)})
		if err != nil {
			s.t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: s.kafka.Topic(topology.DeployComponents), Key: []byte(c), Value: v})
	}
	if err := s.producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		s.t.Fatalf("register %d components: %v", len(components), err)
	}
}

// webhook is the notify target of a component whose notifications the
// stack's hooks record.
func (s *stack) webhook(component string) events.NotifyTarget {
	return events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: s.base + "/hook/" + component, TimeoutMs: 10000}
}

// publish makes the PDP hold version v of policy pid (config
// {"version": v}) and tells the North API.
func (s *stack) publish(pid string, v int) {
	s.t.Helper()
	lp, err := s.pdp.Put(policy.Body{
		policy.FieldPolicyName: pid + "." + strconv.Itoa(v) + ".xml", policy.FieldPolicyVersion: strconv.Itoa(v),
		policy.FieldConfig:             `{"version":` + strconv.Itoa(v) + `}`,
		policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE"},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pdp.Notify(ctx, auth.Client(s.token), s.api+"/v1/pdp/notifications", policy.Notification{LoadedPolicies: []policy.LoadedPolicy{lp}}); err != nil {
		s.t.Fatalf("publish version %d of %s: %v", v, pid, err)
	}
}

// versionOf is the policyVersion of a policy_body, 0 when it has none.
func versionOf(body []byte) int {
	var b struct {
		PolicyVersion string `json:"policyVersion"`
	}
	if json.Unmarshal(body, &b) != nil {
		return 0
	}
	v, _ := strconv.Atoi(b.PolicyVersion)
	return v
}

// policyIDOf is the policy_id of a policy_body: its policyName without
// ".<version>.xml".
func policyIDOf(body []byte) string {
	var b struct {
		PolicyName    string `json:"policyName"`
		PolicyVersion string `json:"policyVersion"`
	}
	_ = json.Unmarshal(body, &b)
	return strings.TrimSuffix(b.PolicyName, "."+b.PolicyVersion+".xml")
}

// inConsul returns the version of policy pid each component's Consul item
// holds (0: none).
func (s *stack) inConsul(components []string, pid string) map[string]int {
	s.t.Helper()
	out := make(map[string]int, len(components))
	for _, c := range components {
		kv, _, err := s.kv.KV().Get(consulkv.ItemKey(s.scn(c), pid), nil)
		if err != nil {
			s.t.Fatal(err)
		}
		if kv != nil {
			out[c] = versionOf(kv.Value)
		}
	}
	return out
}

// waitConsul waits until every component's item of pid holds version v.
func (s *stack) waitConsul(components []string, pid string, v int) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("version %d of %s in Consul for %d components", v, pid, len(components)), func() error {
		var behind []string
		held := s.inConsul(components, pid)
		for _, c := range components {
			if got := held[c]; got != v {
				behind = append(behind, fmt.Sprintf("%s holds %d", c, got))
			}
		}
		if len(behind) > 0 {
			return fmt.Errorf("%d behind: %s", len(behind), strings.Join(behind[:min(len(behind), 5)], "; "))
		}
		return nil
	})
}

// metric is the sum of a counter's samples on a process's /metrics whose
// labels contain every one of labels (e.g. `stage="executor"`).
func (s *stack) metric(name, counter string, labels ...string) float64 {
	resp, err := http.Get("http://" + s.proc(name).HTTPAddr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, counter+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			sum += v
		}
	}
	return sum
}

// watchConsul follows the items of pid of the components with blocking
// queries until the test ends, and reports every value that was older
// than one seen before it.
func (s *stack) watchConsul(components []string, pid string) *consulWatch {
	w := &consulWatch{seen: map[string]int{}}
	keys := map[string]string{}
	for _, c := range components {
		keys[consulkv.ItemKey(s.scn(c), pid)] = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		var index uint64
		for ctx.Err() == nil {
			pairs, meta, err := s.kv.KV().List(s.tag+"-", (&consulapi.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx))
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			index = meta.LastIndex
			w.saw(pairs, keys)
		}
	}()
	return w
}

// consulWatch is what watchConsul saw.
type consulWatch struct {
	mu        sync.Mutex
	seen      map[string]int // component -> newest version seen
	backwards []string
}

func (w *consulWatch) saw(pairs consulapi.KVPairs, keys map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range pairs {
		c, ok := keys[p.Key]
		if !ok {
			continue
		}
		v := versionOf(p.Value)
		if v < w.seen[c] {
			w.backwards = append(w.backwards, fmt.Sprintf("%s went from version %d to %d", p.Key, w.seen[c], v))
		}
		w.seen[c] = max(w.seen[c], v)
	}
}

// wentBack lists the items that went back to an older version.
func (w *consulWatch) wentBack() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.backwards...)
}
