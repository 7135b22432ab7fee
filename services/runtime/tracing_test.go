package runtime_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// TestTraceCrossesStages: records produced in a traced request are
// handled by a transactional stage and then an at-least-once stage, each
// handling a span of the request's trace.
func TestTraceCrossesStages(t *testing.T) {
	c := stagetest.NewCluster(t, 2, topology.CatchupRequests, "out", "dlq.forward", "dlq.sink")
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := runtime.NewTracer(tp)
	env := stagetest.Env(c.Kafka)
	env.Tracer = tracer
	stagetest.Run(t, forwardStage(), env)
	stagetest.Run(t, sinkStage(), env)
	const n = 5
	want := produceTraced(t, c, tracer, n)

	processed := func(topic string) int {
		k := 0
		for _, s := range exp.GetSpans() {
			if s.Name == c.Kafka.Topic(topic)+" process" && s.SpanContext.TraceID() == want {
				k++
			}
		}
		return k
	}
	testkit.Eventually(t, time.Minute, testkit.Holds("both stages' handling in the request's trace", func() bool {
		return processed(topology.CatchupRequests) >= n && processed("out") >= n
	}, func() string {
		var names []string
		for _, s := range exp.GetSpans() {
			names = append(names, s.Name+" "+s.SpanContext.TraceID().String())
		}
		return "trace " + want.String() + "; spans: " + strings.Join(names, "; ")
	}))
}

// produceTraced produces n catch-up requests within one new trace, with a
// client that traces as a stage's does, and returns the trace's id.
func produceTraced(t *testing.T, c *stagetest.Cluster, tracer *runtime.Tracer, n int) trace.TraceID {
	t.Helper()
	opts, err := c.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, tracer.ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, root := tracer.Start(context.Background(), "PUT /v1/test")
	for i := range n {
		rec := c.Record(t, topology.CatchupRequests, "k"+strconv.Itoa(i), req("r"+strconv.Itoa(i)))
		rec.Context = ctx
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	root.End()
	return root.SpanContext().TraceID()
}

// collector is an OTLP/HTTP trace receiver: like a collector, it answers
// POST /v1/traces with an ExportTraceServiceResponse and any other path
// with 404.
type collector struct {
	mu    sync.Mutex
	spans map[string][]string // trace id (hex) -> span names
	paths []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.paths = append(c.paths, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &req)
	}
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("not an OTLP/HTTP protobuf export (%s): %v", r.Header.Get("Content-Type"), err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				id := hex.EncodeToString(sp.GetTraceId())
				c.spans[id] = append(c.spans[id], sp.GetName())
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) trace(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans[id])
}

// TestTraceReachesAnOTLPCollector: with --otlp-endpoint the base URL of an
// OTLP/HTTP collector, as OpenTelemetry defines it, spans are posted to
// <url>/v1/traces, and the collector gets one trace with both stages'
// handling in it.
func TestTraceReachesAnOTLPCollector(t *testing.T) {
	t.Setenv(runtime.EnvOTLPTracesEndpoint, "")
	col := &collector{spans: map[string][]string{}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	tracer, stop, err := runtime.Tracing{OTLPEndpoint: srv.URL, SampleRatio: 1}.Start(context.Background(), "runtime-test")
	if err != nil || tracer == nil {
		t.Fatalf("start tracing to %s: %v", srv.URL, err)
	}
	t.Cleanup(stop)

	c := stagetest.NewCluster(t, 2, topology.CatchupRequests, "out", "dlq.forward", "dlq.sink")
	env := stagetest.Env(c.Kafka)
	env.Tracer = tracer
	stagetest.Run(t, forwardStage(), env)
	stagetest.Run(t, sinkStage(), env)
	want := produceTraced(t, c, tracer, 3).String()

	testkit.Eventually(t, time.Minute, testkit.Holds("the collector to get both stages' handling in one trace", func() bool {
		names := col.trace(want)
		return slices.Contains(names, c.Kafka.Topic(topology.CatchupRequests)+" process") && slices.Contains(names, c.Kafka.Topic("out")+" process")
	}, func() string {
		col.mu.Lock()
		defer col.mu.Unlock()
		return fmt.Sprintf("trace %s; requests %v; spans by trace %v", want, col.paths, col.spans)
	}))
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, p := range col.paths {
		if p != "POST /v1/traces" {
			t.Fatalf("the exporter sent %s, want only POST /v1/traces", p)
		}
	}
}

func TestTracesURL(t *testing.T) {
	for _, tc := range []struct {
		base, traces string
		want, err    string
	}{
		{base: "", want: ""},
		{base: "http://collector:4318", want: "http://collector:4318/v1/traces"},
		{base: "http://collector:4318/", want: "http://collector:4318/v1/traces"},
		{base: "https://gw.example.com/otlp", want: "https://gw.example.com/otlp/v1/traces"},
		{base: "http://collector:4318", traces: "http://other:4318/custom/traces", want: "http://other:4318/custom/traces"},
		{traces: "http://other:4318/", want: "http://other:4318/"},
		{base: "collector:4318", err: `--otlp-endpoint "collector:4318": want an http:// or https:// URL`},
		{base: "http://c:4318", traces: "grpc://c:4317", err: runtime.EnvOTLPTracesEndpoint},
	} {
		got, err := runtime.TracesURL(tc.base, tc.traces)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("TracesURL(%q, %q) = %q, %v; want an error saying %q", tc.base, tc.traces, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("TracesURL(%q, %q) = %q, %v; want %q", tc.base, tc.traces, got, err, tc.want)
		}
	}
}
