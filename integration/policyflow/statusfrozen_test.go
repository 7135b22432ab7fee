package policyflow_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// TestStatusPageShowsConsulDown: a North API whose Consul accepts
// connections and answers nothing (a frozen agent) still serves its status
// page: signed in, a person sees the stages and changes it reads from
// Kafka, and Consul named down with the reason, in headless Chromium.
func TestStatusPageShowsConsulDown(t *testing.T) {
	chromium(t) // skips (or fails, PF_REQUIRE_BROWSER=1) before anything starts
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, pipelinePartitions)
	env := runtime.NewEnv(b.Kafka(prefix), runtime.NewLogger(io.Discard, "error", false))
	caller, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.File{Tokens: []auth.Entry{{Name: "frozen", Role: auth.RoleAdmin, SHA256: auth.Hash(caller)}}}.Set()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- northapi.ServeListener(sctx, env, ln, northapi.Options{Consul: consulkv.Config{Addr: testkit.SilentListener(t)}, Tokens: tokens})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("north api: %v", err)
		}
	})
	api := "http://" + ln.Addr().String()

	ctx := browser(t)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(api+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), caller),
		chromedp.Click(chromedp.CSS("#show")),
	); err != nil {
		t.Fatalf("sign in on the status page: %v", err)
	}
	testkit.Eventually(t, time.Minute, testkit.Named("the status page names Consul down", func() error {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("dependencies").textContent + " | " + document.getElementById("error").textContent`))
		if err != nil {
			return err
		}
		if !strings.Contains(text, "consul is down") || !strings.Contains(text, "did not answer within") {
			return fmt.Errorf("the page shows %q", text)
		}
		return nil
	}))
	if shown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!document.getElementById("status").hidden`)); err != nil || !shown {
		t.Errorf("the status is not shown beside Consul down (%v)", err)
	}
}
