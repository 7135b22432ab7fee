package runtime

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// Mode says how a stage's outputs and offsets are committed.
type Mode int

const (
	// Transactional is exactly-once consume-transform-produce for
	// Kafka-to-Kafka stages: a poll's outputs and input offsets commit in
	// one transaction; consumers read committed.
	Transactional Mode = iota
	// AtLeastOnce is for stages whose effect is outside Kafka: records are
	// handled in order, an offset is marked only after the handler (its
	// effect) succeeded, and marked offsets are committed on revoke and at
	// shutdown. Effects must be idempotent.
	AtLeastOnce
)

func (m Mode) String() string {
	if m == AtLeastOnce {
		return "at-least-once"
	}
	return "transactional"
}

// Input is one consumed record, decoded.
type Input struct {
	Topic     string // base topic name, without the prefix
	Partition int32
	Offset    int64
	Key       []byte
	// Value is the decoded event; nil for a tombstone or a raw topic.
	Value     events.Event
	Raw       []byte
	Headers   []kgo.RecordHeader
	Timestamp time.Time
	// Polled is when the poll that fetched the record returned: the
	// record, and whatever was committed before it was written, was
	// committed before then (read committed). A handler that must see a
	// followed table hold what was written before its record waits for
	// the table as of Polled (TableOf.WaitCaughtUpAsOf), which lists the
	// topic's ends once per poll instead of once per record.
	Polled time.Time
	// Trace is the record's trace context (a span of its handling, when
	// tracing; see Tracer), for spans of effects the stage carries out
	// for it later, such as a notification. Nil when not tracing.
	Trace context.Context
	// hold, in an at-least-once stage, keeps the offsets whose effect
	// goes on (see Hold).
	hold *holds
}

// Tombstone reports whether the record deletes its key.
func (in Input) Tombstone() bool { return in.Raw == nil }

// Output is one record a handler wants produced.
type Output struct {
	Topic string // base topic name, without the prefix
	Key   []byte
	// Value is encoded with its current schema; nil with Raw nil is a
	// tombstone.
	Value   events.Event
	Raw     []byte
	Headers []kgo.RecordHeader
	// Partition, when Explicit is set, pins the record to a partition
	// (for fan-out to every partition of a co-partitioned topic).
	Partition int32
	Explicit  bool
}

// Handler is a stage's decision logic: from one input to its outputs.
// Zero outputs means the input is filtered. An error is retried with
// capped backoff unless it is Permanent, in which case the input goes to
// the stage's dead-letter topic with the reason and the stage goes on; a
// panic is a permanent error too (see Retry, DeadLetter, Recover).
type Handler func(ctx context.Context, in Input) ([]Output, error)

// Outcome is what a BatchHandler says of one input: the outputs to
// produce, or why it failed (Permanent: dead-lettered; otherwise retried).
type Outcome struct {
	Outputs []Output
	Err     error
}

// BatchHandler handles the records of one poll together and returns one
// Outcome per input, in the inputs' order. It is for at-least-once stages
// whose effect costs much less for many records at once (many components
// written in one Consul transaction). The inputs are in fetch order, so
// each partition's records keep their order. On a transient failure the
// runtime keeps what the inputs before it produced and, after a backoff,
// hands that input and every one after it in again; like every
// at-least-once handler it must be idempotent.
type BatchHandler func(ctx context.Context, ins []Input) []Outcome

// Stage describes one pipeline stage to the runtime.
type Stage struct {
	Name   string   // e.g. "matcher"; DLQ is dlq.<Name>
	Mode   Mode     // Transactional or AtLeastOnce
	Inputs []string // base names of the topics the stage's group consumes
	// Outputs are the base names of the topics the stage produces to
	// (besides its dead-letter topic), so that their records-out series
	// exist at 0 from the start (optional).
	Outputs []string
	// Group overrides the consumer group, "policyflow-<Name>" by default;
	// the topic prefix is put in front of it, so environments sharing a
	// cluster never share a group.
	Group string
	// CoPartitioned assigns the same partition numbers of every input to
	// one member (range balancing), for stages that join inputs keyed alike.
	CoPartitioned bool
	// PollRecords, when above 0 and below Env.PollRecords, caps the
	// records of one poll (and transaction) of this stage: for a stage
	// whose records each cost far more than moving them, so that a
	// transaction stays well within the transaction timeout.
	PollRecords int
	// PollBudget bounds how long a transactional stage handles one
	// poll's records: a third of the transaction timeout unless set
	// lower (0, or above that third, means that third). Once it is
	// spent, the records left are not handled, the transaction is
	// aborted and the stage is rewound (Rewound), and the poll is taken
	// again with half the records handled in time, then twice as many
	// after each transaction that took less than a quarter of it, up to
	// PollRecords. Without it a poll that outlives the timeout on a busy
	// machine is aborted by the broker, which fences the producer and
	// stops the stage, to meet the same poll again when started. Set it
	// lower for a stage whose records differ in cost by orders of
	// magnitude.
	PollBudget time.Duration
	// GCPercent, when above 0, is the garbage collector's target for
	// the stage's process (runtime/debug.SetGCPercent) in place of Go's
	// default of 100, unless GOGC is set: a stage whose live heap is
	// large lets its heap grow by this share of it between collections
	// instead of doubling it (see ApplyGCPercent).
	GCPercent int
	// DeadLetterHeaders go on every dead letter of the stage besides the
	// reason and where the record came from (optional): who dead-lettered
	// it, when several writers share one dead-letter topic.
	DeadLetterHeaders []kgo.RecordHeader
	// Flags registers stage-specific flags (optional).
	Flags func(fs *flag.FlagSet)
	// Settings is what Flags fills (a pointer to the stage's
	// configuration), so a test can check that every flag reaches it
	// (flagtest); required with Flags.
	Settings any
	// Setup builds the handler with whatever it needs (tables, Consul
	// client); the returned close func runs after the consume loop ends.
	Setup func(ctx context.Context, env Env) (Handler, func(), error)
	// SetupBatch, in place of Setup, builds a BatchHandler that is given
	// each poll's records at once; AtLeastOnce stages only.
	SetupBatch func(ctx context.Context, env Env) (BatchHandler, func(), error)
	// Assigned and Revoked, when set, are told of partition changes so a
	// stage can restore or drop per-partition state (see ReadPartitions).
	// Assigned runs before any record of the new partitions is handled.
	Assigned func(ctx context.Context, env Env, assigned map[string][]int32) error
	Revoked  func(ctx context.Context, env Env, revoked map[string][]int32)
	// Rewound is called after a transaction aborted (a rebalance or a
	// produce failure), before the batch's records are handled again from
	// the committed offsets: in-memory state that the aborted records
	// moved forward must be rebuilt. When nil, the runtime calls Revoked
	// then Assigned for the whole current assignment instead.
	Rewound func(ctx context.Context, env Env, assigned map[string][]int32) error
}

// pollRecords is how many records one poll of the stage takes.
func (r *runner) pollRecords() int {
	if n := r.stage.PollRecords; n > 0 && (r.env.PollRecords <= 0 || n < r.env.PollRecords) {
		return n
	}
	return r.env.PollRecords
}

// pollBudget is how long the handling of one poll may take: the stage's
// PollBudget, at most a third of the transaction timeout (0: no limit,
// when there is no timeout either).
func (r *runner) pollBudget() time.Duration {
	b, t := r.stage.PollBudget, r.env.TransactionTimeout/3
	if t > 0 && (b <= 0 || b > t) {
		b = t
	}
	return max(b, 0)
}

// pollCap is how many records the next poll of a transactional stage
// takes: pollRecords, or fewer after a poll overran the budget.
func (r *runner) pollCap() int {
	if r.capped > 0 {
		return r.capped
	}
	return r.pollRecords()
}

// GroupIn returns the stage's consumer group under a topic prefix.
func (s Stage) GroupIn(k Kafka) string { return k.Prefix + s.GroupID() }

// GroupID returns the stage's consumer group without the prefix.
func (s Stage) GroupID() string {
	if s.Group != "" {
		return s.Group
	}
	return "policyflow-" + s.Name
}

// Validate says what is wrong with a stage definition.
func (s Stage) Validate() error {
	switch {
	case s.Name == "":
		return errors.New("stage has no name")
	case len(s.Inputs) == 0:
		return fmt.Errorf("stage %s consumes no topic", s.Name)
	case s.Setup == nil && s.SetupBatch == nil:
		return fmt.Errorf("stage %s has no Setup", s.Name)
	case s.Setup != nil && s.SetupBatch != nil:
		return fmt.Errorf("stage %s has both Setup and SetupBatch; give one", s.Name)
	case s.SetupBatch != nil && s.Mode != AtLeastOnce:
		return fmt.Errorf("stage %s: SetupBatch is for at-least-once stages; a transactional stage uses Setup", s.Name)
	}
	return nil
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as one that retrying cannot fix: the input is
// dead-lettered with the reason.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Permanentf is Permanent(fmt.Errorf(...)).
func Permanentf(format string, args ...any) error { return Permanent(fmt.Errorf(format, args...)) }

// IsPermanent reports whether err (or an error it wraps) is permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}
