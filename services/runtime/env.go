package runtime

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kzerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/topology"
)

// Env is what every stage of a process shares: connections, the codec,
// logs, metrics and health. Several stages may run in one process (the
// embedded stack); each still gets its own client and consumer group.
type Env struct {
	Kafka   Kafka
	Log     zerolog.Logger
	Codec   *events.Codec
	Metrics *Metrics
	Health  *Health
	// Retry bounds the backoff of transient handler errors.
	Retry Backoff
	// TransactionTimeout bounds how long a dead member's open transaction
	// blocks its partitions' new owner (default 30s).
	TransactionTimeout time.Duration
	// SessionTimeout is how long the group waits for a silent member
	// before giving its partitions to others (0 = the client default, 45s).
	SessionTimeout time.Duration
	// InstanceID, when set, makes the stage a static member of its group
	// (KIP-345) under that name, and its transactional id stable: a
	// member restarted under the same name (after a crash, without
	// leaving) takes its partitions back without a rebalance and fences
	// the transaction its previous run left open, instead of the group
	// waiting SessionTimeout and the partitions TransactionTimeout. A
	// static member does not leave the group when it stops; its
	// partitions move SessionTimeout later unless it comes back.
	InstanceID string
	// PollRecords caps the records handled per poll (and per transaction).
	PollRecords int
	// MaxRecordBytes is the largest record a stage may produce
	// (default topology.MaxRecordBytes, which topics are created with).
	MaxRecordBytes int32
}

// Backoff is a capped exponential backoff.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Next returns the delay after the given number of failed attempts.
func (b Backoff) Next(attempt int) time.Duration {
	d := b.Initial
	if d <= 0 {
		d = 100 * time.Millisecond
	}
	max := b.Max
	if max <= 0 {
		max = 10 * time.Second
	}
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// NewEnv builds an Env with a fresh metrics registry and health tracker.
func NewEnv(k Kafka, log zerolog.Logger) Env {
	codec := events.Default()
	return Env{
		Kafka:              k,
		Log:                log,
		Codec:              codec,
		Metrics:            NewMetrics(),
		Health:             NewHealth(),
		Retry:              Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second},
		TransactionTimeout: 30 * time.Second,
		PollRecords:        5000,
		MaxRecordBytes:     topology.MaxRecordBytes,
	}
}

// NewLogger returns a zerolog logger at the named level ("debug", "info",
// ...), JSON to w, or human-readable when pretty.
func NewLogger(w io.Writer, level string, pretty bool) zerolog.Logger {
	if w == nil {
		w = os.Stderr
	}
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || level == "" {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// KgoLogger returns the kgo.Logger of a client logging to log
// (franz-go's kzerolog). kgo's info level is chatty (every join, every
// assignment, every flush), so it is heard from at warn unless log is at
// debug.
func KgoLogger(log zerolog.Logger) kgo.Logger {
	l := log.With().Str("component", "kgo").Logger()
	if l.GetLevel() == zerolog.InfoLevel {
		l = l.Level(zerolog.WarnLevel)
	}
	return kzerolog.New(&l)
}

// Metrics are the Prometheus collectors of every stage in the process,
// labelled by stage.
type Metrics struct {
	Registry   *prometheus.Registry
	RecordsIn  *prometheus.CounterVec
	RecordsOut *prometheus.CounterVec
	DLQ        *prometheus.CounterVec
	Retries    *prometheus.CounterVec
	Latency    *prometheus.HistogramVec
	Lag        *prometheus.GaugeVec
	Txns       *prometheus.CounterVec
}

// NewMetrics registers the runtime's collectors on a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		RecordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_records_in_total", Help: "Records consumed by a stage.",
		}, []string{"stage", "topic"}),
		RecordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_records_out_total", Help: "Records produced by a stage (committed or not).",
		}, []string{"stage", "topic"}),
		DLQ: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_dlq_total", Help: "Records a stage sent to its dead-letter topic.",
		}, []string{"stage", "topic"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_retries_total", Help: "Transient handler errors retried.",
		}, []string{"stage"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "policyflow_handler_seconds", Help: "Time a stage's handler takes per record.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 4, 10),
		}, []string{"stage"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "policyflow_consumer_lag", Help: "Records between a stage's position and the partition's end, as of its last fetch.",
		}, []string{"stage", "topic", "partition"}),
		Txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_transactions_total", Help: "Transactions ended by a stage, by outcome.",
		}, []string{"stage", "outcome"}),
	}
	r.MustRegister(m.RecordsIn, m.RecordsOut, m.DLQ, m.Retries, m.Latency, m.Lag, m.Txns)
	return m
}
