package api

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

	"github.com/policyflow/policyflow/services/runtime"
)

// applyFunc folds one record of a view's topic into the view. value is nil
// for a tombstone.
type applyFunc func(ctx context.Context, rec *kgo.Record) error

// reader keeps the read views live: one client with no consumer group
// reads every partition of the views' topics from the start, read
// committed, for as long as the service runs. A topic's view is caught up
// once the reader has passed the end the topic had when the reader
// started; until then it is not ready.
type reader struct {
	kafka  runtime.Kafka
	health *runtime.Health
	log    zerolog.Logger
	apply  map[string]applyFunc // full topic name -> apply

	mu       sync.Mutex
	pos      map[string]map[int32]int64 // next offset to read
	targets  map[string]map[int32]int64 // end as of start-up, nil until listed
	caughtUp map[string]bool
	why      map[string]string // topic -> why it is not caught up
	changed  chan struct{}     // closed and replaced when pos moves
}

func newReader(k runtime.Kafka, health *runtime.Health, log zerolog.Logger, apply map[string]applyFunc) *reader {
	r := &reader{
		kafka:    k,
		health:   health,
		log:      log,
		apply:    apply,
		pos:      map[string]map[int32]int64{},
		targets:  map[string]map[int32]int64{},
		caughtUp: map[string]bool{},
		why:      map[string]string{},
		changed:  make(chan struct{}),
	}
	for t := range apply {
		r.pos[t] = map[int32]int64{}
		r.why[t] = "reading " + t + " from the start"
		r.health.NotReady(r.healthName(t), r.why[t])
	}
	return r
}

func (r *reader) topics() []string {
	out := make([]string, 0, len(r.apply))
	for t := range r.apply {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (r *reader) healthName(topic string) string {
	return "north-api view " + strings.TrimPrefix(topic, r.kafka.Prefix)
}

// run reads until ctx is done.
func (r *reader) run(ctx context.Context) error {
	opts, err := r.kafka.ClientOpts()
	if err != nil {
		return fmt.Errorf("north api: read views: %w", err)
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.WithLogger(runtime.KgoLogger(r.log)),
		kgo.ClientID("policyflow-north-api-views"),
		kgo.ConsumeTopics(r.topics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers are kept so that a partition ending in a
		// marker is seen to reach its end.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("north api: create view reader client: %w", err)
	}
	defer cl.Close()
	defer func() {
		for _, t := range r.topics() {
			r.health.Forget(r.healthName(t))
		}
	}()

	go r.listTargets(ctx, cl)

	var lastFetchErr time.Time
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
				return
			}
			if time.Since(lastFetchErr) > 10*time.Second {
				lastFetchErr = time.Now()
				r.log.Warn().Err(err).Str("topic", t).Int32("partition", p).Msg("fetch for read view failed; retrying")
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			apply := r.apply[fp.Topic]
			for _, rec := range fp.Records {
				if !rec.Attrs.IsControl() && apply != nil {
					if err := apply(ctx, rec); err != nil {
						r.log.Error().Err(err).Str("topic", rec.Topic).Int32("partition", rec.Partition).
							Int64("offset", rec.Offset).Msg("record left out of the read view")
					}
				}
			}
			if n := len(fp.Records); n > 0 {
				r.advance(fp.Topic, fp.Partition, fp.Records[n-1].Offset+1)
			}
		})
	}
}

// listTargets lists, once per topic, where its partitions end as of
// start-up; a missing topic is retried until it exists.
func (r *reader) listTargets(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	pending := r.topics()
	for attempt := 0; len(pending) > 0; attempt++ {
		var still []string
		for _, t := range pending {
			ends, err := r.listTopic(ctx, adm, t)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.setWhy(t, err.Error())
				still = append(still, t)
				continue
			}
			r.setTargets(t, ends)
		}
		pending = still
		if len(pending) == 0 {
			return
		}
		d := time.Duration(min(attempt+1, 10)) * 500 * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

// listTopic returns, per partition, the offset a reader must pass to have
// read everything committed: the last stable offset, or 0 when the
// partition holds nothing to read.
func (r *reader) listTopic(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	starts, err := adm.ListStartOffsets(lctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, listError(topic, err)
	}
	ends, err := adm.ListCommittedOffsets(lctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, listError(topic, err)
	}
	if len(ends[topic]) == 0 {
		return nil, fmt.Errorf("topic %s does not exist: create it with `policyctl topology apply`", topic)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		start := int64(0)
		if s, ok := starts.Lookup(topic, o.Partition); ok {
			start = s.Offset
		}
		if o.Offset > start {
			out[o.Partition] = o.Offset
		} else {
			out[o.Partition] = 0
		}
	})
	return out, nil
}

func listError(topic string, err error) error {
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("topic %s does not exist: create it with `policyctl topology apply`", topic)
	}
	return fmt.Errorf("list the end offsets of %s: %w", topic, err)
}

func (r *reader) setWhy(topic, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.caughtUp[topic] {
		return
	}
	r.why[topic] = why
	r.health.NotReady(r.healthName(topic), why)
}

func (r *reader) setTargets(topic string, ends map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.targets[topic] = ends
	r.why[topic] = "reading " + topic + " from the start"
	r.health.NotReady(r.healthName(topic), r.why[topic])
	r.checkLocked(topic)
}

func (r *reader) advance(topic string, partition int32, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pos[topic] == nil {
		r.pos[topic] = map[int32]int64{}
	}
	if next > r.pos[topic][partition] {
		r.pos[topic][partition] = next
	}
	r.checkLocked(topic)
	close(r.changed)
	r.changed = make(chan struct{})
}

// checkLocked marks topic caught up when every partition has passed its
// start-up end.
func (r *reader) checkLocked(topic string) {
	if r.caughtUp[topic] || r.targets[topic] == nil {
		return
	}
	for p, end := range r.targets[topic] {
		if r.pos[topic][p] < end {
			return
		}
	}
	r.caughtUp[topic] = true
	r.why[topic] = ""
	r.health.Ready(r.healthName(topic))
	r.log.Info().Str("topic", topic).Msg("read view caught up")
}

// ready reports whether topic's view is caught up, and why not.
func (r *reader) ready(topic string) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.caughtUp[topic], r.why[topic]
}

// waitFor waits until the view of topic has read the record at offset of
// partition (or ctx ends).
func (r *reader) waitFor(ctx context.Context, topic string, partition int32, offset int64) error {
	for {
		r.mu.Lock()
		done := r.pos[topic][partition] > offset
		ch := r.changed
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the %s view to read offset %d of partition %d: %w", topic, offset, partition, ctx.Err())
		case <-ch:
		}
	}
}
