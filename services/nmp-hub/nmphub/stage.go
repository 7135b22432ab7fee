// Package nmphub is the nmp-hub stage: the hub's side of node management.
// Every member follows nmp.policies, agent.nodes, agent.packages and
// agent.status whole (an nmp.World); the group consumes the same topics as
// triggers, and each record recomputes the directives of the nodes it may
// change (one node for a node or status record; the org's nodes for an
// NMP, or for a status that moves an NMP across its failure threshold;
// every node for a package). A directive is written to agent.directives
// only when it asks or reports something new, in the transaction that
// consumes the trigger.
package nmphub

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

var inputs = []string{topology.NMPPolicies, topology.AgentNodes, topology.AgentPackages, topology.AgentStatus}

// Stage is the nmp-hub stage. Every call returns a stage with state of
// its own.
func Stage() runtime.Stage {
	h := &hub{}
	return runtime.Stage{
		Name:    topology.StageNMPHub,
		Mode:    runtime.Transactional,
		Inputs:  inputs,
		Setup:   h.setup,
		Rewound: h.rewound,
		Revoked: h.revoked,
	}
}

type hub struct {
	env    runtime.Env
	log    zerolog.Logger
	world  *nmp.World
	follow *runtime.Follower

	// mu guards sent: what this member wrote for each node (since its
	// last rewind), so that an unchanged directive is not written again.
	mu   sync.Mutex
	sent map[string]*events.AgentDirective
	// paused is whether each NMP's rollout was paused when this member
	// last looked.
	paused map[string]bool
}

func (h *hub) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	h.env = env
	h.log = env.Log.With().Str("stage", topology.StageNMPHub).Logger()
	h.world = nmp.NewWorld()
	h.sent = map[string]*events.AgentDirective{}
	h.paused = map[string]bool{}
	apply := map[string]runtime.ApplyFunc{}
	for _, t := range inputs {
		apply[t] = h.applyRow
	}
	var err error
	if h.follow, err = runtime.Follow(env.Kafka, h.log, apply); err != nil {
		return nil, nil, fmt.Errorf("nmp-hub: %w", err)
	}
	start := time.Now()
	if err := h.follow.WaitCaughtUp(ctx); err != nil {
		h.follow.Close()
		return nil, nil, fmt.Errorf("nmp-hub: %w", err)
	}
	h.log.Info().Dur("took", time.Since(start)).Msg("read nmp.policies, agent.nodes, agent.packages and agent.status")
	return h.handle, h.follow.Close, nil
}

// applyRow folds a record of a followed topic into the world. A record
// that does not pass is left out (and dead-lettered where it is consumed).
func (h *hub) applyRow(ctx context.Context, rec *kgo.Record) error {
	var in runtime.Input
	in.Topic = strings.TrimPrefix(rec.Topic, h.env.Kafka.Prefix)
	in.Key, in.Raw = rec.Key, rec.Value
	if rec.Value != nil {
		v, err := h.env.Codec.Decode(ctx, rec.Value)
		if err != nil {
			h.log.Warn().Err(err).Str("topic", rec.Topic).Int64("offset", rec.Offset).Msg("record left out of the hub's state")
			return nil
		}
		in.Value = v
	}
	if _, err := h.fold(in); err != nil {
		h.log.Warn().Err(err).Str("topic", rec.Topic).Int64("offset", rec.Offset).Msg("record left out of the hub's state")
	}
	return nil
}

// fold applies one record to the world and returns the nodes to
// recompute; an error says why the record is refused.
func (h *hub) fold(in runtime.Input) ([]string, error) {
	key := string(in.Key)
	switch in.Topic {
	case topology.NMPPolicies:
		if in.Tombstone() {
			return h.world.SetPolicy(key, nil), nil
		}
		ev, ok := in.Value.(*events.NodeManagementPolicy)
		if !ok {
			return nil, fmt.Errorf("want a %s, got %s", events.SchemaNodeManagementPolicy, schemaOf(in.Value))
		}
		if k := nmp.Key(ev.Org, ev.Name); k != key {
			return nil, fmt.Errorf("NMP %s under key %q: the key must be org/name", k, key)
		}
		p, err := nmp.Compile(ev)
		if err != nil {
			return nil, err
		}
		return h.world.SetPolicy(key, p), nil
	case topology.AgentNodes:
		if in.Tombstone() {
			return h.world.SetNode(key, nil), nil
		}
		ev, ok := in.Value.(*events.AgentNode)
		if !ok {
			return nil, fmt.Errorf("want a %s, got %s", events.SchemaAgentNode, schemaOf(in.Value))
		}
		if k := nmp.Key(ev.Org, ev.Node); k != key {
			return nil, fmt.Errorf("node %s under key %q: the key must be org/node", k, key)
		}
		if ev.Deleted {
			return h.world.SetNode(key, nil), nil
		}
		n, err := nmp.CompileNode(ev)
		if err != nil {
			return nil, err
		}
		return h.world.SetNode(key, n), nil
	case topology.AgentPackages:
		if in.Tombstone() {
			return h.world.SetPackage(key, nil), nil
		}
		ev, ok := in.Value.(*events.AgentPackage)
		if !ok {
			return nil, fmt.Errorf("want a %s, got %s", events.SchemaAgentPackage, schemaOf(in.Value))
		}
		if ev.Version != key {
			return nil, fmt.Errorf("package %s under key %q: the key must be its version", ev.Version, key)
		}
		if _, err := nmp.ParseSemver(ev.Version); err != nil {
			return nil, err
		}
		if len(ev.SHA256) != 64 {
			return nil, fmt.Errorf("package %s: sha256 %q is not 64 hex digits", ev.Version, ev.SHA256)
		}
		return h.world.SetPackage(key, ev), nil
	case topology.AgentStatus:
		if in.Tombstone() {
			return h.world.SetStatus(key, nil), nil
		}
		ev, ok := in.Value.(*events.AgentStatus)
		if !ok {
			return nil, fmt.Errorf("want a %s, got %s", events.SchemaAgentStatus, schemaOf(in.Value))
		}
		if k := nmp.Key(ev.Org, ev.Node); k != key {
			return nil, fmt.Errorf("status of %s under key %q: the key must be org/node", k, key)
		}
		if ev.Status != "" && !nmp.ValidState(ev.Status) {
			return nil, fmt.Errorf("status %q of %s is not one of %v", ev.Status, key, nmp.States)
		}
		return h.world.SetStatus(key, ev), nil
	}
	return nil, fmt.Errorf("no handler for topic %s", in.Topic)
}

func schemaOf(e events.Event) string {
	if e == nil {
		return "a record that is not an event"
	}
	return e.SchemaName()
}

// handle recomputes the directives of the nodes a record may change. The
// world is folded by the follower; the handler waits until the follower
// has read the record, so the world holds it and everything before it.
func (h *hub) handle(ctx context.Context, in runtime.Input) ([]runtime.Output, error) {
	if err := h.follow.WaitFor(ctx, in.Topic, in.Partition, in.Offset); err != nil {
		return nil, fmt.Errorf("nmp-hub: wait for %s[%d]@%d in the state: %w", in.Topic, in.Partition, in.Offset, err)
	}
	if in.Topic == topology.NMPPolicies || in.Topic == topology.AgentPackages {
		// An org-wide or fleet-wide recomputation reads every node and
		// status committed before it, not only those this member's
		// follower happened to have read (NMPs and packages change
		// rarely, so the cost of asking the brokers is small).
		if err := h.follow.WaitCaughtUp(ctx); err != nil {
			return nil, fmt.Errorf("nmp-hub: catch up before recomputing for %s %q: %w", in.Topic, in.Key, err)
		}
	}
	keys, err := h.check(in)
	if err != nil {
		return nil, runtime.Permanent(fmt.Errorf("nmp-hub: %s record %q: %w", in.Topic, in.Key, err))
	}
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
	if in.Topic == topology.AgentNodes && in.Tombstone() {
		k := string(in.Key)
		h.sent[k] = nil
		outs = append(outs, runtime.Output{Topic: topology.AgentDirectives, Key: in.Key})
	}
	return outs, nil
}

// check validates the consumed record as fold does (without folding it
// again) and returns the nodes to recompute.
func (h *hub) check(in runtime.Input) ([]string, error) {
	scratch := &hub{env: h.env, log: h.log, world: nmp.NewWorld()}
	if _, err := scratch.fold(in); err != nil {
		return nil, err
	}
	key := string(in.Key)
	switch in.Topic {
	case topology.NMPPolicies:
		org, _, _ := strings.Cut(key, "/")
		return h.world.OrgNodes(org), nil
	case topology.AgentPackages:
		return h.world.AllNodes(), nil
	case topology.AgentNodes:
		if in.Tombstone() {
			return nil, nil
		}
		return []string{key}, nil
	case topology.AgentStatus:
		keys := []string{key}
		st, _ := in.Value.(*events.AgentStatus)
		if st == nil || st.Policy == "" {
			return keys, nil
		}
		// A report that moved its NMP across the failure threshold
		// concerns every node of the org.
		paused := h.world.Rollout(st.Policy).Paused
		h.mu.Lock()
		was := h.paused[st.Policy]
		h.paused[st.Policy] = paused
		h.mu.Unlock()
		if paused != was {
			keys = h.world.OrgNodes(st.Org)
		}
		return keys, nil
	}
	return nil, nil
}

// rewound forgets what this member wrote: the aborted transaction's
// directives never reached the topic.
func (h *hub) rewound(context.Context, runtime.Env, map[string][]int32) error {
	h.mu.Lock()
	h.sent = map[string]*events.AgentDirective{}
	h.mu.Unlock()
	return nil
}

func (h *hub) revoked(context.Context, runtime.Env, map[string][]int32) {
	h.mu.Lock()
	h.sent = map[string]*events.AgentDirective{}
	h.mu.Unlock()
}
