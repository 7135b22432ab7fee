package runtime

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// Table is a compacted topic as a map: the latest value of each key,
// decoded and checked to be a V. It is rebuilt by reading the topic from
// the start and kept current while it runs (a Follower); a tombstone
// deletes its key. A record that cannot be decoded or holds another event
// is logged and left out: the key keeps its value.
type Table[V events.Event] struct {
	base string
	f    *Follower

	mu   sync.RWMutex
	rows map[string]V
	gone map[string]struct{} // keys whose latest record is a tombstone
}

// FollowTable starts following a compacted topic (base name) into a new
// table; WaitCaughtUp tells when it holds what the topic held. onChange,
// when set, is told of each record after the table applied it (from one
// goroutine, in offset order per partition; a tombstone with a nil
// Value), for a stage that keeps an index of its own over the values.
// Close the table when done.
func FollowTable[V events.Event](env Env, base string, onChange func(Msg[V])) (*Table[V], error) {
	t := &Table[V]{base: base, rows: map[string]V{}, gone: map[string]struct{}{}}
	apply := func(ctx context.Context, rec *kgo.Record) error {
		m, _, err := decodeRow[V](ctx, env.Codec, env.Kafka, PassTombstones, rec)
		if err != nil {
			return err
		}
		t.apply(m)
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

func (t *Table[V]) apply(m Msg[V]) {
	key := string(m.Key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if m.Tombstone() {
		delete(t.rows, key)
		t.gone[key] = struct{}{}
		return
	}
	t.rows[key] = m.Value
	delete(t.gone, key)
}

// Get returns the latest value of key. found is false when the topic
// holds no record of key; it is true with a nil value when the latest
// record is a tombstone (the key was deleted).
func (t *Table[V]) Get(key string) (v V, found bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if v, ok := t.rows[key]; ok {
		return v, true
	}
	_, found = t.gone[key]
	return v, found
}

// Len is the number of keys with a value.
func (t *Table[V]) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.rows)
}

// WaitCaughtUp returns once every record committed to the topic before the
// call has been applied.
func (t *Table[V]) WaitCaughtUp(ctx context.Context) error {
	return t.f.WaitCaughtUp(ctx, t.base)
}

// Close stops following the topic.
func (t *Table[V]) Close() { t.f.Close() }
