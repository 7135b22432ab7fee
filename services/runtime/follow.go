package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ApplyFunc folds one record of a followed topic into derived state. An
// error is logged and the record left out; the follower goes on.
type ApplyFunc func(ctx context.Context, rec *kgo.Record) error

// Follower keeps state derived from topics current: one client with no
// consumer group reads every partition of the topics from the start, read
// committed, and keeps reading until Close, handing each record to the
// topic's ApplyFunc (from one goroutine, in offset order per partition).
// Partitions and topics that appear later are picked up.
type Follower struct {
	k     Kafka
	log   zerolog.Logger
	apply map[string]ApplyFunc // full topic name -> apply
	cl    *kgo.Client
	adm   *kadm.Client

	mu  sync.Mutex
	pos map[string]map[int32]int64 // next offset, per topic and partition
	// listed is the newest listing of each topic's ends (WaitCaughtUpAsOf).
	listed  map[string]listing
	changed chan struct{} // closed and replaced when pos moves
	cancel  context.CancelFunc
	stopped chan struct{}
}

// Follow starts following the topics (base names) in the background.
func Follow(k Kafka, log zerolog.Logger, apply map[string]ApplyFunc) (*Follower, error) {
	f := &Follower{
		k: k, log: log, apply: map[string]ApplyFunc{},
		pos: map[string]map[int32]int64{}, listed: map[string]listing{}, changed: make(chan struct{}), stopped: make(chan struct{}),
	}
	topics := make([]string, 0, len(apply))
	for base, fn := range apply {
		f.apply[k.Topic(base)] = fn
		topics = append(topics, k.Topic(base))
	}
	opts, err := k.ClientOpts()
	if err != nil {
		return nil, err
	}
	f.cl, err = kgo.NewClient(append(opts,
		kgo.WithLogger(KgoLogger(log)),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) are kept so that a
		// partition ending in markers is seen to reach its end.
		kgo.KeepControlRecords(),
		// Bounded like a stage's own fetches (see Env.FetchMaxBytes):
		// the state it restores is what the stage keeps, not the
		// decompressed batches it came in.
		kgo.FetchMaxBytes(DefaultFetchMaxBytes), kgo.FetchMaxPartitionBytes(DefaultFetchMaxBytes),
	)...)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", strings.Join(topics, ", "), err)
	}
	f.adm = kadm.NewClient(f.cl)
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.run(ctx)
	return f, nil
}

// Topics returns the followed topics' base names, sorted.
func (f *Follower) Topics() []string {
	out := make([]string, 0, len(f.apply))
	for t := range f.apply {
		out = append(out, strings.TrimPrefix(t, f.k.Prefix))
	}
	sort.Strings(out)
	return out
}

// Close stops reading and waits for the reader to end.
func (f *Follower) Close() {
	f.cancel()
	f.cl.Close()
	<-f.stopped
}

func (f *Follower) run(ctx context.Context) {
	defer close(f.stopped)
	for {
		fetches := f.cl.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			f.log.Warn().Err(err).Str("topic", t).Int32("partition", p).Msg("follow: fetch failed; retrying")
		})
		moved := false
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			apply := f.apply[fp.Topic]
			for _, rec := range fp.Records {
				if rec.Attrs.IsControl() || apply == nil {
					continue
				}
				if err := apply(ctx, rec); err != nil {
					f.log.Error().Err(err).Str("topic", rec.Topic).Int32("partition", rec.Partition).
						Int64("offset", rec.Offset).Str("key", string(rec.Key)).Msg("follow: record left out")
				}
			}
			if n := len(fp.Records); n > 0 {
				f.mu.Lock()
				if f.pos[fp.Topic] == nil {
					f.pos[fp.Topic] = map[int32]int64{}
				}
				f.pos[fp.Topic][fp.Partition] = fp.Records[n-1].Offset + 1
				f.mu.Unlock()
				moved = true
			}
		})
		if moved {
			f.mu.Lock()
			close(f.changed)
			f.changed = make(chan struct{})
			f.mu.Unlock()
		}
	}
}

// ErrNoTopic is returned (wrapped) when a followed topic does not exist.
var ErrNoTopic = errors.New("does not exist: create it with `policyctl topology apply`")

// Ends returns, per partition of a topic (base name), the offset a reader
// must pass to have read every committed record: the last stable offset,
// or 0 when retention left nothing to read.
func Ends(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, listErr(topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, listErr(topic, err)
	}
	if len(ends[topic]) == 0 {
		return nil, fmt.Errorf("topic %s %w", topic, ErrNoTopic)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		out[o.Partition] = o.Offset
		if s, ok := starts.Lookup(topic, o.Partition); ok && s.Offset >= o.Offset {
			out[o.Partition] = 0
		}
	})
	return out, nil
}

func listErr(topic string, err error) error {
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("topic %s %w", topic, ErrNoTopic)
	}
	return fmt.Errorf("list the offsets of %s: %w", topic, err)
}

// WaitCaughtUp returns once every record committed to the topics (base
// names; all followed topics when none are named) before the call has been
// applied.
func (f *Follower) WaitCaughtUp(ctx context.Context, bases ...string) error {
	return f.WaitCaughtUpAsOf(ctx, time.Now(), bases...)
}

// listing is where a topic's partitions ended (Ends) when it was asked at.
type listing struct {
	at   time.Time
	ends map[int32]int64
}

// WaitCaughtUpAsOf returns once every record committed to the topics (base
// names; all followed topics when none are named) before asOf has been
// applied. The ends are asked of the brokers only when no listing of them
// was begun at or after asOf: a handler that needs a table to hold what
// was committed before its record passes when the record's poll returned
// (Input.Polled), and every record of one poll costs one listing, not one
// each.
func (f *Follower) WaitCaughtUpAsOf(ctx context.Context, asOf time.Time, bases ...string) error {
	if len(bases) == 0 {
		bases = f.Topics()
	}
	want := map[string]map[int32]int64{}
	for _, b := range bases {
		t := f.k.Topic(b)
		f.mu.Lock()
		l, ok := f.listed[t]
		f.mu.Unlock()
		if !ok || l.at.Before(asOf) {
			at := time.Now()
			ends, err := Ends(ctx, f.adm, t)
			if err != nil {
				return err
			}
			l = listing{at: at, ends: ends}
			f.mu.Lock()
			if prev, ok := f.listed[t]; !ok || prev.at.Before(at) {
				f.listed[t] = l
			}
			f.mu.Unlock()
		}
		want[t] = l.ends
	}
	for {
		f.mu.Lock()
		behind := ""
		for t, ends := range want {
			for p, end := range ends {
				if f.pos[t][p] < end {
					behind = t
				}
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if behind == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("catch up with %s: %w", behind, ctx.Err())
		case <-f.stopped:
			return fmt.Errorf("catch up with %s: the follower stopped", behind)
		case <-ch:
		}
	}
}

// WaitFor waits until the record at offset of partition of a topic (base
// name) has been applied.
func (f *Follower) WaitFor(ctx context.Context, base string, partition int32, offset int64) error {
	t := f.k.Topic(base)
	for {
		f.mu.Lock()
		done := f.pos[t][partition] > offset
		ch := f.changed
		f.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for offset %d of %s[%d] to be read: %w", offset, t, partition, ctx.Err())
		case <-f.stopped:
			return fmt.Errorf("wait for offset %d of %s[%d]: the follower stopped", offset, t, partition)
		case <-ch:
		}
	}
}
