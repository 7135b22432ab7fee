// Package acm holds the rules every side of automation-composition
// participants shares: the keys of acm.sync, the states and outcomes, the
// consumer group of a participant's replicas and the key of an operation.
// The participant intermediary (participant), the replica-sync stage and
// the North API all call it, so each rule is spelled once.
package acm

import (
	"strings"

	"github.com/policyflow/policyflow/services/check"
)

// Registry states of a replica.
const (
	OnLine  = "ON_LINE"
	OffLine = "OFF_LINE"
)

// States of compositions and elements.
const (
	Priming      = "PRIMING"
	Primed       = "PRIMED"
	Depriming    = "DEPRIMING"
	Commissioned = "COMMISSIONED"
	Deploying    = "DEPLOYING"
	Deployed     = "DEPLOYED"
	Updating     = "UPDATING"
	Undeploying  = "UNDEPLOYING"
	Undeployed   = "UNDEPLOYED"
	Timeout      = "TIMEOUT"
	Failed       = "FAILED"
)

// Outcomes of an operation, in ParticipantMessage.outcome.
const (
	Success   = "SUCCESS"
	Failure   = "FAILED"
	TimedOut  = "TIMEOUT"
	Cancelled = "CANCELLED"
	Stale     = "STALE"
)

// Operation kinds (ParticipantOperation.kind).
const (
	OpPrime    = "PRIME"
	OpDeprime  = "DEPRIME"
	OpDeploy   = "DEPLOY"
	OpUpdate   = "UPDATE"
	OpUndeploy = "UNDEPLOY"
	OpDelete   = "DELETE"
	// OpStatus asks every replica it reaches for a status report (ACM's
	// ParticipantStatusReq): each answers with a HEARTBEAT at once,
	// response_to naming the request, and runs nothing.
	OpStatus = "STATUS"
)

// Message kinds (ParticipantMessage.kind).
const (
	MsgRegister   = "REGISTER"
	MsgDeregister = "DEREGISTER"
	MsgHeartbeat  = "HEARTBEAT"
	MsgResult     = "RESULT"
	MsgState      = "STATE"
	MsgSync       = "SYNC"
	MsgTick       = "TICK"
)

// State kinds (ReplicaState.kind).
const (
	KindReplica     = "REPLICA"
	KindComposition = "COMPOSITION"
	KindElement     = "ELEMENT"
)

// Transition returns the state an element or composition is in while op
// runs, and the state it reaches when op succeeds.
func Transition(op string) (during, after string, ok bool) {
	switch op {
	case OpPrime:
		return Priming, Primed, true
	case OpDeprime:
		return Depriming, Commissioned, true
	case OpDeploy:
		return Deploying, Deployed, true
	case OpUpdate:
		return Updating, Deployed, true
	case OpUndeploy:
		return Undeploying, Undeployed, true
	case OpDelete:
		return Undeploying, Undeployed, true
	}
	return "", "", false
}

// InTransition reports whether state is one an operation is still
// running in.
func InTransition(state string) bool {
	switch state {
	case Priming, Depriming, Deploying, Updating, Undeploying:
		return true
	}
	return false
}

// ReplicaKey is the acm.sync key of a replica's registry entry.
func ReplicaKey(participantID, replicaID string) string {
	return participantID + "/replica/" + replicaID
}

// CompositionKey is the acm.sync key of a primed composition definition.
func CompositionKey(participantID, compositionID string) string {
	return participantID + "/composition/" + compositionID
}

// ElementKey is the acm.sync key of one element of an instance.
func ElementKey(participantID, instanceID, elementID string) string {
	return participantID + "/instance/" + instanceID + "/" + elementID
}

// ParticipantOf returns the participant an acm.sync key belongs to.
func ParticipantOf(key string) string {
	p, _, _ := strings.Cut(key, "/")
	return p
}

// Group is the consumer group (before the topic prefix) that the replicas
// of one participant share to read its operations.
func Group(participantID string) string { return "policyflow-participant-" + participantID }

// DLQStage is the name whose dead-letter topic (dlq.participants) takes
// what a participant replica cannot process.
const DLQStage = "participants"

// OperationKey is the record key of an operation on acm.participant: the
// instance, so that one instance's operations stay in order on one
// partition while different instances spread over the replicas; an
// operation on a composition definition is keyed by the composition.
func OperationKey(participantID, compositionID, instanceID string) string {
	switch {
	case instanceID != "":
		return instanceID
	case compositionID != "":
		return compositionID
	}
	return participantID
}

// ErrBadID says an id cannot be used (check.ErrBadID).
var ErrBadID = check.ErrBadID

// Deleted is the state a replica reports for an element or composition
// that is gone: replica-sync deletes its key from acm.sync.
const Deleted = "DELETED"
