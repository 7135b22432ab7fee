package agentnotifier

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// TestSlowWebhookDoesNotHoldUpAnotherComponent: while one component's
// webhook has not answered, the next record, another component's, is
// claimed, its script run and its outcome recorded.
func TestSlowWebhookDoesNotHoldUpAnotherComponent(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	rec := newRecorder(t, scripts)
	arrived, release := make(chan struct{}), make(chan struct{})
	var arrivedOnce, releaseOnce sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		arrivedOnce.Do(func() { close(arrived) })
		<-release // held until the test has seen the script's outcome
	}))
	t.Cleanup(hook.Close)
	stagetest.Run(t, stageOn(t, consulCfg, scripts), stagetest.Env(c.Kafka))
	// Cleanups run last first: the webhook answers, then the stage
	// (which finishes its notifications) stops, then the server.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })

	// Its timeout is longer than the wait for the script's outcome: the
	// script must not wait for it.
	slow := webhook(hook.URL + "/slow")
	slow.TimeoutMs = 300_000
	holdGeneration(t, consul, 1, "slow-hook")
	c.Produce(t, topology.ComponentApplied, "slow-hook", update("slow-hook", 1, slow))
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the webhook was not called within 60s")
	}
	holdGeneration(t, consul, 1, "fast-script")
	c.Produce(t, topology.ComponentApplied, "fast-script", update("fast-script", 1,
		events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: rec.script}))
	if cl, _ := waitClaim(t, consul, "fast-script", "fast-script-u1"); *cl.ExitCode != 0 {
		t.Fatalf("claim of the script component %+v", cl)
	}
	if calls := rec.calls(t); len(calls) != 1 || calls[0][1] != wantPayload("fast-script", 1) {
		t.Fatalf("script calls %q, want one with %s", calls, wantPayload("fast-script", 1))
	}
	releaseOnce.Do(func() { close(release) })
	if cl, _ := waitClaim(t, consul, "slow-hook", "slow-hook-u1"); *cl.ExitCode != 0 || cl.HTTPStatus != 200 {
		t.Fatalf("claim of the webhook component %+v", cl)
	}
}

// TestNotifierRecordsWhatTheRulesRefuse: a notification the operator's
// rules refuse, or that cannot be delivered as asked, is claimed and
// recorded as failed with the reason, never run; URLs are masked in the
// claim.
func TestNotifierRecordsWhatTheRulesRefuse(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	scripts, elsewhere := t.TempDir(), t.TempDir()
	marker := filepath.Join(elsewhere, "ran")
	outside := writeScript(t, elsewhere, "outside.sh", "touch "+marker+"\n")
	inside := writeScript(t, scripts, "inside.sh", "touch "+marker+"\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusTemporaryRedirect)
		case "/fail":
			http.Error(w, "stack trace with internals", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	h := batchHandler(t, consulCfg, testConfig(t, scripts))

	big := update("refuse-big", 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: inside})
	hold(t, consul, "refuse-big", events.Policy{PolicyID: "BIG", PolicyVersion: "1", Body: `{"blob":"` + strings.Repeat("b", 300*1024) + `"}`})
	secretURL := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/fail?x=1&token=s3cret"
	holdGeneration(t, consul, 1, "refuse-outside", "refuse-system", "refuse-host", "refuse-metadata", "refuse-redirect", "refuse-secret")
	ins := []runtime.Input{
		input(update("refuse-outside", 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: outside})),
		input(update("refuse-system", 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/usr/bin/touch"})),
		input(update("refuse-host", 1, webhook("http://hooks.example.com/policies"))),
		input(update("refuse-metadata", 1, webhook("http://169.254.169.254/latest/meta-data"))),
		input(update("refuse-redirect", 1, webhook(srv.URL+"/moved"))),
		input(update("refuse-secret", 1, webhook(secretURL))),
		input(big),
	}
	for i, oc := range h(context.Background(), ins) {
		if oc.Err != nil {
			t.Fatalf("input %d: %v", i, oc.Err)
		}
	}
	for _, tc := range []struct {
		scn    string
		code   int
		status int
		want   []string
	}{
		{"refuse-outside", -1, 0, []string{"not run: script_path", "not in an allowed directory; scripts run only from " + scripts}},
		{"refuse-system", -1, 0, []string{"not run: script_path \"/usr/bin/touch\" is not in an allowed directory"}},
		{"refuse-host", -1, 0, []string{"not called: webhook_url http://hooks.example.com/policies: host hooks.example.com:80 is not allowed; webhooks go only to 127.0.0.1"}},
		{"refuse-metadata", -1, 0, []string{"not called", "host 169.254.169.254:80 is not allowed"}},
		{"refuse-redirect", 1, 307, []string{"307 Temporary Redirect: redirects are not followed"}},
		{"refuse-secret", 1, 500, []string{"POST http://***@127.0.0.1", "/fail?x=1&token=***: 500 Internal Server Error"}},
		{"refuse-big", -1, 0, []string{"not run: the notification is", "128 KiB", "by webhook instead"}},
	} {
		cl, pair := waitClaim(t, consul, tc.scn, tc.scn+"-u1")
		if *cl.ExitCode != tc.code || cl.HTTPStatus != tc.status {
			t.Errorf("claim of %s: %+v; want exit code %d, HTTP status %d", tc.scn, cl, tc.code, tc.status)
		}
		for _, w := range tc.want {
			if !strings.Contains(cl.Stderr, w) {
				t.Errorf("claim of %s: stderr %q lacks %q", tc.scn, cl.Stderr, w)
			}
		}
		for _, secret := range []string{"hunter2", "s3cret", "internals"} {
			if strings.Contains(string(pair.Value), secret) {
				t.Errorf("claim of %s shows %q: %s", tc.scn, secret, pair.Value)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused script ran")
	}
}
