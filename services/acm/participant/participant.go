package participant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	env runtime.Env
	// emit writes acm.runtime (registration, heartbeats, states and
	// results) and the dead letters of acm.sync records.
	emit *runtime.Emitter

	mu       sync.Mutex
	state    State                          // compositions and elements, by acm.sync key
	registry map[string]events.ReplicaState // replicas of this participant, by acm.sync key
	changed  chan struct{}
	running  map[string]*run // operation running per element key
	parts    map[int32]bool  // partitions of acm.participant owned
	// statusAnswered are the status requests answered last.
	statusAnswered []string

	ready chan struct{}
}

// run is one element operation in progress.
type run struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
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
	log := cfg.Log.With().Str("participant", cfg.ParticipantID).Str("replica", cfg.ReplicaID).Logger()
	env := runtime.NewEnv(cfg.Kafka, log)
	env.Codec, env.SessionTimeout, env.InstanceID = cfg.Codec, cfg.SessionTimeout, cfg.InstanceID
	return &Participant{
		cfg: cfg, log: log, env: env,
		state: State{}, registry: map[string]events.ReplicaState{}, changed: make(chan struct{}),
		running: map[string]*run{}, parts: map[int32]bool{},
		ready: make(chan struct{}),
	}, nil
}

// Metrics returns the replica's metrics (records in and out, dead
// letters, retries, lag of its operations), for the implementation to
// serve.
func (p *Participant) Metrics() *runtime.Metrics { return p.env.Metrics }

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
	var err error
	p.emit, err = runtime.NewEmitter(p.env, acm.DLQStage, p.deadLetterHeaders()...)
	if err != nil {
		return fmt.Errorf("participant %s: %w", p.cfg.ParticipantID, err)
	}
	defer p.emit.Close()

	if err := p.send(ctx, p.message(acm.MsgRegister)); err != nil {
		return fmt.Errorf("participant %s replica %s: register: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, err)
	}
	follower, err := runtime.Follow(p.cfg.Kafka, p.log, map[string]runtime.ApplyFunc{
		topology.ACMSync: p.syncRecords(),
	})
	if err != nil {
		return err
	}
	defer follower.Close()

	stopHeartbeats := p.emit.Every(ctx, runtime.Timer{
		Name: "heartbeat",
		Next: func() time.Duration { return p.cfg.Heartbeat },
		Run: func(ctx context.Context, _ runtime.Tick) error {
			return p.send(ctx, p.message(acm.MsgHeartbeat))
		},
	})
	defer stopHeartbeats()

	if err := follower.WaitCaughtUp(ctx, topology.ACMSync); err != nil {
		if ctx.Err() != nil {
			stopHeartbeats()
			return p.finish(ctx)
		}
		return fmt.Errorf("participant %s replica %s: rebuild the state from %s: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, p.syncTopic(), err)
	}
	close(p.ready)
	p.log.Info().Int("keys", len(p.Dump())).Msg("state rebuilt from acm.sync; taking operations")
	err = p.stage().Run(ctx, p.env)
	stopHeartbeats()
	if err != nil && ctx.Err() == nil {
		return err
	}
	return p.finish(ctx)
}

// stage is the consumer of the participant's operations: its replicas
// share one group over acm.participant. Each operation is handed in
// typed; the element operations it starts run in the background, each
// holding the operation's offset (runtime.Input.Hold) until it is
// answered, so what is committed is below every unanswered operation and
// an operation a dead replica was running is taken again by the next
// owner of its partition. An operation that cannot be run is
// dead-lettered to dlq.participants by the runtime.
func (p *Participant) stage() runtime.Stage {
	return runtime.Stage{
		Name:              acm.DLQStage,
		Mode:              runtime.AtLeastOnce,
		Inputs:            []string{topology.ACMParticipant},
		Group:             acm.Group(p.cfg.ParticipantID),
		DeadLetterHeaders: p.deadLetterHeaders(),
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return runtime.Typed(runtime.RefuseTombstones, p.handle), nil, nil
		},
		Assigned: func(_ context.Context, _ runtime.Env, assigned map[string][]int32) error {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, part := range assigned[topology.ACMParticipant] {
				p.parts[part] = true
			}
			return nil
		},
		Revoked: func(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, part := range revoked[topology.ACMParticipant] {
				delete(p.parts, part)
			}
		},
	}
}

// deadLetterHeaders say which replica of which participant dead-lettered
// a record.
func (p *Participant) deadLetterHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderParticipant, Value: []byte(p.cfg.ParticipantID)},
		{Key: HeaderReplica, Value: []byte(p.cfg.ReplicaID)},
	}
}

// Headers of a participant's dead letter, besides the runtime's.
const (
	HeaderParticipant = "pf.participant"
	HeaderReplica     = "pf.replica"
)

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
	return p.emit.Emit(ctx, runtime.Output{Topic: topology.ACMRuntime, Key: []byte(p.cfg.ParticipantID), Value: m})
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
