package runtime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// Table is a compacted topic as a map: the latest value of each key,
// decoded and checked to be a V (a TableOf that keeps each V as it is).
type Table[V events.Event] = TableOf[V, V]

// TableOf is a compacted topic as a map from each key to what a Build
// made of the key's records: a V as it is (Table), or a value derived from
// it once, as it is read (a compiled policy, an indexed model, a state
// folded over the key's records). It is rebuilt by reading the topic from
// the start and kept current while it runs (a Follower); a tombstone
// deletes its key. A record that cannot be decoded, holds another event or
// that the Build refuses is logged and left out: the key keeps its value.
//
// It is the one way the services read a compacted topic: a stage's state,
// and the North API's read views, which also list it sorted (Sorted) and
// wait for their own writes (WaitFor).
type TableOf[V events.Event, T any] struct {
	base  string
	f     *Follower
	build Build[V, T]

	mu   sync.RWMutex
	rows map[string]T
	gone map[string]struct{} // keys whose latest record is a tombstone
}

// Build makes a table's value of a key from the key's latest record m
// (never a tombstone: those delete the key) and the value the key had
// (prev; had is false when it had none: never written, or deleted since).
// An error refuses the record: it is logged and the key keeps prev.
type Build[V events.Event, T any] func(m Msg[V], prev T, had bool) (T, error)

// FollowTable starts following a compacted topic (base name) into a new
// table; WaitCaughtUp tells when it holds what the topic held. onChange,
// when set, is told of each record after the table applied it (from one
// goroutine, in offset order per partition; a tombstone with a nil
// Value), for a stage that keeps an index of its own over the values.
// Close the table when done.
func FollowTable[V events.Event](env Env, base string, onChange func(Msg[V])) (*Table[V], error) {
	return FollowTableOf(env, base, func(m Msg[V], _ V, _ bool) (V, error) { return m.Value, nil }, onChange)
}

// FollowTableOf is FollowTable keeping what build makes of each record.
// onChange is told of the records build accepted and of tombstones.
func FollowTableOf[V events.Event, T any](env Env, base string, build Build[V, T], onChange func(Msg[V])) (*TableOf[V, T], error) {
	t := &TableOf[V, T]{base: base, build: build, rows: map[string]T{}, gone: map[string]struct{}{}}
	apply := func(ctx context.Context, rec *kgo.Record) error {
		m, _, err := decodeRow[V](ctx, env.Codec, env.Kafka, PassTombstones, rec)
		if err != nil {
			return err
		}
		if err := t.apply(m); err != nil {
			return fmt.Errorf("record at %s[%d]@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		if onChange != nil {
			onChange(m)
		}
		return nil
	}
	f, err := Follow(env.Kafka, env.Log, map[string]ApplyFunc{base: apply})
	if err != nil {
		return nil, fmt.Errorf("table of %s: %w", env.Kafka.Topic(base), err)
	}
	t.f = f
	return t, nil
}

func (t *TableOf[V, T]) apply(m Msg[V]) error {
	key := string(m.Key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if m.Tombstone() {
		delete(t.rows, key)
		t.gone[key] = struct{}{}
		return nil
	}
	prev, had := t.rows[key]
	v, err := t.build(m, prev, had)
	if err != nil {
		return err
	}
	t.rows[key] = v
	delete(t.gone, key)
	return nil
}

// Base is the base name of the table's topic.
func (t *TableOf[V, T]) Base() string { return t.base }

// Get returns the latest value of key. found is false when the topic
// holds no record of key; it is true with a zero (nil) value when the
// latest record is a tombstone (the key was deleted).
func (t *TableOf[V, T]) Get(key string) (v T, found bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if v, ok := t.rows[key]; ok {
		return v, true
	}
	_, found = t.gone[key]
	return v, found
}

// Value returns the value of key; ok is false when the key has none
// (never written, or deleted).
func (t *TableOf[V, T]) Value(key string) (v T, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok = t.rows[key]
	return v, ok
}

// Len is the number of keys with a value.
func (t *TableOf[V, T]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.rows)
}

// Sorted returns every value, by key.
func (t *TableOf[V, T]) Sorted() []T {
	t.mu.RLock()
	defer t.mu.RUnlock()
	keys := make([]string, 0, len(t.rows))
	for k := range t.rows {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare[string])
	out := make([]T, len(keys))
	for i, k := range keys {
		out[i] = t.rows[k]
	}
	return out
}

// Find returns the key of a value match accepts, if any (which one, when
// several are, is not said).
func (t *TableOf[V, T]) Find(match func(T) bool) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for k, v := range t.rows {
		if match(v) {
			return k, true
		}
	}
	return "", false
}

// WaitCaughtUp returns once every record committed to the topic before the
// call has been applied.
func (t *TableOf[V, T]) WaitCaughtUp(ctx context.Context) error {
	return t.f.WaitCaughtUp(ctx, t.base)
}

// WaitCaughtUpAsOf returns once every record committed to the topic before
// asOf has been applied, asking the brokers where the topic ends only when
// no listing begun at or after asOf is known (Follower.WaitCaughtUpAsOf).
func (t *TableOf[V, T]) WaitCaughtUpAsOf(ctx context.Context, asOf time.Time) error {
	return t.f.WaitCaughtUpAsOf(ctx, asOf, t.base)
}

// WaitFor returns once the record at offset of partition has been applied
// (or left out): a writer waits for its own write to be read, so its next
// read sees it.
func (t *TableOf[V, T]) WaitFor(ctx context.Context, partition int32, offset int64) error {
	return t.f.WaitFor(ctx, t.base, partition, offset)
}

// Close stops following the topic.
func (t *TableOf[V, T]) Close() { t.f.Close() }
