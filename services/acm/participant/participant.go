package participant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Participant is one running replica of a participant.
type Participant struct {
	cfg Config
	log zerolog.Logger

	prod *kgo.Client // writes acm.runtime and dlq.participants

	mu       sync.Mutex
	state    State                          // compositions and elements, by acm.sync key
	registry map[string]events.ReplicaState // replicas of this participant, by acm.sync key
	changed  chan struct{}
	running  map[string]*run // operation running per element key
	parts    map[int32]*partTrack
	// statusAnswered are the status requests answered last.
	statusAnswered []string

	ready chan struct{}
}

// run is one element operation in progress.
type run struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// partTrack is what a partition of acm.participant has handed in: the
// offsets whose operations are not finished, and the offset after the
// last record seen. What is committed is the lowest unfinished offset, so
// an operation a crashed replica was running is taken again by another.
type partTrack struct {
	inflight  map[int64]int // offset -> elements still running
	next      int64
	committed int64
}

// errSuperseded cancels an operation when the next one for its element
// comes.
var errSuperseded = errors.New("superseded by the next operation for the element")

// errStopping cancels operations when the replica stops.
var errStopping = errors.New("the replica is stopping")

// New checks the configuration and returns a replica that Run starts.
func New(cfg Config) (*Participant, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Participant{
		cfg:   cfg,
		log:   cfg.Log.With().Str("participant", cfg.ParticipantID).Str("replica", cfg.ReplicaID).Logger(),
		state: State{}, registry: map[string]events.ReplicaState{}, changed: make(chan struct{}),
		running: map[string]*run{}, parts: map[int32]*partTrack{},
		ready: make(chan struct{}),
	}, nil
}

// ID returns the participant id and this replica's id.
func (p *Participant) ID() (participantID, replicaID string) {
	return p.cfg.ParticipantID, p.cfg.ReplicaID
}

// Ready is closed once the replica has caught up with acm.sync and takes
// operations.
func (p *Participant) Ready() <-chan struct{} { return p.ready }

func (p *Participant) types() []string {
	out := make([]string, 0, len(p.cfg.Types))
	for t := range p.cfg.Types {
		out = append(out, t)
	}
	return out
}

// Run registers the replica, rebuilds its state from acm.sync, then takes
// operations until ctx ends; it then leaves the group, cancels what is
// running (another replica takes it again) and deregisters. Call it once
// per Participant.
func (p *Participant) Run(ctx context.Context) error {
	opts, err := p.cfg.Kafka.ClientOpts()
	if err != nil {
		return err
	}
	p.prod, err = kgo.NewClient(append(opts,
		kgo.WithLogger(runtime.KgoLogger(p.log)),
		kgo.RecordPartitioner(runtime.Partitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(topology.MaxRecordBytes),
	)...)
	if err != nil {
		return fmt.Errorf("participant %s: create a producer: %w", p.cfg.ParticipantID, err)
	}
	defer p.prod.Close()

	if err := p.send(ctx, p.message(acm.MsgRegister)); err != nil {
		return fmt.Errorf("participant %s replica %s: register: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, err)
	}
	follower, err := runtime.Follow(p.cfg.Kafka, p.log, map[string]runtime.ApplyFunc{topology.ACMSync: p.applySync})
	if err != nil {
		return err
	}
	defer follower.Close()

	hctx, stopHeartbeats := context.WithCancel(ctx)
	heartbeats := make(chan struct{})
	go func() { defer close(heartbeats); p.heartbeat(hctx) }()
	stopHB := func() { stopHeartbeats(); <-heartbeats }
	defer stopHB()

	if err := follower.WaitCaughtUp(ctx, topology.ACMSync); err != nil {
		if ctx.Err() != nil {
			stopHB()
			return p.finish(ctx)
		}
		return fmt.Errorf("participant %s replica %s: rebuild the state from %s: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, p.syncTopic(), err)
	}
	close(p.ready)
	p.log.Info().Int("keys", len(p.Dump())).Msg("state rebuilt from acm.sync; taking operations")
	err = p.consume(ctx, opts)
	stopHB()
	if err != nil && ctx.Err() == nil {
		return err
	}
	return p.finish(ctx)
}

// finish cancels what runs (unanswered, so another replica runs it again)
// and deregisters.
func (p *Participant) finish(ctx context.Context) error {
	p.mu.Lock()
	runs := make([]*run, 0, len(p.running))
	for _, r := range p.running {
		r.cancel(errStopping)
		runs = append(runs, r)
	}
	p.mu.Unlock()
	for _, r := range runs {
		<-r.done
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.send(dctx, p.message(acm.MsgDeregister)); err != nil {
		return fmt.Errorf("participant %s replica %s: deregister: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, err)
	}
	return nil
}

func (p *Participant) heartbeat(ctx context.Context) {
	t := time.NewTicker(p.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := p.send(ctx, p.message(acm.MsgHeartbeat)); err != nil && ctx.Err() == nil {
				p.log.Warn().Err(err).Msg("heartbeat not sent")
			}
		}
	}
}

// message is a ParticipantMessage of this replica.
func (p *Participant) message(kind string) *events.ParticipantMessage {
	m := &events.ParticipantMessage{
		MessageID: NewReplicaID(), ParticipantID: p.cfg.ParticipantID, ReplicaID: p.cfg.ReplicaID,
		Kind: kind, Properties: "{}", SentAt: time.Now().UTC().Truncate(time.Millisecond),
	}
	if kind == acm.MsgRegister || kind == acm.MsgHeartbeat {
		m.SupportedElementTypes = p.types()
	}
	return m
}

// send writes a message to acm.runtime, keyed by the participant, and
// waits until the broker has it.
func (p *Participant) send(ctx context.Context, m *events.ParticipantMessage) error {
	b, err := p.cfg.Codec.Encode(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.Kind, err)
	}
	rec := &kgo.Record{Topic: p.cfg.Kafka.Topic(topology.ACMRuntime), Key: []byte(p.cfg.ParticipantID), Value: b}
	return p.prod.ProduceSync(ctx, rec).FirstErr()
}

// deadLetter writes rec to dlq.participants with the reason in headers.
func (p *Participant) deadLetter(ctx context.Context, rec *kgo.Record, reason error) {
	p.log.Error().Err(reason).Str("topic", rec.Topic).Int32("partition", rec.Partition).Int64("offset", rec.Offset).Msg("record dead-lettered")
	h := append([]kgo.RecordHeader(nil), rec.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: runtime.HeaderError, Value: []byte(reason.Error())},
		kgo.RecordHeader{Key: runtime.HeaderStage, Value: []byte(acm.DLQStage)},
		kgo.RecordHeader{Key: runtime.HeaderTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: runtime.HeaderPartition, Value: []byte(strconv.Itoa(int(rec.Partition)))},
		kgo.RecordHeader{Key: runtime.HeaderOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
		kgo.RecordHeader{Key: runtime.HeaderFailedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
		kgo.RecordHeader{Key: "pf.participant", Value: []byte(p.cfg.ParticipantID)},
		kgo.RecordHeader{Key: "pf.replica", Value: []byte(p.cfg.ReplicaID)},
	)
	dl := &kgo.Record{Topic: p.cfg.Kafka.Topic(topology.DLQ(acm.DLQStage)), Key: rec.Key, Value: rec.Value, Headers: h}
	if err := p.prod.ProduceSync(context.WithoutCancel(ctx), dl).FirstErr(); err != nil {
		p.log.Error().Err(err).Msg("dead letter not written")
	}
}

// SetProperties replicates a change of an element's properties made by
// the implementation (its outProperties): the properties are merged into
// what the replicas hold.
func (p *Participant) SetProperties(ctx context.Context, instanceID, elementID string, props json.RawMessage) error {
	cur, ok := p.ElementState(instanceID, elementID)
	if !ok {
		return fmt.Errorf("participant %s: instance %s has no element %s", p.cfg.ParticipantID, instanceID, elementID)
	}
	merged, err := merge(json.RawMessage(cur.Properties), props)
	if err != nil {
		return fmt.Errorf("participant %s: properties of element %s of instance %s: %w", p.cfg.ParticipantID, elementID, instanceID, err)
	}
	m := p.message(acm.MsgState)
	m.CompositionID, m.InstanceID, m.ElementID = &cur.CompositionID, &instanceID, &elementID
	m.ElementType, m.Revision, m.Properties = cur.ElementType, cur.Revision, string(merged)
	return p.send(ctx, m)
}

// merge returns base with every top-level key of over set (both JSON
// objects; over may be empty).
func merge(base, over json.RawMessage) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(base) > 0 {
		if err := json.Unmarshal(base, &m); err != nil {
			return nil, fmt.Errorf("not a JSON object: %w", err)
		}
	}
	if len(over) > 0 && string(over) != "null" {
		var o map[string]json.RawMessage
		if err := json.Unmarshal(over, &o); err != nil {
			return nil, fmt.Errorf("out properties are not a JSON object: %w", err)
		}
		for k, v := range o {
			m[k] = v
		}
	}
	return json.Marshal(m)
}
