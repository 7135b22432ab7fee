package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadPartitions reads a topic (the given partitions, or all when nil)
// from the start up to its end as of the call (the last stable offset:
// committed records only), calling fn for each record in partition order.
// Stages use it to rebuild state from compacted topics.
func ReadPartitions(ctx context.Context, k Kafka, base string, partitions []int32, fn func(*kgo.Record) error) error {
	return withAdmin(k, func(adm *kadm.Client) error {
		ends, err := Ends(ctx, adm, k.Topic(base))
		if err != nil {
			return err
		}
		to := map[int32]int64{}
		for p, end := range ends {
			if partitions == nil || contains(partitions, p) {
				to[p] = end
			}
		}
		return ReadRange(ctx, k, base, nil, to, fn)
	})
}

// ReadRange reads the committed records of a topic at offsets [from[p],
// to[p]) of each partition p in to (from[p] absent means the start),
// calling fn in offset order per partition; transaction markers are
// skipped. A range that retention removed reads nothing.
func ReadRange(ctx context.Context, k Kafka, base string, from, to map[int32]int64, fn func(*kgo.Record) error) error {
	topic := k.Topic(base)
	want := map[int32]kgo.Offset{}
	for p, end := range to {
		if start := from[p]; end > start {
			want[p] = kgo.NewOffset().At(start)
		}
	}
	if len(want) == 0 {
		return nil
	}
	opts, err := k.ClientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}),
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
		return fmt.Errorf("read %s: %w", topic, err)
	}
	defer cl.Close()
	// Retention may have removed a range entirely: nothing to wait for.
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("read %s: list start offsets: %w", topic, err)
	}
	remaining := map[int32]int64{}
	for p := range want {
		if s, ok := starts.Lookup(topic, p); !ok || s.Offset < to[p] {
			remaining[p] = to[p]
		}
	}
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("read %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var herr error
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			end, ok := remaining[fp.Partition]
			if !ok {
				return
			}
			for _, rec := range fp.Records {
				if rec.Offset >= end {
					break
				}
				if herr == nil && !rec.Attrs.IsControl() {
					herr = fn(rec)
				}
			}
			if n := len(fp.Records); n > 0 && fp.Records[n-1].Offset+1 >= end {
				delete(remaining, fp.Partition)
			}
		})
		if herr != nil {
			return herr
		}
	}
	return nil
}

// CommittedOffsets returns a consumer group's committed offset per
// partition of a topic (base name). It waits for a pending transactional
// offset commit to end (RequireStable), so each offset is the one the
// group's consuming resumes at.
func CommittedOffsets(ctx context.Context, k Kafka, group, base string) (map[int32]int64, error) {
	out := map[int32]int64{}
	err := withAdmin(k, func(adm *kadm.Client) error {
		resp, err := adm.FetchOffsets(kadm.RequireStable(ctx), group)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("fetch committed offsets of group %s: %w", group, err)
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Topic == k.Topic(base) && o.At >= 0 {
				out[o.Partition] = o.At
			}
		})
		return nil
	})
	return out, err
}

// withAdmin runs fn with a short-lived admin client.
func withAdmin(k Kafka, fn func(*kadm.Client) error) error {
	opts, err := k.ClientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(kadm.NewClient(cl))
}

func contains(ps []int32, p int32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// PartitionCount returns a topic's partition count from the brokers'
// metadata, for writers that copy a record to every partition.
func PartitionCount(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("read the metadata of %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || (d.Err == nil && len(d.Partitions) == 0) {
		return 0, fmt.Errorf("topic %s %w", topic, ErrNoTopic)
	}
	if d.Err != nil {
		return 0, fmt.Errorf("read the metadata of %s: %w", topic, d.Err)
	}
	return int32(len(d.Partitions)), nil
}

// TopicPartitions is PartitionCount of a topic by its base name, with a
// client of its own.
func TopicPartitions(ctx context.Context, k Kafka, base string) (int32, error) {
	var n int32
	err := withAdmin(k, func(adm *kadm.Client) error {
		var err error
		n, err = PartitionCount(ctx, adm, k.Topic(base))
		return err
	})
	return n, err
}

// EveryPartition returns n copies of a record for topic, one pinned (Pin)
// to each of its partitions 0..n-1, for a request that every member of a
// co-partitioned stage must see (a catch-up). ctx becomes each record's
// context.
func EveryPartition(ctx context.Context, topic string, n int32, key, value []byte) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for p := range recs {
		recs[p] = &kgo.Record{Topic: topic, Key: key, Value: value, Context: ctx}
		Pin(recs[p], int32(p))
	}
	return recs
}
