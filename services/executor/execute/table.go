package execute

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// liveTable reads every partition of a compacted topic from its start
// (read committed) and keeps reading in the background, handing each
// record to apply, so that state derived from the topic follows every
// committed change, including those made after the stage started.
type liveTable struct {
	base  string
	topic string
	codec *events.Codec
	log   zerolog.Logger
	// apply is called from the reader goroutine only, in offset order
	// within a partition; ev is nil for a tombstone.
	apply func(key string, ev events.Event)

	cl  *kgo.Client
	adm *kadm.Client

	mu       sync.Mutex
	pos      map[int32]int64 // next offset to read, per consumed partition
	progress chan struct{}   // closed and replaced whenever pos moves
	stopped  chan struct{}   // closed when the reader goroutine ends
	cancel   context.CancelFunc
}

// startTable starts reading a topic in the background. It does not wait
// for the reader to catch up: call waitCaughtUp.
func startTable(k runtime.Kafka, base string, codec *events.Codec, log zerolog.Logger, apply func(string, events.Event)) (*liveTable, error) {
	t := &liveTable{
		base:     base,
		topic:    k.Topic(base),
		codec:    codec,
		log:      log.With().Str("table", base).Logger(),
		apply:    apply,
		pos:      map[int32]int64{},
		progress: make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	opts, err := k.ClientOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.WithLogger(runtime.KgoLogger(log)),
		// Partitions are added once their count is known (waitCaughtUp).
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records are kept so that a partition ending in
		// transaction markers is seen to reach its end.
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("read %s: create client: %w", t.topic, err)
	}
	t.cl, t.adm = cl, kadm.NewClient(cl)
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go t.run(ctx)
	return t, nil
}

func (t *liveTable) close() {
	t.cancel()
	t.cl.Close()
	<-t.stopped
}

func (t *liveTable) run(ctx context.Context) {
	defer close(t.stopped)
	for {
		fetches := t.cl.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			t.log.Warn().Err(err).Int32("partition", p).Msg("fetch error; the reader keeps going")
		})
		moved := map[int32]int64{}
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			for _, rec := range fp.Records {
				if !rec.Attrs.IsControl() {
					t.handle(ctx, rec)
				}
			}
			if n := len(fp.Records); n > 0 {
				moved[fp.Partition] = fp.Records[n-1].Offset + 1
			}
		})
		if len(moved) == 0 {
			continue
		}
		t.mu.Lock()
		for p, next := range moved {
			if next > t.pos[p] {
				t.pos[p] = next
			}
		}
		close(t.progress)
		t.progress = make(chan struct{})
		t.mu.Unlock()
	}
}

func (t *liveTable) handle(ctx context.Context, rec *kgo.Record) {
	if rec.Value == nil {
		t.apply(string(rec.Key), nil)
		return
	}
	ev, err := t.codec.Decode(ctx, rec.Value)
	if err != nil {
		t.log.Error().Err(err).Int32("partition", rec.Partition).Int64("offset", rec.Offset).Str("key", string(rec.Key)).
			Msg("skip a record that does not decode")
		return
	}
	t.apply(string(rec.Key), ev)
}

// waitCaughtUp returns once the reader has handed over every record
// committed to the topic before the call.
func (t *liveTable) waitCaughtUp(ctx context.Context) error {
	starts, err := t.adm.ListStartOffsets(ctx, t.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("list start offsets of %s: %w", t.topic, err)
	}
	ends, err := t.adm.ListCommittedOffsets(ctx, t.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("list end offsets of %s: %w", t.topic, err)
	}
	if _, ok := ends[t.topic]; !ok {
		return fmt.Errorf("list end offsets of %s: the topic does not exist", t.topic)
	}
	want := map[int32]int64{}
	add := map[int32]kgo.Offset{}
	t.mu.Lock()
	ends.Each(func(o kadm.ListedOffset) {
		if _, ok := t.pos[o.Partition]; !ok {
			t.pos[o.Partition] = 0
			add[o.Partition] = kgo.NewOffset().AtStart()
		}
		if s, ok := starts.Lookup(t.topic, o.Partition); ok && s.Offset >= o.Offset {
			return // nothing left to read in this partition
		}
		want[o.Partition] = o.Offset
	})
	t.mu.Unlock()
	if len(add) > 0 {
		t.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: add})
	}
	for {
		t.mu.Lock()
		behind := false
		for p, end := range want {
			if t.pos[p] < end {
				behind = true
				break
			}
		}
		ch := t.progress
		t.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("catch up with %s: %w", t.topic, ctx.Err())
		case <-t.stopped:
			return fmt.Errorf("catch up with %s: the reader stopped", t.topic)
		case <-ch:
		}
	}
}

// readRange reads the records of one partition at offsets [start, end)
// (read committed; control records skipped), calling fn in offset order.
func readRange(ctx context.Context, k runtime.Kafka, base string, partition int32, start, end int64, fn func(*kgo.Record)) error {
	topic := k.Topic(base)
	opts, err := k.ClientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		return fmt.Errorf("read %s[%d]: create client: %w", topic, partition, err)
	}
	defer cl.Close()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("read %s[%d]: list start offsets: %w", topic, partition, err)
	}
	if s, ok := starts.Lookup(topic, partition); ok && s.Offset >= end {
		return nil // retention removed the range
	}
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s[%d] from %d to %d: %w", topic, partition, start, end, err)
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("read %s[%d] from %d to %d: %w", topic, partition, start, end, ferr)
		}
		done := false
		fetches.EachRecord(func(rec *kgo.Record) {
			if done || rec.Offset >= end {
				done = true
				return
			}
			if !rec.Attrs.IsControl() {
				fn(rec)
			}
			if rec.Offset >= end-1 {
				done = true
			}
		})
		if done {
			return nil
		}
	}
}
