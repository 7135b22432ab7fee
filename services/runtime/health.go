package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health tracks whether each stage of the process is ready: its client is
// up, its group joined and its state restored.
type Health struct {
	mu     sync.Mutex
	stages map[string]string // stage -> "" when ready, else why not
}

// NewHealth returns an empty tracker (ready: nothing to wait for).
func NewHealth() *Health { return &Health{stages: map[string]string{}} }

// NotReady records why a stage is not ready.
func (h *Health) NotReady(stage, why string) {
	h.mu.Lock()
	h.stages[stage] = why
	h.mu.Unlock()
}

// Ready marks a stage ready.
func (h *Health) Ready(stage string) { h.NotReady(stage, "") }

// Forget drops a stage that stopped.
func (h *Health) Forget(stage string) {
	h.mu.Lock()
	delete(h.stages, stage)
	h.mu.Unlock()
}

// Status returns the reasons stages are not ready (empty when all are).
func (h *Health) Status() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	for s, why := range h.stages {
		if why != "" {
			out[s] = why
		}
	}
	return out
}

// Handler is the ops listener's mux: /healthz (the process answers),
// /readyz (every stage is ready; 503 with the reasons otherwise) and
// /metrics. extra adds routes, such as PprofRoutes.
func (env Env) Handler(extra map[string]http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		st := env.Health.Status()
		if len(st) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			names := make([]string, 0, len(st))
			for n := range st {
				names = append(names, n)
			}
			sort.Strings(names)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": "not ready", "stages": st})
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}` + "\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(env.Metrics.Registry, promhttp.HandlerOpts{}))
	for p, h := range extra {
		mux.Handle(p, h)
	}
	return mux
}

// PprofRoutes are the Go profiles under /debug/pprof/ (for `go tool pprof`
// when a stage is slow), for Handler's extra routes. They are served only
// when asked for (--pprof): /debug/pprof/cmdline shows the command line,
// secrets given as flags included.
func PprofRoutes() map[string]http.Handler {
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

// Serve runs the health and metrics server on addr until ctx is done.
func Serve(ctx context.Context, addr string, env Env, extra map[string]http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for health and metrics on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, env, extra)
}

// ServeListener is Serve on an open listener.
func ServeListener(ctx context.Context, ln net.Listener, env Env, extra map[string]http.Handler) error {
	srv := &http.Server{Handler: env.Handler(extra), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
