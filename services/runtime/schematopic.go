package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

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
