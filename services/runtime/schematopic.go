package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// SchemasTopic is the base name of the compacted topic where every writer
// publishes its schemas, keyed by fingerprint (hex).
const SchemasTopic = "schemas"

// PublishSchemas writes the current schema of every event to the schemas
// topic, so that readers built from older code can decode this process's
// records. It is idempotent (compacted by fingerprint).
func PublishSchemas(ctx context.Context, env Env) error {
	opts, err := env.Kafka.ClientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.WithLogger(KgoLogger(env.Log)))...)
	if err != nil {
		return fmt.Errorf("publish schemas: %w", err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for fp, js := range env.Codec.CurrentSchemas() {
		recs = append(recs, &kgo.Record{Topic: env.Kafka.Topic(SchemasTopic), Key: []byte(fp.String()), Value: []byte(js)})
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("publish schemas to %s: %w", env.Kafka.Topic(SchemasTopic), err)
	}
	return nil
}

// TopicSchemaSource looks up unknown writer schemas in the schemas topic.
// It reads the whole topic on a miss (rare: once per new writer version).
type TopicSchemaSource struct {
	Kafka Kafka
	mu    sync.Mutex
}

// Lookup implements events.SchemaSource.
func (s *TopicSchemaSource) Lookup(ctx context.Context, fp events.Fingerprint) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var found string
	err := ReadPartitions(ctx, s.Kafka, SchemasTopic, nil, func(rec *kgo.Record) error {
		if string(rec.Key) == fp.String() && rec.Value != nil {
			found = string(rec.Value)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read %s: %w", s.Kafka.Topic(SchemasTopic), err)
	}
	if found == "" {
		return "", fmt.Errorf("fingerprint %s is not in %s: %w", fp, s.Kafka.Topic(SchemasTopic), events.ErrUnknownSchema)
	}
	return found, nil
}

// ReadPartitions reads a topic (the given partitions, or all when nil)
// from the start up to its end as of the call (the last stable offset:
// committed records only), calling fn for each record in partition order.
// Stages use it to rebuild state from compacted topics.
func ReadPartitions(ctx context.Context, k Kafka, base string, partitions []int32, fn func(*kgo.Record) error) error {
	ends, err := endOffsets(ctx, k, base, partitions)
	if err != nil {
		return err
	}
	want := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	for p, end := range ends {
		if end > 0 {
			want[p] = kgo.NewOffset().AtStart()
			remaining[p] = end
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
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{k.Topic(base): want}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) are kept so that a
		// partition ending in markers is seen to reach its end.
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("read %s: %w", k.Topic(base), err)
	}
	defer cl.Close()
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
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

// endOffsets returns the last stable offset of each wanted partition.
func endOffsets(ctx context.Context, k Kafka, base string, partitions []int32) (map[int32]int64, error) {
	opts, err := k.ClientOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := k.Topic(base)
	offs, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if err := offs.Error(); err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	if _, ok := offs[topic]; !ok {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, errNoTopic)
	}
	want := map[int32]bool{}
	for _, p := range partitions {
		want[p] = true
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) {
		if len(want) == 0 || want[o.Partition] {
			out[o.Partition] = o.Offset
		}
	})
	return out, nil
}

var errNoTopic = errors.New("topic does not exist")
