package agentnotifier

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/topology"
)

// attempt is one call of a component's webhook, as its ledger keeps it.
type attempt struct {
	update string
	at     time.Time
}

// ledger is a component's webhook that keeps every call, failing those of
// the updates in fail.
type ledger struct {
	mu   sync.Mutex
	got  []attempt
	fail map[string]bool
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u := r.Header.Get(HeaderUpdateID)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, attempt{update: u, at: time.Now()})
	if l.fail[u] {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
}

func (l *ledger) attempts(update string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []time.Time
	for _, a := range l.got {
		if a.update == update {
			out = append(out, a.at)
		}
	}
	return out
}

// TestAbortDropsRetriesOfTheAbortedVersion: a notification of v2 whose
// webhook fails is not run again once the rollout of v2 is aborted while
// its retry waits; it is recorded as superseded, and v1, which the abort
// restores, is notified next.
func TestAbortDropsRetriesOfTheAbortedVersion(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.PolicyRollouts, topology.DLQ(topology.StageAgentNotifier))
	cfg := testConfig(t)
	cfg.Attempts, cfg.Backoff.Initial, cfg.Backoff.Max = 3, 2*time.Second, 2*time.Second
	s := StageWith(cfg)
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"--consul-addr", consulCfg.Addr}); err != nil {
		t.Fatal(err)
	}
	stagetest.Run(t, s, stagetest.Env(c.Kafka))

	l := &ledger{fail: map[string]bool{"u-v2": true}}
	srv := httptest.NewServer(l)
	defer srv.Close()
	hook := events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: srv.URL}
	v1 := events.Policy{PolicyID: "P", PolicyName: "P.1.xml", PolicyVersion: "1", BodyHash: "h1", Body: `{"policyName":"P.1.xml","policyVersion":"1","config":{"v":1}}`}
	v2 := events.Policy{PolicyID: "P", PolicyName: "P.2.xml", PolicyVersion: "2", BodyHash: "h2", Body: `{"policyName":"P.2.xml","policyVersion":"2","config":{"v":2}}`}
	now := time.UnixMilli(10_000).UTC()
	r := rollout.Start("P", "r1", "2", "h2", &events.PolicyCatalogEntry{PolicyVersion: "1", Body: v1.Body, BodyHash: "h1", Revision: 1},
		rollout.Plan{Steps: []float64{1}}, "op", now)
	c.Produce(t, topology.PolicyRollouts, "P", r)

	hold(t, consul, "dcae-vm", v2)
	c.Produce(t, topology.ComponentApplied, "c1", applied("u-v2", 2, hook, []events.Policy{v2}, []events.Policy{v2}, nil))
	deadline := time.Now().Add(30 * time.Second)
	for len(l.attempts("u-v2")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("v2 never notified")
		}
		time.Sleep(20 * time.Millisecond)
	}
	aborted, err := rollout.Abort(r, 3, "op", now)
	if err != nil {
		t.Fatal(err)
	}
	c.Produce(t, topology.PolicyRollouts, "P", aborted)
	abortedAt := time.Now()

	claim, _ := waitClaim(t, consul, "dcae-vm", "u-v2")
	if claim.Outcome != consulkv.OutcomeSuperseded || claim.Attempts != 1 || !strings.Contains(claim.Stderr, "aborted") {
		t.Fatalf("claim of v2 after the abort %+v, want superseded after 1 attempt", claim)
	}
	for _, at := range l.attempts("u-v2") {
		if at.After(abortedAt) {
			t.Fatalf("v2 attempts at %v, one after the abort at %v", l.attempts("u-v2"), abortedAt)
		}
	}

	// The version the abort restores is notified next.
	hold(t, consul, "dcae-vm", v1)
	c.Produce(t, topology.ComponentApplied, "c1", applied("u-v1", 3, hook, []events.Policy{v1}, []events.Policy{v1}, nil))
	if claim, _ = waitClaim(t, consul, "dcae-vm", "u-v1"); claim.Outcome != consulkv.OutcomeOK || len(l.attempts("u-v1")) != 1 {
		t.Fatalf("claim of v1 %+v, %d attempts", claim, len(l.attempts("u-v1")))
	}
}
