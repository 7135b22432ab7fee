package runtime

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// Msg is an input whose value the runtime decoded and checked to be a T.
type Msg[T events.Event] struct {
	Input
	// Value is the input's event; nil only for a tombstone handed
	// through (PassTombstones).
	Value T
}

// Tombstones says what a typed handler does with a tombstone (a record
// without a value).
type Tombstones int

const (
	// SkipTombstones filters a tombstone: no outputs, the handler never
	// sees it. For inputs where one may come but means nothing to the
	// stage; where one is never written, refuse it instead, so that it is
	// not dropped silently.
	SkipTombstones Tombstones = iota
	// PassTombstones hands a tombstone to the handler with a nil Value,
	// for inputs where it means something (a compacted topic's delete).
	PassTombstones
	// RefuseTombstones fails a tombstone permanently, for inputs on which
	// one is never written.
	RefuseTombstones
)

// msgOf checks that in holds a T. skip is true for a tombstone to leave
// out; the error (permanent) says what in holds instead.
func msgOf[T events.Event](in Input, tombstones Tombstones) (m Msg[T], skip bool, err error) {
	m.Input = in
	if in.Tombstone() {
		switch tombstones {
		case PassTombstones:
			return m, false, nil
		case RefuseTombstones:
			return m, false, Permanentf("record at %s[%d]@%d is a tombstone (no value), which %s never carries: want %s", in.Topic, in.Partition, in.Offset, in.Topic, schemaOf[T]())
		}
		return m, true, nil
	}
	v, ok := in.Value.(T)
	if !ok {
		held := "not decoded"
		if in.Value != nil {
			held = in.Value.SchemaName()
		}
		return m, false, Permanentf("record at %s[%d]@%d is %s, want %s", in.Topic, in.Partition, in.Offset, held, schemaOf[T]())
	}
	m.Value = v
	return m, false, nil
}

// schemaOf names the schema of the events of type T.
func schemaOf[T events.Event]() string {
	var zero T // every event's SchemaName answers on a nil pointer
	return zero.SchemaName()
}

// Typed is a Handler for inputs of one event type: the runtime decodes
// each input once and checks its type once, so fn gets a T. An input
// holding another event fails permanently (it is dead-lettered with what
// it holds and what was wanted); a tombstone is treated as tombstones says.
func Typed[T events.Event](tombstones Tombstones, fn func(ctx context.Context, m Msg[T]) ([]Output, error)) Handler {
	return func(ctx context.Context, in Input) ([]Output, error) {
		m, skip, err := msgOf[T](in, tombstones)
		if skip || err != nil {
			return nil, err
		}
		return fn(ctx, m)
	}
}

// TypedBatch is Typed for a BatchHandler: fn is handed, in order, the
// inputs that hold a T (and tombstones, when passed through) and returns
// one Outcome for each of them.
func TypedBatch[T events.Event](tombstones Tombstones, fn func(ctx context.Context, ms []Msg[T]) []Outcome) BatchHandler {
	return func(ctx context.Context, ins []Input) []Outcome {
		out := make([]Outcome, len(ins))
		idx := make([]int, 0, len(ins))
		ms := make([]Msg[T], 0, len(ins))
		for i, in := range ins {
			m, skip, err := msgOf[T](in, tombstones)
			if skip || err != nil {
				out[i].Err = err
				continue
			}
			idx = append(idx, i)
			ms = append(ms, m)
		}
		if len(ms) == 0 {
			return out
		}
		for j, oc := range counted(fn(ctx, ms), len(ms)) {
			out[idx[j]] = oc
		}
		return out
	}
}

// Route is the Handler of a stage with several inputs: each input goes to
// the handler of its topic (base name), typically a Typed one.
func Route(byTopic map[string]Handler) Handler {
	return func(ctx context.Context, in Input) ([]Output, error) {
		h, ok := byTopic[in.Topic]
		if !ok {
			return nil, Permanentf("record at %s[%d]@%d: no handler for topic %s", in.Topic, in.Partition, in.Offset, in.Topic)
		}
		return h(ctx, in)
	}
}

// Rows adapts fn to the record callback of ReadPartitions and ReadRange,
// for a stage rebuilding state from a topic: each record is decoded once
// and checked to hold a V, a tombstone treated as tombstones says. A
// record that cannot be decoded, holds another event or is a refused
// tombstone is logged and left out (it was refused where it was
// consumed); an error of fn ends the read.
func Rows[V events.Event](ctx context.Context, env Env, tombstones Tombstones, fn func(Msg[V]) error) func(*kgo.Record) error {
	return func(rec *kgo.Record) error {
		m, skip, err := decodeRow[V](ctx, env.Codec, env.Kafka, tombstones, rec)
		if err != nil {
			env.Log.Warn().Err(err).Str("topic", rec.Topic).Int32("partition", rec.Partition).Int64("offset", rec.Offset).
				Str("key", string(rec.Key)).Msg("record left out of the state read")
			return nil
		}
		if skip {
			return nil
		}
		return fn(m)
	}
}

// decodeRow decodes a fetched record as a Msg[V].
func decodeRow[V events.Event](ctx context.Context, codec *events.Codec, k Kafka, tombstones Tombstones, rec *kgo.Record) (Msg[V], bool, error) {
	in := inputOf(k, rec)
	if rec.Value != nil {
		v, err := decodeValue(ctx, codec, rec.Value)
		if err != nil {
			return Msg[V]{Input: in}, false, fmt.Errorf("record at %s[%d]@%d: %w", in.Topic, in.Partition, in.Offset, err)
		}
		in.Value = v
	}
	return msgOf[V](in, tombstones)
}

// DecodeAs decodes an encoded event that must be a V (a value a stage
// kept encoded), saying what it is instead when it is not.
func DecodeAs[V events.Event](ctx context.Context, codec *events.Codec, raw []byte) (V, error) {
	var zero V
	ev, err := codec.Decode(ctx, raw)
	if err != nil {
		return zero, err
	}
	v, ok := ev.(V)
	if !ok {
		return zero, fmt.Errorf("the value is %s, want %s", ev.SchemaName(), schemaOf[V]())
	}
	return v, nil
}

// Apply adapts fn to a Follower's ApplyFunc, for state derived from a
// followed topic: each record is decoded once and checked to hold a V, a
// tombstone treated as tombstones says. A record that cannot be decoded,
// holds another event or is a refused tombstone is handed to refused with
// the reason (to dead-letter it) when refused is set, and otherwise
// logged and left out; either way the follower goes on. An error of fn
// is logged by the follower and the record left out.
func Apply[V events.Event](env Env, tombstones Tombstones, fn func(ctx context.Context, m Msg[V]) error, refused func(ctx context.Context, in Input, err error)) ApplyFunc {
	return func(ctx context.Context, rec *kgo.Record) error {
		m, skip, err := decodeRow[V](ctx, env.Codec, env.Kafka, tombstones, rec)
		switch {
		case err != nil && refused != nil:
			refused(ctx, m.Input, err)
			return nil
		case err != nil:
			return err
		case skip:
			return nil
		}
		return fn(ctx, m)
	}
}
