package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// Emitter produces what a stage writes besides its handler's outputs: on
// a clock (Every), for an effect that ends after its handler returned
// (a participant's result), or the dead letter of a record of a followed
// topic. It produces the way the runtime produces outputs: events encoded
// with the Env's codec, records placed by Partitioner (Pin honoured),
// counted in the stage's records-out and dead-letter metrics, and waited
// for until the brokers have them.
type Emitter struct {
	stage  string
	env    Env
	log    zerolog.Logger
	cl     *kgo.Client
	dlqHdr []kgo.RecordHeader

	timers sync.WaitGroup
}

// NewEmitter returns the Emitter of a stage (its name labels the metrics
// and names the dead-letter topic); deadLetterHeaders go on every dead
// letter it writes, as Stage.DeadLetterHeaders do on the stage's. Close
// it when done.
func NewEmitter(env Env, stage string, deadLetterHeaders ...kgo.RecordHeader) (*Emitter, error) {
	if env.Codec == nil {
		env.Codec = events.Default()
	}
	opts, err := env.Kafka.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w", stage, err)
	}
	log := env.Log.With().Str("stage", stage).Logger()
	opts = append(opts,
		kgo.WithLogger(KgoLogger(log)),
		kgo.ClientID("policyflow-"+stage),
		kgo.RecordPartitioner(Partitioner()),
		kgo.ProducerLinger(0),
	)
	if env.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(env.MaxRecordBytes), kgo.BrokerMaxWriteBytes(2*env.MaxRecordBytes))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("stage %s: create a producer: %w", stage, err)
	}
	return &Emitter{stage: stage, env: env, log: log, cl: cl, dlqHdr: deadLetterHeaders}, nil
}

// Close waits for the timers started with Every to stop (stop them
// first) and closes the producer.
func (e *Emitter) Close() {
	e.timers.Wait()
	e.cl.Close()
}

// Emit produces outs and returns once the brokers have every one, or
// with the first error (explained, see Kafka.Explain). An event that
// cannot be encoded fails the call before anything is produced.
func (e *Emitter) Emit(ctx context.Context, outs ...Output) error {
	recs := make([]*kgo.Record, 0, len(outs))
	for _, o := range outs {
		if o.Value != nil {
			b, err := e.env.Codec.Encode(o.Value)
			if err != nil {
				return fmt.Errorf("stage %s: encode the record for %s: %w", e.stage, o.Topic, err)
			}
			o.Raw = b
		}
		rec := &kgo.Record{Topic: e.env.Kafka.Topic(o.Topic), Key: o.Key, Value: o.Raw, Headers: o.Headers}
		if o.Explicit {
			Pin(rec, o.Partition)
		}
		recs = append(recs, rec)
	}
	if err := e.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("stage %s: produce %d record(s): %w", e.stage, len(recs), e.env.Kafka.Explain(err))
	}
	if e.env.Metrics != nil {
		for _, o := range outs {
			e.env.Metrics.RecordsOut.WithLabelValues(e.stage, o.Topic).Inc()
		}
	}
	return nil
}

// DeadLetter writes in to the stage's dead-letter topic with the reason
// and where it came from in headers, as the runtime does for a record
// its handler failed permanently (see DeadLetter), and counts it.
func (e *Emitter) DeadLetter(ctx context.Context, in Input, reason error) error {
	if e.env.Metrics != nil {
		e.env.Metrics.DLQ.WithLabelValues(e.stage, in.Topic).Inc()
		e.env.Metrics.Errors.WithLabelValues(e.stage, "permanent").Inc()
	}
	e.log.Error().Err(reason).Str("topic", e.env.Kafka.Topic(in.Topic)).Int32("partition", in.Partition).Int64("offset", in.Offset).
		Msg("record dead-lettered")
	dl := deadLetter(e.stage, e.env.Kafka, in, reason, e.dlqHdr...)
	// Produced even while the stage stops: the record is not read again.
	return e.Emit(context.WithoutCancel(ctx), dl)
}

// Tick is one run of a Timer.
type Tick struct {
	At time.Time
	// Woken is true for a run the Timer's Wake asked for, false for one
	// its clock did.
	Woken bool
}

// Timer is work a stage does on a clock rather than for a record
// (heartbeats, ticks, periodic catch-ups), run by Emitter.Every; what it
// writes, it writes with the Emitter's Emit.
type Timer struct {
	// Name says what the timer does, in logs.
	Name string
	// Next is the wait before each run (the first included), counted
	// from the end of the previous run; drawn again each time, so it may
	// vary.
	Next func() time.Duration
	// Wake, when set, runs the timer at once each time it receives;
	// the clock starts again after such a run.
	Wake <-chan struct{}
	// Run does the work; an error is logged at warn and the timer goes
	// on.
	Run func(ctx context.Context, t Tick) error
}

// Every runs t until ctx ends or the returned stop is called (which waits
// for a run in progress to end).
func (e *Emitter) Every(ctx context.Context, t Timer) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	e.timers.Add(1)
	go func() {
		defer e.timers.Done()
		defer close(done)
		clock := time.NewTimer(t.Next())
		defer clock.Stop()
		for {
			var tick Tick
			select {
			case <-ctx.Done():
				return
			case now := <-clock.C:
				tick = Tick{At: now}
			case <-t.Wake:
				tick = Tick{At: time.Now(), Woken: true}
			}
			if err := t.Run(ctx, tick); err != nil && ctx.Err() == nil {
				e.log.Warn().Err(err).Str("timer", t.Name).Msg("timed work failed; it runs again at its next time")
			}
			clock.Stop()
			clock.Reset(t.Next())
		}
	}()
	return func() { cancel(); <-done }
}

// Fanout is one output per partition of a topic (base name) of n
// partitions, each pinned to its partition, all with the same key and
// encoded value: a record every member owning a partition of it reads.
func Fanout(base string, n int32, key, raw []byte) []Output {
	outs := make([]Output, n)
	for p := range outs {
		outs[p] = Output{Topic: base, Key: key, Raw: raw, Partition: int32(p), Explicit: true}
	}
	return outs
}
