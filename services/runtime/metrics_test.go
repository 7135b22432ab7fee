package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// series are the values of one metric family by their labels, written
// name=value,... in label order.
func series(t *testing.T, m *runtime.Metrics, name string) map[string]float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mm := range f.GetMetric() {
			var ls []string
			for _, l := range mm.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[strings.Join(ls, ",")] = value(mm)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetHistogram() != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// forwardStage copies catch-up requests from an origin topic to "out" in
// transactions; sinkStage reads "out" at least once.
func forwardStage() runtime.Stage {
	return runtime.Stage{
		Name:    "forward",
		Mode:    runtime.Transactional,
		Inputs:  []string{topology.CatchupRequests},
		Outputs: []string{"out"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(_ context.Context, in runtime.Input) ([]runtime.Output, error) {
				return []runtime.Output{{Topic: "out", Key: in.Key, Value: in.Value}}, nil
			}, nil, nil
		},
	}
}

func sinkStage() runtime.Stage {
	return runtime.Stage{
		Name:   "sink",
		Mode:   runtime.AtLeastOnce,
		Inputs: []string{"out"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(context.Context, runtime.Input) ([]runtime.Output, error) { return nil, nil }, nil, nil
		},
	}
}

// TestIdleLagReadsZero runs a transactional stage whose input was written
// in transactions and an at-least-once stage reading its output: once
// every record is handled, every lag series of both reads 0 (transaction
// markers are not lag), and every per-stage series existed at 0 before
// the first record.
func TestIdleLagReadsZero(t *testing.T) {
	c := stagetest.NewCluster(t, 3, topology.CatchupRequests, "out", "dlq.forward", "dlq.sink")
	env := stagetest.Env(c.Kafka)
	stagetest.Run(t, forwardStage(), env)
	stagetest.Run(t, sinkStage(), env)

	testkit.Eventually(t, time.Minute, testkit.Holds("both stages ready", func() bool { return len(env.Health.Status()) == 0 && len(env.Health.Detail()) == 2 }))
	for name, want := range map[string][]string{
		"policyflow_records_in_total":       {"stage=forward,topic=" + topology.CatchupRequests, "stage=sink,topic=out"},
		"policyflow_records_out_total":      {"stage=forward,topic=out", "stage=forward,topic=dlq.forward", "stage=sink,topic=dlq.sink"},
		"policyflow_dlq_total":              {"stage=forward,topic=" + topology.CatchupRequests, "stage=sink,topic=out"},
		"policyflow_handler_errors_total":   {"kind=permanent,stage=forward", "kind=transient,stage=sink"},
		"policyflow_retries_total":          {"stage=forward", "stage=sink"},
		"policyflow_handler_seconds":        {"stage=forward", "stage=sink"},
		"policyflow_transactions_total":     {"outcome=committed,stage=forward", "outcome=aborted,stage=forward"},
		"policyflow_consumer_rewinds_total": {"stage=forward,topic=" + topology.CatchupRequests, "stage=sink,topic=out"},
	} {
		got := series(t, env.Metrics, name)
		for _, w := range want {
			if v, ok := got[w]; !ok || v != 0 {
				t.Errorf("before any record, %s{%s} = %v (present %v); want present at 0; have %v", name, w, v, ok, got)
			}
		}
	}

	const n = 40
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var recs []*kgo.Record
	for i := range n {
		rec := c.Record(t, topology.CatchupRequests, "k"+strconv.Itoa(i), req("r"+strconv.Itoa(i)))
		rec.Timestamp = at
		recs = append(recs, rec)
	}
	// In three transactions, so every input partition has markers
	// between and after its records.
	c.ProduceCommitted(t, recs[:10]...)
	c.ProduceCommitted(t, recs[10:25]...)
	c.ProduceCommitted(t, recs[25:]...)

	out := c.Read(t, "out", n, 60*time.Second)
	for _, r := range out {
		if got := stagetest.Header(r, runtime.HeaderOriginTopic); got != topology.CatchupRequests {
			t.Fatalf("output %s has origin topic %q, want %s", r.Key, got, topology.CatchupRequests)
		}
		o, ok := runtime.Origin(r.Headers)
		if !ok || !o.At.Equal(at) {
			t.Fatalf("output %s has origin time %v (%v), want the input's timestamp %v", r.Key, o.At, ok, at)
		}
	}
	in := func(stage, topic string) float64 {
		return series(t, env.Metrics, "policyflow_records_in_total")["stage="+stage+",topic="+topic]
	}
	var lags map[string]float64
	testkit.Eventually(t, time.Minute, testkit.Holds("every lag series at 0 once every record is handled", func() bool {
		if in("forward", topology.CatchupRequests) != n || in("sink", "out") != n {
			return false
		}
		lags = series(t, env.Metrics, "policyflow_consumer_lag")
		held := map[string]bool{}
		for k, v := range lags {
			if v != 0 {
				return false
			}
			held[strings.Split(k, ",")[1]] = true // partition=,stage=,topic=
		}
		return held["stage=forward"] && held["stage=sink"]
	}, func() string {
		return fmt.Sprintf("records in %v, lag %v", series(t, env.Metrics, "policyflow_records_in_total"), lags)
	}))

	// /readyz says what each stage holds.
	srv := httptest.NewServer(env.Handler(nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct {
		Status string                         `json:"status"`
		Detail map[string]runtime.StageHealth `json:"detail"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.Status != "ready" {
		t.Fatalf("/readyz: %d %s (%v)", resp.StatusCode, raw, err)
	}
	fw, sink := body.Detail["forward"], body.Detail["sink"]
	if !fw.Ready || fw.Mode != "transactional" || len(fw.Partitions[topology.CatchupRequests]) != 3 || fw.Idle {
		t.Errorf("/readyz detail of forward: %+v; want ready, transactional, holding the 3 partitions of %s", fw, topology.CatchupRequests)
	}
	if !sink.Ready || sink.Mode != "at-least-once" || len(sink.Partitions["out"]) != 3 {
		t.Errorf("/readyz detail of sink: %+v; want ready, at-least-once, holding the 3 partitions of out", sink)
	}
}
