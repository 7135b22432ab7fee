package replicasync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// DefaultOfflineAfter is ACM's maxStatusWaitMs: a replica silent for
// longer is OFF_LINE.
const DefaultOfflineAfter = 150 * time.Second

// Config is the stage's own configuration.
type Config struct {
	// OfflineAfter is how long a replica may stay silent before the
	// registry shows it OFF_LINE.
	OfflineAfter time.Duration
	// TickEvery is how often the stage checks silences and operation
	// deadlines (0: a tenth of OfflineAfter, between 100 ms and 15 s).
	TickEvery time.Duration
	// ForgetAfter is how long a replica may stay silent before it is
	// removed from the registry (0: never).
	ForgetAfter time.Duration
}

// DefaultForgetAfter removes a replica an hour after its last heartbeat:
// replica ids are per process, so one gone that long is not coming back.
const DefaultForgetAfter = time.Hour

// DefaultConfig reads PF_OFFLINE_AFTER and PF_SYNC_TICK, falling back to
// the defaults.
func DefaultConfig() Config {
	c := Config{OfflineAfter: DefaultOfflineAfter, ForgetAfter: DefaultForgetAfter}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_OFFLINE_AFTER", "")); err == nil {
		c.OfflineAfter = d
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_FORGET_AFTER", "")); err == nil {
		c.ForgetAfter = d
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_SYNC_TICK", "")); err == nil {
		c.TickEvery = d
	}
	return c
}

// RegisterFlags adds the stage's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.OfflineAfter, "offline-after", c.OfflineAfter, "a replica silent for longer is OFF_LINE (env PF_OFFLINE_AFTER)")
	fs.DurationVar(&c.TickEvery, "tick", c.TickEvery, "how often silences and operation deadlines are checked; 0 is a tenth of --offline-after (env PF_SYNC_TICK)")
	fs.DurationVar(&c.ForgetAfter, "forget-after", c.ForgetAfter, "a replica silent for longer is removed from the registry; 0 keeps it OFF_LINE for ever (env PF_FORGET_AFTER)")
}

// Validate says what is wrong with the configuration.
func (c Config) Validate() error {
	if c.OfflineAfter <= 0 {
		return fmt.Errorf("--offline-after %s: want a positive duration, e.g. 150s", c.OfflineAfter)
	}
	if c.TickEvery < 0 {
		return fmt.Errorf("--tick %s: want 0 (automatic) or a positive duration", c.TickEvery)
	}
	if c.ForgetAfter < 0 || c.ForgetAfter > 0 && c.ForgetAfter <= c.OfflineAfter {
		return fmt.Errorf("--forget-after %s: want 0 (never) or longer than --offline-after %s", c.ForgetAfter, c.OfflineAfter)
	}
	return nil
}

// tickEvery is TickEvery or its automatic value.
func (c Config) tickEvery() time.Duration {
	if c.TickEvery > 0 {
		return c.TickEvery
	}
	return min(max(c.OfflineAfter/10, 100*time.Millisecond), 15*time.Second)
}

// Stage is replica-sync configured from the environment (and from flags
// when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is replica-sync with cfg: it reads acm.runtime
// (transactionally) and writes acm.sync, following acm.sync for the
// state it changes. Every call returns a stage with state of its own.
func StageWith(cfg Config) runtime.Stage {
	s := &syncer{cfg: cfg}
	return runtime.Stage{
		Name:     topology.StageReplicaSync,
		Mode:     runtime.Transactional,
		Inputs:   []string{topology.ACMRuntime},
		Flags:    s.cfg.RegisterFlags,
		Settings: &s.cfg,
		Setup:    s.setup,
		Rewound:  s.rewound,
	}
}

// pending is a state this member wrote and has not yet read back from
// acm.sync; st nil is a deletion.
type pending struct{ st *events.ReplicaState }

type syncer struct {
	cfg Config

	mu        sync.Mutex
	committed map[string]*events.ReplicaState // acm.sync as read
	own       map[string]pending              // own writes not yet read back
}

// Get implements View: own writes first, then what acm.sync holds.
func (s *syncer) Get(key string) (*events.ReplicaState, bool) {
	if p, ok := s.own[key]; ok {
		return p.st, p.st != nil
	}
	st, ok := s.committed[key]
	return st, ok
}

// Keys implements View.
func (s *syncer) Keys() []string {
	out := make([]string, 0, len(s.committed)+len(s.own))
	for k := range s.committed {
		if _, ok := s.own[k]; !ok {
			out = append(out, k)
		}
	}
	for k, p := range s.own {
		if p.st != nil {
			out = append(out, k)
		}
	}
	return out
}

// follow applies a record of acm.sync, dropping the own write it confirms.
func (s *syncer) follow(m runtime.Msg[*events.ReplicaState]) {
	key := string(m.Key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Value == nil {
		delete(s.committed, key)
	} else {
		s.committed[key] = m.Value
	}
	if p, ok := s.own[key]; ok && (p.st == nil && m.Value == nil || p.st != nil && m.Value != nil && m.Value.Version >= p.st.Version) {
		delete(s.own, key)
	}
}

func (s *syncer) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	if err := s.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	s.committed, s.own = map[string]*events.ReplicaState{}, map[string]pending{}
	table, err := runtime.FollowTable(env, topology.ACMSync, s.follow)
	if err != nil {
		return nil, nil, err
	}
	if err := table.WaitCaughtUp(ctx); err != nil {
		table.Close()
		return nil, nil, fmt.Errorf("replica-sync: read %s: %w", env.Kafka.Topic(topology.ACMSync), err)
	}
	parts, err := partitions(ctx, env)
	if err != nil {
		table.Close()
		return nil, nil, err
	}
	emit, err := runtime.NewEmitter(env, topology.StageReplicaSync)
	if err != nil {
		table.Close()
		return nil, nil, err
	}
	stopTicks := emit.Every(context.WithoutCancel(ctx), s.ticks(env, emit, parts))
	where := runtime.Partitioner().ForTopic(env.Kafka.Topic(topology.ACMRuntime))
	h := runtime.Typed(runtime.RefuseTombstones, func(ctx context.Context, m runtime.Msg[*events.ParticipantMessage]) ([]runtime.Output, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		rules := Rules{OfflineAfter: s.cfg.OfflineAfter, ForgetAfter: s.cfg.ForgetAfter, Owns: func(participantID string) bool {
			return int32(where.Partition(&kgo.Record{Key: []byte(participantID)}, int(parts))) == m.Partition
		}}
		changes, err := Decide(rules, s, m.Value, time.Now())
		if err != nil {
			return nil, runtime.Permanent(err)
		}
		outs := make([]runtime.Output, 0, len(changes))
		for _, c := range changes {
			s.own[c.Key] = pending{st: c.State}
			out := runtime.Output{Topic: topology.ACMSync, Key: []byte(c.Key)}
			if c.State != nil {
				out.Value = c.State
			}
			outs = append(outs, out)
		}
		return outs, nil
	})
	return h, func() { stopTicks(); emit.Close(); table.Close() }, nil
}

// rewound forgets own writes an aborted transaction took back.
func (s *syncer) rewound(context.Context, runtime.Env, map[string][]int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.own)
	return nil
}

// partitions returns the partition count of acm.runtime.
func partitions(ctx context.Context, env runtime.Env) (int32, error) {
	opts, err := env.Kafka.ClientOpts()
	if err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("replica-sync: create an admin client: %w", err)
	}
	defer cl.Close()
	n, err := runtime.PartitionCount(ctx, kadm.NewClient(cl), env.Kafka.Topic(topology.ACMRuntime))
	if err != nil {
		return 0, fmt.Errorf("replica-sync: %w", err)
	}
	return n, nil
}

// ticks writes a TICK to every partition of acm.runtime every tickEvery,
// so the member owning each checks the silences and deadlines of that
// partition's participants in its transactions.
func (s *syncer) ticks(env runtime.Env, emit *runtime.Emitter, parts int32) runtime.Timer {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	self := "replica-sync-" + hex.EncodeToString(id)
	return runtime.Timer{
		Name: "tick",
		Next: s.cfg.tickEvery,
		Run: func(ctx context.Context, t runtime.Tick) error {
			now := t.At
			b, err := env.Codec.Encode(&events.ParticipantMessage{
				MessageID: self + "-" + now.UTC().Format("20060102T150405.000"), ReplicaID: self,
				Kind: acm.MsgTick, Properties: "{}", SentAt: now,
			})
			if err != nil {
				return fmt.Errorf("encode a tick: %w", err)
			}
			pctx, cancel := context.WithTimeout(ctx, s.cfg.tickEvery())
			defer cancel()
			return emit.Emit(pctx, runtime.Fanout(topology.ACMRuntime, parts, nil, b)...)
		},
	}
}
