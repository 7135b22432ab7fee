// Package policyflow_test runs the whole policy flow — North API, PDP
// simulator, every stage, Consul — on the chosen backend and checks what
// an operator would: the Consul values, what a component's script got,
// and the dead-letter records.
package policyflow_test

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
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/apicheck"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/stages"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
)

func TestMain(m *testing.M) { backend.Main(m) }

// pipeline is one running policy flow under a test's own topic prefix.
type pipeline struct {
	t      *testing.T
	b      *backend.Backend
	kafka  runtime.Kafka
	consul *consulapi.Client
	api    string
	ops    string // health, readiness and metrics of the stages and the API
	token  string // an admin token of the API
	pdp    *pdp.Server
	pdpURL string
	// scripts is the directory component scripts run from, and
	// targets where notifications may go (scripts and 127.0.0.1).
	scripts string
	targets notifytarget.Config
	stop    func()
	// catchupEvery, when set before run, is pdp-ingest's periodic
	// catch-up interval.
	catchupEvery time.Duration
	// tracer, when set before the pipeline runs, traces it.
	tracer *runtime.Tracer
	// tenantTokens, when set before the pipeline runs, are tenant tokens
	// of the API, by tenant.
	tenantTokens map[string]string
	// client sends the test's requests to the API; every exchange is
	// checked against the API's OpenAPI document, and the test fails for
	// each one that differs from it.
	client *http.Client
}

// segmentBytes bounds the segmenter's pieces in these suites, far below
// its default (the one record limit), so that a delta of a few MB reaches
// the executor in pieces and is put back together there.
const segmentBytes = 1 << 20

// pipelinePartitions is how many partitions start gives every topic.
const pipelinePartitions = 3

// start runs the policy flow under the test's own topic prefix; opts
// change the pipeline's settings before it starts.
func start(t *testing.T, opts ...func(*pipeline)) *pipeline {
	t.Helper()
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, pipelinePartitions)
	return startOn(t, b, b.Kafka(prefix), opts...)
}

// startTenants is start with a tenant token of the API for each of
// tenants; it returns the tokens by tenant.
func startTenants(t *testing.T, tenants ...string) (*pipeline, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	for _, tenant := range tenants {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[tenant] = tok
	}
	return start(t, func(p *pipeline) { p.tenantTokens = tokens }), tokens
}

// startOn runs the policy flow on the Kafka k says (its topology applied)
// and the backend's Consul.
func startOn(t *testing.T, b *backend.Backend, k runtime.Kafka, opts ...func(*pipeline)) *pipeline {
	t.Helper()
	sim := pdp.NewServer()
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	c, err := b.Consul().Client() // with the external backend's ACL token
	if err != nil {
		t.Fatal(err)
	}
	scripts := t.TempDir()
	p := &pipeline{t: t, b: b, kafka: k, consul: c, pdp: sim, pdpURL: srv.URL, client: apicheck.Client(t, northapi.OpenAPI()),
		scripts: scripts, targets: notifytarget.Config{ScriptDirs: []string{scripts}, WebhookAllow: []string{"127.0.0.1"}}}
	for _, o := range opts {
		o(p)
	}
	p.run()
	t.Cleanup(func() { p.stop() })
	return p
}

// run starts every stage and the North API.
func (p *pipeline) run() {
	p.t.Helper()
	env := runtime.NewEnv(p.kafka, runtime.NewLogger(os.Stderr, "warn", true))
	env.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	env.SessionTimeout = 6 * time.Second
	env.TransactionTimeout = 10 * time.Second
	env.Tracer = p.tracer
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	p.api = "http://" + ln.Addr().String()
	if p.token, err = auth.NewToken(); err != nil {
		p.t.Fatal(err)
	}
	entries := []auth.Entry{{Name: "integration", Role: auth.RoleAdmin, SHA256: auth.Hash(p.token)}}
	for tenant, token := range p.tenantTokens {
		entries = append(entries, auth.Entry{Name: "tenant-" + tenant, Role: auth.RoleTenant, Tenant: tenant, SHA256: auth.Hash(token)})
	}
	tokens, err := auth.File{Tokens: entries}.Set()
	if err != nil {
		p.t.Fatal(err)
	}
	ops := httptest.NewServer(env.Handler(nil))
	p.ops = ops.URL
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		if err := runtime.RunStages(ctx, env, stages.With(stages.Config{PDPURL: p.pdpURL, Consul: p.b.Consul(), NotifyTargets: p.targets, MaxSegmentBytes: segmentBytes, CatchupInterval: p.catchupEvery})...); err != nil && ctx.Err() == nil {
			p.t.Errorf("stages: %v", err)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		if err := northapi.ServeListener(ctx, env, ln, northapi.Options{Consul: p.b.Consul(), Tokens: tokens, Registration: northapi.Registration{Targets: p.targets}}); err != nil && ctx.Err() == nil {
			p.t.Errorf("north api: %v", err)
		}
	}()
	p.stop = func() {
		cancel()
		<-done
		<-done
		ops.Close()
	}
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("stages and North API ready", func() error {
		resp, err := http.Get(p.ops + "/readyz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, body)
		}
		// The North API's views may register with the health only once
		// its reader reached the brokers: its own word is the last one.
		resp, err = p.client.Get(p.api + "/healthcheck")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var h northapi.Health
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Status != "ok" {
			return fmt.Errorf("North API /healthcheck: %+v (%v)", h, err)
		}
		return nil
	}))
}

func (p *pipeline) do(method, path string, body any) (int, string) {
	p.t.Helper()
	return p.doAs(p.token, method, path, body)
}

// doAs is do with another token.
func (p *pipeline) doAs(token, method, path string, body any) (int, string) {
	p.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, p.api+path, r)
	req.Header.Set("Content-Type", "application/json")
	auth.SetBearer(req, token)
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// tokenClient is the pipeline's checked client sending the admin token.
func (p *pipeline) tokenClient() *http.Client {
	return &http.Client{Transport: &auth.Transport{Token: p.token, Base: p.client.Transport}}
}

func (p *pipeline) must(method, path string, body any) string {
	p.t.Helper()
	code, out := p.do(method, path, body)
	if code/100 != 2 {
		p.t.Fatalf("%s %s: %d %s", method, path, code, out)
	}
	return out
}

// publish stores a policy version in the PDP and sends its notification.
func (p *pipeline) publish(name, version, config string, matching map[string]any) {
	p.t.Helper()
	lp, err := p.pdp.Put(policy.Body{
		policy.FieldPolicyName: name, policy.FieldPolicyVersion: version,
		policy.FieldConfig: config, policy.FieldMatchingConditions: matching,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	if err := pdp.Notify(context.Background(), p.tokenClient(), p.api+"/v1/pdp/notifications", policy.Notification{LoadedPolicies: []policy.LoadedPolicy{lp}}); err != nil {
		p.t.Fatal(err)
	}
}

// unpublish removes every version of a policy from the PDP and notifies.
func (p *pipeline) unpublish(policyName string) {
	p.t.Helper()
	removed := p.pdp.Remove(policyName)
	if err := pdp.Notify(context.Background(), p.tokenClient(), p.api+"/v1/pdp/notifications", policy.Notification{RemovedPolicies: removed}); err != nil {
		p.t.Fatal(err)
	}
}

// items returns the policy_id -> policy_body of a component's folder.
func (p *pipeline) items(scn string) map[string]map[string]any {
	p.t.Helper()
	pairs, _, err := p.consul.KV().List(consulkv.ItemsPrefix(scn), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, kv := range pairs {
		id, ok := consulkv.ItemPolicyID(scn, kv.Key)
		if !ok {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(kv.Value, &body); err != nil {
			p.t.Fatalf("%s is not a JSON policy_body: %v", kv.Key, err)
		}
		out[id] = body
	}
	return out
}

func (p *pipeline) event(scn string) map[string]any {
	p.t.Helper()
	kv, _, err := p.consul.KV().Get(consulkv.EventKey(scn), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if kv == nil {
		return nil
	}
	var ev map[string]any
	if err := json.Unmarshal(kv.Value, &ev); err != nil {
		p.t.Fatal(err)
	}
	return ev
}

func configOf(body map[string]any) string {
	b, _ := json.Marshal(body["config"])
	return string(b)
}

func keys(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recorder is a component script that records each call's argv.
type recorder struct {
	dir  string
	path string
}

// newRecorder puts a recorder in the pipeline's script directory.
func (p *pipeline) newRecorder() *recorder {
	t := p.t
	dir, err := os.MkdirTemp(p.scripts, "recorder")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "reconfigure.sh")
	// call.N appears whole (written aside, then renamed): the test reads
	// the calls while the script may be running, and a file the shell
	// has created but not yet written would read as an empty call.
	script := "#!/bin/sh\nn=$(ls " + dir + "/call.* 2>/dev/null | wc -l)\nn=$((n+1))\nprintf '%s' \"$#\" > " + dir + "/argc.$n\nprintf '%s' \"$1\" > " + dir + "/arg1.$n\nprintf '%s' \"$2\" > " + dir + "/.call.$n.tmp && mv " + dir + "/.call.$n.tmp " + dir + "/call.$n\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &recorder{dir: dir, path: path}
}

type call struct {
	argc    string
	arg1    string
	payload struct {
		Policies        []map[string]any `json:"policies"`
		UpdatedPolicies []map[string]any `json:"updated_policies"`
		RemovedPolicies []map[string]any `json:"removed_policies"`
	}
	raw string
}

func (r *recorder) calls(t *testing.T) []call {
	t.Helper()
	var out []call
	for i := 1; ; i++ {
		raw, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("call.%d", i)))
		if err != nil {
			return out
		}
		argc, _ := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("argc.%d", i)))
		arg1, _ := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("arg1.%d", i)))
		c := call{argc: string(argc), arg1: string(arg1), raw: string(raw)}
		if err := json.Unmarshal(raw, &c.payload); err != nil {
			t.Fatalf("call %d: the JSON argument does not parse: %v: %s", i, err, raw)
		}
		out = append(out, c)
	}
}

func (p *pipeline) register(id string, c map[string]any) {
	p.t.Helper()
	p.must(http.MethodPut, "/v1/components/"+id, c)
}

func TestSeedExampleReachesConsulAndScript(t *testing.T) {
	p := start(t)
	rec := p.newRecorder()
	scn := "vm-memory-" + strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	p.register("comp-1", map[string]any{
		"deployment_id": "dep-1", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_VM_MEMORY"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	match := map[string]any{"ONAPName": "DCAE", "ConfigName": "vm_memory"}
	p.publish("DCAE.Config_VM_MEMORY.5.xml", "5", `{"min_memory": "2GB"}`, match)
	key := "DCAE.Config_VM_MEMORY"
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("version 5 in Consul", func() error {
		if got := configOf(p.items(scn)[key]); got != `{"min_memory":"2GB"}` {
			return fmt.Errorf("config %s", got)
		}
		return nil
	}))
	p.publish("DCAE.Config_VM_MEMORY.222.xml", "222", `{"min_memory": "8GB"}`, match)
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("version 222 in Consul", func() error {
		body := p.items(scn)[key]
		if got := configOf(body); got != `{"min_memory":"8GB"}` || body["policyVersion"] != "222" {
			return fmt.Errorf("config %s version %v", got, body["policyVersion"])
		}
		return nil
	}))
	ev := p.event(scn)
	if ev["action"] != "updated" || ev["update_id"] == "" || ev["policies_count"] != float64(1) || ev["timestamp"] == nil {
		t.Fatalf("event %v", ev)
	}
	var last call
	testkit.Eventually(p.t, time.Minute, testkit.Named("the script is run with version 222", func() error {
		calls := rec.calls(t)
		if len(calls) == 0 {
			return fmt.Errorf("no call")
		}
		last = calls[len(calls)-1]
		if !strings.Contains(last.raw, "8GB") {
			return fmt.Errorf("last call %s", last.raw)
		}
		return nil
	}))
	if last.argc != "2" || last.arg1 != "policies" {
		t.Fatalf("script argv: argc=%s $1=%q, want 2 and \"policies\"", last.argc, last.arg1)
	}
	if len(last.payload.Policies) != 1 || len(last.payload.UpdatedPolicies) != 1 || len(last.payload.RemovedPolicies) != 0 {
		t.Fatalf("payload lists: %s", last.raw)
	}
	if configOf(last.payload.UpdatedPolicies[0]) != `{"min_memory":"8GB"}` || last.payload.UpdatedPolicies[0]["policyName"] != "DCAE.Config_VM_MEMORY.222.xml" {
		t.Fatalf("updated policy %v", last.payload.UpdatedPolicies[0])
	}

	// Replaying every topic from the start changes nothing in Consul and
	// notifies nobody again.
	before := p.settledIndexes(scn)
	callsBefore := len(rec.calls(t))
	p.stop()
	consumed := p.committedOffsets()
	p.rewindGroups()
	p.run()
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("replay consumed", func() error { return p.reached(consumed) }))
	// The consul-writer commits an offset only after its write, so what a
	// replay would write is in Consul by now.
	if after := p.modifyIndexes(scn); !equalMaps(before, after) {
		t.Fatalf("replay changed Consul: before %v after %v", before, after)
	}
	// A notification may still run after its offset committed: a barrier
	// instead of a wait. The next version is notified after anything the
	// replay would have notified (a component's notifications run in
	// order), so it must be the only call since.
	p.publish("DCAE.Config_VM_MEMORY.223.xml", "223", `{"min_memory": "16GB"}`, match)
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("the barrier's notification", func() error {
		calls := rec.calls(t)
		if len(calls) == 0 || !strings.Contains(calls[len(calls)-1].raw, "16GB") {
			return fmt.Errorf("%d calls, the last without version 223", len(calls))
		}
		return nil
	}))
	if n := len(rec.calls(t)); n != callsBefore+1 {
		t.Fatalf("replay notified the component again: %d calls since it, want only the barrier's", n-callsBefore)
	}
}

// settledIndexes is modifyIndexes once the component's last notification
// is recorded: the notifier completes its claim after the script ran, so
// a snapshot taken as soon as the script was seen may miss that write.
func (p *pipeline) settledIndexes(scn string) map[string]uint64 {
	p.t.Helper()
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("the notification of "+scn+" recorded", func() error {
		kv, _, err := p.consul.KV().Get(consulkv.ClaimKey(scn), nil)
		if err != nil {
			return err
		}
		if kv == nil {
			return fmt.Errorf("no claim")
		}
		var cl consulkv.Claim
		if err := json.Unmarshal(kv.Value, &cl); err != nil {
			return err
		}
		if finished, _ := cl.Finished(); !finished {
			return fmt.Errorf("claim %s not finished", kv.Value)
		}
		return nil
	}))
	return p.modifyIndexes(scn)
}

func (p *pipeline) modifyIndexes(scn string) map[string]uint64 {
	pairs, _, err := p.consul.KV().List(scn+":", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, kv := range pairs {
		out[kv.Key] = kv.ModifyIndex
	}
	return out
}

func equalMaps(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (p *pipeline) groups() []string {
	var out []string
	for _, s := range stages.All() {
		out = append(out, s.GroupIn(p.kafka))
	}
	return out
}

// rewindGroups deletes every stage group's committed offsets, so the next
// run consumes every topic from the start.
func (p *pipeline) rewindGroups() {
	adm := p.b.Admin(p.t)
	resp, err := adm.DeleteGroups(context.Background(), p.groups()...)
	if err != nil {
		p.t.Fatal(err)
	}
	for g, r := range resp {
		if r.Err != nil {
			p.t.Fatalf("delete group %s: %v", g, r.Err)
		}
	}
}

// committedOffsets returns every stage group's committed offsets.
func (p *pipeline) committedOffsets() map[string]kadm.OffsetResponses {
	adm := p.b.Admin(p.t)
	out := map[string]kadm.OffsetResponses{}
	for _, g := range p.groups() {
		offs, err := adm.FetchOffsets(context.Background(), g)
		if err != nil {
			p.t.Fatalf("fetch offsets of %s: %v", g, err)
		}
		out[g] = offs
	}
	return out
}

// reached says whether every group has again committed at least the
// offsets it had before the rewind: the replay has read everything the
// first run had.
func (p *pipeline) reached(before map[string]kadm.OffsetResponses) error {
	now := p.committedOffsets()
	for g, offs := range before {
		var err error
		offs.Each(func(o kadm.OffsetResponse) {
			cur, ok := now[g].Lookup(o.Topic, o.Partition)
			if err == nil && (!ok || cur.At < o.At) {
				err = fmt.Errorf("group %s is at %d of %s[%d], first run reached %d", g, cur.At, o.Topic, o.Partition, o.At)
			}
		})
		if err != nil {
			return err
		}
	}
	return nil
}
