package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// withReplica runs replica-sync and one replica of participant p1 (type
// org.policyflow.Test) on k until the test ends.
func withReplica(t *testing.T, k runtime.Kafka) {
	t.Helper()
	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	env.SessionTimeout, env.TransactionTimeout = 10*time.Second, 10*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	stageDone := make(chan error, 1)
	go func() {
		stageDone <- replicasync.StageWith(replicasync.Config{OfflineAfter: time.Minute}).Run(ctx, env)
	}()
	p, err := participant.New(participant.Config{Kafka: k, ParticipantID: "p1", ReplicaID: "r1", Log: runtime.NewLogger(io.Discard, "error", false),
		Types: map[string]participant.Callbacks{"org.policyflow.Test": {}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-stageDone })
}

// until runs policyctl until its JSON answer satisfies ok.
func until(t *testing.T, ok func(map[string]any) bool, args ...string) map[string]any {
	t.Helper()
	var v map[string]any
	testkit.Eventually(t, 60*time.Second, func() error {
		r := policyctl(t, args...)
		if r.code == 0 {
			if v = stdoutJSON(t, r); ok(v) {
				return nil
			}
		}
		return fmt.Errorf("policyctl %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), r.code, r.out, r.errOut)
	})
	return v
}

func TestACMCommands(t *testing.T) {
	url, k := northAPI(t)
	withReplica(t, k)
	until(t, func(v map[string]any) bool { return v["participantState"] == "ON_LINE" }, "participants", "show", "--api", url, "p1")
	if v := until(t, func(map[string]any) bool { return true }, "participants", "list", "--api", url); len(v["participants"].([]any)) != 1 {
		t.Errorf("participants list: %v", v)
	}
	els := writeFile(t, "els.json", `[{"id": "e1", "type": "org.policyflow.Test", "properties": {"k": "v"}}]`)
	for _, args := range [][]string{
		{"acm", "prime", "--api", url, "--elements", els, "p1", "c1"},
		{"acm", "deploy", "--api", url, "--composition", "c1", "--elements", els, "p1", "i1"},
	} {
		if r := policyctl(t, args...); r.code != 0 || stdoutJSON(t, r)["operationId"] == "" {
			t.Fatalf("policyctl %s: exit %d %q %q", strings.Join(args, " "), r.code, r.out, r.errOut)
		}
	}
	until(t, func(v map[string]any) bool { return v["state"] == "PRIMED" }, "acm", "status", "--api", url, "--composition", "c1", "p1")
	v := until(t, func(v map[string]any) bool {
		els, _ := v["elements"].([]any)
		return len(els) == 1 && els[0].(map[string]any)["state"] == "DEPLOYED"
	}, "acm", "status", "--api", url, "p1", "i1")
	if el := v["elements"].([]any)[0].(map[string]any); el["properties"].(map[string]any)["k"] != "v" {
		t.Errorf("element %v", el)
	}
	if r := policyctl(t, "acm", "undeploy", "--api", url, "--composition", "c1", "p1", "i1"); r.code != 0 {
		t.Fatalf("undeploy: exit %d %q", r.code, r.errOut)
	}
	until(t, func(v map[string]any) bool {
		els, _ := v["elements"].([]any)
		return len(els) == 1 && els[0].(map[string]any)["state"] == "UNDEPLOYED"
	}, "acm", "status", "--api", url, "p1", "i1")
	for _, args := range [][]string{{"participants", "sync", "--api", url}, {"participants", "sync", "--api", url, "p1"}} {
		if r := policyctl(t, args...); r.code != 0 || stdoutJSON(t, r)["requestId"] == "" {
			t.Fatalf("policyctl %s: exit %d %q", strings.Join(args, " "), r.code, r.errOut)
		}
	}

	// What to fix, said by policyctl or by the API.
	for _, tc := range []struct {
		args []string
		code int
		frag string
	}{
		// Without --composition the API takes it from the instance; a
		// new instance has none to take it from.
		{[]string{"acm", "deploy", "--api", url, "--elements", els, "p1", "i9"}, exitFailure, "holds no instance i9 to take it from: give compositionId"},
		{[]string{"acm", "deploy", "--api", url, "--composition", "c1", "p1", "i1"}, exitUsage, "needs --elements"},
		{[]string{"acm", "deploy", "--api", url, "--composition", "c1", "--elements", writeFile(t, "bad.json", `{"id":"e1"}`), "p1", "i1"}, exitFailure, "JSON array of elements"},
		{[]string{"acm", "deploy", "--api", url, "--composition", "c1", "--elements", writeFile(t, "other.json", `[{"id":"e1","type":"x"}]`), "p1", "i1"}, exitFailure, "which no replica of participant p1 supports"},
		{[]string{"acm", "status", "--api", url, "p1"}, exitUsage, "acm status takes"},
		{[]string{"participants", "show", "--api", url, "p9"}, exitFailure, "participant p9 is unknown"},
		// A flag after the arguments is honoured: --composition is seen,
		// so what is missing is --elements.
		{[]string{"acm", "deploy", "p1", "i1", "--composition", "c1", "--api", url}, exitUsage, "needs --elements"},
	} {
		r := policyctl(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.errOut, tc.frag) {
			t.Errorf("policyctl %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), r.code, r.errOut, tc.code, tc.frag)
		}
	}
}
