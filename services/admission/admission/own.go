package admission

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// HeaderWrite marks a record the stage wrote to a topic it also follows
// (admission.verdicts, deploy.components, deploy.deployments,
// admission.audit): the run that wrote it (8 random bytes) and the
// write's number in that run (8 bytes, big-endian). Reading such a
// record back, the run that wrote it already holds its value: it is
// folded in again from that value, not decoded.
const HeaderWrite = "pf.admission_write"

// ownWrites are the records one run of the stage wrote to the topics it
// follows and has not read back yet, by write number: what they hold, as
// the stage made it. A write of a transaction that aborts is never read
// back (the tables read committed): the run's tables are read again
// (admitter.reread) with a new ownWrites, and the old one is dropped.
type ownWrites struct {
	run [8]byte

	mu   sync.Mutex
	next uint64
	m    map[uint64]ownWrite
}

// ownWrite is what a record the stage wrote holds: its value (nil: a
// tombstone) and, for a deployment record, its admitted request as
// parsed (nil when the record holds none), so that reading it back
// parses nothing.
type ownWrite struct {
	// key is the record's key: a record under another key that carries
	// the header (copied by another writer) is not this write.
	key      string
	value    events.Event
	admitted *admittedRequest
	// entry, for an audit entry, is what the reports keep of it
	// (keptEntry: whether it is known).
	entry     *kept
	keptEntry bool
}

func newOwnWrites() *ownWrites {
	w := &ownWrites{m: map[uint64]ownWrite{}}
	if _, err := rand.Read(w.run[:]); err != nil {
		panic(fmt.Sprintf("admission: random run id: %v", err))
	}
	return w
}

// mark tags o as written by this run and keeps its value until it is read
// back.
func (w *ownWrites) mark(o *runtime.Output, ow ownWrite) {
	ow.key, ow.value = string(o.Key), o.Value
	w.mu.Lock()
	n := w.next
	w.next++
	w.m[n] = ow
	w.mu.Unlock()
	v := make([]byte, 16)
	copy(v, w.run[:])
	binary.BigEndian.PutUint64(v[8:], n)
	o.Headers = append(o.Headers[:len(o.Headers):len(o.Headers)], kgo.RecordHeader{Key: HeaderWrite, Value: v})
}

// take returns, and forgets, what a record read back holds when this run
// wrote it.
func (w *ownWrites) take(rec *kgo.Record) (ownWrite, bool) {
	for _, h := range rec.Headers {
		if h.Key != HeaderWrite {
			continue
		}
		if len(h.Value) != 16 || [8]byte(h.Value[:8]) != w.run {
			return ownWrite{}, false
		}
		n := binary.BigEndian.Uint64(h.Value[8:])
		w.mu.Lock()
		defer w.mu.Unlock()
		ow, ok := w.m[n]
		if !ok || ow.key != string(rec.Key) {
			return ownWrite{}, false // decoded as anyone's record
		}
		delete(w.m, n)
		return ow, true
	}
	return ownWrite{}, false
}

// pending is how many writes have not been read back.
func (w *ownWrites) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// follower is a runtime.Follower of one topic, caught up as a table is.
type follower struct {
	f    *runtime.Follower
	base string
}

func (f follower) WaitCaughtUp(ctx context.Context) error { return f.f.WaitCaughtUp(ctx, f.base) }
func (f follower) Close()                                 { f.f.Close() }

// followOwn follows base, a topic the stage writes to, as follow does,
// but a record this run wrote (own) is folded in by known from what it
// holds, without decoding it; every other record is decoded and folded
// in by apply.
func followOwn[V events.Event](env runtime.Env, ts *tables, base string, own *ownWrites, apply func(key string, v V), known func(key string, w ownWrite)) error {
	decode := runtime.Apply(env, runtime.PassTombstones, func(_ context.Context, m runtime.Msg[V]) error {
		apply(string(m.Key), m.Value)
		return nil
	}, nil)
	fn := func(ctx context.Context, rec *kgo.Record) error {
		if w, ok := own.take(rec); ok {
			known(string(rec.Key), w)
			return nil
		}
		return decode(ctx, rec)
	}
	f, err := runtime.Follow(env.Kafka, env.Log, map[string]runtime.ApplyFunc{base: fn})
	if err != nil {
		return fmt.Errorf("admission: table of %s: %w", env.Kafka.Topic(base), err)
	}
	ts.bases, ts.ts = append(ts.bases, base), append(ts.ts, follower{f: f, base: base})
	return nil
}
