package agentnotifier

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/notifytarget"
)

// scriptRules allows scripts from dirs and webhooks to 127.0.0.1.
func scriptRules(t testing.TB, dirs ...string) notifytarget.Rules {
	t.Helper()
	r, err := notifytarget.Config{ScriptDirs: dirs, WebhookAllow: []string{"127.0.0.1"}}.Rules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunScript(t *testing.T) {
	dir := t.TempDir()
	rules := scriptRules(t, dir)
	ctx := context.Background()
	t.Setenv("PF_SECRET", "from the notifier's environment")
	echo := writeScript(t, dir, "echo.sh", `printf '%s|' "$#" "$1" "$PATH" "${PF_SECRET-unset}" "$POLICYFLOW_COMPONENT_ID" "$POLICYFLOW_UPDATE_ID" "$POLICYFLOW_GENERATION" >&2; exit 0`+"\n")
	d := Delivery{ComponentID: "c-1", UpdateID: "u-7", Generation: 7}
	if r := RunScript(ctx, rules, echo, d, []byte(`{"a":"b c"}`), 10*time.Second); r.ExitCode != 0 || r.Stderr != `2|policies|/usr/bin:/bin|unset|c-1|u-7|7|` {
		t.Fatalf("echo script: %+v; want 2 arguments, PATH=/usr/bin:/bin, the update it delivers and nothing of the notifier's environment", r)
	}
	fail := writeScript(t, dir, "fail.sh", "echo boom >&2\nexit 3\n")
	if r := RunScript(ctx, rules, fail, Delivery{}, []byte(`{}`), 10*time.Second); r.ExitCode != 3 || r.Stderr != "boom\n" {
		t.Fatalf("failing script: %+v", r)
	}
	noisy := writeScript(t, dir, "noisy.sh", "i=0; while [ $i -lt 2000 ]; do echo 0123456789 >&2; i=$((i+1)); done\n")
	if r := RunScript(ctx, rules, noisy, Delivery{}, []byte(`{}`), 10*time.Second); r.ExitCode != 0 || !strings.HasPrefix(r.Stderr, "0123456789\n") ||
		!strings.Contains(r.Stderr, "more bytes of stderr dropped") || len(r.Stderr) > MaxStderrBytes+100 {
		t.Fatalf("noisy script: exit %d, %d bytes of stderr", r.ExitCode, len(r.Stderr))
	}
	// A script that starts a child and hangs is killed with its child.
	slow := writeScript(t, dir, "slow.sh", "sleep 60 &\nsleep 60\n")
	start := time.Now()
	r := RunScript(ctx, rules, slow, Delivery{}, []byte(`{}`), 300*time.Millisecond)
	if r.ExitCode != -1 || !strings.Contains(r.Stderr, "timeout of 300ms") || time.Since(start) > 30*time.Second {
		t.Fatalf("slow script: %+v after %s", r, time.Since(start))
	}
	// A script that ended while a child keeps its stderr open is
	// recorded with its own exit status.
	detached := writeScript(t, dir, "detached.sh", "sleep 4 &\necho started >&2\nexit 0\n")
	if r := RunScript(ctx, rules, detached, Delivery{}, []byte(`{}`), 10*time.Second); r.ExitCode != 0 || !strings.HasPrefix(r.Stderr, "started\n") ||
		!strings.Contains(r.Stderr, "kept its stderr open") {
		t.Fatalf("script whose child holds its stderr: %+v", r)
	}
}

// TestRunScriptRefuses: what the rules refuse is not run, and the result
// says why.
func TestRunScriptRefuses(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	rules := scriptRules(t, dir)
	ctx := context.Background()
	marker := filepath.Join(elsewhere, "ran")
	body := "touch " + marker + "\n"
	outside := writeScript(t, elsewhere, "outside.sh", body)
	replaced := writeScript(t, dir, "replaced.sh", body)
	notExec := writeScript(t, dir, "plain.sh", body)
	if err := os.Chmod(notExec, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(path string) Result { return RunScript(ctx, rules, path, Delivery{}, []byte(`{}`), 10*time.Second) }
	// Registered while it was fine, then replaced by a link out of the
	// allowed directory: refused when it would run.
	if r := run(replaced); r.ExitCode != 0 {
		t.Fatalf("script before it was replaced: %+v", r)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(replaced); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, replaced); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rules notifytarget.Rules
		path  string
		want  string
	}{
		{rules, outside, "not in an allowed directory; scripts run only from " + dir},
		{rules, "/usr/bin/touch", "not in an allowed directory"},
		{rules, replaced, "resolves to"},
		{rules, notExec, "is not executable"},
		{rules, filepath.Join(dir, "missing.sh"), "does not exist"},
		{rules, filepath.Join(dir, "sub"), "is a directory"},
		{notifytarget.Rules{}, outside, "--script-dir"},
	} {
		r := RunScript(ctx, tc.rules, tc.path, Delivery{}, []byte(`{}`), 10*time.Second)
		if r.ExitCode != -1 || !strings.HasPrefix(r.Stderr, "not run: ") || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%s: %+v; want exit -1 and %q", tc.path, r, tc.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused script ran")
	}
}

// TestRunScriptArgumentLimit: a notification one byte over what Linux
// passes in one argument is not run and says why; one at the limit is.
func TestRunScriptArgumentLimit(t *testing.T) {
	dir := t.TempDir()
	rules := scriptRules(t, dir)
	size := writeScript(t, dir, "size.sh", `printf '%s' "${#2}" >&2`+"\n")
	big := []byte(strings.Repeat("x", notifytarget.MaxArgBytes+1))
	r := RunScript(context.Background(), rules, size, Delivery{}, big, 10*time.Second)
	if r.ExitCode != -1 || !strings.Contains(r.Stderr, "not run: the notification is 131072 bytes") || !strings.Contains(r.Stderr, "128 KiB") {
		t.Fatalf("oversized notification: %+v", r)
	}
	if runtime.GOOS != "linux" {
		return
	}
	r = RunScript(context.Background(), rules, size, Delivery{}, big[:notifytarget.MaxArgBytes], 10*time.Second)
	if r.ExitCode != 0 || r.Stderr != strconv.Itoa(notifytarget.MaxArgBytes) {
		t.Fatalf("notification of exactly %d bytes: %+v", notifytarget.MaxArgBytes, r)
	}
}

func TestPostWebhook(t *testing.T) {
	var got []byte
	var ctype, delivery string
	var calls atomic.Int32
	release := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { calls.Add(100) }))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		ctype = r.Header.Get("Content-Type")
		delivery = r.Header.Get(HeaderComponentID) + " " + r.Header.Get(HeaderUpdateID) + " " + r.Header.Get(HeaderGeneration)
		got, _ = io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/fail":
			http.Error(w, "not today: internal detail", http.StatusServiceUnavailable)
		case "/moved":
			http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
		case "/hang":
			<-release
		}
	}))
	defer srv.Close()
	defer close(release)
	rules := scriptRules(t)
	client := rules.Client(4)
	ctx := context.Background()
	post := func(u string, timeout time.Duration) Result {
		return PostWebhook(ctx, rules, client, u, Delivery{ComponentID: "c-1", UpdateID: "u-7", Generation: 7}, []byte(`{"policies":[]}`), timeout)
	}
	r := post(srv.URL+"/ok", 5*time.Second)
	if r.ExitCode != 0 || r.HTTPStatus != 200 || string(got) != `{"policies":[]}` || ctype != "application/json" || delivery != "c-1 u-7 7" {
		t.Fatalf("webhook: %+v, body %s, content type %s, delivery %q", r, got, ctype, delivery)
	}
	// A failure keeps the status, never the answer's body.
	r = post(srv.URL+"/fail", 5*time.Second)
	if r.ExitCode != 1 || r.HTTPStatus != 503 || !strings.HasSuffix(r.Stderr, "/fail: 503 Service Unavailable") || strings.Contains(r.Stderr, "internal detail") {
		t.Fatalf("failing webhook: %+v", r)
	}
	// A redirect is not followed: the 307 is the answer.
	r = post(srv.URL+"/moved", 5*time.Second)
	if r.ExitCode != 1 || r.HTTPStatus != 307 || !strings.Contains(r.Stderr, "307 Temporary Redirect: redirects are not followed") || calls.Load() >= 100 {
		t.Fatalf("redirecting webhook: %+v, redirect target reached: %v", r, calls.Load() >= 100)
	}
	// Credentials in the URL are masked in the result.
	r = post(strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1)+"/fail?x=1&access_token=s3cret", 5*time.Second)
	if r.ExitCode != 1 || strings.Contains(r.Stderr, "hunter2") || strings.Contains(r.Stderr, "s3cret") ||
		!strings.Contains(r.Stderr, "http://***@127.0.0.1") || !strings.Contains(r.Stderr, "x=1&access_token=***") {
		t.Fatalf("webhook with credentials: %+v", r)
	}
	r = post(strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1)+"/hang?token=s3cret", 200*time.Millisecond)
	if r.ExitCode != -1 || !strings.Contains(r.Stderr, "no answer within its timeout of 200ms") || strings.Contains(r.Stderr, "hunter2") || strings.Contains(r.Stderr, "s3cret") {
		t.Fatalf("webhook that does not answer: %+v", r)
	}
	r = post("http://127.0.0.1:1/none", 5*time.Second)
	if r.ExitCode != -1 || r.HTTPStatus != 0 || r.Stderr == "" {
		t.Fatalf("unreachable webhook: %+v", r)
	}
	// A host the rules do not allow is not called.
	before := calls.Load()
	other := notifytarget.Config{WebhookAllow: []string{"hooks.example.com"}}.MustRules()
	r = PostWebhook(ctx, other, other.Client(1), srv.URL+"/ok", Delivery{}, []byte(`{}`), 5*time.Second)
	if r.ExitCode != -1 || !strings.HasPrefix(r.Stderr, "not called: ") || !strings.Contains(r.Stderr, "is not allowed") || calls.Load() != before {
		t.Fatalf("webhook to a host not allowed: %+v", r)
	}
	// A name allowed that leads to a loopback address is refused when
	// dialled.
	byName := notifytarget.Config{WebhookAllow: []string{"localhost"}}.MustRules()
	r = PostWebhook(ctx, byName, byName.Client(1), strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)+"/ok", Delivery{}, []byte(`{}`), 5*time.Second)
	if r.ExitCode != -1 || !strings.Contains(r.Stderr, "loopback") || calls.Load() != before {
		t.Fatalf("webhook whose name resolves to loopback: %+v", r)
	}
}
