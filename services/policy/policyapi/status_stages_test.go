package policyapi

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// TestStatusListsEveryExpectedStage: the status lists every stage its
// configuration names, whether or not it answers: a stage whose ops
// listener is gone (killed) and one whose listener answers without it are
// rows marked not ready, by name, and a stage that answers shows its
// committed lag.
func TestStatusListsEveryExpectedStage(t *testing.T) {
	ops := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = w.Write([]byte(`{"status":"ready","detail":{"executor":{"ready":true,"mode":"transactional","partitions":{"component.policies":[0,1,2]}}}}`))
		case "/metrics":
			_, _ = w.Write([]byte("# TYPE policyflow_consumer_lag gauge\n" +
				`policyflow_consumer_lag{stage="executor",topic="policy.segments",partition="0"} 7` + "\n" +
				`policyflow_consumer_lag{stage="executor",topic="policy.segments",partition="1"} 5` + "\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer ops.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close() // the killed stage's listener: nothing answers there
	addr := strings.TrimPrefix(ops.URL, "http://")
	s := &API{Kit: &web.Kit{Log: zerolog.Nop()}, opts: Options{StageOps: []string{
		topology.StageExecutor + "=" + addr,
		topology.StageMatcher + "=" + addr,
		topology.StageConsulWriter + "=" + gone,
	}}}
	rows := map[string]StageStatus{}
	for _, r := range s.stageStatus(context.Background()) {
		rows[r.Name] = r
	}
	if r := rows[topology.StageExecutor]; !r.Ready || r.Lag != 12 {
		t.Errorf("executor: %+v; want ready with lag 12", r)
	}
	if r, ok := rows[topology.StageMatcher]; !ok || r.Ready || !strings.Contains(r.Reason, "not running") {
		t.Errorf("matcher, whose listener answers without it: %+v (listed %v); want listed, not ready, not running", r, ok)
	}
	if r, ok := rows[topology.StageConsulWriter]; !ok || r.Ready || !strings.Contains(r.Reason, "does not answer") {
		t.Errorf("consul-writer, whose listener is gone: %+v (listed %v); want listed, not ready, its listener does not answer", r, ok)
	}
	if len(rows) != 3 {
		t.Errorf("rows %v; want the three stages configured", rows)
	}
}

// TestStatusOfThisProcessListsExpectedStages: in one process (the dev
// stack), a stage expected but not running is a row marked not ready.
func TestStatusOfThisProcessListsExpectedStages(t *testing.T) {
	env := runtime.NewEnv(runtime.Kafka{}, zerolog.Nop())
	env.Health.Expect(topology.StageMatcher)
	s := &API{Kit: &web.Kit{Env: env, Log: zerolog.Nop()}}
	rows := s.stageStatus(context.Background())
	if len(rows) != 1 || rows[0].Name != topology.StageMatcher || rows[0].Ready || rows[0].Reason != runtime.NotRunning {
		t.Errorf("rows %+v; want matcher, not ready, %q", rows, runtime.NotRunning)
	}
}

func TestStageOpsEntryNamesItsStage(t *testing.T) {
	for entry, want := range map[string][2]string{
		"consul-writer:9090":           {"consul-writer", "consul-writer:9090"},
		"http://executor:9090/":        {"executor", "http://executor:9090/"},
		"matcher=127.0.0.1:9191":       {"matcher", "127.0.0.1:9191"},
		"127.0.0.1:9090":               {"", "127.0.0.1:9090"},
		"stack=http://127.0.0.1:9090":  {"stack", "http://127.0.0.1:9090"},
		"not-a-stage.example.com:9090": {"", "not-a-stage.example.com:9090"},
	} {
		if n, a := stageOf(entry); n != want[0] || a != want[1] {
			t.Errorf("stageOf(%q) = %q, %q; want %q, %q", entry, n, a, want[0], want[1])
		}
	}
}
