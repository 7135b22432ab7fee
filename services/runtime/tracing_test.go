package runtime_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
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
	const n = 5
	for i := range n {
		rec := c.Record(t, topology.CatchupRequests, "k"+strconv.Itoa(i), req("r"+strconv.Itoa(i)))
		rec.Context = ctx
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	root.End()
	want := root.SpanContext().TraceID()

	processed := func(topic string) int {
		k := 0
		for _, s := range exp.GetSpans() {
			if s.Name == c.Kafka.Topic(topic)+" process" && s.SpanContext.TraceID() == want {
				k++
			}
		}
		return k
	}
	waitFor(t, "both stages' handling in the request's trace", func() bool {
		return processed(topology.CatchupRequests) >= n && processed("out") >= n
	}, func() string {
		var names []string
		for _, s := range exp.GetSpans() {
			names = append(names, s.Name+" "+s.SpanContext.TraceID().String())
		}
		return "trace " + want.String() + "; spans: " + strings.Join(names, "; ")
	})
}
