package web

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
)

// fakeView catches up once open is true; until then it fails as a missing
// topic does.
type fakeView struct {
	base string
	open atomic.Bool
}

func (v *fakeView) Base() string { return v.base }

func (v *fakeView) WaitCaughtUp(context.Context) error {
	if !v.open.Load() {
		return errors.New("topic " + v.base + " does not exist")
	}
	return nil
}

// A view is not ready, and an answer that needs it is a 503 saying why,
// until it has caught up; a view that cannot yet be read is retried.
func TestViewsAreReadyOnceCaughtUp(t *testing.T) {
	health := runtime.NewHealth()
	views := NewViews(runtime.Kafka{Prefix: "p."}, health, zerolog.Nop())
	a, b := &fakeView{base: "a"}, &fakeView{base: "b"}
	a.open.Store(true)
	views.Add(a, b)
	if views.Ready() {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- views.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "a caught up", func() bool { return views.Need("a") == nil })
	e := views.Need("a", "b")
	if e == nil || e.Status != http.StatusServiceUnavailable || !strings.Contains(e.Msg, "p.b") {
		t.Fatalf("Need(a, b) while b is not read = %+v; want a 503 naming p.b", e)
	}
	if views.Ready() {
		t.Fatal("ready while b is not read")
	}
	if why := health.Status()["north-api view b"]; !strings.Contains(why, "does not exist") {
		t.Errorf("/readyz says %q of view b; want why it is not read", why)
	}
	b.open.Store(true)
	waitFor(t, "b caught up after retrying", func() bool { return views.Ready() })
	if st := views.States(); st["p.a"] != "" || st["p.b"] != "" {
		t.Errorf("states %v; want both caught up", st)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
