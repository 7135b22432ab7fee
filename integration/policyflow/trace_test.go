package policyflow_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// TestTraceRunsFromTheRequestToTheNotification: with tracing on, the
// North API request that publishes a policy and the notification of the
// component it reaches are in one trace, through every stage between.
func TestTraceRunsFromTheRequestToTheNotification(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	p := start(t, func(p *pipeline) { p.tracer = runtime.NewTracer(tp) })
	rec := p.newRecorder()
	id := "traced-" + strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	p.register(id, map[string]any{
		"deployment_id": "dep-" + id, "service_component_name": "scn-" + id,
		"policy_ids": []string{"DCAE.Config_Traced"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	// Pushed, so the whole way is the pipeline's (no PDP between).
	req, _ := http.NewRequest(http.MethodPost, p.api+"/v1/policies", strings.NewReader(
		`{"policyName": "DCAE.Config_Traced.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"k": 1}}`))
	auth.SetBearer(req, p.token)
	resp, err := p.client.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("push: %v %v", err, resp)
	}
	resp.Body.Close()

	// The spans by trace, named without the topic prefix.
	traces := func() map[string]map[string]bool {
		out := map[string]map[string]bool{}
		for _, s := range exp.GetSpans().Snapshots() {
			id := s.SpanContext().TraceID().String()
			if out[id] == nil {
				out[id] = map[string]bool{}
			}
			out[id][strings.TrimPrefix(s.Name(), p.kafka.Prefix)] = true
		}
		return out
	}
	var seen map[string]bool
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("the push's trace reaching the notification", func() error {
		for _, names := range traces() {
			if names["POST /v1/policies"] {
				seen = names
				if names["notify "+id] {
					return nil
				}
			}
		}
		return fmt.Errorf("the trace of POST /v1/policies: %v", keysOf(seen))
	}))
	for _, want := range []string{"pdp.notifications process", "policy.changes process", "policy.matches process",
		"policy.segments process", "component.policies process", "component.applied process"} {
		if !seen[want] {
			t.Errorf("the trace from the push to the notification has no span %q; it has %v", want, keysOf(seen))
		}
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
