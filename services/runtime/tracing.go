package runtime

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer traces records across stages with OpenTelemetry: every record a
// policyflow client produces carries its trace context in W3C
// traceparent headers (franz-go's kotel plugin), a stage's handling of a
// record is a span in the trace of the record that caused it, and the
// records it produces continue that trace. So one trace runs from a North
// API request through every stage to the component's notification.
// Tracing is off (Env.Tracer nil) unless an OTLP endpoint is configured.
type Tracer struct {
	provider trace.TracerProvider
	kotel    *kotel.Tracer
	tracer   trace.Tracer
}

// NewTracer traces with the spans of provider.
func NewTracer(provider trace.TracerProvider) *Tracer {
	kt := kotel.NewTracer(kotel.TracerProvider(provider), kotel.TracerPropagator(propagation.TraceContext{}))
	return &Tracer{provider: provider, kotel: kt, tracer: provider.Tracer("github.com/policyflow/policyflow")}
}

// ClientOpts are the options that make a Kafka client trace what it
// produces and fetches (none when t is nil).
func (t *Tracer) ClientOpts() []kgo.Opt {
	if t == nil {
		return nil
	}
	return []kgo.Opt{kgo.WithHooks(kotel.NewKotel(kotel.WithTracer(t.kotel)).Hooks()...)}
}

// process starts the span of a stage handling a fetched record, a child
// of the record's trace; the records it causes are produced in its
// context.
func (t *Tracer) process(rec *kgo.Record) (context.Context, trace.Span) {
	if t == nil {
		return rec.Context, trace.SpanFromContext(context.Background())
	}
	return t.kotel.WithProcessSpan(rec)
}

// Start starts a span (of a stage's effect, such as a notification) in
// ctx; with tracing off it is a span that records nothing.
func (t *Tracer) Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// Tracing is the configuration of trace export.
type Tracing struct {
	// OTLPEndpoint is the base URL of an OTLP/HTTP collector, e.g.
	// http://otel-collector:4318, as OTEL_EXPORTER_OTLP_ENDPOINT is:
	// spans go to <OTLPEndpoint>/v1/traces (see TracesURL). Empty turns
	// tracing off unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
	OTLPEndpoint string
	// SampleRatio is the share of new traces recorded (0 to 1).
	SampleRatio float64
}

// OpenTelemetry's environment variables for the OTLP exporter's endpoint
// (the OTLP exporter specification).
const (
	// EnvOTLPEndpoint is the base URL of every signal; /v1/traces is
	// appended for traces.
	EnvOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// EnvOTLPTracesEndpoint is the full URL of traces, used as it is.
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// RegisterFlags adds the tracing flags to fs.
func (c *Tracing) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", EnvOr("PF_OTLP_ENDPOINT", EnvOr(EnvOTLPEndpoint, "")),
		"base URL of an OTLP/HTTP collector to export traces to, e.g. http://otel-collector:4318: spans go to <url>/v1/traces; "+
			EnvOTLPTracesEndpoint+", when set, is the full URL of traces instead; empty and that unset: no tracing (env PF_OTLP_ENDPOINT, then "+EnvOTLPEndpoint+")")
	c.SampleRatio = 1
	fs.Float64Var(&c.SampleRatio, "trace-sample-ratio", c.SampleRatio, "share of new traces recorded when tracing, 0 to 1 (a trace started upstream keeps its decision)")
}

// TracesURL is where an OTLP/HTTP exporter sends spans, as the
// OpenTelemetry specification says: the traces endpoint, when given, as
// it is; otherwise the base endpoint with v1/traces appended to its path
// (http://collector:4318 and http://collector:4318/ give
// http://collector:4318/v1/traces; http://gw/otlp gives
// http://gw/otlp/v1/traces). "" when both are empty: no tracing.
func TracesURL(base, traces string) (string, error) {
	what, u := EnvOTLPTracesEndpoint, traces
	if u == "" {
		if base == "" {
			return "", nil
		}
		what, u = "--otlp-endpoint", base
	}
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		return "", fmt.Errorf("%s %q: want an http:// or https:// URL with a host, e.g. http://otel-collector:4318", what, u)
	}
	if traces != "" {
		return traces, nil
	}
	parsed.Path = strings.TrimSuffix(parsed.Path, "/") + "/v1/traces"
	parsed.RawPath = ""
	return parsed.String(), nil
}

// Start builds the Tracer of the configuration for the named service, or
// nil when tracing is off; stop flushes the spans still buffered.
func (c Tracing) Start(ctx context.Context, service string) (tracer *Tracer, stop func(), err error) {
	endpoint, err := TracesURL(c.OTLPEndpoint, os.Getenv(EnvOTLPTracesEndpoint))
	if err != nil || endpoint == "" {
		return nil, func() {}, err
	}
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return nil, nil, fmt.Errorf("--trace-sample-ratio %g: want 0 to 1", c.SampleRatio)
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP exporter to %s: %w", endpoint, err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
	)
	return NewTracer(tp), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}
