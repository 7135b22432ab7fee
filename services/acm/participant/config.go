// Package participant is the participant intermediary (seed 003): the Go
// package a participant implementation embeds to become one replica of a
// participant. The implementation supplies callbacks per element type;
// the intermediary registers the replica, heartbeats, takes operations
// from the consumer group its participant's replicas share, applies
// ACM's addressing rule, runs each operation with a timeout (cancelling
// a stuck one when the next operation for the same element comes),
// reports results and property changes, and holds the participant's
// whole state as acm.sync says, identical on every replica.
package participant

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/runtime"
)

// Defaults.
const (
	// DefaultHeartbeat is how often a replica says it is alive (ACM's
	// default).
	DefaultHeartbeat = 20 * time.Second
	// DefaultOperationTimeout bounds an operation that names no timeout.
	DefaultOperationTimeout = 60 * time.Second
)

// Element is what a callback is told of one element of an instance.
type Element struct {
	ParticipantID string
	CompositionID string
	InstanceID    string
	ElementID     string
	ElementType   string
	// Properties is the element's properties as a JSON object: those of
	// the operation for deploy and update, the ones the replicas hold for
	// undeploy and delete.
	Properties json.RawMessage
	Revision   int64
	// OperationID is the message_id of the operation.
	OperationID string
}

// Composition is what prime and deprime are told: one element definition
// of a composition definition.
type Composition struct {
	ParticipantID string
	CompositionID string
	// ElementID is the element definition's id, ElementType its type and
	// Properties its definition (a JSON object).
	ElementID   string
	ElementType string
	Properties  json.RawMessage
	Revision    int64
	OperationID string
}

// Callbacks are what a participant implementation does for the elements
// of one type. A callback must return when ctx ends (the operation timed
// out, or the next operation for the element cancelled it); one that does
// not is abandoned and its answer ignored. Deploy and Update may return
// out properties (a JSON object, or nil) that are merged into the
// element's properties and replicated. A nil callback succeeds at once.
type Callbacks struct {
	Prime    func(ctx context.Context, c Composition) error
	Deprime  func(ctx context.Context, c Composition) error
	Deploy   func(ctx context.Context, e Element) (json.RawMessage, error)
	Update   func(ctx context.Context, e Element) (json.RawMessage, error)
	Undeploy func(ctx context.Context, e Element) error
	Delete   func(ctx context.Context, e Element) error
}

// Config is one replica's configuration.
type Config struct {
	Kafka runtime.Kafka
	// ParticipantID names the participant; every replica of it has the
	// same one.
	ParticipantID string
	// ReplicaID names this replica; unique per process (a random one
	// when empty).
	ReplicaID string
	// Types maps each supported element type to its callbacks.
	Types map[string]Callbacks
	// Heartbeat is how often the replica heartbeats (DefaultHeartbeat
	// when 0).
	Heartbeat time.Duration
	// OperationTimeout bounds an operation whose timeout_ms is 0
	// (DefaultOperationTimeout when 0).
	OperationTimeout time.Duration
	// SessionTimeout is how long the group waits for a silent replica
	// before giving its operations to others (0: the client's 45 s).
	SessionTimeout time.Duration
	// InstanceID, when set, makes the replica a static member of the
	// participant's group (unique among its replicas and the same across
	// restarts, e.g. a pod name): restarted, it takes its operations'
	// partitions back at once instead of after SessionTimeout.
	InstanceID string
	Log        zerolog.Logger
	// Codec encodes and decodes records (events.Default() when nil).
	Codec *events.Codec
	// OnApply, when set, is told of every acm.sync record of the
	// participant the replica applied (after applying it), from the
	// reader's goroutine: for metrics and measurements.
	OnApply func(key string, st *events.ReplicaState)
}

// NewReplicaID returns a random replica id (a UUID, version 4).
func NewReplicaID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// withDefaults fills the defaults in and says what is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.ReplicaID == "" {
		c.ReplicaID = NewReplicaID()
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.OperationTimeout == 0 {
		c.OperationTimeout = DefaultOperationTimeout
	}
	if c.Codec == nil {
		c.Codec = events.Default()
	}
	var errs []error
	if err := check.ID("participant id", c.ParticipantID); err != nil {
		errs = append(errs, err)
	}
	if err := check.ID("replica id", c.ReplicaID); err != nil {
		errs = append(errs, err)
	}
	if len(c.Types) == 0 {
		errs = append(errs, errors.New("no element type supported: give the callbacks of at least one"))
	}
	if c.Heartbeat < 0 || c.OperationTimeout < 0 || c.SessionTimeout < 0 {
		errs = append(errs, fmt.Errorf("heartbeat %s, operation timeout %s, session timeout %s: none may be negative", c.Heartbeat, c.OperationTimeout, c.SessionTimeout))
	}
	if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("participant: %w", err)
	}
	return c, nil
}
