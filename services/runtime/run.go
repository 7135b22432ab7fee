package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
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

// DLQTopic is the base name of a stage's dead-letter topic.
func DLQTopic(stage string) string { return "dlq." + stage }

// runner holds what one running stage needs.
type runner struct {
	stage   Stage
	env     Env
	log     zerolog.Logger
	handler Handler
	batch   BatchHandler // set instead of handler by Stage.SetupBatch
	// owned is the current assignment (base topic names), kept by the
	// group callbacks and read by the poll loop after an abort.
	mu    sync.Mutex
	owned map[string][]int32
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

	r := &runner{stage: s, env: env, log: log, owned: map[string][]int32{}}
	var closeFn func()
	var err error
	if s.SetupBatch != nil {
		r.batch, closeFn, err = s.SetupBatch(ctx, env)
	} else {
		r.handler, closeFn, err = s.Setup(ctx, env)
	}
	if err != nil {
		return fmt.Errorf("stage %s: setup: %w", s.Name, err)
	}
	if closeFn != nil {
		defer closeFn()
	}
	log.Info().Str("mode", s.Mode.String()).Str("group", s.GroupIn(env.Kafka)).Strs("inputs", s.Inputs).Msg("stage starting")
	if s.Mode == AtLeastOnce {
		err = r.runAtLeastOnce(ctx)
	} else {
		err = r.runTransactional(ctx)
	}
	log.Info().Err(err).Msg("stage stopped")
	return err
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
	)
	if r.env.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(r.env.SessionTimeout), kgo.HeartbeatInterval(r.env.SessionTimeout/10))
	}
	if r.env.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(r.env.MaxRecordBytes), kgo.BrokerMaxWriteBytes(2*r.env.MaxRecordBytes))
	}
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

func (r *runner) onAssigned(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
	r.log.Info().Interface("partitions", assigned).Msg("partitions assigned")
	r.mu.Lock()
	for t, ps := range r.base(assigned) {
		r.owned[t] = append(r.owned[t], ps...)
	}
	r.mu.Unlock()
	if r.stage.Assigned == nil {
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

func (r *runner) disown(parts map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
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
	r.disown(revoked)
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
	r.disown(lost)
	if r.stage.Revoked != nil {
		r.stage.Revoked(ctx, r.env, r.base(lost))
	}
}

// decode turns a fetched record into an Input.
func (r *runner) decode(ctx context.Context, rec *kgo.Record) (Input, error) {
	in := Input{
		Topic:     strings.TrimPrefix(rec.Topic, r.env.Kafka.Prefix),
		Partition: rec.Partition,
		Offset:    rec.Offset,
		Key:       rec.Key,
		Raw:       rec.Value,
		Headers:   rec.Headers,
		Timestamp: rec.Timestamp,
	}
	if rec.Value == nil {
		return in, nil
	}
	v, err := r.env.Codec.Decode(ctx, rec.Value)
	if err != nil {
		return in, Permanent(fmt.Errorf("decode record: %w", err))
	}
	in.Value = v
	return in, nil
}

// process decodes and handles one record, retrying transient errors with
// capped backoff until stop is done. It returns the records to produce:
// the handler's outputs, or the dead-letter record. ok is false when stop
// ended the retries (the record was not processed).
func (r *runner) process(stop context.Context, rec *kgo.Record) (out []*kgo.Record, ok bool) {
	r.env.Metrics.RecordsIn.WithLabelValues(r.stage.Name, strings.TrimPrefix(rec.Topic, r.env.Kafka.Prefix)).Inc()
	// The handler itself is not interrupted by stop: the record in hand is
	// finished (drained); only waiting between retries is.
	hctx := context.WithoutCancel(stop)
	in, err := r.decode(hctx, rec)
	for attempt := 0; err == nil; attempt++ {
		start := time.Now()
		var outs []Output
		outs, err = r.handler(hctx, in)
		r.env.Metrics.Latency.WithLabelValues(r.stage.Name).Observe(time.Since(start).Seconds())
		if err == nil {
			recs, eerr := r.encode(outs)
			if eerr == nil {
				return recs, true
			}
			err = Permanent(eerr)
		}
		if IsPermanent(err) {
			break
		}
		r.env.Metrics.Retries.WithLabelValues(r.stage.Name).Inc()
		d := r.env.Retry.Next(attempt)
		r.log.Warn().Err(err).Str("topic", rec.Topic).Int32("partition", rec.Partition).Int64("offset", rec.Offset).
			Dur("retry_in", d).Msg("handler failed; retrying")
		select {
		case <-stop.Done():
			return nil, false
		case <-time.After(d):
		}
		err = nil
	}
	return []*kgo.Record{r.deadLetter(rec, err)}, true
}

func (r *runner) encode(outs []Output) ([]*kgo.Record, error) {
	recs := make([]*kgo.Record, 0, len(outs))
	for _, o := range outs {
		rec := &kgo.Record{Topic: r.env.Kafka.Topic(o.Topic), Key: o.Key, Headers: o.Headers}
		if o.Explicit {
			Pin(rec, o.Partition)
		}
		switch {
		case o.Value != nil:
			b, err := r.env.Codec.Encode(o.Value)
			if err != nil {
				return nil, fmt.Errorf("output to %s: %w", o.Topic, err)
			}
			rec.Value = b
		case o.Raw != nil:
			rec.Value = o.Raw
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// deadLetter counts and logs a record that cannot be processed and
// returns its copy for the stage's dead-letter topic, with the reason.
func (r *runner) deadLetter(rec *kgo.Record, err error) *kgo.Record {
	r.env.Metrics.DLQ.WithLabelValues(r.stage.Name, strings.TrimPrefix(rec.Topic, r.env.Kafka.Prefix)).Inc()
	r.log.Error().Err(err).Str("topic", rec.Topic).Int32("partition", rec.Partition).Int64("offset", rec.Offset).
		Msg("record dead-lettered")
	reason := "unknown error"
	if err != nil {
		reason = err.Error()
	}
	h := append([]kgo.RecordHeader(nil), rec.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderStage, Value: []byte(r.stage.Name)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
		kgo.RecordHeader{Key: HeaderOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		kgo.RecordHeader{Key: HeaderFailedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
	)
	return &kgo.Record{Topic: r.env.Kafka.Topic(DLQTopic(r.stage.Name)), Key: rec.Key, Value: rec.Value, Headers: h}
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

func (r *runner) observeLag(fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		end := p.LastStableOffset
		if end < 0 {
			end = p.HighWatermark
		}
		lag := end - (p.Records[len(p.Records)-1].Offset + 1)
		if lag < 0 {
			lag = 0
		}
		r.env.Metrics.Lag.WithLabelValues(r.stage.Name, strings.TrimPrefix(p.Topic, r.env.Kafka.Prefix), strconv.Itoa(int(p.Partition))).Set(float64(lag))
	})
}

func (r *runner) logFetchErrors(fetches kgo.Fetches) {
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
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
