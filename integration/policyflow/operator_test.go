package policyflow_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/policyflow/policyflow/services/testkit"
)

// metricSample is one line of /metrics: a series and its value.
type metricSample struct {
	name   string
	labels string
	value  float64
}

// scrape reads the pipeline's /metrics: the samples, and the names of
// every metric family (from its # TYPE line).
func (p *pipeline) scrape() ([]metricSample, map[string]bool) {
	p.t.Helper()
	resp, err := http.Get(p.ops + "/metrics")
	if err != nil {
		p.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var samples []metricSample
	families := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			families[strings.Fields(f)[0]] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		name, labels, _ := strings.Cut(series, "{")
		samples = append(samples, metricSample{name: name, labels: strings.TrimSuffix(labels, "}"), value: v})
	}
	return samples, families
}

// value is the sum of the samples of name whose labels hold every one of
// the given label="value" pairs.
func value(samples []metricSample, name string, labels ...string) float64 {
	var sum float64
	for _, s := range samples {
		if s.name != name {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(s.labels, l)
		}
		if all {
			sum += s.value
		}
	}
	return sum
}

// failingScript is a component script that fails as a broken component
// would: a reason on stderr and exit status 3.
func (p *pipeline) failingScript() string {
	p.t.Helper()
	dir, err := os.MkdirTemp(p.scripts, "failing")
	if err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(dir, "reconfigure.sh")
	script := "#!/bin/sh\necho 'reconfigure failed: the config server did not answer' >&2\nexit 3\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// TestOperatorView runs a pipeline with a component notified with
// success and one whose script fails, publishes a policy for both, and
// checks what an operator sees: the metrics (notifications by outcome,
// Consul writes, end-to-end latency; once idle, every lag series at 0),
// that the dashboards and alert rules name only metrics that exist, and
// the status page in a real browser.
func TestOperatorView(t *testing.T) {
	p := start(t)
	suffix := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	rec := p.newRecorder()
	okID, failID := "billing-"+suffix, "inventory-"+suffix
	for id, script := range map[string]string{okID: rec.path, failID: p.failingScript()} {
		p.register(id, map[string]any{
			"deployment_id": "dep-" + suffix, "service_component_name": "scn-" + id,
			"policy_ids": []string{"DCAE.Config_OperatorView"},
			"notify":     map[string]any{"kind": "script", "script_path": script},
		})
	}
	// The registrations first reach Consul (an empty collection), so that
	// the policy comes to both components by the PDP notification, whose
	// end-to-end latency is checked below, and not with their first
	// gathering.
	for _, id := range []string{okID, failID} {
		testkit.Eventually(p.t, 2*time.Minute, testkit.Named(id+" registered and written", func() error {
			code, body := p.do(http.MethodGet, "/v1/components/"+id+"/status", nil)
			var st struct {
				Applied *struct{} `json:"applied"`
			}
			if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil || st.Applied == nil {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		}))
	}
	p.publish("DCAE.Config_OperatorView.7.xml", "7", `{"threshold": 7}`, map[string]any{"ONAPName": "DCAE"})
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("both notifications recorded", func() error {
		samples, _ := p.scrape()
		ok := value(samples, "policyflow_notifications_total", `outcome="ok"`)
		failed := value(samples, "policyflow_notifications_total", `outcome="failed"`)
		// The policy's own way: from the PDP notification to Consul and
		// to the component told with success.
		written := value(samples, "policyflow_end_to_end_seconds_count", `milestone="consul_written"`, `origin="pdp.notifications"`)
		told := value(samples, "policyflow_end_to_end_seconds_count", `milestone="notified"`, `origin="pdp.notifications"`)
		if ok < 1 || failed < 1 || written < 1 || told < 1 {
			return fmt.Errorf("notifications ok %v, failed %v; the policy written %v, told %v", ok, failed, written, told)
		}
		return nil
	}))

	t.Run("metrics", func(t *testing.T) {
		samples, _ := p.scrape()
		for _, c := range []struct {
			what   string
			name   string
			labels []string
		}{
			{"Consul writes", "policyflow_consul_writes_total", []string{`outcome="ok"`}},
			{"Consul write latency", "policyflow_consul_request_seconds_count", []string{`op="write"`}},
			{"PDP notification to Consul written", "policyflow_end_to_end_seconds_count", []string{`milestone="consul_written"`, `origin="pdp.notifications"`}},
			{"PDP notification to notified", "policyflow_end_to_end_seconds_count", []string{`milestone="notified"`, `origin="pdp.notifications"`}},
			{"notification latency", "policyflow_notification_seconds_count", []string{`outcome="failed"`}},
		} {
			if v := value(samples, c.name, c.labels...); v < 1 {
				t.Errorf("%s: %s{%s} = %v; want at least 1", c.what, c.name, strings.Join(c.labels, ","), v)
			}
		}
		// The failed script is not counted as timed out.
		if v := value(samples, "policyflow_notifications_total", `outcome="timed_out"`); v != 0 {
			t.Errorf("notifications timed out: %v; want 0", v)
		}
	})

	t.Run("idle pipeline: every lag series reads 0", func(t *testing.T) {
		var last []string
		testkit.Eventually(p.t, time.Minute, testkit.Named("every lag series at 0", func() error {
			samples, _ := p.scrape()
			last = last[:0]
			n := 0
			for _, s := range samples {
				if s.name != "policyflow_consumer_lag" {
					continue
				}
				n++
				if s.value != 0 {
					last = append(last, fmt.Sprintf("%s=%v", s.labels, s.value))
				}
			}
			if n == 0 {
				return fmt.Errorf("no policyflow_consumer_lag series")
			}
			if len(last) > 0 {
				return fmt.Errorf("%d of %d lag series are not 0: %s", len(last), n, strings.Join(last, "; "))
			}
			return nil
		}))
	})

	t.Run("dashboards and alerts name existing metrics", func(t *testing.T) {
		_, families := p.scrape()
		named := deployMetricNames(t)
		if len(named) == 0 {
			t.Fatal("the dashboards and alert rules in deploy/ name no policyflow metric")
		}
		for name, files := range named {
			base := name
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && families[b] {
					base = b
				}
			}
			if !families[base] {
				t.Errorf("%s names %s, which the running pipeline's /metrics does not have", strings.Join(files, ", "), name)
			}
		}
	})

	t.Run("status page in a browser", func(t *testing.T) {
		p.browseStatusPage(t, "DCAE.Config_OperatorView", okID, failID)
	})
}

// deployFiles are the dashboards and alert rules, relative to this
// package.
var deployFiles = []string{"../../deploy/grafana/*.json", "../../deploy/prometheus/*.yaml"}

var metricName = regexp.MustCompile(`\bpolicyflow_[a-z0-9_]+`)

// deployMetricNames are the policyflow metric names the dashboards and
// alert rules use, with the files naming each.
func deployMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, glob := range deployFiles {
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("no file matches %s (%v)", glob, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, m := range metricName.FindAllString(string(b), -1) {
				if !seen[m] {
					seen[m] = true
					out[m] = append(out[m], strings.TrimPrefix(f, "../../"))
				}
			}
		}
	}
	return out
}

// chromium finds Debian's chromium (or another Chrome) on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("PF_REQUIRE_BROWSER") != "" {
		t.Fatal("no chromium on PATH; install Debian's chromium package (make browser)")
	}
	t.Skip("no chromium on PATH (make browser installs it; PF_REQUIRE_BROWSER=1 makes this a failure)")
	return ""
}

// browser is a headless Chromium tab for the test, closed when it ends,
// its actions bounded by two minutes.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancel(); cancelTab(); cancelAlloc() })
	return ctx
}

// browseStatusPage opens /ui/ in headless Chromium, signs in with the
// token as a person would, and reads the page: every stage ready, the
// policy's rollout (2 should have it, 2 written, 1 notified, 1 failed),
// the failed notification with its reason. The screenshot is kept in the
// test's directory, and in docs/ with PF_SAVE_SCREENSHOT=1.
func (p *pipeline) browseStatusPage(t *testing.T, policyID, okID, failID string) {
	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(p.api+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), p.token),
		chromedp.Click(chromedp.CSS("#show")),
		chromedp.WaitVisible(chromedp.CSS("#status")),
	); err != nil {
		t.Fatalf("sign in on the status page: %v", err)
	}
	rows := func(table string) [][]string {
		js := `Array.from(document.querySelectorAll("#` + table + ` tbody tr")).map(tr => Array.from(tr.cells).map(td => td.textContent.trim()))`
		out, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](js))
		if err != nil {
			t.Fatalf("read the table %s: %v", table, err)
		}
		return out
	}
	var stages, changes, failures [][]string
	testkit.Eventually(t, time.Minute, testkit.Named("the status page shows the rollout", func() error {
		stages, changes, failures = rows("stages"), rows("changes"), rows("failures")
		for _, r := range changes {
			// Policy, version, changed, should have, written, notified, failed, rollout.
			if len(r) == 8 && r[0] == policyID {
				if r[1] == "7" && r[3] == "2" && r[4] == "2" && r[5] == "1" && r[6] == "1" {
					return nil
				}
				return fmt.Errorf("rollout row %q", r)
			}
		}
		return fmt.Errorf("no row of %s among %q", policyID, changes)
	}))
	ready := map[string]bool{}
	for _, r := range stages {
		if len(r) == 6 && r[1] == "ready" {
			ready[r[0]] = true
		}
	}
	for _, s := range []string{"pdp-ingest", "matcher", "segmenter", "executor", "consul-writer", "agent-notifier"} {
		if !ready[s] {
			t.Errorf("the status page does not show stage %s ready: %q", s, stages)
		}
	}
	var failed []string
	for _, r := range failures {
		if len(r) == 6 && r[0] == failID {
			failed = r
		}
		if len(r) > 0 && r[0] == okID {
			t.Errorf("the notified component %s is listed as failed: %q", okID, r)
		}
	}
	if failed == nil || failed[2] != "3" || !strings.Contains(failed[4], "the config server did not answer") {
		t.Errorf("failed notification of %s: %q; want exit code 3 and the script's reason, among %q", failID, failed, failures)
	}

	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dst := []string{filepath.Join(t.TempDir(), "status-page.png")}
	if os.Getenv("PF_SAVE_SCREENSHOT") != "" {
		dst = append(dst, "../../docs/img/status-page.png")
	}
	for _, d := range dst {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(d, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(dst)
	t.Logf("status page screenshot: %s", strings.Join(dst, ", "))
}
