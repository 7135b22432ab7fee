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
	// before giving its partitions to others (0 = the client default, 45s;
	// the binaries' flag defaults to DefaultSessionTimeout).
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
	// LagInterval is how often each stage reads its group's committed
	// lag (Metrics.Lag); default DefaultLagInterval.
	LagInterval time.Duration
	// PollRecords caps the records handled per poll (and per transaction).
	PollRecords int
	// FetchMaxBytes bounds the (compressed) bytes one fetch of the
	// stage's consumer asks for, in all and per partition (kgo's
	// FetchMaxBytes and FetchMaxPartitionBytes); 0 leaves franz-go's
	// defaults (50 MiB and 1 MiB a partition). A fetch is decompressed
	// whole and kept until its records are handled, so this, with the
	// compression ratio, sets the stage's memory for records in hand. A
	// batch larger than it is still fetched, alone (KIP-74). Default
	// DefaultFetchMaxBytes.
	FetchMaxBytes int32
	// MaxBufferedOutputs bounds the output records a stage's producer
	// holds before the broker acknowledged them (kgo's
	// MaxBufferedRecords): producing waits beyond it. The outputs of a
	// transaction were encoded, batched and compressed ahead of the
	// broker, three copies of them at once; 0 leaves franz-go's 50,000.
	// Default DefaultMaxBufferedOutputs.
	MaxBufferedOutputs int
	// MaxRecordBytes is the largest record a stage may produce
	// (default topology.MaxRecordBytes, which topics are created with).
	MaxRecordBytes int32
	// Tracer, when set, traces records across stages (see Tracer); nil:
	// tracing is off.
	Tracer *Tracer
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

// DefaultFetchMaxBytes is Env.FetchMaxBytes unless set: 256 KiB of
// compressed batches a fetch. Policy bodies compress well (padded JSON
// twenty-fold and more), so franz-go's 1 MiB a partition held tens of MiB
// of decompressed batches in a stage of a few partitions.
const DefaultFetchMaxBytes = 256 << 10

// DefaultMaxBufferedOutputs is Env.MaxBufferedOutputs unless set. The
// executor's outputs (a component's policies, bodies included, about
// 5 KiB) held ahead of the broker were 60 MiB of its heap at 50,000.
const DefaultMaxBufferedOutputs = 1000

// NewEnv builds an Env with a fresh metrics registry and health tracker.
func NewEnv(k Kafka, log zerolog.Logger) Env {
	codec := events.Default()
	m, h := NewMetrics(), NewHealth()
	m.Registry.MustRegister(healthCollector{h})
	return Env{
		Kafka:              k,
		Log:                log,
		Codec:              codec,
		Metrics:            m,
		Health:             h,
		Retry:              Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second},
		TransactionTimeout: 30 * time.Second,
		PollRecords:        5000,
		FetchMaxBytes:      DefaultFetchMaxBytes,
		MaxBufferedOutputs: DefaultMaxBufferedOutputs,
		LagInterval:        DefaultLagInterval,
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
// labelled by stage. Every series a stage can move is created at 0 when
// the stage starts (see Metrics.start), so a rate or an alert has a series
// to read before the first event.
type Metrics struct {
	Registry   *prometheus.Registry
	RecordsIn  *prometheus.CounterVec
	RecordsOut *prometheus.CounterVec
	Errors     *prometheus.CounterVec
	DLQ        *prometheus.CounterVec
	Retries    *prometheus.CounterVec
	Latency    *prometheus.HistogramVec
	Lag        *prometheus.GaugeVec
	Txns       *prometheus.CounterVec
	// Rewinds counts the times the broker told a stage's consumer that
	// records it had read are gone (franz-go's ErrDataLoss: an unclean
	// leader election, a broker that lost unsynced writes), and the
	// consumer went back to where the log now ends or to its reset
	// offset, reading again what it had handled. A leader move alone
	// never does this on a healthy cluster.
	Rewinds *prometheus.CounterVec
	// Notifications and NotifySeconds count and time the notifications
	// of components (script or webhook) by outcome: ok, failed,
	// timed_out.
	Notifications *prometheus.CounterVec
	NotifySeconds *prometheus.HistogramVec
	// ConsulWrites counts a stage's writes to Consul by outcome (ok,
	// conflict: a check-and-set lost; error); ConsulSeconds times each
	// request to Consul by operation (read, write).
	ConsulWrites  *prometheus.CounterVec
	ConsulSeconds *prometheus.HistogramVec
	// EndToEnd is the time from a record entering the pipeline (a PDP
	// notification or pushed policy, a component registration, a
	// catch-up request: its origin, see Origin) to a milestone reached
	// for it: consul_written, notified.
	EndToEnd *prometheus.HistogramVec
}

// Notification outcomes (the outcome label of Notifications).
const (
	OutcomeOK       = "ok"
	OutcomeFailed   = "failed"
	OutcomeTimedOut = "timed_out"
	// OutcomeConflict is a Consul write whose check-and-set lost.
	OutcomeConflict = "conflict"
	OutcomeError    = "error"
)

// End-to-end milestones (the milestone label of EndToEnd).
const (
	MilestoneConsulWritten = "consul_written"
	MilestoneNotified      = "notified"
)

// latencyBuckets are 50µs to ~13s, by 4.
var latencyBuckets = prometheus.ExponentialBuckets(0.00005, 4, 10)

// endToEndBuckets are 5ms to ~40min, by 2: a change crosses the whole
// pipeline in well under a second when it is idle, and catch-up of a big
// estate may take minutes.
var endToEndBuckets = prometheus.ExponentialBuckets(0.005, 2, 19)

// NewMetrics registers the runtime's collectors on a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: r,
		RecordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_records_in_total", Help: "Records consumed by a stage (transaction markers not counted).",
		}, []string{"stage", "topic"}),
		RecordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_records_out_total", Help: "Records produced by a stage (outputs and dead letters; transactional stages count committed ones).",
		}, []string{"stage", "topic"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_handler_errors_total", Help: "Records a stage's handler failed on: transient (retried) or permanent (dead-lettered, with undecodable records).",
		}, []string{"stage", "kind"}),
		DLQ: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_dlq_total", Help: "Records a stage sent to its dead-letter topic, by the topic they were read from.",
		}, []string{"stage", "topic"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_retries_total", Help: "Transient handler errors retried.",
		}, []string{"stage"}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "policyflow_handler_seconds", Help: "Time a stage's handler takes per record (per poll for batch handlers).",
			Buckets: latencyBuckets,
		}, []string{"stage"}),
		Lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "policyflow_consumer_lag", Help: "Records of a stage's input partition after its consumer group's committed offset (the partition's end offset minus the commit), read every few seconds by each member for the whole group: what is fetched but not yet done counts, and so do the partitions of a member that died. Members of one stage report the same numbers; aggregate them with max by partition.",
		}, []string{"stage", "topic", "partition"}),
		Txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_transactions_total", Help: "Transactions ended by a stage, by outcome.",
		}, []string{"stage", "outcome"}),
		Rewinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_consumer_rewinds_total", Help: "Times a stage's consumer was moved back on an input partition because the broker reported records it had read as lost (data loss after a leader change): what follows is read again.",
		}, []string{"stage", "topic"}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_notifications_total", Help: "Notifications of components by script or webhook, by outcome: ok, failed, timed_out.",
		}, []string{"stage", "kind", "outcome"}),
		NotifySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "policyflow_notification_seconds", Help: "Time a notification (script run or webhook call) took, by outcome.",
			Buckets: latencyBuckets,
		}, []string{"stage", "outcome"}),
		ConsulWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_consul_writes_total", Help: "Writes of a component's folder or claim to Consul, by outcome: ok, conflict (check-and-set lost, retried), error.",
		}, []string{"stage", "outcome"}),
		ConsulSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "policyflow_consul_request_seconds", Help: "Time of one request to Consul, by operation: read, write.",
			Buckets: latencyBuckets,
		}, []string{"stage", "op"}),
		EndToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "policyflow_end_to_end_seconds", Help: "Time from a record entering the pipeline (origin: the topic it entered by) to a milestone: consul_written, notified.",
			Buckets: endToEndBuckets,
		}, []string{"milestone", "origin"}),
	}
	r.MustRegister(m.RecordsIn, m.RecordsOut, m.Errors, m.DLQ, m.Retries, m.Latency, m.Lag, m.Txns, m.Rewinds,
		m.Notifications, m.NotifySeconds, m.ConsulWrites, m.ConsulSeconds, m.EndToEnd)
	return m
}

// start creates at 0 every series of a starting stage.
func (m *Metrics) start(s Stage) {
	for _, t := range s.Inputs {
		m.RecordsIn.WithLabelValues(s.Name, t)
		m.DLQ.WithLabelValues(s.Name, t)
		m.Rewinds.WithLabelValues(s.Name, t)
	}
	for _, t := range append([]string{topology.DLQ(s.Name)}, s.Outputs...) {
		m.RecordsOut.WithLabelValues(s.Name, t)
	}
	m.Errors.WithLabelValues(s.Name, "transient")
	m.Errors.WithLabelValues(s.Name, "permanent")
	m.Retries.WithLabelValues(s.Name)
	m.Latency.WithLabelValues(s.Name)
	if s.Mode == Transactional {
		for _, o := range []string{"committed", "aborted", "error"} {
			m.Txns.WithLabelValues(s.Name, o)
		}
	}
}

// Notifier creates at 0 the notification series of a stage that notifies
// components, for each kind of target (script, webhook).
func (m *Metrics) Notifier(stage string, kinds ...string) {
	for _, o := range []string{OutcomeOK, OutcomeFailed, OutcomeTimedOut} {
		for _, k := range kinds {
			m.Notifications.WithLabelValues(stage, k, o)
		}
		m.NotifySeconds.WithLabelValues(stage, o)
	}
	for _, o := range Origins {
		m.EndToEnd.WithLabelValues(MilestoneNotified, o)
	}
}

// ConsulWriter creates at 0 the Consul series of a stage that writes to
// Consul.
func (m *Metrics) ConsulWriter(stage string) {
	for _, o := range []string{OutcomeOK, OutcomeConflict, OutcomeError} {
		m.ConsulWrites.WithLabelValues(stage, o)
	}
	m.ConsulSeconds.WithLabelValues(stage, "read")
	m.ConsulSeconds.WithLabelValues(stage, "write")
}

// ObserveConsul records the time of one request to Consul since start.
func (m *Metrics) ObserveConsul(stage, op string, start time.Time) {
	m.ConsulSeconds.WithLabelValues(stage, op).Observe(time.Since(start).Seconds())
}

// Reached records that the record in has reached a milestone now, timed
// from its origin (see Origin); a record without one is not observed.
func (m *Metrics) Reached(milestone string, headers []kgo.RecordHeader) {
	if o, ok := Origin(headers); ok {
		m.ReachedAt(milestone, o)
	}
}
