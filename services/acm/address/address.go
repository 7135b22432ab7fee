// Package address is ACM's addressing rule: whether a message the runtime
// or a participant sent is meant for a given participant replica. The
// participant intermediary applies it to every message before acting, and
// `policyctl explain applies-to` shows it to operators.
package address

import (
	"errors"
	"strings"
)

// Message classes: a ParticipantMessage may carry a participantIdList; a
// ParticipantAckMessage never does.
const (
	ClassParticipant    = "ParticipantMessage"
	ClassParticipantAck = "ParticipantAckMessage"
)

// Message is the addressing part of a message.
type Message struct {
	ParticipantID     string   `json:"participantId"`
	ReplicaID         string   `json:"replicaId"`
	ParticipantIDList []string `json:"participantIdList,omitempty"`
}

// Receiver is the replica deciding whether a message is for it.
type Receiver struct {
	ParticipantID string `json:"participantId"`
	ReplicaID     string `json:"replicaId"`
}

// ErrNoReceiverID says that the receiver lacks its participantId or its
// replicaId, so no message can be decided for it.
var ErrNoReceiverID = errors.New("the receiver has no id")

// Validate says what the receiver lacks.
func (r Receiver) Validate() error {
	switch {
	case strings.TrimSpace(r.ParticipantID) == "":
		return errors.Join(ErrNoReceiverID, errors.New("receiver.participantId is empty: give the receiving participant's id"))
	case strings.TrimSpace(r.ReplicaID) == "":
		return errors.Join(ErrNoReceiverID, errors.New("receiver.replicaId is empty: give the receiving replica's id"))
	}
	return nil
}

// sameID compares two ids the way ACM compares UUIDs: by value, so case
// and surrounding spaces do not matter.
func sameID(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

// Applies reports whether a message of class class (ClassParticipant or
// ClassParticipantAck) is for receiver. The rule, in order:
//
//  1. a non-empty participantIdList (ParticipantMessage only) that lacks
//     the receiver's participantId: not for it;
//  2. no participantId, or the receiver's participantId and no replicaId:
//     for it;
//  3. otherwise it is for the receiver exactly when its replicaId is the
//     receiver's.
//
// It fails only when the receiver lacks an id (ErrNoReceiverID).
func Applies(class string, m Message, receiver Receiver) (bool, error) {
	if err := receiver.Validate(); err != nil {
		return false, err
	}
	if class != ClassParticipantAck && len(m.ParticipantIDList) > 0 {
		listed := false
		for _, id := range m.ParticipantIDList {
			if sameID(id, receiver.ParticipantID) {
				listed = true
				break
			}
		}
		if !listed {
			return false, nil
		}
	}
	if strings.TrimSpace(m.ParticipantID) == "" {
		return true, nil
	}
	if sameID(m.ParticipantID, receiver.ParticipantID) && strings.TrimSpace(m.ReplicaID) == "" {
		return true, nil
	}
	return sameID(m.ReplicaID, receiver.ReplicaID), nil
}
