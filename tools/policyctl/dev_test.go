package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// lockedBuffer is an output stream the command writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runningDev is one `policyctl dev` started by a test.
type runningDev struct {
	out, errOut *lockedBuffer
	stop        context.CancelFunc
	code        chan int
	broker      string
	consul      string
	http        string
	banner      string
}

var (
	bannerBroker = regexp.MustCompile(`(?m)^  Kafka broker +(\S+)$`)
	bannerConsul = regexp.MustCompile(`(?m)^  Consul +http://(\S+)/ui `)
	bannerHTTP   = regexp.MustCompile(`(?m)^  health, metrics +http://(\S+)/healthz `)
	bannerAPI    = regexp.MustCompile(`(?m)^  North API +http://(\S+) `)
	bannerPDP    = regexp.MustCompile(`(?m)^  PDP simulator +http://(\S+)/getConfig`)
	bannerToken  = regexp.MustCompile(`(?m)^  API token +(\S+) +\((new, )?admin; in (\S+), where policyctl finds it`)
)

// startDev runs `policyctl dev` on dataDir with free ports and the extra
// arguments, and waits for its banner.
func startDev(t *testing.T, dataDir string, extra ...string) *runningDev {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &runningDev{out: &lockedBuffer{}, errOut: &lockedBuffer{}, stop: cancel, code: make(chan int, 1)}
	args := append([]string{"dev",
		"--data-dir", dataDir,
		"--broker-addr", "127.0.0.1:0",
		"--consul-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0",
		"--partitions", "2",
	}, extra...)
	go func() {
		d.code <- run(withStreams(ctx, d.out, d.errOut), args)
	}()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case code := <-d.code:
			cancel()
			t.Fatalf("policyctl dev exited %d before printing its banner\nstdout:\n%s\nstderr:\n%s", code, d.out, d.errOut)
		case <-deadline:
			d.shutdown(t)
			t.Fatalf("policyctl dev printed no banner within 3 minutes\nstdout:\n%s\nstderr:\n%s", d.out, d.errOut)
		case <-time.After(100 * time.Millisecond):
		}
		out := d.out.String()
		b, c, h := bannerBroker.FindStringSubmatch(out), bannerConsul.FindStringSubmatch(out), bannerHTTP.FindStringSubmatch(out)
		if b != nil && c != nil && h != nil && strings.Contains(out, "Ctrl-C") {
			d.broker, d.consul, d.http, d.banner = b[1], c[1], h[1], out
			return d
		}
	}
}

// shutdown interrupts the command the way the first Ctrl-C does and
// returns its exit status.
func (d *runningDev) shutdown(t *testing.T) int {
	t.Helper()
	d.stop()
	select {
	case code := <-d.code:
		return code
	case <-time.After(2 * time.Minute):
		t.Fatalf("policyctl dev did not stop within 2 minutes of the interrupt\nstderr:\n%s", d.errOut)
		return -1
	}
}

func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func httpDoAs(t *testing.T, token, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth.SetBearer(req, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// devTestEnv skips (or, under CI, fails) without a Consul binary, and
// clears the environment a developer's shell may set for policyctl dev, so
// that every server of the stack listens on a free port.
func devTestEnv(t *testing.T) {
	t.Helper()
	if _, err := devstack.ConsulBinary(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but there is no consul binary: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	for _, k := range []string{"PF_DEV_DATA_DIR", "PF_DEV_BROKER_ADDR", "PF_DEV_CONSUL_ADDR", "PF_HTTP_ADDR", "PF_TOPIC_PREFIX", "PF_LOG_LEVEL", "PF_PDP_URL"} {
		t.Setenv(k, "")
	}
	// Servers that hooks add to the stack listen on free ports too.
	t.Setenv("PF_API_ADDR", "127.0.0.1:0")
	t.Setenv("PF_DEV_PDP_ADDR", "127.0.0.1:0")
}

func TestDevRunsTheStackAndKeepsItsState(t *testing.T) {
	devTestEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	t.Setenv("PF_DEV_DATA_DIR", dataDir)          // where policyctl looks for the dev token
	marker := topology.DLQ(topology.StageMatcher) // a topic no stage reads

	d := startDev(t, dataDir)
	if !strings.Contains(d.banner, "topics created") {
		t.Errorf("first start: banner does not report created topics:\n%s", d.banner)
	}

	// Every topic of the topology is on the broker the banner names.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(d.broker, ",")...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tds, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatalf("list topics on %s: %v", d.broker, err)
	}
	for _, tp := range topology.Default() {
		if !tds.Has(tp.Name) {
			t.Errorf("topic %s missing on the dev broker", tp.Name)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: marker, Key: []byte("marker"), Value: []byte("kept")}).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", marker, err)
	}
	cl.Close()

	// Consul answers at the address the banner names, UI included.
	if code, body := httpDo(t, http.MethodPut, "http://"+d.consul+"/v1/kv/dev-test/marker", "kept"); code != 200 {
		t.Fatalf("consul KV put: %d %s", code, body)
	}
	if code, _ := httpDo(t, http.MethodGet, "http://"+d.consul+"/ui/", ""); code != 200 {
		t.Errorf("consul UI answered %d", code)
	}

	// The North API wants the admin token the banner printed and kept,
	// mode 0600, where policyctl finds it.
	api, tok := bannerAPI.FindStringSubmatch(d.banner), bannerToken.FindStringSubmatch(d.banner)
	if api == nil || tok == nil || tok[2] == "" || tok[3] != filepath.Join(dataDir, "policyctl.token") {
		t.Fatalf("first start: banner does not name the North API and a new admin token in %s:\n%s", filepath.Join(dataDir, "policyctl.token"), d.banner)
	}
	token := tok[1]
	// So is the key agent packages are signed with (agentpackage publish
	// finds it), and the banner names it.
	if !strings.Contains(d.banner, "--trusted-key "+filepath.Join(dataDir, "package-signing.key.pub")) {
		t.Errorf("the banner does not name the package signing key:\n%s", d.banner)
	}
	for _, f := range []string{"policyctl.token", "api-tokens.json", "package-signing.key"} {
		st, err := os.Stat(filepath.Join(dataDir, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", f, st, err)
		}
	}
	if kept, err := os.ReadFile(filepath.Join(dataDir, "policyctl.token")); err != nil || strings.TrimSpace(string(kept)) != token {
		t.Errorf("policyctl.token holds %q (%v), want the token of the banner", kept, err)
	}

	// Health, readiness and metrics of the stages.
	if code, body := httpDo(t, http.MethodGet, "http://"+d.http+"/healthz", ""); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := httpDo(t, http.MethodGet, "http://"+d.http+"/metrics", ""); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d, %d bytes without go_goroutines", code, len(body))
	}
	for {
		code, body := httpDo(t, http.MethodGet, "http://"+d.http+"/readyz", "")
		if code == 200 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("/readyz never answered 200; last %d %s\nstderr:\n%s", code, body, d.errOut)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if code, body := httpDo(t, http.MethodGet, "http://"+api[1]+"/v1/components/nobody/status", ""); code != http.StatusUnauthorized {
		t.Errorf("North API without a token: %d %s, want 401", code, body)
	}
	if code, body := httpDoAs(t, token, http.MethodGet, "http://"+api[1]+"/v1/components/nobody/status"); code != http.StatusNotFound {
		t.Errorf("North API with the dev token: %d %s, want 404 (no such component)", code, body)
	}
	if code, _ := httpDoAs(t, token, http.MethodGet, "http://"+api[1]+"/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics on the North API's port: %d, want 404 (it is on the ops listener)", code)
	}

	// The PDP simulator notifies the pipeline like a real PDP: a version
	// loaded through its admin API reaches the catalog the North API reads.
	pdpAddr := bannerPDP.FindStringSubmatch(d.banner)
	if pdpAddr == nil {
		t.Fatalf("banner does not name the PDP simulator:\n%s", d.banner)
	}
	loaded := `{"policyName": "DCAE.Config_DevSim.3.xml", "policyVersion": "3", "policyConfigStatus": "CONFIG_RETRIEVED", "matchingConditions": {"ONAPName": "DCAE"}, "config": {"k": "v"}}`
	if code, body := httpDo(t, http.MethodPut, "http://"+pdpAddr[1]+"/sim/policies", loaded); code != http.StatusOK || !strings.Contains(body, "/v1/pdp/notifications") {
		t.Fatalf("PUT /sim/policies on the dev PDP simulator: %d %s; want 200 saying it notified the North API", code, body)
	}
	for {
		code, body := httpDoAs(t, token, http.MethodGet, "http://"+api[1]+"/policy_latest/DCAE.Config_DevSim")
		if code == http.StatusOK && strings.Contains(body, "DCAE.Config_DevSim.3.xml") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the simulator's version never reached the catalog: last %d %s", code, body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	// A catch-up, followed until the stages have handled it.
	if r := policyctl(t, "catch-up", "--api", "http://"+api[1], "--wait-timeout", "2m"); r.code != 0 || !strings.Contains(r.errOut, "matcher 2/2 partitions") ||
		!strings.Contains(r.errOut, "consul-writer 2/2") || !strings.Contains(r.out, `"components_compared"`) {
		t.Errorf("catchup --wait: exit %d stdout %q stderr %q", r.code, r.out, r.errOut)
	}

	if code := d.shutdown(t); code != 0 {
		t.Fatalf("policyctl dev exited %d after the interrupt\nstderr:\n%s", code, d.errOut)
	}
	if _, err := http.Get("http://" + d.consul + "/v1/status/leader"); err == nil {
		t.Errorf("consul at %s still answers after policyctl dev stopped", d.consul)
	}

	// A second start on the same data dir finds everything where it was.
	d = startDev(t, dataDir)
	defer d.shutdown(t)
	// A second stack on the same data dir is refused, not started beside it.
	if r := policyctl(t, "dev", "--data-dir", dataDir, "--broker-addr", "127.0.0.1:0", "--consul-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"); r.code != 1 || !strings.Contains(r.errOut, "another `policyctl dev`") {
		t.Errorf("second policyctl dev on %s: exit %d, stderr %q; want exit 1 saying another one runs", dataDir, r.code, r.errOut)
	}
	if !strings.Contains(d.banner, "nothing changed") {
		t.Errorf("restart: banner does not say the topology was already in place:\n%s", d.banner)
	}
	if tok := bannerToken.FindStringSubmatch(d.banner); tok == nil || tok[1] != token || tok[2] != "" {
		t.Errorf("restart: banner does not show the same admin token, not new:\n%s", d.banner)
	}
	if code, body := httpDo(t, http.MethodGet, "http://"+d.consul+"/v1/kv/dev-test/marker?raw", ""); code != 200 || body != "kept" {
		t.Errorf("restart: consul key dev-test/marker = %d %q, want 200 \"kept\"", code, body)
	}
	cl, err = kgo.NewClient(kgo.SeedBrokers(strings.Split(d.broker, ",")...), kgo.ConsumeTopics(marker),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("restart: record on %s not found: %v", marker, ctx.Err())
		}
		var found bool
		fs.EachRecord(func(r *kgo.Record) { found = found || (string(r.Key) == "marker" && string(r.Value) == "kept") })
		if found {
			break
		}
	}
}

// `make run` again on the same data shows the demo working again: the
// catalog already holds the last run's versions, so each run publishes the
// two versions after the one in force (an older one would not replace
// it). The PDP simulator keeps its policies in the data dir, as a PDP
// would: started again it lists what the catalog holds from it, so the
// catch-up pdp-ingest runs on start finds nothing withdrawn and withholds
// nothing.
func TestDemoRunsAgainOnItsData(t *testing.T) {
	devTestEnv(t)
	dataDir := t.TempDir()
	t.Setenv("PF_DEV_DATA_DIR", dataDir)
	// The hosts policies may call, as the stack's North API and admission
	// stage read them, are in the banner.
	t.Setenv("PF_ADMISSION_HOOK_ALLOW", "127.0.0.1:9999")
	for run, want := range []string{"demo: version 222 reached Consul", "demo: version 224 reached Consul"} {
		d := startDev(t, dataDir, "--demo")
		if !regexp.MustCompile(`(?m)^  policy engines +127\.0\.0\.1:9999 `).MatchString(d.banner) {
			t.Errorf("run %d: the banner does not name the hosts of PF_ADMISSION_HOOK_ALLOW:\n%s", run+1, d.banner)
		}
		err := testkit.Wait(3*time.Minute, func() error {
			select {
			case code := <-d.code:
				t.Fatalf("run %d: policyctl dev exited %d before the demo ended\nstdout:\n%s\nstderr:\n%s", run+1, code, d.out, d.errOut)
			default:
			}
			if !strings.Contains(d.out.String(), "demo: the component's script was run") {
				return errors.New("the demo did not end")
			}
			return nil
		})
		if err != nil {
			d.shutdown(t)
			t.Fatalf("run %d: %v\nstdout:\n%s\nstderr:\n%s", run+1, err, d.out, d.errOut)
		}
		if out := d.out.String(); !strings.Contains(out, want) {
			t.Errorf("run %d: the demo says\n%s\nwant %q", run+1, out, want)
		}
		// pdp-ingest's catch-up on start has compared the catalog with the
		// simulator before the demo published anything.
		if logs := d.errOut.String(); strings.Contains(logs, "removals_withheld") || strings.Contains(logs, "catch-up removed no policy") {
			t.Errorf("run %d: pdp-ingest's catch-up found policies of the catalog missing from the PDP simulator:\n%s", run+1, logs)
		}
		if b, err := os.ReadFile(filepath.Join(dataDir, devPDPStateFile)); err != nil || !strings.Contains(string(b), "DCAE.Config_VM_STORAGE.1.xml") {
			t.Errorf("run %d: the PDP simulator's policies in %s: %v %.300s", run+1, devPDPStateFile, err, b)
		}
		if code := d.shutdown(t); code != 0 {
			t.Fatalf("run %d: policyctl dev exited %d\nstderr:\n%s", run+1, code, d.errOut)
		}
	}
}

// --otlp-endpoint is the collector's base URL; one that is not a URL is
// refused before anything starts.
func TestDevRefusesAnOTLPEndpointThatIsNotAURL(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	r := policyctl(t, "dev", "--ephemeral", "--otlp-endpoint", "collector:4318")
	if r.code != 2 || !strings.Contains(r.errOut, `--otlp-endpoint "collector:4318": want an http:// or https:// URL`) {
		t.Fatalf("policyctl dev --otlp-endpoint collector:4318: exit %d, stderr %s; want a usage error naming the flag", r.code, r.errOut)
	}
}

// TestDevWebhooksNeverReachTheStack: the dev stack allows webhooks to
// this machine, but not to the ports its Consul, broker, North API and
// listeners serve on, on any loopback address.
func TestDevWebhooksNeverReachTheStack(t *testing.T) {
	own := []string{"127.0.0.1:8500", "[::1]:9092", "0.0.0.0:8080", "localhost:9090", "192.0.2.7:8181"}
	r := notifytarget.Config{WebhookAllow: devWebhookAllow, WebhookRefuse: webhookRefusals(own)}.MustRules()
	for _, u := range []string{"http://127.0.0.1:8500/v1/kv/x", "http://[::1]:8500/v1/acl/bootstrap", "http://127.0.0.2:9092/",
		"http://127.0.0.1:8080/v1/components/x", "http://[::1]:9090/metrics"} {
		if _, err := r.CheckWebhook(u); err == nil || !strings.Contains(err.Error(), "serves this stack itself") {
			t.Errorf("webhook %s: %v; want it refused as one of the stack's own services", u, err)
		}
	}
	if _, err := r.CheckWebhook("http://127.0.0.1:9999/hook"); err != nil {
		t.Errorf("a webhook to another local port: %v", err)
	}
}

// --broker-count outside 1 to devstack.MaxBrokers, or a PF_BROKER_COUNT
// that is no number, is refused before anything starts.
func TestDevRefusesABadBrokerCount(t *testing.T) {
	for _, args := range [][]string{{"--broker-count", "0"}, {"--broker-count", "17"}} {
		r := policyctl(t, append([]string{"dev", "--ephemeral"}, args...)...)
		if r.code != 2 || !strings.Contains(r.errOut, "--broker-count") {
			t.Errorf("policyctl dev %v: exit %d, stderr %s; want a usage error naming --broker-count", args, r.code, r.errOut)
		}
	}
	t.Setenv("PF_BROKER_COUNT", "three")
	if r := policyctl(t, "dev", "--ephemeral"); r.code != 2 || !strings.Contains(r.errOut, "PF_BROKER_COUNT") {
		t.Errorf("PF_BROKER_COUNT=three: exit %d, stderr %s; want a usage error naming it", r.code, r.errOut)
	}
}
