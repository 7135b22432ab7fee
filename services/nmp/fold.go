package nmp

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// WorldTopics are the topics a World is folded from: nmp.policies,
// agent.nodes, agent.packages and agent.status.
var WorldTopics = []string{topology.NMPPolicies, topology.AgentNodes, topology.AgentPackages, topology.AgentStatus}

// The folds apply one record of one of WorldTopics to w: FoldPolicy a
// record of nmp.policies, FoldNode of agent.nodes, FoldPackage of
// agent.packages and FoldStatus of agent.status, each given the record's
// key and its value, nil for a tombstone. They are the one set of rules
// by which the nmp-hub and the North API read node management; the
// runtime checks that a record holds the topic's event before it is
// folded (runtime.Apply, runtime.Typed). An error says why the record is
// refused; the world then keeps what it had: an NMP must be under its
// org/name key and compile, a node under org/node and compile, a package
// under its version, which is semantic, with a SHA-256 of 64 hex digits,
// and a status under org/node in one of States.

// FoldPolicy folds a record of nmp.policies.
func (w *World) FoldPolicy(key string, ev *events.NodeManagementPolicy) error {
	if ev == nil {
		w.SetPolicy(key, nil)
		return nil
	}
	if k := Key(ev.Org, ev.Name); k != key {
		return fmt.Errorf("NMP %s under key %q: the key must be org/name", k, key)
	}
	p, err := Compile(ev)
	if err != nil {
		return err
	}
	w.SetPolicy(key, p)
	return nil
}

// FoldNode folds a record of agent.nodes, read from partition.
func (w *World) FoldNode(key string, partition int32, ev *events.AgentNode) error {
	if ev == nil {
		w.SetNode(key, nil)
		return nil
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
	return nil
}

// FoldPackage folds a record of agent.packages.
func (w *World) FoldPackage(key string, ev *events.AgentPackage) error {
	if ev == nil {
		w.SetPackage(key, nil)
		return nil
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
	return nil
}

// FoldStatus folds a record of agent.status.
func (w *World) FoldStatus(key string, ev *events.AgentStatus) error {
	if ev == nil {
		w.SetStatus(key, nil)
		return nil
	}
	if k := Key(ev.Org, ev.Node); k != key {
		return fmt.Errorf("status of %s under key %q: the key must be org/node", k, key)
	}
	if ev.Status != "" && !ValidState(ev.Status) {
		return fmt.Errorf("status %q of %s is not one of %v", ev.Status, key, States)
	}
	w.SetStatus(key, ev)
	return nil
}

// FollowedWorld is a World kept current from WorldTopics by a
// runtime.Follower, each record checked by the runtime to hold its topic's
// event and folded by the topic's fold (a refused record is logged and
// left out). The nmp-hub and the North API each keep one.
type FollowedWorld struct {
	*World
	f *runtime.Follower
}

// FollowWorld starts reading WorldTopics from the start into a new world.
// Close it when done.
func FollowWorld(env runtime.Env, log zerolog.Logger) (*FollowedWorld, error) {
	w := &FollowedWorld{World: NewWorld()}
	apply := map[string]runtime.ApplyFunc{
		topology.NMPPolicies: foldInto(env, log, func(m runtime.Msg[*events.NodeManagementPolicy]) error {
			return w.FoldPolicy(string(m.Key), m.Value)
		}),
		topology.AgentNodes: foldInto(env, log, func(m runtime.Msg[*events.AgentNode]) error {
			return w.FoldNode(string(m.Key), m.Partition, m.Value)
		}),
		topology.AgentPackages: foldInto(env, log, func(m runtime.Msg[*events.AgentPackage]) error {
			return w.FoldPackage(string(m.Key), m.Value)
		}),
		topology.AgentStatus: foldInto(env, log, func(m runtime.Msg[*events.AgentStatus]) error {
			return w.FoldStatus(string(m.Key), m.Value)
		}),
	}
	f, err := runtime.Follow(env.Kafka, log, apply)
	if err != nil {
		return nil, fmt.Errorf("follow the node-management world: %w", err)
	}
	w.f = f
	return w, nil
}

// foldInto adapts a fold to the follower: the runtime decodes each record
// once and checks that it holds a V (a tombstone is handed on as a nil
// V); a record it refuses, or the fold refuses, is logged and left out.
func foldInto[V events.Event](env runtime.Env, log zerolog.Logger, fold func(runtime.Msg[V]) error) runtime.ApplyFunc {
	left := func(in runtime.Input, err error) {
		log.Warn().Err(err).Str("topic", in.Topic).Int32("partition", in.Partition).Int64("offset", in.Offset).
			Msg("record left out of the node-management world")
	}
	return runtime.Apply(env, runtime.PassTombstones, func(_ context.Context, m runtime.Msg[V]) error {
		if err := fold(m); err != nil {
			left(m.Input, err)
		}
		return nil
	}, func(_ context.Context, in runtime.Input, err error) { left(in, err) })
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
