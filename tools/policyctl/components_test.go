package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/apicheck"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// northAPI runs a North API on an in-process broker and returns its URL
// and the broker settings, for reading what it produced. Its tokens are
// those of a dev stack whose data dir is PF_DEV_DATA_DIR: the admin token
// in policyctl.token, where policyctl finds it, and the tokens file
// api-tokens.json, reloaded every 20ms.
func northAPI(t *testing.T) (string, runtime.Kafka) {
	t.Helper()
	hermeticEnv(t)
	t.Setenv("PF_API", "")
	tok, err := devstack.EnsureDevToken(os.Getenv("PF_DEV_DATA_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.Open(tok.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	k := runtime.Kafka{Brokers: c.ListenAddrs(), Prefix: "ctl.", FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	r := policyctl(t, "topology", "apply", "--brokers", k.Brokers[0], "--topic-prefix", k.Prefix, "--partitions", "2")
	if r.code != 0 {
		t.Fatalf("topology apply: exit %d %s", r.code, r.errOut)
	}
	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	srv, err := northapi.New(env, northapi.Options{Consul: consulkv.Config{Addr: "127.0.0.1:1"}, Tokens: tokens, PackageDir: t.TempDir(),
		Registration: northapi.Registration{Targets: notifytarget.Config{WebhookAllow: []string{"127.0.0.1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	go tokens.Watch(ctx, 20*time.Millisecond, zerolog.Nop())
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-done
		srv.Close()
	})
	testkit.Eventually(t, 60*time.Second, testkit.Holds("the North API ready", srv.Ready))
	// policyctl talks to the API through a proxy that checks every
	// exchange against the API's OpenAPI document: the test fails for
	// each one that differs.
	target, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = apicheck.Wrap(t, northapi.OpenAPI(), nil)
	checked := httptest.NewServer(proxy)
	t.Cleanup(checked.Close)
	return checked.URL, k
}

// readTopic reads want records of a topic from the start (generous
// deadline).
func readTopic(t *testing.T, k runtime.Kafka, base string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(k.Topic(base)), kgo.FetchMaxWait(100*time.Millisecond))
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
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const componentFile = `{
  "component_id": "comp-ctl",
  "deployment_id": "dep-ctl",
  "service_component_name": "scn-ctl",
  "policy_ids": ["DCAE.Config_VM_MEMORY"],
  "policy_filters": [{"filter_id": "f1", "policyName": "DCAE.Config_.*"}],
  "notify": {"kind": "webhook", "webhook_url": "http://127.0.0.1:9999/policies"},
  "config": {"a": 1}
}`

func TestComponentCommandsTalkToTheNorthAPI(t *testing.T) {
	url, k := northAPI(t)

	r := policyctl(t, "component", "put", "--api", url, writeFile(t, "c.json", componentFile))
	if r.code != 0 {
		t.Fatalf("component put: exit %d stderr %q", r.code, r.errOut)
	}
	if got := stdoutJSON(t, r); got["component_id"] != "comp-ctl" || got["generation"] != 1.0 {
		t.Errorf("component put printed %v", got)
	}
	recs := readTopic(t, k, topology.DeployComponents, 1)
	if len(recs) != 1 {
		t.Fatalf("deploy.components holds %d records, want 1", len(recs))
	}
	var c events.Component
	if err := events.Default().DecodeInto(context.Background(), recs[0].Value, &c); err != nil {
		t.Fatal(err)
	}
	if c.ComponentID != "comp-ctl" || c.Notify.Kind != events.NotifyWebhook || c.Config != `{"a":1}` || len(c.PolicyFilters) != 1 {
		t.Errorf("component on the topic: %+v", c)
	}

	// From stdin, with --id, and PF_API instead of --api.
	t.Setenv("PF_API", url)
	noID := strings.Replace(componentFile, `"component_id": "comp-ctl",`, "", 1)
	noID = strings.Replace(noID, `"scn-ctl"`, `"scn-stdin"`, 1) // a folder belongs to one component
	r = policyctlIn(t, noID, "component", "put", "--id", "comp-stdin", "-")
	if r.code != 0 || stdoutJSON(t, r)["component_id"] != "comp-stdin" {
		t.Fatalf("component put - --id: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	r = policyctlIn(t, noID, "component", "put", "-")
	if r.code != 2 || !strings.Contains(r.errOut, "has no component_id; add \"component_id\" to it or pass --id") {
		t.Errorf("no id: exit %d stderr %q", r.code, r.errOut)
	}

	r = policyctl(t, "component", "status", "comp-ctl")
	if got := stdoutJSON(t, r); r.code != 0 || got["registered"] != true || got["deployment_id"] != "dep-ctl" {
		t.Errorf("component status: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}

	r = policyctl(t, "component", "renotify", "comp-ctl")
	if got := stdoutJSON(t, r); r.code != 0 || got["component_id"] != "comp-ctl" || got["deployment_id"] != "dep-ctl" || got["request_id"] == "" {
		t.Errorf("component renotify: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}

	r = policyctl(t, "component", "delete", "comp-ctl")
	if got := stdoutJSON(t, r); r.code != 0 || got["deleted"] != true {
		t.Errorf("component delete: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	var last *kgo.Record
	recs = readTopic(t, k, topology.DeployComponents, 3)
	for _, rec := range recs {
		if string(rec.Key) == "comp-ctl" {
			last = rec
		}
	}
	if len(recs) != 3 || last == nil || last.Value != nil {
		t.Errorf("after delete: %d records; want comp-ctl's last to be a tombstone", len(recs))
	}

	// The API's reason and what to do, on stderr; nothing on stdout.
	r = policyctl(t, "component", "delete", "comp-ctl")
	if r.code != 1 || r.out != "" || !strings.Contains(r.errOut, "404 Not Found") || !strings.Contains(r.errOut, "comp-ctl is not registered") ||
		!strings.Contains(r.errOut, "Check the id") {
		t.Errorf("second delete: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	bad := strings.Replace(componentFile, `"DCAE.Config_.*"`, `"DCAE.Config_(.*"`, 1)
	r = policyctl(t, "component", "put", writeFile(t, "bad.json", bad))
	if r.code != 1 || !strings.Contains(r.errOut, `filter_id "f1"`) || !strings.Contains(r.errOut, "missing closing )") ||
		!strings.Contains(r.errOut, "Fix the input") {
		t.Errorf("bad regex: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "component", "put", writeFile(t, "broken.json", "{\n  \"component_id\": \"x\",\n}"))
	if r.code != 1 || !strings.Contains(r.errOut, "is not valid JSON: line 3, column 1") {
		t.Errorf("broken file: exit %d stderr %q", r.code, r.errOut)
	}
}

func TestPolicyAndCatchupCommands(t *testing.T) {
	url, k := northAPI(t)
	t.Setenv("PF_API", url)

	push := `[{"policyName": "DCAE.Config_A.3.xml", "policyVersion": "3", "policyConfigStatus": "CONFIG_RETRIEVED",
	  "matchingConditions": {"ONAPName": "DCAE"}, "config": {"k": 1}}]`
	r := policyctlIn(t, push, "policy", "push", "-")
	if r.code != 0 {
		t.Fatalf("policy push: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "pdp", "notify", writeFile(t, "n.json", `{"loadedPolicies": [{"policyName": "DCAE.Config_B.1.xml", "versionNo": "1"}]}`))
	if r.code != 0 {
		t.Fatalf("pdp notify: exit %d stderr %q", r.code, r.errOut)
	}
	recs := readTopic(t, k, topology.PDPNotifications, 2)
	keys := map[string]*events.PdpNotification{}
	for _, rec := range recs {
		var n events.PdpNotification
		if err := events.Default().DecodeInto(context.Background(), rec.Value, &n); err != nil {
			t.Fatal(err)
		}
		keys[string(rec.Key)] = &n
	}
	if a := keys["DCAE.Config_A"]; a == nil || len(a.PushedBodies) != 1 || !strings.Contains(a.PushedBodies[0], `"policyVersion":"3"`) {
		t.Errorf("pushed policy on the topic: %+v", a)
	}
	if b := keys["DCAE.Config_B"]; b == nil || len(b.LoadedPolicies) != 1 || b.LoadedPolicies[0].VersionNo != "1" {
		t.Errorf("notification on the topic: %+v", b)
	}

	r = policyctlIn(t, `[{"policyName": "DCAE.Config_A.4.xml", "policyVersion": "4", "policyConfigStatus": "CONFIG_NOT_FOUND", "config": {"k": 1}}]`,
		"policy", "push", "-")
	if r.code != 1 || !strings.Contains(r.errOut, "DCAE.Config_A.4.xml") || !strings.Contains(r.errOut, "CONFIG_NOT_FOUND") {
		t.Errorf("invalid push: exit %d stderr %q", r.code, r.errOut)
	}

	r = policyctl(t, "catch-up", "--wait=false")
	if got := stdoutJSON(t, r); r.code != 0 || got["scope"] != events.ScopeAll || got["partitions"] != 2.0 {
		t.Errorf("catchup: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	if recs := readTopic(t, k, topology.CatchupRequests, 2); len(recs) != 2 || recs[0].Partition == recs[1].Partition {
		t.Errorf("catch-up records: %d, want one on each of 2 partitions", len(recs))
	}
	// catchup is the former name, kept as an alias.
	r = policyctl(t, "catchup", "--deployment", "nobody")
	if r.code != 1 || !strings.Contains(r.errOut, "no registered component belongs to deployment nobody") {
		t.Errorf("catchup of unknown deployment: exit %d stderr %q", r.code, r.errOut)
	}

	// By default catch-up shows its progress until every partition of
	// both stages reported, then prints a summary.
	done := make(chan result, 1)
	go func() { done <- policyctl(t, "catch-up", "--reason", "waited for") }()
	var id string
	for _, rec := range readTopic(t, k, topology.CatchupRequests, 4) {
		if req := decodeCatchup(t, rec); req.Reason == "waited for" {
			id = req.RequestID
		}
	}
	if id == "" {
		t.Fatal("the waited-for catch-up request is not on the topic")
	}
	for _, stage := range []string{events.ProgressMatcher, events.ProgressConsulWriter} {
		for p := int32(0); p < 2; p++ {
			produce(t, k, topology.CatchupProgress, id, &events.CatchupProgress{RequestID: id, Stage: stage, Partition: p,
				Compared: 5, Differed: 1, KeysWritten: 2, DoneAt: time.Now().UTC()})
		}
	}
	r = <-done
	if got := stdoutJSON(t, r); r.code != 0 || got["components_compared"] != 10.0 || got["components_that_differed"] != 2.0 ||
		got["folders_written_back"] != 2.0 || got["consul_keys_written"] != 4.0 || !strings.Contains(r.errOut, "matcher 2/2 partitions") {
		t.Errorf("catch-up waited for: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}

	// --follow shows a catch-up pdp-ingest ran, with what it found
	// comparing the catalog with the PDP.
	const periodic = "pdp-ingest-1764190000000000000"
	withheld := "the PDP listed no policy for .* while the catalog holds 3 from it: an empty answer removes nothing"
	produce(t, k, topology.CatchupProgress, periodic, &events.CatchupProgress{RequestID: periodic, Stage: events.ProgressPDPIngest,
		Compared: 0, RemovalWithheld: &withheld, DoneAt: time.Now().UTC()})
	for _, stage := range []string{events.ProgressMatcher, events.ProgressConsulWriter} {
		for p := int32(0); p < 2; p++ {
			produce(t, k, topology.CatchupProgress, periodic, &events.CatchupProgress{RequestID: periodic, Stage: stage, Partition: p, Compared: 5, DoneAt: time.Now().UTC()})
		}
	}
	r = policyctl(t, "catch-up", "--follow", periodic)
	if got := stdoutJSON(t, r); r.code != 0 || got["removals_withheld"] != withheld || got["policies_removed"] != 0.0 ||
		!strings.Contains(r.errOut, "REMOVALS WITHHELD: the PDP listed no policy") {
		t.Errorf("catch-up --follow: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	if r = policyctl(t, "catch-up", "--follow", periodic, "--deployment", "d"); r.code != 2 {
		t.Errorf("catch-up --follow --deployment: exit %d, want a usage error", r.code)
	}

	r = policyctl(t, "rollout", "DCAE.Config_NOBODY")
	if r.code != 1 || !strings.Contains(r.errOut, "404") || !strings.Contains(r.errOut, "DCAE.Config_NOBODY is not in the catalog") {
		t.Errorf("rollout of an unknown policy: exit %d stderr %q", r.code, r.errOut)
	}
	if r = policyctl(t, "rollout", "--limit", "-1", "X"); r.code != 2 || !strings.Contains(r.errOut, "--limit -1") {
		t.Errorf("rollout with a bad limit: exit %d stderr %q", r.code, r.errOut)
	}
}

func TestAPICommandsExplainAnUnreachableOrFailingAPI(t *testing.T) {
	hermeticEnv(t)
	ln := httptest.NewServer(http.NotFoundHandler())
	dead := ln.URL
	ln.Close()
	r := policyctl(t, "catchup", "--api", dead)
	if r.code != 1 || !strings.Contains(r.errOut, "cannot reach the North API at "+dead) || !strings.Contains(r.errOut, "PF_API") {
		t.Errorf("unreachable: exit %d stderr %q", r.code, r.errOut)
	}
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error": "the North API is still reading deploy.components"}`))
	}))
	defer busy.Close()
	r = policyctl(t, "component", "status", "--api", busy.URL, "x")
	if r.code != 1 || !strings.Contains(r.errOut, "still reading deploy.components") || !strings.Contains(r.errOut, "run the command again shortly") {
		t.Errorf("503: exit %d stderr %q", r.code, r.errOut)
	}
	if r := policyctl(t, "catchup", "--api", "localhost:8080"); r.code != 2 || !strings.Contains(r.errOut, "is not an http(s) URL") {
		t.Errorf("bad --api: exit %d stderr %q", r.code, r.errOut)
	}
	if r := policyctl(t, "component", "delete"); r.code != 2 {
		t.Errorf("delete without id: exit %d", r.code)
	}
}

func TestAPICommandsSendTheTokenTheyAreGiven(t *testing.T) {
	url, _ := northAPI(t)
	t.Setenv("PF_API", url)
	devDir := os.Getenv("PF_DEV_DATA_DIR")
	admin, err := os.ReadFile(filepath.Join(devDir, devstack.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}

	// A read-only token, added to the tokens file the API reads.
	tokensFile := filepath.Join(devDir, devstack.TokensFileName)
	r := policyctl(t, "token", "add", "--file", tokensFile, "--name", "auditor", "--role", "read-only")
	readOnly := strings.TrimSpace(r.out)
	if r.code != 0 || !strings.HasPrefix(readOnly, "pf_") || !strings.Contains(r.errOut, "token auditor (role read-only) added") {
		t.Fatalf("token add: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}
	if st, err := os.Stat(tokensFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("tokens file after token add: %v %v, want mode 0600", st, err)
	}
	if r := policyctl(t, "token", "add", "--file", tokensFile, "--name", "auditor", "--role", "read-only"); r.code != 2 || !strings.Contains(r.errOut, "--replace") {
		t.Errorf("token add of an existing name: exit %d stderr %q", r.code, r.errOut)
	}
	if r := policyctl(t, "token", "add", "--file", tokensFile, "--name", "t", "--role", "tenant"); r.code != 2 || !strings.Contains(r.errOut, "needs the tenant") {
		t.Errorf("token add of a tenant token without a tenant: exit %d stderr %q", r.code, r.errOut)
	}
	// The API reloads the file: the new token reads, and may not write.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = policyctl(t, "component", "status", "--token", readOnly, "nobody")
		if strings.Contains(r.errOut, "404 Not Found") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the added token was not accepted within 30s: exit %d stderr %q", r.code, r.errOut)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Setenv("PF_TOKEN", readOnly)
	r = policyctl(t, "catchup")
	if r.code != 1 || !strings.Contains(r.errOut, "403 Forbidden") || !strings.Contains(r.errOut, "has role read-only") || !strings.Contains(r.errOut, "role or tenant does not allow") {
		t.Errorf("catchup with a read-only token: exit %d stderr %q", r.code, r.errOut)
	}
	t.Setenv("PF_TOKEN", "")

	// --token-file names a file; the dev stack's file is the default.
	r = policyctl(t, "catchup", "--wait=false", "--token-file", writeFile(t, "tok", string(admin)))
	if r.code != 0 {
		t.Errorf("catchup with --token-file: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "catchup", "--token-file", filepath.Join(t.TempDir(), "missing"))
	if r.code != 1 || !strings.Contains(r.errOut, "read the North API token from --token-file") {
		t.Errorf("catchup with a missing --token-file: exit %d stderr %q", r.code, r.errOut)
	}
	if r := policyctl(t, "catchup", "--wait=false"); r.code != 0 {
		t.Errorf("catchup with the dev stack's token: exit %d stderr %q", r.code, r.errOut)
	}

	// No token anywhere: the API's 401, and where policyctl looks.
	t.Setenv("PF_DEV_DATA_DIR", t.TempDir())
	r = policyctl(t, "catchup")
	if r.code != 1 || !strings.Contains(r.errOut, "401 Unauthorized") || !strings.Contains(r.errOut, "policyctl sent no token") ||
		!strings.Contains(r.errOut, devstack.TokenFileName) {
		t.Errorf("catchup without a token: exit %d stderr %q", r.code, r.errOut)
	}
	r = policyctl(t, "catchup", "--token", "pf_wrong")
	if r.code != 1 || !strings.Contains(r.errOut, "401 Unauthorized") || !strings.Contains(r.errOut, "is not one the North API knows") {
		t.Errorf("catchup with an unknown token: exit %d stderr %q", r.code, r.errOut)
	}
}

func decodeCatchup(t *testing.T, rec *kgo.Record) *events.CatchupRequest {
	t.Helper()
	v, err := events.Default().Decode(context.Background(), rec.Value)
	if err != nil {
		t.Fatal(err)
	}
	req, ok := v.(*events.CatchupRequest)
	if !ok {
		t.Fatalf("record on %s is a %T", rec.Topic, v)
	}
	return req
}

func produce(t *testing.T, k runtime.Kafka, base, key string, ev events.Event) {
	t.Helper()
	b, err := events.Default().Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: k.Topic(base), Key: []byte(key), Value: b}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
