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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health tracks whether each stage of the process is ready (its client is
// up, its group joined and its state restored) and what it holds: the
// partitions assigned to its group member.
type Health struct {
	mu     sync.Mutex
	stages map[string]string // stage -> "" when ready, else why not
	detail map[string]*StageHealth
	// expected are the stages that should run in this process (Expect):
	// one that does not (never started, or stopped) is not ready.
	expected []string
	// deps are the outside services each stage needs (Depend).
	deps map[string][]*dependency
	// blocked are each stage's own reasons not to be ready (Blocked).
	blocked map[string][]func() string
}

// Dependency is an outside service a stage needs to make progress, such
// as Consul for the stages that write or read it: while Check fails the
// stage is not ready, whatever it holds.
type Dependency struct {
	Name string
	// Check is a cheap call to the service; it is given a context of
	// DependencyTimeout and its answer is kept for DependencyCacheFor.
	Check func(ctx context.Context) error
}

// How long a dependency check may take, and how long its answer stands:
// a probe every few seconds from each of Kubernetes, Prometheus and the
// status page costs the dependency one call every DependencyCacheFor.
const (
	DependencyTimeout  = time.Second
	DependencyCacheFor = 2 * time.Second
)

// dependency is a Dependency with its last answer.
type dependency struct {
	Dependency
	mu  sync.Mutex
	at  time.Time
	err error
}

// check returns the dependency's answer, asking it again when the last
// one is older than DependencyCacheFor.
func (d *dependency) check() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.at.IsZero() && time.Since(d.at) < DependencyCacheFor {
		return d.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), DependencyTimeout)
	defer cancel()
	d.err, d.at = d.Check(ctx), time.Now()
	return d.err
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
	// Expected says the stage should run here (Health.Expect).
	Expected bool `json:"expected,omitempty"`
}

// NewHealth returns an empty tracker (ready: nothing to wait for).
func NewHealth() *Health {
	return &Health{stages: map[string]string{}, detail: map[string]*StageHealth{}, deps: map[string][]*dependency{}, blocked: map[string][]func() string{}}
}

// Expect names the stages that should run in this process: each is
// reported not ready ("not running") whenever it is not, so that a stage
// that stopped or never started shows instead of disappearing.
func (h *Health) Expect(stages ...string) {
	h.mu.Lock()
	h.expected = append(h.expected, stages...)
	h.mu.Unlock()
}

// NotRunning is the reason given for an expected stage that does not run.
const NotRunning = "not running"

// Depend makes a stage's readiness depend on an outside service as well
// (see Dependency); it lasts until the stage stops (Forget).
func (h *Health) Depend(stage string, d Dependency) {
	h.mu.Lock()
	h.deps[stage] = append(h.deps[stage], &dependency{Dependency: d})
	h.mu.Unlock()
}

// Blocked makes a stage's readiness depend on its own progress as well:
// while why returns a reason, the stage is not ready for it, however well
// it holds its partitions and its dependencies answer (records of its
// partitions wait on something outside the group, such as another
// process's lease). why is asked at every probe and scrape: it must be
// cheap and must not block. It lasts until the stage stops (Forget).
func (h *Health) Blocked(stage string, why func() string) {
	h.mu.Lock()
	h.blocked[stage] = append(h.blocked[stage], why)
	h.mu.Unlock()
}

// dependencies returns the stages' dependencies as they are now.
func (h *Health) dependencies() map[string][]*dependency {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]*dependency, len(h.deps))
	for s, ds := range h.deps {
		out[s] = ds
	}
	return out
}

// reasons returns every known stage's reason not to be ready ("" when
// ready): its own state, then its dependencies, then what blocks it, then
// the expected stages that do not run. Dependencies and what blocks are
// asked outside the lock.
func (h *Health) reasons() map[string]string {
	h.mu.Lock()
	out := make(map[string]string, len(h.stages)+len(h.expected))
	for s, why := range h.stages {
		out[s] = why
	}
	for _, s := range h.expected {
		if _, ok := out[s]; !ok {
			out[s] = NotRunning
		}
	}
	blocked := make(map[string][]func() string, len(h.blocked))
	for s, fs := range h.blocked {
		blocked[s] = fs
	}
	h.mu.Unlock()
	for s, ds := range h.dependencies() {
		if why, ok := out[s]; !ok || why != "" {
			continue
		}
		for _, d := range ds {
			if err := d.check(); err != nil {
				out[s] = d.Name + " does not answer: " + err.Error()
				break
			}
		}
	}
	for s, fs := range blocked {
		if why, ok := out[s]; !ok || why != "" {
			continue
		}
		for _, f := range fs {
			if why := f(); why != "" {
				out[s] = why
				break
			}
		}
	}
	return out
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
	delete(h.deps, stage)
	delete(h.blocked, stage)
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
	out := map[string]string{}
	for s, why := range h.reasons() {
		if why != "" {
			out[s] = why
		}
	}
	return out
}

// Detail returns what /readyz says of every stage known or expected:
// ready or why not, and the partitions it holds. Components tracked by
// NotReady and Ready only (the North API's views) have no partitions.
func (h *Health) Detail() map[string]StageHealth {
	reasons := h.reasons()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]StageHealth, len(reasons))
	for s, why := range reasons {
		d := StageHealth{Ready: why == "", Reason: why, Expected: slices.Contains(h.expected, s)}
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

// Readiness as metrics, read at each scrape: policyflow_stage_ready (1 when
// the stage is ready, 0 when not, expected stages that do not run
// included) and policyflow_dependency_up (1 when an outside service a stage
// depends on answers, else 0), for alerts on a stage or a dependency down.
var (
	stageReadyDesc = prometheus.NewDesc("policyflow_stage_ready",
		"1 while a stage is ready (joined its group, holds its partitions or is idle by design, its dependencies answer), else 0; a stage expected in the process that does not run reads 0.",
		[]string{"stage"}, nil)
	dependencyUpDesc = prometheus.NewDesc("policyflow_dependency_up",
		"1 while an outside service a stage needs (Consul) answers a cheap call within a second, else 0; answers are kept for two seconds.",
		[]string{"stage", "dependency"}, nil)
)

// healthCollector exports a Health as metrics.
type healthCollector struct{ h *Health }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stageReadyDesc
	ch <- dependencyUpDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	reasons := c.h.reasons()
	c.h.mu.Lock()
	stages := map[string]bool{}
	for s := range reasons {
		// Stages only: the North API's views are tracked here too.
		stages[s] = c.h.detail[s] != nil || slices.Contains(c.h.expected, s)
	}
	c.h.mu.Unlock()
	for s, why := range reasons {
		if !stages[s] {
			continue
		}
		ch <- prometheus.MustNewConstMetric(stageReadyDesc, prometheus.GaugeValue, boolValue(why == ""), s)
	}
	for s, ds := range c.h.dependencies() {
		for _, d := range ds {
			ch <- prometheus.MustNewConstMetric(dependencyUpDesc, prometheus.GaugeValue, boolValue(d.check() == nil), s, d.Name)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
