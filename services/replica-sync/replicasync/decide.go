// Package replicasync is the replica-sync stage (seed 003, "true
// participant replicas"): it reads what participant replicas send the
// runtime (registrations, heartbeats, results, state and property
// changes), keeps the registry of participants and their replicas, and
// writes every state change to the compacted acm.sync, from which every
// replica of a participant rebuilds the same state. Decide holds the
// decisions; the stage (stage.go) wires it to Kafka, exactly-once.
package replicasync

import (
	"fmt"
	"sort"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/check"
)

// View is the state of acm.sync as the stage knows it: what is committed
// there and what this stage wrote since.
type View interface {
	// Get returns the state under key; found is false when there is none
	// (never written, or deleted).
	Get(key string) (st *events.ReplicaState, found bool)
	// Keys returns every key holding a state, in no particular order.
	Keys() []string
}

// Change is one record for acm.sync: State nil deletes the key.
type Change struct {
	Key   string
	State *events.ReplicaState
}

// Rules are the stage's settings that Decide uses.
type Rules struct {
	// OfflineAfter is how long a replica may stay silent before it is
	// OFF_LINE (ACM's maxStatusWaitMs; 150 s by default).
	OfflineAfter time.Duration
	// ForgetAfter is how long a replica may stay silent before it is
	// removed from the registry (0: never). Replica ids are per process,
	// so a killed replica never comes back under its id.
	ForgetAfter time.Duration
	// Owns, when set, says whether the participant's messages are on the
	// acm.runtime partition a TICK or an all-participants SYNC came on:
	// each partition's owner checks and rewrites only its participants,
	// so two members never write the same key. Nil owns every one.
	Owns func(participantID string) bool
}

func (r Rules) owns(participantID string) bool { return r.Owns == nil || r.Owns(participantID) }

// Decide returns the acm.sync changes one message makes. now is the time
// the stage handles it (used by TICK and stamped on every change). An
// error means the message can never be applied (it is dead-lettered).
func Decide(r Rules, v View, m *events.ParticipantMessage, now time.Time) ([]Change, error) {
	switch m.Kind {
	case acm.MsgTick:
		return tick(r, v, now), nil
	case acm.MsgSync:
		if m.ParticipantID != "" {
			if err := check.ID("participant_id", m.ParticipantID); err != nil {
				return nil, err
			}
		}
		return resync(r, v, m.ParticipantID, now), nil
	}
	if err := check.ID("participant_id", m.ParticipantID); err != nil {
		return nil, err
	}
	if err := check.ID("replica_id", m.ReplicaID); err != nil {
		return nil, err
	}
	switch m.Kind {
	case acm.MsgRegister, acm.MsgHeartbeat:
		return []Change{register(v, m, now)}, nil
	case acm.MsgDeregister:
		key := acm.ReplicaKey(m.ParticipantID, m.ReplicaID)
		if _, ok := v.Get(key); !ok {
			return nil, nil
		}
		return []Change{{Key: key}}, nil
	case acm.MsgResult, acm.MsgState:
		if m.Outcome == acm.Stale {
			// The replica applied nothing: the state stays as it is.
			return nil, nil
		}
		return element(v, m, now)
	}
	return nil, fmt.Errorf("replica-sync: message %s from participant %s replica %s has kind %q, which replica-sync does not handle", m.MessageID, m.ParticipantID, m.ReplicaID, m.Kind)
}

// next is prev's successor version under key.
func next(v View, key string) int64 {
	if prev, ok := v.Get(key); ok {
		return prev.Version + 1
	}
	return 1
}

func register(v View, m *events.ParticipantMessage, now time.Time) Change {
	key := acm.ReplicaKey(m.ParticipantID, m.ReplicaID)
	types := m.SupportedElementTypes
	if prev, ok := v.Get(key); ok && len(types) == 0 && m.Kind == acm.MsgHeartbeat {
		types = prev.SupportedElementTypes
	}
	types = append([]string{}, types...)
	sort.Strings(types)
	return Change{Key: key, State: &events.ReplicaState{
		ParticipantID: m.ParticipantID, ReplicaID: m.ReplicaID, Kind: acm.KindReplica,
		State: acm.OnLine, Properties: "{}", Version: next(v, key), UpdatedAt: now,
		HeartbeatMs: m.SentAt.UnixMilli(), SupportedElementTypes: types,
	}}
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// element turns a RESULT or STATE into the new state of the element or
// composition it is about. A message older than the state (a lower
// revision: a late answer to an operation the runtime has since
// superseded) changes nothing.
func element(v View, m *events.ParticipantMessage, now time.Time) ([]Change, error) {
	comp, inst, elem := str(m.CompositionID), str(m.InstanceID), str(m.ElementID)
	var key, kind string
	switch {
	case inst != "" && elem != "":
		if err := check.ID("instance_id", inst); err != nil {
			return nil, err
		}
		if err := check.ID("element_id", elem); err != nil {
			return nil, err
		}
		key, kind = acm.ElementKey(m.ParticipantID, inst, elem), acm.KindElement
	case inst == "" && comp != "":
		if err := check.ID("composition_id", comp); err != nil {
			return nil, err
		}
		key, kind = acm.CompositionKey(m.ParticipantID, comp), acm.KindComposition
	default:
		return nil, fmt.Errorf("replica-sync: %s message %s from participant %s replica %s names neither an instance element (instance_id and element_id) nor a composition (composition_id alone)", m.Kind, m.MessageID, m.ParticipantID, m.ReplicaID)
	}
	props := m.Properties
	if props == "" {
		props = "{}"
	}
	if !check.Object([]byte(props)) {
		return nil, fmt.Errorf("replica-sync: %s message %s from participant %s replica %s: properties are not a JSON object: %.80q", m.Kind, m.MessageID, m.ParticipantID, m.ReplicaID, props)
	}
	prev, had := v.Get(key)
	if had && m.Revision < prev.Revision {
		return nil, nil
	}
	state := str(m.State)
	if state == "" {
		if !had {
			return nil, fmt.Errorf("replica-sync: %s message %s from participant %s replica %s gives no state for %s, which has none yet", m.Kind, m.MessageID, m.ParticipantID, m.ReplicaID, key)
		}
		state = prev.State
	}
	if state == acm.Deleted {
		if !had {
			return nil, nil
		}
		return []Change{{Key: key}}, nil
	}
	st := &events.ReplicaState{
		ParticipantID: m.ParticipantID, InstanceID: inst, ElementID: elem, Kind: kind,
		State: state, Properties: props, Version: next(v, key), UpdatedAt: now,
		ReplicaID: m.ReplicaID, CompositionID: comp, ElementType: m.ElementType,
		Revision: m.Revision, OperationID: str(m.ResponseTo), Detail: m.Detail,
	}
	if had {
		if st.CompositionID == "" {
			st.CompositionID = prev.CompositionID
		}
		if st.ElementType == "" {
			st.ElementType = prev.ElementType
		}
		if st.OperationID == "" && m.Revision == prev.Revision {
			st.OperationID = prev.OperationID
		}
	}
	if acm.InTransition(state) {
		st.DeadlineMs = m.DeadlineMs
	}
	return []Change{{Key: key, State: st}}, nil
}

// tick marks silent replicas OFF_LINE, removes those silent longer than
// ForgetAfter, and marks elements whose operation ran past its deadline
// TIMEOUT (the replica running it died, or cannot say).
func tick(r Rules, v View, now time.Time) []Change {
	var out []Change
	keys := v.Keys()
	sort.Strings(keys)
	for _, key := range keys {
		st, _ := v.Get(key)
		if !r.owns(st.ParticipantID) {
			continue
		}
		silent := now.Sub(time.UnixMilli(st.HeartbeatMs))
		switch {
		case st.Kind == acm.KindReplica && r.ForgetAfter > 0 && silent > r.ForgetAfter:
			out = append(out, Change{Key: key})
		case st.Kind == acm.KindReplica && st.State == acm.OnLine && silent > r.OfflineAfter:
			n := *st
			n.State, n.Version, n.UpdatedAt = acm.OffLine, st.Version+1, now
			n.Detail = fmt.Sprintf("no heartbeat for more than %s (last %s)", r.OfflineAfter, time.UnixMilli(st.HeartbeatMs).UTC().Format(time.RFC3339Nano))
			out = append(out, Change{Key: key, State: &n})
		case st.Kind != acm.KindReplica && acm.InTransition(st.State) && st.DeadlineMs > 0 && now.UnixMilli() > st.DeadlineMs:
			n := *st
			n.State, n.Version, n.UpdatedAt, n.DeadlineMs = acm.Timeout, st.Version+1, now, 0
			n.Detail = fmt.Sprintf("%s by replica %s: no result before the operation's deadline %s", st.State, st.ReplicaID, time.UnixMilli(st.DeadlineMs).UTC().Format(time.RFC3339Nano))
			out = append(out, Change{Key: key, State: &n})
		}
	}
	return out
}

// resync writes every state of the participant (every participant of
// the partition when participantID is empty) again, so every replica
// applies it again.
func resync(r Rules, v View, participantID string, now time.Time) []Change {
	var out []Change
	keys := v.Keys()
	sort.Strings(keys)
	for _, key := range keys {
		p := acm.ParticipantOf(key)
		if participantID != "" && p != participantID || participantID == "" && !r.owns(p) {
			continue
		}
		st, _ := v.Get(key)
		n := *st
		n.Version, n.UpdatedAt = st.Version+1, now
		out = append(out, Change{Key: key, State: &n})
	}
	return out
}
