package agentnotifier

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// hookServer is a webhook endpoint that keeps, per path, the bodies it
// was sent in the order they came.
type hookServer struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string][]string
	// came counts the requests that came, answered or not.
	came atomic.Int64
}

// newHookServer starts the endpoint; wait, when not nil, runs inside
// every request, given its path.
func newHookServer(t testing.TB, wait func(path string)) *hookServer {
	t.Helper()
	h := &hookServer{got: map[string][]string{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.came.Add(1)
		if wait != nil {
			wait(r.URL.Path)
		}
		h.mu.Lock()
		h.got[r.URL.Path] = append(h.got[r.URL.Path], string(b))
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	return h
}

// calls returns the bodies sent to path so far.
func (h *hookServer) calls(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got[path]...)
}

// total is how many requests came in all.
func (h *hookServer) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, b := range h.got {
		n += len(b)
	}
	return n
}

// policyOf is the one policy of generation gen of component id, its body
// naming both.
func policyOf(id string, gen int64) events.Policy {
	return events.Policy{PolicyID: "P", PolicyName: fmt.Sprintf("P.%d.xml", gen), PolicyVersion: fmt.Sprint(gen),
		Body: fmt.Sprintf(`{"config":{"component":%q,"generation":%d}}`, id, gen)}
}

// holdGeneration makes Consul hold generation gen of each component.
func holdGeneration(t testing.TB, consul *api.Client, gen int64, ids ...string) {
	t.Helper()
	for _, id := range ids {
		hold(t, consul, id, policyOf(id, gen))
	}
}

// update is generation gen of component id (also its
// service_component_name), which updated its one policy (policyOf).
func update(id string, gen int64, notify events.NotifyTarget) *events.ComponentApplied {
	p := policyOf(id, gen)
	return &events.ComponentApplied{
		ComponentID: id, ServiceComponentName: id, UpdateID: fmt.Sprintf("%s-u%d", id, gen), Action: "updated", Generation: gen,
		PoliciesCount: 1, PoliciesBytes: int64(len(p.Body)), PolicyRefs: []events.PolicyRef{p.Ref()}, UpdatedRefs: []events.PolicyRef{p.Ref()},
		Notify: notify, AppliedAt: time.UnixMilli(5000).UTC(),
	}
}

// wantPayload is the notification of update(id, gen, ...).
func wantPayload(id string, gen int64) string {
	p := fmt.Sprintf(`[{"config":{"component":%q,"generation":%d}}]`, id, gen)
	return `{"policies":` + p + `,"updated_policies":` + p + `,"removed_policies":[]}`
}

func webhook(url string) events.NotifyTarget {
	return events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: url}
}

// TestNotifierManyComponents notifies hundreds of components from one
// go of records: each once, with its own payload, its claim completed;
// a component with two updates is notified of both, in order; a replay
// notifies nobody and writes nothing.
func TestNotifierManyComponents(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	const twice = "many-twice"
	// Generation 2 of the component updated twice lands in Consul while
	// the component is told of generation 1, and the notification of
	// generation 2 carries it.
	hooks := newHookServer(t, func(path string) {
		if path == "/"+twice {
			holdGeneration(t, consul, 2, twice)
		}
	})
	const nHooks, nScripts = 200, 3
	dir := t.TempDir()
	scripts := make([]*recorder, nScripts)
	for i := range scripts {
		scripts[i] = newRecorder(t, dir)
	}

	hookID := func(i int) string { return fmt.Sprintf("many-hook-%03d", i) }
	scriptID := func(i int) string { return fmt.Sprintf("many-script-%d", i) }
	holdGeneration(t, consul, 1, twice)
	for i := range nHooks {
		holdGeneration(t, consul, 1, hookID(i))
	}
	for i := range scripts {
		holdGeneration(t, consul, 1, scriptID(i))
	}
	records := func() []*kgo.Record {
		recs := []*kgo.Record{c.Record(t, topology.ComponentApplied, twice, update(twice, 1, webhook(hooks.URL+"/"+twice)))}
		for i := range nHooks {
			id := hookID(i)
			recs = append(recs, c.Record(t, topology.ComponentApplied, id, update(id, 1, webhook(hooks.URL+"/"+id))))
		}
		for i, s := range scripts {
			id := scriptID(i)
			recs = append(recs, c.Record(t, topology.ComponentApplied, id,
				update(id, 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: s.script})))
		}
		return append(recs, c.Record(t, topology.ComponentApplied, twice, update(twice, 2, webhook(hooks.URL+"/"+twice))))
	}
	c.ProduceRecords(t, records()...)

	env := stagetest.Env(c.Kafka)
	env.PollRecords = 1000
	stage := stageOn(t, consulCfg, dir)
	stagetest.Run(t, stage, env)
	waitCommitted(t, c, stage.GroupIn(c.Kafka), topology.ComponentApplied)
	// Committed once claimed; the last notifications may still be under
	// way.
	waitOutcomes(t, consul, "many-", nHooks+nScripts+1)

	check := func(when string) {
		t.Helper()
		for i := range nHooks {
			id := hookID(i)
			if got := hooks.calls("/" + id); len(got) != 1 || got[0] != wantPayload(id, 1) {
				t.Fatalf("%s: webhook of %s got %q, want one call with %s", when, id, got, wantPayload(id, 1))
			}
		}
		for i, s := range scripts {
			id := scriptID(i)
			if got := s.calls(t); len(got) != 1 || !reflect.DeepEqual(got[0], []string{"policies", wantPayload(id, 1)}) {
				t.Fatalf("%s: script of %s called with %q, want once with [policies %s]", when, id, got, wantPayload(id, 1))
			}
		}
		if got, want := hooks.calls("/"+twice), []string{wantPayload(twice, 1), wantPayload(twice, 2)}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: webhook of %s got %q, want generation 1 then 2: %q", when, twice, got, want)
		}
		if n := hooks.total(); n != nHooks+2 {
			t.Fatalf("%s: %d webhook calls, want %d", when, n, nHooks+2)
		}
	}
	check("first run")

	claims := func() map[string]consulkv.Claim {
		pairs, _, err := consul.KV().List("many-", nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]consulkv.Claim{}
		for _, p := range pairs {
			if !strings.HasSuffix(p.Key, consulkv.ClaimKey("")) {
				continue // a policy
			}
			cl, err := consulkv.ParseClaim(p.Value)
			if err != nil {
				t.Fatalf("claim %s: %v", p.Key, err)
			}
			out[p.Key] = cl
		}
		return out
	}
	got := claims()
	if len(got) != nHooks+nScripts+1 {
		t.Fatalf("%d claims under many-, want %d", len(got), nHooks+nScripts+1)
	}
	for key, cl := range got {
		scn := strings.TrimSuffix(key, consulkv.ClaimKey(""))
		gen := int64(1)
		if scn == twice {
			gen = 2
		}
		if cl.UpdateID != fmt.Sprintf("%s-u%d", scn, gen) || cl.Generation != gen || cl.ExitCode == nil || *cl.ExitCode != 0 || cl.At == "" {
			t.Fatalf("claim %s: %+v, want update %s-u%d completed with exit code 0", key, cl, scn, gen)
		}
	}
	if dead := c.Read(t, topology.DLQ(topology.StageAgentNotifier), 0, time.Second); len(dead) != 0 {
		t.Fatalf("%d records dead-lettered", len(dead))
	}

	// Replay: the same records again notify nobody and change no claim.
	before := stagetest.ModifyIndexes(t, consul, "many-")
	c.ProduceRecords(t, records()...)
	waitCommitted(t, c, stage.GroupIn(c.Kafka), topology.ComponentApplied)
	check("after the replay")
	if after := stagetest.ModifyIndexes(t, consul, "many-"); !reflect.DeepEqual(before, after) {
		t.Fatalf("the replay changed claims: ModifyIndex before %v, after %v", before, after)
	}
}

// TestNotifierNotifiesAtOnce: the webhooks of different components are
// called while others are still answering.
func TestNotifierNotifiesAtOnce(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	var inFlight, most atomic.Int32
	overlapped := make(chan struct{})
	var once sync.Once
	// Each request waits for a second one to come while it is in flight;
	// one at a time, each gives up after a while and most stays 1.
	hooks := newHookServer(t, func(string) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n > 1 {
			once.Do(func() { close(overlapped) })
		}
		select {
		case <-overlapped:
		case <-time.After(5 * time.Second):
		}
	})
	const n = 8
	var recs []*kgo.Record
	for i := range n {
		id := fmt.Sprintf("overlap-%d", i)
		holdGeneration(t, consul, 1, id)
		recs = append(recs, c.Record(t, topology.ComponentApplied, id, update(id, 1, webhook(hooks.URL+"/"+id))))
	}
	c.ProduceRecords(t, recs...)
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 1000
	stagetest.Run(t, stageOn(t, consulCfg), env)
	for i := range n {
		id := fmt.Sprintf("overlap-%d", i)
		if cl, _ := waitClaim(t, consul, id, id+"-u1"); *cl.ExitCode != 0 {
			t.Fatalf("claim of %s: %+v", id, cl)
		}
	}
	if m := most.Load(); m < 2 {
		t.Fatalf("at most %d webhook call(s) in flight at once, want several", m)
	}
}

// waitOutcomes waits until n claims under prefix record an outcome.
func waitOutcomes(t *testing.T, consul *api.Client, prefix string, n int) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, func() error {
		pairs, _, err := consul.KV().List(prefix, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, p := range pairs {
			if cl, err := consulkv.ParseClaim(p.Value); err == nil && cl.ExitCode != nil {
				done++
			}
		}
		if done < n {
			return fmt.Errorf("%d of %d claims under %s record an outcome", done, n, prefix)
		}
		return nil
	})
}

// stageOn is the agent-notifier with testConfig's targets (scripts from
// scriptDirs), told by its flags, as runtime.Main tells it, to reach the
// Consul agent at consulCfg.
func stageOn(t testing.TB, consulCfg consulkv.Config, scriptDirs ...string) runtime.Stage {
	t.Helper()
	s := StageWith(testConfig(t, scriptDirs...))
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"--consul-addr", consulCfg.Addr}); err != nil {
		t.Fatal(err)
	}
	return s
}

// batchHandler is the agent-notifier's batch handler with cfg on the
// Consul agent at consulCfg.
func batchHandler(t testing.TB, consulCfg consulkv.Config, cfg Config) runtime.BatchHandler {
	t.Helper()
	cfg.Consul = consulCfg
	h, closeFn, err := StageWith(cfg).SetupBatch(context.Background(), stagetest.Env(runtime.Kafka{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return h
}

func input(a *events.ComponentApplied) runtime.Input {
	return runtime.Input{Topic: topology.ComponentApplied, Value: a, Raw: []byte("encoded")}
}

// TestNotifierBatchOutcomes: in one batch, records that can never be
// notified are dead-lettered one by one, the others are notified, a
// component named twice in order.
func TestNotifierBatchOutcomes(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	// Generation 2 of batch-a lands in Consul while it is told of 1.
	hooks := newHookServer(t, func(path string) {
		if path == "/batch-a" {
			holdGeneration(t, consul, 2, "batch-a")
		}
	})
	h := batchHandler(t, consulCfg, testConfig(t))
	holdGeneration(t, consul, 1, "batch-a", "batch-d")

	noSCN := update("no-scn", 1, webhook(hooks.URL+"/no-scn"))
	noSCN.ServiceComponentName = ""
	badKind := update("bad-kind", 1, events.NotifyTarget{Kind: "pigeon"})
	// Consul holds a body that is not a JSON object (the consul-writer
	// writes none such): the notification cannot be built.
	badBody := update("bad-body", 1, webhook(hooks.URL+"/bad-body"))
	hold(t, consul, "bad-body", events.Policy{PolicyID: "P", Body: "[1]"})
	gone := update("batch-a", 3, webhook(hooks.URL+"/batch-a"))
	gone.Uninstalled = true
	ins := []runtime.Input{
		input(update("batch-a", 1, webhook(hooks.URL+"/batch-a"))),
		{Topic: topology.ComponentApplied, Key: []byte("batch-b")}, // a tombstone
		input(noSCN),
		input(badKind),
		input(badBody),
		{Topic: topology.ComponentApplied, Value: &events.ComponentPolicies{ComponentID: "batch-c"}, Raw: []byte("encoded")}, // another event
		input(update("batch-a", 2, webhook(hooks.URL+"/batch-a"))),
		input(gone),
		input(update("batch-d", 1, webhook(hooks.URL+"/batch-d"))),
	}
	out := h(context.Background(), ins)
	if len(out) != len(ins) {
		t.Fatalf("%d outcomes for %d inputs", len(out), len(ins))
	}
	for i, oc := range out {
		dead := i >= 2 && i <= 5
		if (oc.Err != nil) != dead || (dead && !runtime.IsPermanent(oc.Err)) || len(oc.Outputs) != 0 {
			t.Errorf("input %d: outcome %+v, want dead-lettered: %v", i, oc, dead)
		}
	}
	// The handler returned once everything was claimed; the outcomes
	// come in as the webhooks answer.
	if cl, _ := waitClaim(t, consul, "batch-a", "batch-a-u2"); cl.Generation != 2 || *cl.ExitCode != 0 || cl.HTTPStatus != 200 {
		t.Fatalf("claim of batch-a %+v", cl)
	}
	if cl, _ := waitClaim(t, consul, "batch-d", "batch-d-u1"); *cl.ExitCode != 0 {
		t.Fatalf("claim of batch-d %+v", cl)
	}
	if got, want := hooks.calls("/batch-a"), []string{wantPayload("batch-a", 1), wantPayload("batch-a", 2)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batch-a got %q, want %q", got, want)
	}
	if got := hooks.calls("/batch-d"); len(got) != 1 || got[0] != wantPayload("batch-d", 1) {
		t.Fatalf("batch-d got %q", got)
	}
	if n := hooks.total(); n != 3 {
		t.Fatalf("%d webhook calls, want 3", n)
	}

	// Again: nobody is notified.
	if out := h(context.Background(), ins); out[0].Err != nil || out[6].Err != nil || out[8].Err != nil {
		t.Fatalf("outcomes of the replay %+v", out)
	}
	if n := hooks.total(); n != 3 {
		t.Fatalf("%d webhook calls after the replay, want 3", n)
	}
}

// TestNotifierConsulDown: without Consul no one is notified; the first
// record that needs a claim fails transiently (the runtime retries from
// it), records before it keep their outcome.
func TestNotifierConsulDown(t *testing.T) {
	hooks := newHookServer(t, nil)
	h := batchHandler(t, consulkv.Config{Addr: fmt.Sprintf("127.0.0.1:%d", stagetest.FreePort(t))}, testConfig(t))
	bad := update("down-bad", 1, events.NotifyTarget{Kind: "pigeon"})
	out := h(context.Background(), []runtime.Input{
		input(bad),
		input(update("down-a", 1, webhook(hooks.URL+"/down-a"))),
		input(update("down-b", 1, webhook(hooks.URL+"/down-b"))),
	})
	if !runtime.IsPermanent(out[0].Err) {
		t.Fatalf("bad notify kind: %v, want dead-lettered", out[0].Err)
	}
	if out[1].Err == nil || runtime.IsPermanent(out[1].Err) || !strings.Contains(out[1].Err.Error(), "read claim") {
		t.Fatalf("first record needing Consul: %v, want a transient error reading its claim", out[1].Err)
	}
	if n := hooks.total(); n != 0 {
		t.Fatalf("%d webhook calls without Consul, want none", n)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	if err := (Config{Timeout: time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "--notify-concurrency") {
		t.Fatalf("concurrency 0: %v", err)
	}
	for _, lease := range []time.Duration{0, 500 * time.Millisecond, time.Hour} {
		cfg := DefaultConfig()
		cfg.Lease = lease
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--notify-lease") {
			t.Fatalf("lease %s: %v", lease, err)
		}
	}
}

// BenchmarkNotifyBatch notifies 1000 webhook components of one batch,
// a new generation each time, against real Consul and a local webhook:
// "batch" hands them in together, "one_at_a_time" one per batch (the
// cost of handling records singly).
func BenchmarkNotifyBatch(b *testing.B) {
	consulCfg, consul := stagetest.Consul(b)
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		calls.Add(1)
	}))
	defer srv.Close()
	const n = 1000
	for _, mode := range []string{"batch", "one_at_a_time"} {
		for i := range n {
			holdGeneration(b, consul, 1, fmt.Sprintf("bench-%s-%04d", mode, i))
		}
		// The generation goes on from run to run (-count) of a mode, so
		// every component is notified every time.
		gen := int64(0)
		b.Run(mode, func(b *testing.B) {
			h := batchHandler(b, consulCfg, testConfig(b))
			calls.Store(0)
			runs := int64(0)
			for b.Loop() {
				gen++
				runs++
				ins := make([]runtime.Input, n)
				for i := range ins {
					id := fmt.Sprintf("bench-%s-%04d", mode, i)
					ins[i] = input(update(id, gen, webhook(srv.URL+"/"+id)))
				}
				var out []runtime.Outcome
				if mode == "batch" {
					out = h(context.Background(), ins)
				} else {
					for _, in := range ins {
						out = append(out, h(context.Background(), []runtime.Input{in})...)
					}
				}
				for i, oc := range out {
					if oc.Err != nil {
						b.Fatalf("input %d: %v", i, oc.Err)
					}
				}
			}
			// The last notifications may still be under way.
			for deadline := time.Now().Add(time.Minute); calls.Load() < n*runs && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if got := calls.Load(); got != n*runs {
				b.Fatalf("%d webhook calls, want %d", got, n*runs)
			}
			b.ReportMetric(float64(n*runs)/b.Elapsed().Seconds(), "components/s")
		})
	}
}

// TestClaimConflict: when a claim changed between its read and its
// check-and-set, the shared transaction fails, and the other components
// of the group are still claimed and their outcomes recorded; only the
// changed one fails, transiently, to be read again.
func TestClaimConflict(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	n := &notifier{cfg: testConfig(t)}
	n.cfg.Consul = consulCfg
	_, closeFn, err := n.setup(context.Background(), stagetest.Env(runtime.Kafka{}))
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	var jobs []*job
	for i := range 5 {
		holdGeneration(t, consul, 1, fmt.Sprintf("conflict-%d", i))
		j, err := n.prepare(update(fmt.Sprintf("conflict-%d", i), 1, webhook("http://127.0.0.1:1/")))
		if err != nil || j == nil {
			t.Fatalf("prepare: %v %v", j, err)
		}
		j.i = i
		jobs = append(jobs, j)
	}
	ctx := context.Background()
	todo, err := n.read(ctx, jobs, func(j *job, err error) { t.Fatalf("notification of %s: %v", j.key, err) })
	if err != nil {
		t.Fatal(err)
	}
	if len(todo) != len(jobs) {
		t.Fatalf("%d of %d components to notify", len(todo), len(jobs))
	}
	// Someone else claims conflict-2 after it was read.
	if _, err := consul.KV().Put(&api.KVPair{Key: jobs[2].key, Value: []byte(`{"update_id":"other","generation":1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	var failed []int
	claimed := n.claimAll(ctx, todo, func(j *job, err error) {
		if !errors.Is(err, ErrClaimTaken) || runtime.IsPermanent(err) {
			t.Errorf("claim %s: %v, want a transient ErrClaimTaken", j.key, err)
		}
		failed = append(failed, j.i)
	})
	if len(claimed) != 4 || !reflect.DeepEqual(failed, []int{2}) {
		t.Fatalf("claimed %d, failed %v; want 4 claimed and conflict-2 failed", len(claimed), failed)
	}

	// The outcome of conflict-3 cannot be recorded either once its claim
	// changed; the others' outcomes are.
	if _, err := consul.KV().Put(&api.KVPair{Key: jobs[3].key, Value: []byte(`{"update_id":"other","generation":2}`)}, nil); err != nil {
		t.Fatal(err)
	}
	for _, j := range claimed {
		code := 0
		j.claim.ExitCode = &code
	}
	n.record(ctx, claimed)
	for i, j := range jobs {
		p, _, err := consul.KV().Get(j.key, nil)
		if err != nil || p == nil {
			t.Fatalf("claim %s: %v %v", j.key, p, err)
		}
		cl, err := consulkv.ParseClaim(p.Value)
		switch {
		case err != nil:
			t.Fatalf("claim %s: %v", j.key, err)
		case i == 2 || i == 3:
			if cl.UpdateID != "other" {
				t.Errorf("claim %s %+v, want the other writer's", j.key, cl)
			}
		case cl.UpdateID != j.a.UpdateID || cl.ExitCode == nil || *cl.ExitCode != 0:
			t.Errorf("claim %s %+v, want update %s completed", j.key, cl, j.a.UpdateID)
		}
	}
}

// TestReadGroups: a read transaction holds at most 128 operations, one
// per component, and folders expected to hold at most
// consulkv.ReadTxnBytes of bodies; a bigger one is read on its own.
func TestReadGroups(t *testing.T) {
	newJob := func(id string, bodyBytes int) *job {
		a := update(id, 1, webhook("http://127.0.0.1:1/"))
		a.PoliciesBytes = int64(bodyBytes)
		return &job{a: a, key: consulkv.ClaimKey(id)}
	}
	var jobs []*job
	for i := range 100 {
		jobs = append(jobs, newJob(fmt.Sprintf("small-%03d", i), 100))
	}
	jobs = append(jobs, newJob("big", consulkv.ReadTxnBytes), newJob("after-big", 100))
	for i := range 6 {
		jobs = append(jobs, newJob(fmt.Sprintf("mid-%d", i), consulkv.ReadTxnBytes/4))
	}
	var sizes []int
	for _, g := range readGroups(jobs) {
		sizes = append(sizes, len(g))
	}
	// 100 small together (one operation each, 128 at most); big alone;
	// after-big with the first three mid (a quarter each), then the
	// other three.
	if want := []int{100, 1, 4, 3}; !reflect.DeepEqual(sizes, want) {
		t.Fatalf("read transactions of %v components, want %v", sizes, want)
	}
}

// TestUnreadableFolderIsNotNotifiedEmpty: Consul answers a read the
// token may not make with nothing, as it answers for a deleted folder. A
// component that holds policies but whose folder shows neither items nor
// an event is not sent an empty notification: it fails permanently,
// saying which read right to grant; its neighbour in the read is notified.
// readingNotifier is a notifier set up against a real Consul agent, for
// calling read directly, and the agent's client.
func readingNotifier(t *testing.T) (*notifier, *api.Client) {
	t.Helper()
	consulCfg, consul := stagetest.Consul(t)
	n := &notifier{cfg: testConfig(t)}
	n.cfg.Consul = consulCfg
	_, closeFn, err := n.setup(context.Background(), stagetest.Env(runtime.Kafka{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return n, consul
}

// jobsOf prepares one job for each update, in order.
func jobsOf(t *testing.T, n *notifier, updates ...*events.ComponentApplied) []*job {
	t.Helper()
	var jobs []*job
	for i, a := range updates {
		j, err := n.prepare(a)
		if err != nil || j == nil {
			t.Fatalf("prepare %s generation %d: %v %v", a.ComponentID, a.Generation, j, err)
		}
		j.i = i
		jobs = append(jobs, j)
	}
	return jobs
}

func TestUnreadableFolderIsNotNotifiedEmpty(t *testing.T) {
	n, consul := readingNotifier(t)
	holdGeneration(t, consul, 1, "readable")
	hook := webhook("http://127.0.0.1:1/")
	jobs := jobsOf(t, n, update("unreadable", 1, hook), update("readable", 1, hook))
	failed := map[string]error{}
	todo, err := n.read(context.Background(), jobs, func(j *job, err error) { failed[j.a.ComponentID] = err })
	if err != nil {
		t.Fatal(err)
	}
	if len(todo) != 1 || todo[0].a.ComponentID != "readable" || !strings.Contains(string(todo[0].body), `"generation":1`) {
		t.Fatalf("to notify: %d jobs, want the readable component with its policy", len(todo))
	}
	why := failed["unreadable"]
	if why == nil || !runtime.IsPermanent(why) || !strings.Contains(why.Error(), `grant key_prefix "unreadable:policies/" { policy = "read" }`) {
		t.Errorf("the unreadable component failed with %v, want a permanent error naming the read right to grant", why)
	}
}

// TestRecordOfAnEarlierGenerationThanConsulIsNotNotified: when the
// agent-notifier reaches a record after Consul already holds a later
// generation of the component (it lagged), the earlier record is not
// notified with the later policies; the later one is, once.
func TestRecordOfAnEarlierGenerationThanConsulIsNotNotified(t *testing.T) {
	n, consul := readingNotifier(t)
	holdGeneration(t, consul, 2, "c1")
	ev := consulkv.Event{Action: consulkv.ActionUpdated, UpdateID: "c1-u2", PoliciesCount: 1, Generation: 2}
	if _, err := consul.KV().Put(&api.KVPair{Key: consulkv.EventKey("c1"), Value: ev.JSON()}, nil); err != nil {
		t.Fatal(err)
	}
	hook := webhook("http://127.0.0.1:1/")
	jobs := jobsOf(t, n, update("c1", 1, hook), update("c1", 2, hook))
	failed := map[int64]error{}
	todo, err := n.read(context.Background(), jobs, func(j *job, err error) { failed[j.a.Generation] = err })
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 0 {
		t.Fatalf("failed: %v", failed)
	}
	if len(todo) != 1 || todo[0].a.Generation != 2 || !strings.Contains(string(todo[0].body), `"generation":2`) {
		var gens []int64
		for _, j := range todo {
			gens = append(gens, j.a.Generation)
		}
		t.Fatalf("to notify: generations %v, want only generation 2 with its policy", gens)
	}
}
