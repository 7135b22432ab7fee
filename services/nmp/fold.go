package nmp

import (
	"context"
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// WorldTopics are the topics a World is folded from: nmp.policies,
// agent.nodes, agent.packages and agent.status.
var WorldTopics = []string{topology.NMPPolicies, topology.AgentNodes, topology.AgentPackages, topology.AgentStatus}

// Fold applies one record of one of WorldTopics (base name) to w: v is
// its value, nil for a tombstone. It is the one set of rules by which
// the nmp-hub and the North API read node management. An error says why
// the record is refused; the world then keeps what it had: an NMP must be
// under its org/name key and compile, a node under org/node and compile,
// a package under its version, which is semantic, with a SHA-256 of 64
// hex digits, and a status under org/node in one of States.
func (w *World) Fold(topic string, partition int32, key string, v events.Event) error {
	switch topic {
	case topology.NMPPolicies:
		if v == nil {
			w.SetPolicy(key, nil)
			return nil
		}
		ev, ok := v.(*events.NodeManagementPolicy)
		if !ok {
			return fmt.Errorf("want a %s, got %s", events.SchemaNodeManagementPolicy, v.SchemaName())
		}
		if k := Key(ev.Org, ev.Name); k != key {
			return fmt.Errorf("NMP %s under key %q: the key must be org/name", k, key)
		}
		p, err := Compile(ev)
		if err != nil {
			return err
		}
		w.SetPolicy(key, p)
	case topology.AgentNodes:
		if v == nil {
			w.SetNode(key, nil)
			return nil
		}
		ev, ok := v.(*events.AgentNode)
		if !ok {
			return fmt.Errorf("want a %s, got %s", events.SchemaAgentNode, v.SchemaName())
		}
		if k := Key(ev.Org, ev.Node); k != key {
			return fmt.Errorf("node %s under key %q: the key must be org/node", k, key)
		}
		if ev.Deleted {
			w.SetNode(key, nil)
			return nil
		}
		n, err := CompileNode(ev)
		if err != nil {
			return err
		}
		n.Partition = partition
		w.SetNode(key, n)
	case topology.AgentPackages:
		if v == nil {
			w.SetPackage(key, nil)
			return nil
		}
		ev, ok := v.(*events.AgentPackage)
		if !ok {
			return fmt.Errorf("want a %s, got %s", events.SchemaAgentPackage, v.SchemaName())
		}
		if ev.Version != key {
			return fmt.Errorf("package %s under key %q: the key must be its version", ev.Version, key)
		}
		if _, err := ParseSemver(ev.Version); err != nil {
			return err
		}
		if len(ev.SHA256) != 64 {
			return fmt.Errorf("package %s: sha256 %q is not 64 hex digits", ev.Version, ev.SHA256)
		}
		w.SetPackage(key, ev)
	case topology.AgentStatus:
		if v == nil {
			w.SetStatus(key, nil)
			return nil
		}
		ev, ok := v.(*events.AgentStatus)
		if !ok {
			return fmt.Errorf("want a %s, got %s", events.SchemaAgentStatus, v.SchemaName())
		}
		if k := Key(ev.Org, ev.Node); k != key {
			return fmt.Errorf("status of %s under key %q: the key must be org/node", k, key)
		}
		if ev.Status != "" && !ValidState(ev.Status) {
			return fmt.Errorf("status %q of %s is not one of %v", ev.Status, key, States)
		}
		w.SetStatus(key, ev)
	default:
		return fmt.Errorf("no handler for topic %s", topic)
	}
	return nil
}

// FollowedWorld is a World kept current from WorldTopics by a
// runtime.Follower, each record folded by World.Fold (a refused record is
// logged and left out). The nmp-hub and the North API each keep one.
type FollowedWorld struct {
	*World
	f *runtime.Follower
}

// FollowWorld starts reading WorldTopics from the start into a new world.
// Close it when done.
func FollowWorld(env runtime.Env, log zerolog.Logger) (*FollowedWorld, error) {
	w := &FollowedWorld{World: NewWorld()}
	fold := func(ctx context.Context, rec *kgo.Record) error {
		topic := strings.TrimPrefix(rec.Topic, env.Kafka.Prefix)
		var v events.Event
		if rec.Value != nil {
			var err error
			if v, err = env.Codec.Decode(ctx, rec.Value); err != nil {
				log.Warn().Err(err).Str("topic", rec.Topic).Int64("offset", rec.Offset).Msg("record left out of the node-management world")
				return nil
			}
		}
		if err := w.Fold(topic, rec.Partition, string(rec.Key), v); err != nil {
			log.Warn().Err(err).Str("topic", rec.Topic).Int64("offset", rec.Offset).Msg("record left out of the node-management world")
		}
		return nil
	}
	apply := map[string]runtime.ApplyFunc{}
	for _, t := range WorldTopics {
		apply[t] = fold
	}
	f, err := runtime.Follow(env.Kafka, log, apply)
	if err != nil {
		return nil, fmt.Errorf("follow the node-management world: %w", err)
	}
	w.f = f
	return w, nil
}

// WaitFor waits until the record at offset of partition of topic (base
// name) has been folded.
func (w *FollowedWorld) WaitFor(ctx context.Context, topic string, partition int32, offset int64) error {
	return w.f.WaitFor(ctx, topic, partition, offset)
}

// WaitCaughtUp returns once every record committed to the topics (all of
// WorldTopics when none are named) before the call has been folded.
func (w *FollowedWorld) WaitCaughtUp(ctx context.Context, topics ...string) error {
	return w.f.WaitCaughtUp(ctx, topics...)
}

// Close stops following.
func (w *FollowedWorld) Close() { w.f.Close() }

// Topic is the world's view of one of its topics: what a reader waits
// for to know that topic is read.
func (w *FollowedWorld) Topic(base string) WorldTopic { return WorldTopic{w: w, base: base} }

// WorldTopic is one topic of a FollowedWorld.
type WorldTopic struct {
	w    *FollowedWorld
	base string
}

// Base is the topic's base name.
func (t WorldTopic) Base() string { return t.base }

// WaitCaughtUp returns once the world holds what the topic held.
func (t WorldTopic) WaitCaughtUp(ctx context.Context) error { return t.w.WaitCaughtUp(ctx, t.base) }

// WaitFor waits until the record at offset of partition has been folded.
func (t WorldTopic) WaitFor(ctx context.Context, partition int32, offset int64) error {
	return t.w.WaitFor(ctx, t.base, partition, offset)
}
