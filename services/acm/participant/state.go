package participant

import (
	"context"
	"fmt"
	"maps"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// State is a participant's replicated state: every composition and
// element record of acm.sync for it, by acm.sync key. Two replicas that
// caught up with the same records hold equal States.
type State map[string]events.ReplicaState

// syncRecords hands the acm.sync records of this participant, decoded,
// to applySync; records of other participants are skipped undecoded. A
// record of this participant that is not a ReplicaState is dead-lettered
// with the reason.
func (p *Participant) syncRecords() runtime.ApplyFunc {
	apply := runtime.Apply(p.env, runtime.PassTombstones, p.applySync, p.refuseSync)
	return func(ctx context.Context, rec *kgo.Record) error {
		if acm.ParticipantOf(string(rec.Key)) != p.cfg.ParticipantID {
			return nil
		}
		return apply(ctx, rec)
	}
}

// applySync folds one acm.sync record of this participant into the
// replica's state.
func (p *Participant) applySync(_ context.Context, m runtime.Msg[*events.ReplicaState]) error {
	key := string(m.Key)
	if m.Value == nil {
		p.mu.Lock()
		delete(p.state, key)
		delete(p.registry, key)
		p.mu.Unlock()
		p.notify()
		return nil
	}
	st := m.Value
	p.mu.Lock()
	switch st.Kind {
	case acm.KindReplica:
		p.registry[key] = *st
	case acm.KindComposition, acm.KindElement:
		if cur, ok := p.state[key]; !ok || st.Version >= cur.Version {
			p.state[key] = *st
		}
	}
	p.mu.Unlock()
	p.notify()
	if p.cfg.OnApply != nil {
		p.cfg.OnApply(key, st)
	}
	return nil
}

// refuseSync dead-letters an acm.sync record of this participant that is
// not a ReplicaState.
func (p *Participant) refuseSync(ctx context.Context, in runtime.Input, err error) {
	reason := fmt.Errorf("participant %s replica %s: acm.sync record %q: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, in.Key, err)
	if err := p.emit.DeadLetter(ctx, in, reason); err != nil {
		p.log.Error().Err(err).Msg("dead letter not written")
	}
}

// notify wakes whoever waits for the state to change.
func (p *Participant) notify() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Dump returns a copy of the replica's state.
func (p *Participant) Dump() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.state)
}

// Replicas returns the registry entries of this participant's replicas as
// acm.sync holds them, by replica id.
func (p *Participant) Replicas() map[string]events.ReplicaState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]events.ReplicaState{}
	for _, st := range p.registry {
		out[st.ReplicaID] = st
	}
	return out
}

// ElementState returns what the replica holds of one element.
func (p *Participant) ElementState(instanceID, elementID string) (events.ReplicaState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.state[acm.ElementKey(p.cfg.ParticipantID, instanceID, elementID)]
	return st, ok
}

// WaitState waits until cond holds of the state (checked at once and on
// every change) or ctx ends. cond runs under the replica's lock: it must
// not keep the map nor call the replica's methods.
func (p *Participant) WaitState(ctx context.Context, cond func(State) bool) error {
	for {
		p.mu.Lock()
		ok := cond(p.state)
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("participant %s replica %s: wait for the state: %w", p.cfg.ParticipantID, p.cfg.ReplicaID, ctx.Err())
		case <-ch:
		}
	}
}

// syncTopic is acm.sync under the prefix.
func (p *Participant) syncTopic() string { return p.cfg.Kafka.Topic(topology.ACMSync) }
