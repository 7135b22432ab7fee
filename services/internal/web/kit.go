package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// Kit is what each subsystem's API is built on: the environment, a
// producer whose writes are waited for, the read views with their
// readiness, and a lock per key for read-modify-write requests.
type Kit struct {
	Env   runtime.Env
	Log   zerolog.Logger
	Views *Views
	// ViewWait bounds how long a write waits for the API's own view to
	// show it (WaitOwnWrite); ProduceTimeout how long it waits for Kafka.
	ViewWait, ProduceTimeout time.Duration

	cl       *kgo.Client
	produced *prometheus.CounterVec
	locks    keyedMutex
}

// NewKit is a kit producing with cl (idempotent, as the North API builds
// it), counting the records produced per topic on produced (nil: not
// counted).
func NewKit(env runtime.Env, log zerolog.Logger, cl *kgo.Client, produced *prometheus.CounterVec, viewWait, produceTimeout time.Duration) *Kit {
	return &Kit{
		Env: env, Log: log, Views: NewViews(env.Kafka, env.Health, log),
		ViewWait: viewWait, ProduceTimeout: produceTimeout, cl: cl, produced: produced,
	}
}

// Admin is an admin client on the kit's connection.
func (k *Kit) Admin() *kadm.Client { return kadm.NewClient(k.cl) }

// Produce writes records and waits for them to be acknowledged.
func (k *Kit) Produce(ctx context.Context, recs ...*kgo.Record) error {
	ctx, cancel := context.WithTimeout(ctx, k.ProduceTimeout)
	defer cancel()
	for _, r := range recs {
		if r.Context == nil {
			r.Context = ctx
		}
	}
	results := k.cl.ProduceSync(ctx, recs...)
	for _, r := range results {
		if r.Err == nil && k.produced != nil {
			k.produced.WithLabelValues(r.Record.Topic).Inc()
		}
	}
	if err := results.FirstErr(); err != nil {
		return fmt.Errorf("produce to %s: %w", recs[0].Topic, err)
	}
	return nil
}

// ProduceFailed is the answer to a write Kafka did not take.
func (k *Kit) ProduceFailed(err error) *Error {
	return Errorf(http.StatusServiceUnavailable, "%v; check that the brokers %v are reachable and the topics exist (`policyctl topology apply`), then retry: repeating the request is safe",
		err, k.Env.Kafka.Brokers)
}

// ProduceEvent writes ev under key to topic (a base name).
func (k *Kit) ProduceEvent(ctx context.Context, topic, key string, ev events.Event) *Error {
	b, err := k.Env.Codec.Encode(ev)
	if err != nil {
		return Errorf(http.StatusInternalServerError, "encode %s: %v", ev.SchemaName(), err)
	}
	if err := k.Produce(ctx, &kgo.Record{Topic: k.Env.Kafka.Topic(topic), Key: []byte(key), Value: b}); err != nil {
		return k.ProduceFailed(err)
	}
	return nil
}

// ProduceRecord writes ev (nil: a tombstone) under key to topic (a base
// name), and returns the record written.
func (k *Kit) ProduceRecord(ctx context.Context, topic, key string, ev events.Event) (*kgo.Record, *Error) {
	rec := &kgo.Record{Topic: k.Env.Kafka.Topic(topic), Key: []byte(key)}
	if ev != nil {
		val, err := k.Env.Codec.Encode(ev)
		if err != nil {
			return nil, Errorf(http.StatusInternalServerError, "encode %s: %v", key, err)
		}
		rec.Value = val
	}
	if err := k.Produce(ctx, rec); err != nil {
		return nil, Errorf(http.StatusServiceUnavailable, "write %s to %s: %v; nothing was written, retry", key, topic, err)
	}
	return rec, nil
}

// ProduceEveryPartition writes ev to every partition of topic, for the
// requests each partition's owner acts on for its own keys (a catch-up, a
// resync of every participant), and returns the partition count.
func (k *Kit) ProduceEveryPartition(ctx context.Context, topic, key string, ev events.Event) (int32, *Error) {
	name := k.Env.Kafka.Topic(topic)
	n, e := k.PartitionCount(ctx, topic)
	if e != nil {
		return 0, e
	}
	value, err := k.Env.Codec.Encode(ev)
	if err != nil {
		return 0, Errorf(http.StatusInternalServerError, "encode %s: %v", ev.SchemaName(), err)
	}
	var kb []byte
	if key != "" {
		kb = []byte(key)
	}
	if err := k.Produce(ctx, runtime.EveryPartition(ctx, name, n, kb, value)...); err != nil {
		return 0, k.ProduceFailed(err)
	}
	return n, nil
}

// PartitionCount is the partition count of topic (a base name).
func (k *Kit) PartitionCount(ctx context.Context, topic string) (int32, *Error) {
	n, err := runtime.PartitionCount(ctx, k.Admin(), k.Env.Kafka.Topic(topic))
	if err != nil {
		return 0, Errorf(http.StatusServiceUnavailable, "%v; check the brokers %v and run `policyctl topology apply`", err, k.Env.Kafka.Brokers)
	}
	return n, nil
}

// OwnWriteWaiter is a read view that can wait for a record to be read
// (runtime.TableOf.WaitFor).
type OwnWriteWaiter interface {
	WaitFor(ctx context.Context, partition int32, offset int64) error
}

// WaitOwnWrite waits, bounded by ViewWait, until view has read rec, so
// the caller's next request sees the write (a component's next write its
// generation, a node's new token). The write stands either way.
func (k *Kit) WaitOwnWrite(ctx context.Context, view OwnWriteWaiter, rec *kgo.Record) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.ViewWait)
	defer cancel()
	if err := view.WaitFor(wctx, rec.Partition, rec.Offset); err != nil {
		k.Log.Warn().Err(err).Str("topic", rec.Topic).Str("key", string(rec.Key)).Msg("written but not yet seen in the view")
	}
}

// Lock serializes the read-modify-write requests of one key; call the
// function it returns to unlock.
func (k *Kit) Lock(key string) func() { return k.locks.lock(key) }

// NewID returns 16 random bytes in hex, for notification and request ids.
func NewID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewUUID is a random (version 4) UUID.
func NewUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// keyedMutex serializes work per key.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
