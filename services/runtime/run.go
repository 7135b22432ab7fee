package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Error headers of a dead-lettered record.
const (
	HeaderError     = "pf.error"
	HeaderStage     = "pf.stage"
	HeaderTopic     = "pf.topic"
	HeaderPartition = "pf.partition"
	HeaderOffset    = "pf.offset"
	HeaderFailedAt  = "pf.failed_at"
)

// runner holds what one running stage needs.
type runner struct {
	stage Stage
	env   Env
	log   zerolog.Logger
	// chain is the stage's handler inside the runtime's middleware; it
	// is handed a poll's records, or one record at a time.
	chain BatchHandler
	// owned is the current assignment (base topic names), kept by the
	// group callbacks and read by the poll loop after an abort.
	mu    sync.Mutex
	owned map[string][]int32
	// assigned is set once the group has given the member its first
	// assignment (possibly empty).
	assigned bool
	// holds, in an at-least-once stage, keeps the offsets of effects
	// that go on after their handler returned (Input.Hold).
	holds *holds
	// polled is when the poll in hand returned (Input.Polled).
	polled time.Time
	// capped, when above 0, is how many records the next poll of a
	// transactional stage takes, fewer than pollRecords: a poll overran
	// the stage's PollBudget (see txn.go).
	capped int
}

// Run runs the stage until ctx is done: it builds the handler, joins the
// stage's consumer group and processes records in the stage's mode. When
// ctx is done it finishes the record in hand, commits what was done and
// leaves the group.
func (s Stage) Run(ctx context.Context, env Env) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if env.Codec == nil || env.Metrics == nil || env.Health == nil {
		return fmt.Errorf("stage %s: Env is missing its codec, metrics or health: build it with NewEnv", s.Name)
	}
	log := env.Log.With().Str("stage", s.Name).Logger()
	env.Health.NotReady(s.Name, "starting")
	defer env.Health.Forget(s.Name)
	env.Metrics.start(s)
	env.Health.describe(s.Name, s.Mode.String(), s.GroupIn(env.Kafka))

	r := &runner{stage: s, env: env, log: log, owned: map[string][]int32{}}
	// Setup may read state from Kafka: the brokers are waited for first,
	// so that unreachable brokers or refused credentials are told as such
	// rather than as the failure of a state read.
	if err := r.reachBrokers(ctx); err != nil || ctx.Err() != nil {
		return err
	}
	var inner BatchHandler
	var closeFn func()
	var err error
	if s.SetupBatch != nil {
		var b BatchHandler
		b, closeFn, err = s.SetupBatch(ctx, env)
		inner = r.timed(b)
	} else {
		var h Handler
		h, closeFn, err = s.Setup(ctx, env)
		inner = oneByOne(func(ctx context.Context, in Input) ([]Output, error) {
			defer r.observe(time.Now())
			return h(ctx, in)
		})
	}
	if err != nil {
		return fmt.Errorf("stage %s: setup: %w", s.Name, env.Kafka.Explain(err))
	}
	if closeFn != nil {
		defer closeFn()
	}
	// Waiting between retries ends with ctx; handling itself does not
	// (see handle).
	r.chain = Chain(inner,
		DeadLetter(s.Name, env.Kafka, r.deadLettered, s.DeadLetterHeaders...),
		Recover(),
		decoding(env.Codec),
		Retry(env.Retry, ctx.Done(), r.retrying),
		encoding(env.Codec),
	)
	lctx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	go r.watchLag(lctx)
	log.Info().Str("mode", s.Mode.String()).Str("group", s.GroupIn(env.Kafka)).Strs("inputs", s.Inputs).Msg("stage starting")
	if s.Mode == AtLeastOnce {
		err = r.runAtLeastOnce(ctx)
	} else {
		err = r.runTransactional(ctx)
	}
	err = env.Kafka.Explain(err)
	log.Info().Err(err).Msg("stage stopped")
	return err
}

// reachBrokers waits until the brokers answer a client of the stage's
// configuration (see waitBrokers).
func (r *runner) reachBrokers(ctx context.Context) error {
	opts, err := r.env.Kafka.ClientOpts()
	if err != nil {
		return fmt.Errorf("stage %s: %w", r.stage.Name, err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.WithLogger(KgoLogger(r.log)), kgo.ClientID("policyflow-"+r.stage.Name))...)
	if err != nil {
		return fmt.Errorf("stage %s: create client: %w", r.stage.Name, err)
	}
	defer cl.Close()
	return r.waitBrokers(ctx, cl)
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// consumeOpts are the group options both modes share.
func (r *runner) consumeOpts() ([]kgo.Opt, error) {
	opts, err := r.env.Kafka.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", r.stage.Name, err)
	}
	topics := make([]string, len(r.stage.Inputs))
	for i, t := range r.stage.Inputs {
		topics[i] = r.env.Kafka.Topic(t)
	}
	opts = append(opts,
		kgo.WithLogger(KgoLogger(r.log)),
		kgo.ClientID("policyflow-"+r.stage.Name),
		kgo.ConsumerGroup(r.stage.GroupIn(r.env.Kafka)),
		kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(r.onAssigned),
		kgo.OnPartitionsRevoked(r.onRevoked),
		kgo.OnPartitionsLost(r.onLost),
		kgo.ProducerLinger(0),
		// Transaction markers are handed to the poll loop (which drops
		// them before handling) so that the lag reads 0 once they are
		// read: kgo does not return a fetch of markers only, which would
		// leave every partition written by a transactional producer one
		// offset behind forever.
		kgo.KeepControlRecords(),
	)
	if r.env.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(r.env.InstanceID))
	}
	opts = append(opts, r.env.Tracer.ClientOpts()...)
	if r.env.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(r.env.SessionTimeout), kgo.HeartbeatInterval(r.env.SessionTimeout/10))
	}
	if r.env.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(r.env.MaxRecordBytes), kgo.BrokerMaxWriteBytes(2*r.env.MaxRecordBytes))
	}
	opts = append(opts, r.env.fetchOpts()...)
	opts = append(opts, r.env.bufferOpts()...)
	if r.stage.CoPartitioned {
		opts = append(opts, kgo.Balancers(kgo.RangeBalancer()))
	}
	return opts, nil
}

func (r *runner) base(topics map[string][]int32) map[string][]int32 {
	out := make(map[string][]int32, len(topics))
	for t, ps := range topics {
		out[strings.TrimPrefix(t, r.env.Kafka.Prefix)] = ps
	}
	return out
}

// Readiness follows the group: a stage is ready once its member has
// joined and been given its assignment (and restored the state of its
// partitions, see restore). A member given no partition is ready and idle:
// its group has more members than partitions. Until the join completes,
// while a rebalance has taken every partition away and after they were
// lost, it is not ready: it makes no progress, however well it runs.
const (
	notJoined      = "joining the consumer group: no partitions assigned yet"
	rebalancing    = "rebalancing: every partition revoked, waiting for the group's next assignment"
	partitionsLost = "partitions lost (session expired or fenced): rejoining the consumer group"
)

// joining says, once the brokers answer, that the stage waits for its
// group to assign it partitions, unless the group already has (the join
// starts with the client, and may complete before the brokers are
// known to answer).
func (r *runner) joining() { r.notReadyUnlessAssigned(notJoined) }

// notReadyUnlessAssigned marks the stage not ready for why, unless the
// group has assigned it partitions already: from then on the group
// callbacks tell its readiness.
func (r *runner) notReadyUnlessAssigned(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.assigned {
		r.env.Health.NotReady(r.stage.Name, why)
	}
}

func (r *runner) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	r.log.Info().Interface("partitions", assigned).Msg("partitions assigned")
	r.mu.Lock()
	r.assigned = true
	for t, ps := range r.base(assigned) {
		r.owned[t] = append(r.owned[t], ps...)
	}
	r.env.Health.hold(r.stage.Name, r.owned)
	r.mu.Unlock()
	if r.stage.Assigned == nil {
		r.env.Health.Ready(r.stage.Name)
		return
	}
	r.restore(ctx, r.base(assigned), r.stage.Assigned)
}

// restore runs a state-restoring hook until it succeeds or ctx is done.
func (r *runner) restore(ctx context.Context, parts map[string][]int32, hook func(context.Context, Env, map[string][]int32) error) {
	r.env.Health.NotReady(r.stage.Name, "restoring state of assigned partitions")
	for attempt := 0; ; attempt++ {
		err := hook(ctx, r.env, parts)
		if err == nil {
			break
		}
		r.log.Error().Err(err).Msg("restore state of assigned partitions; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.env.Retry.Next(attempt)):
		}
	}
	r.env.Health.Ready(r.stage.Name)
}

// rewound rebuilds state after an aborted transaction (see Stage.Rewound).
func (r *runner) rewound(ctx context.Context) {
	r.mu.Lock()
	parts := make(map[string][]int32, len(r.owned))
	for t, ps := range r.owned {
		parts[t] = append([]int32(nil), ps...)
	}
	r.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	switch {
	case r.stage.Rewound != nil:
		r.restore(ctx, parts, r.stage.Rewound)
	case r.stage.Assigned != nil:
		if r.stage.Revoked != nil {
			r.stage.Revoked(ctx, r.env, parts)
		}
		r.restore(ctx, parts, r.stage.Assigned)
	}
}

// disown drops partitions no longer held; when none is left, the stage
// is not ready for the reason why.
func (r *runner) disown(parts map[string][]int32, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		r.env.Health.hold(r.stage.Name, r.owned)
		if len(r.owned) == 0 {
			r.env.Health.NotReady(r.stage.Name, why)
		}
	}()
	for t, ps := range r.base(parts) {
		keep := r.owned[t][:0]
		for _, p := range r.owned[t] {
			gone := false
			for _, q := range ps {
				gone = gone || p == q
			}
			if !gone {
				keep = append(keep, p)
			}
		}
		if len(keep) == 0 {
			delete(r.owned, t)
		} else {
			r.owned[t] = keep
		}
	}
}

func (r *runner) onRevoked(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
	r.log.Info().Interface("partitions", revoked).Msg("partitions revoked")
	r.disown(revoked, rebalancing)
	if r.holds != nil {
		r.holds.forget(revoked)
	}
	if r.stage.Mode == AtLeastOnce {
		if err := cl.CommitMarkedOffsets(ctx); err != nil {
			r.log.Warn().Err(err).Msg("commit marked offsets on revoke")
		}
	}
	if r.stage.Revoked != nil {
		r.stage.Revoked(ctx, r.env, r.base(revoked))
	}
}

func (r *runner) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	r.log.Warn().Interface("partitions", lost).Msg("partitions lost")
	r.disown(lost, partitionsLost)
	if r.holds != nil {
		r.holds.forget(lost)
	}
	if r.stage.Revoked != nil {
		r.stage.Revoked(ctx, r.env, r.base(lost))
	}
}

// timed measures each call of a batch handler.
func (r *runner) timed(b BatchHandler) BatchHandler {
	return func(ctx context.Context, ins []Input) []Outcome {
		defer r.observe(time.Now())
		return b(ctx, ins)
	}
}

// observe records how long a call of the stage's handler took.
func (r *runner) observe(start time.Time) {
	r.env.Metrics.Latency.WithLabelValues(r.stage.Name).Observe(time.Since(start).Seconds())
}

// inputOf is a fetched record as an Input, its value not decoded yet.
func inputOf(k Kafka, rec *kgo.Record) Input {
	return Input{
		Topic:     strings.TrimPrefix(rec.Topic, k.Prefix),
		Partition: rec.Partition,
		Offset:    rec.Offset,
		Key:       rec.Key,
		Raw:       rec.Value,
		Headers:   rec.Headers,
		Timestamp: rec.Timestamp,
	}
}

// handle runs records (in fetch order, so each partition's in order)
// through the stage's handler chain, retrying transient failures with
// capped backoff until stop is done. It returns the records to produce
// (outputs and dead letters, in input order) and how many of recs, from
// the start, were handled: fewer than len(recs) only when stop ended the
// retries.
func (r *runner) handle(stop context.Context, recs []*kgo.Record) ([]*kgo.Record, int) {
	ins := make([]Input, len(recs))
	for i, rec := range recs {
		ins[i] = inputOf(r.env.Kafka, rec)
		ins[i].Polled = r.polled
	}
	return r.handleInputs(stop, recs, ins)
}

// handleInputs is handle with the records' inputs built already (ins[i]
// is recs[i]'s, its value possibly decoded).
func (r *runner) handleInputs(stop context.Context, recs []*kgo.Record, ins []Input) ([]*kgo.Record, int) {
	spans := make([]context.Context, len(recs))
	for i, rec := range recs {
		r.env.Metrics.RecordsIn.WithLabelValues(r.stage.Name, strings.TrimPrefix(rec.Topic, r.env.Kafka.Prefix)).Inc()
		ins[i].hold = r.holds
		if r.env.Tracer != nil {
			ctx, span := r.env.Tracer.process(rec)
			defer span.End()
			spans[i], ins[i].Trace = ctx, ctx
		}
	}
	// The handler itself is not interrupted by stop: the records in hand
	// are finished (drained); only waiting between retries is.
	outcomes := r.chain(context.WithoutCancel(stop), ins)
	var out []*kgo.Record
	for i, oc := range outcomes {
		if oc.Err != nil {
			return out, i
		}
		for _, o := range oc.Outputs {
			rec := r.record(spans[i], o)
			withOrigin(rec, ins[i])
			out = append(out, rec)
		}
	}
	return out, len(recs)
}

// process handles one record; ok is false when stop ended its retries
// (the record was not processed).
func (r *runner) process(stop context.Context, rec *kgo.Record, in Input) (out []*kgo.Record, ok bool) {
	out, n := r.handleInputs(stop, []*kgo.Record{rec}, []Input{in})
	return out, n == 1
}

// decodeWindow is how many records of a poll a transactional stage
// decodes ahead (predecode) before handling them one by one: enough to
// keep every core busy, few enough that a poll of large records is not
// held twice, raw and decoded, at once.
const decodeWindow = 256

// inputsAhead returns the inputs of recs, their values decoded on every
// core when the stage's handler is one record at a time.
func (r *runner) inputsAhead(ctx context.Context, recs []*kgo.Record) []Input {
	ins := make([]Input, len(recs))
	for i, rec := range recs {
		ins[i] = inputOf(r.env.Kafka, rec)
		ins[i].Polled = r.polled
	}
	predecode(ctx, r.env.Codec, ins)
	return ins
}

// record is an encoded output (see encoding) as the record to produce, in
// the trace context of the input that caused it (ctx, nil when not
// tracing).
func (r *runner) record(ctx context.Context, o Output) *kgo.Record {
	rec := &kgo.Record{Topic: r.env.Kafka.Topic(o.Topic), Key: o.Key, Value: o.Raw, Headers: o.Headers, Context: ctx}
	if o.Explicit {
		Pin(rec, o.Partition)
	}
	return rec
}

// retrying counts and logs a retry (see Retry).
func (r *runner) retrying(in Input, again int, err error, d time.Duration) {
	r.env.Metrics.Retries.WithLabelValues(r.stage.Name).Inc()
	r.env.Metrics.Errors.WithLabelValues(r.stage.Name, "transient").Inc()
	r.log.Warn().Err(err).Str("topic", r.env.Kafka.Topic(in.Topic)).Int32("partition", in.Partition).Int64("offset", in.Offset).
		Int("inputs_again", again).Dur("retry_in", d).Msg("handler failed; retrying from this input")
}

// deadLettered counts and logs a record that cannot be processed (see
// DeadLetter).
func (r *runner) deadLettered(in Input, err error) {
	r.env.Metrics.DLQ.WithLabelValues(r.stage.Name, in.Topic).Inc()
	r.env.Metrics.Errors.WithLabelValues(r.stage.Name, "permanent").Inc()
	r.log.Error().Err(err).Str("topic", r.env.Kafka.Topic(in.Topic)).Int32("partition", in.Partition).Int64("offset", in.Offset).
		Msg("record dead-lettered")
}

type explicitKey struct{}

// Pin places rec on the given partition when produced by a client using
// Partitioner (to copy a record to every partition of a co-partitioned
// topic).
func Pin(rec *kgo.Record, partition int32) {
	ctx := rec.Context
	if ctx == nil {
		ctx = context.Background()
	}
	rec.Partition = partition
	rec.Context = context.WithValue(ctx, explicitKey{}, true)
}

// Partitioner honours Pin and otherwise hashes the key like Kafka's
// default partitioner, so every policyflow writer and other clients agree
// on where a key lives.
func Partitioner() kgo.Partitioner {
	sticky := kgo.StickyKeyPartitioner(nil)
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		tp := sticky.ForTopic(topic)
		return func(rec *kgo.Record, n int) int {
			if rec.Context != nil && rec.Context.Value(explicitKey{}) != nil {
				return int(rec.Partition)
			}
			return tp.Partition(rec, n)
		}
	})
}

// KeyPartition is the partition of a topic of n partitions that a record
// keyed key goes to (Partitioner, unpinned): a stage keyed by one thing
// can tell which of its partitions another key lives on.
func KeyPartition(key string, n int) int32 {
	if n <= 0 {
		return 0
	}
	// kgo.StickyKeyPartitioner hashes a key with Kafka's murmur2; building
	// one per call seeds a random source each time, which cost the
	// executor a quarter of its CPU. The hash is written out here instead.
	return int32((murmur2(key) & 0x7fffffff) % uint32(n))
}

// murmur2 is the hash the Kafka Java client (and franz-go's key
// partitioner) place keyed records with.
func murmur2(key string) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(key))
	b := key
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// dataRecords are the records of a poll without its transaction markers
// (see KeepControlRecords in consumeOpts), in fetch order.
func dataRecords(fetches kgo.Fetches) (data, markers []*kgo.Record) {
	fetches.EachRecord(func(rec *kgo.Record) {
		if rec.Attrs.IsControl() {
			markers = append(markers, rec)
		} else {
			data = append(data, rec)
		}
	})
	return data, markers
}

func (r *runner) logFetchErrors(fetches kgo.Fetches) {
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
			return
		}
		var loss *kgo.ErrDataLoss
		if errors.As(err, &loss) {
			r.env.Metrics.Rewinds.WithLabelValues(r.stage.Name, strings.TrimPrefix(t, r.env.Kafka.Prefix)).Inc()
			r.log.Error().Err(err).Str("topic", t).Int32("partition", p).Msg("the broker lost records this stage had read; reading the partition again from where it now ends")
			return
		}
		r.log.Warn().Err(err).Str("topic", t).Int32("partition", p).Msg("fetch error")
	})
}

func (r *runner) countOut(recs []*kgo.Record) {
	for _, rec := range recs {
		r.env.Metrics.RecordsOut.WithLabelValues(r.stage.Name, strings.TrimPrefix(rec.Topic, r.env.Kafka.Prefix)).Inc()
	}
}

// outCounts counts a transaction's outputs by topic until it commits,
// without holding the records: kgo releases each once the broker has
// acknowledged it, and a transaction's outputs (a change matched against
// 100,000 components) were the largest thing a stage held.
type outCounts map[string]int

func (c outCounts) add(recs []*kgo.Record) {
	for _, rec := range recs {
		c[rec.Topic]++
	}
}

func (r *runner) countOutBy(c outCounts) {
	for topic, n := range c {
		r.env.Metrics.RecordsOut.WithLabelValues(r.stage.Name, strings.TrimPrefix(topic, r.env.Kafka.Prefix)).Add(float64(n))
	}
}

// fetchOpts bound what one fetch of a stage's consumer asks for (see
// FetchMaxBytes).
func (e Env) fetchOpts() []kgo.Opt {
	if e.FetchMaxBytes <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.FetchMaxBytes(e.FetchMaxBytes), kgo.FetchMaxPartitionBytes(e.FetchMaxBytes)}
}

// bufferOpts bound the outputs a stage's producer holds unacknowledged
// (see MaxBufferedOutputs).
func (e Env) bufferOpts() []kgo.Opt {
	if e.MaxBufferedOutputs <= 0 {
		return nil
	}
	return []kgo.Opt{kgo.MaxBufferedRecords(e.MaxBufferedOutputs)}
}
