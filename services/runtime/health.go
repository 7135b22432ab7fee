package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health tracks whether each stage of the process is ready (its client is
// up, its group joined and its state restored) and what it holds: the
// partitions assigned to its group member.
type Health struct {
	mu     sync.Mutex
	stages map[string]string // stage -> "" when ready, else why not
	detail map[string]*StageHealth
}

// StageHealth is what /readyz says of one stage.
type StageHealth struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	Mode   string `json:"mode,omitempty"`
	Group  string `json:"group,omitempty"`
	// Partitions are the partitions this member holds, by base topic.
	Partitions map[string][]int32 `json:"partitions,omitempty"`
	// Idle says the member holds no partition while ready: the group
	// has more members than partitions, so it stands by by design.
	Idle bool `json:"idle,omitempty"`
}

// NewHealth returns an empty tracker (ready: nothing to wait for).
func NewHealth() *Health {
	return &Health{stages: map[string]string{}, detail: map[string]*StageHealth{}}
}

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
	delete(h.detail, stage)
	h.mu.Unlock()
}

// describe records a stage's mode and consumer group.
func (h *Health) describe(stage, mode, group string) {
	h.mu.Lock()
	h.detail[stage] = &StageHealth{Mode: mode, Group: group, Partitions: map[string][]int32{}}
	h.mu.Unlock()
}

// hold records the partitions a stage's member holds now.
func (h *Health) hold(stage string, owned map[string][]int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.detail[stage]
	if d == nil {
		d = &StageHealth{}
		h.detail[stage] = d
	}
	d.Partitions = make(map[string][]int32, len(owned))
	for t, ps := range owned {
		c := append([]int32(nil), ps...)
		slices.Sort(c)
		d.Partitions[t] = c
	}
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

// Detail returns what /readyz says of every stage known: ready or why
// not, and the partitions it holds. Components tracked by NotReady and
// Ready only (the North API's views) have no partitions.
func (h *Health) Detail() map[string]StageHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]StageHealth, len(h.stages))
	for s, why := range h.stages {
		d := StageHealth{Ready: why == "", Reason: why}
		if dd := h.detail[s]; dd != nil {
			d.Mode, d.Group = dd.Mode, dd.Group
			d.Partitions = map[string][]int32{}
			for t, ps := range dd.Partitions {
				d.Partitions[t] = append([]int32(nil), ps...)
			}
			d.Idle = d.Ready && len(d.Partitions) == 0
		}
		out[s] = d
	}
	return out
}

// Handler is the ops listener's mux: /healthz (the process answers),
// /readyz (every stage is ready, 503 with the reasons otherwise; with each
// stage's detail: ready, mode, group, partitions held) and
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
		body := map[string]any{"status": "ready", "detail": env.Health.Detail()}
		if len(st) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			body["status"], body["stages"] = "not ready", st
		}
		_ = json.NewEncoder(w).Encode(body)
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
