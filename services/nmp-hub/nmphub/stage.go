// Package nmphub is the nmp-hub stage: the hub's side of node management.
// Every member follows nmp.policies, agent.nodes, agent.packages and
// agent.status whole (an nmp.World, folded by nmp.FollowWorld as the North
// API folds it). The group consumes them and
// nmp.recompute, co-partitioned: the member that owns partition p of
// agent.nodes also owns partition p of agent.status and of nmp.recompute,
// and it alone writes the directives of the nodes of that partition, one
// record after another, so the last directive written for a node is the
// one its latest inputs give. A node or status record recomputes its node;
// an NMP or package record is copied to every partition of nmp.recompute
// (as is a status that moves an NMP across its failure threshold), and
// each partition's owner recomputes its nodes of the org. A directive is
// written to agent.directives only when it asks or reports something new,
// in the transaction that consumes its cause.
package nmphub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Stage is the nmp-hub stage. Every call returns a stage with state of
// its own.
func Stage() runtime.Stage {
	h := &hub{}
	return runtime.Stage{
		Name:          topology.StageNMPHub,
		Mode:          runtime.Transactional,
		Inputs:        append(append([]string{}, nmp.WorldTopics...), topology.NMPRecompute),
		CoPartitioned: true,
		Setup:         h.setup,
		Rewound:       h.rewound,
		Revoked:       h.revoked,
	}
}

type hub struct {
	env    runtime.Env
	log    zerolog.Logger
	world  *nmp.FollowedWorld // folded by nmp.FollowWorld, as the North API's
	fanout atomic.Int32       // partitions of nmp.recompute

	// mu guards sent and paused. sent is what this member wrote for
	// each node since its last rewind, so that an unchanged directive
	// is not written again; paused is whether each NMP's rollout was
	// paused when this member last looked.
	mu     sync.Mutex
	sent   map[string]*events.AgentDirective
	paused map[string]bool
}

func (h *hub) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	h.env = env
	h.log = env.Log.With().Str("stage", topology.StageNMPHub).Logger()
	h.sent = map[string]*events.AgentDirective{}
	h.paused = map[string]bool{}
	if err := h.readFanout(ctx); err != nil {
		return nil, nil, err
	}
	var err error
	if h.world, err = nmp.FollowWorld(env, h.log); err != nil {
		return nil, nil, fmt.Errorf("nmp-hub: %w", err)
	}
	start := time.Now()
	if err := h.world.WaitCaughtUp(ctx); err != nil {
		h.world.Close()
		return nil, nil, fmt.Errorf("nmp-hub: %w", err)
	}
	h.log.Info().Dur("took", time.Since(start)).Int32("recompute_partitions", h.fanout.Load()).
		Msg("read nmp.policies, agent.nodes, agent.packages and agent.status")
	return h.handler(), h.world.Close, nil
}

// readFanout reads the partition count of nmp.recompute.
func (h *hub) readFanout(ctx context.Context) error {
	opts, err := h.env.Kafka.ClientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.WithLogger(runtime.KgoLogger(h.log)))...)
	if err != nil {
		return fmt.Errorf("nmp-hub: create admin client: %w", err)
	}
	defer cl.Close()
	n, err := runtime.WaitPartitions(ctx, h.env, topology.StageNMPHub, kadm.NewClient(cl), topology.NMPRecompute)
	if err != nil {
		return err
	}
	h.fanout.Store(n)
	return nil
}

// handler decides what a record changes: the runtime decodes each record
// and checks that it holds its topic's event (a record of another schema
// is dead-lettered saying what it holds). The world is folded by its
// follower (nmp.FollowWorld, the fold the North API reads by too); each
// handler of a world topic waits until the follower has read the record,
// so the world holds it and everything before it, and a recomputation
// waits for the record that caused it.
func (h *hub) handler() runtime.Handler {
	return runtime.Route(map[string]runtime.Handler{
		topology.NMPPolicies: runtime.Typed(runtime.PassTombstones, func(ctx context.Context, m runtime.Msg[*events.NodeManagementPolicy]) ([]runtime.Output, error) {
			if err := h.folded(ctx, m.Input, func(w *nmp.World) error { return w.FoldPolicy(string(m.Key), m.Value) }); err != nil {
				return nil, err
			}
			org, _, _ := strings.Cut(string(m.Key), "/")
			return h.fanOut(m.Input, org, "nmp")
		}),
		topology.AgentPackages: runtime.Typed(runtime.PassTombstones, func(ctx context.Context, m runtime.Msg[*events.AgentPackage]) ([]runtime.Output, error) {
			if err := h.folded(ctx, m.Input, func(w *nmp.World) error { return w.FoldPackage(string(m.Key), m.Value) }); err != nil {
				return nil, err
			}
			return h.fanOut(m.Input, "", "package")
		}),
		topology.AgentNodes:   runtime.Typed(runtime.PassTombstones, h.node),
		topology.AgentStatus:  runtime.Typed(runtime.PassTombstones, h.status),
		topology.NMPRecompute: runtime.Typed(runtime.RefuseTombstones, h.recompute),
	})
}

// folded waits until the world's follower has read the record in, then
// makes the checks the fold makes, on a world of its own (this record
// only): a record the fold refuses fails permanently.
func (h *hub) folded(ctx context.Context, in runtime.Input, fold func(*nmp.World) error) error {
	if err := h.world.WaitFor(ctx, in.Topic, in.Partition, in.Offset); err != nil {
		return fmt.Errorf("nmp-hub: wait for %s[%d]@%d in the state: %w", in.Topic, in.Partition, in.Offset, err)
	}
	if err := fold(nmp.NewWorld()); err != nil {
		return runtime.Permanent(fmt.Errorf("nmp-hub: %s record %q: %w", in.Topic, in.Key, err))
	}
	return nil
}

// node recomputes the directive of a node; a deleted node's directive is
// deleted.
func (h *hub) node(ctx context.Context, m runtime.Msg[*events.AgentNode]) ([]runtime.Output, error) {
	if err := h.folded(ctx, m.Input, func(w *nmp.World) error { return w.FoldNode(string(m.Key), m.Partition, m.Value) }); err != nil {
		return nil, err
	}
	key := string(m.Key)
	if m.Value == nil || m.Value.Deleted {
		h.mu.Lock()
		h.sent[key] = nil
		h.mu.Unlock()
		return []runtime.Output{{Topic: topology.AgentDirectives, Key: m.Key}}, nil
	}
	return h.directives([]string{key}), nil
}

// status recomputes the directive of the reporting node; a report that
// moved its NMP across the failure threshold concerns every node of the
// org.
func (h *hub) status(ctx context.Context, m runtime.Msg[*events.AgentStatus]) ([]runtime.Output, error) {
	if err := h.folded(ctx, m.Input, func(w *nmp.World) error { return w.FoldStatus(string(m.Key), m.Value) }); err != nil {
		return nil, err
	}
	outs := h.directives([]string{string(m.Key)})
	st := m.Value
	if st == nil || st.Policy == "" {
		return outs, nil
	}
	paused := h.world.Rollout(st.Policy).Paused
	h.mu.Lock()
	was := h.paused[st.Policy]
	h.paused[st.Policy] = paused
	h.mu.Unlock()
	if paused != was {
		more, err := h.fanOut(m.Input, st.Org, "threshold")
		if err != nil {
			return nil, err
		}
		outs = append(outs, more...)
	}
	return outs, nil
}

// fanOut copies a change to every partition of nmp.recompute.
func (h *hub) fanOut(in runtime.Input, org, cause string) ([]runtime.Output, error) {
	r := &events.NodeRecompute{Org: org, Cause: cause, SourceTopic: in.Topic, SourcePartition: in.Partition, SourceOffset: in.Offset, IssuedAt: time.Now().UTC()}
	raw, err := h.env.Codec.Encode(r)
	if err != nil {
		return nil, fmt.Errorf("nmp-hub: encode a recomputation: %w", err)
	}
	n := h.fanout.Load()
	outs := make([]runtime.Output, 0, n)
	for p := int32(0); p < n; p++ {
		outs = append(outs, runtime.Output{Topic: topology.NMPRecompute, Key: []byte(org), Raw: raw, Partition: p, Explicit: true})
	}
	return outs, nil
}

// recompute recomputes the directives of this partition's nodes of an
// org, once the world holds the record that caused it and every node and
// status committed before.
func (h *hub) recompute(ctx context.Context, m runtime.Msg[*events.NodeRecompute]) ([]runtime.Output, error) {
	in, r := m.Input, m.Value
	switch r.SourceTopic {
	case topology.NMPPolicies, topology.AgentPackages, topology.AgentStatus:
	default:
		return nil, runtime.Permanentf("nmp-hub: recomputation at %s[%d]@%d names source topic %q", in.Topic, in.Partition, in.Offset, r.SourceTopic)
	}
	if r.SourceOffset >= 0 {
		if err := h.world.WaitFor(ctx, r.SourceTopic, r.SourcePartition, r.SourceOffset); err != nil {
			return nil, fmt.Errorf("nmp-hub: wait for %s[%d]@%d in the state: %w", r.SourceTopic, r.SourcePartition, r.SourceOffset, err)
		}
	}
	// The nodes and statuses of this partition committed before it
	// (those handled already are in the view; this also covers nodes
	// whose records this member has not been handed yet).
	if err := h.world.WaitCaughtUp(ctx, topology.AgentNodes, topology.AgentStatus); err != nil {
		return nil, fmt.Errorf("nmp-hub: catch up before recomputing: %w", err)
	}
	return h.directives(h.world.NodesIn(r.Org, in.Partition)), nil
}

// directives computes the directives of nodes and returns the ones that
// changed.
func (h *hub) directives(keys []string) []runtime.Output {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	var outs []runtime.Output
	for _, k := range keys {
		d := h.world.Directive(k, now)
		prev, had := h.sent[k]
		if d == nil {
			if had && prev != nil {
				h.sent[k] = nil
				outs = append(outs, runtime.Output{Topic: topology.AgentDirectives, Key: []byte(k)})
			}
			continue
		}
		if had && nmp.Same(prev, d) {
			continue
		}
		h.sent[k] = d
		outs = append(outs, runtime.Output{Topic: topology.AgentDirectives, Key: []byte(k), Value: d})
	}
	return outs
}

// rewound forgets what this member wrote: the aborted transaction's
// directives never reached the topic.
func (h *hub) rewound(context.Context, runtime.Env, map[string][]int32) error {
	h.forget()
	return nil
}

func (h *hub) revoked(context.Context, runtime.Env, map[string][]int32) { h.forget() }

func (h *hub) forget() {
	h.mu.Lock()
	h.sent = map[string]*events.AgentDirective{}
	h.paused = map[string]bool{}
	h.mu.Unlock()
}
