package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// partitionsTimeout bounds one read of a topic's partition count.
const partitionsTimeout = 10 * time.Second

// WaitPartitions reads the partition count of a topic (base name) until
// it can, for a stage that writes one copy of a record to every partition
// of it: while the topic is missing or the brokers do not answer, the
// stage is not ready (saying which topic it waits for), and the read is
// tried again after env.Retry's backoff. It fails only when ctx ends.
func WaitPartitions(ctx context.Context, env Env, stage string, adm *kadm.Client, base string) (int32, error) {
	topic := env.Kafka.Topic(base)
	for attempt := 0; ; attempt++ {
		lctx, cancel := context.WithTimeout(ctx, partitionsTimeout)
		n, err := PartitionCount(lctx, adm, topic)
		cancel()
		if err == nil {
			return n, nil
		}
		if env.Health != nil {
			env.Health.NotReady(stage, "waiting for topic "+topic+": "+err.Error())
		}
		env.Log.Warn().Err(err).Str("stage", stage).Str("topic", topic).Msg("cannot read the partition count; retrying")
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s: read the partitions of %s: %w", stage, topic, ctx.Err())
		case <-time.After(env.Retry.Next(attempt)):
		}
	}
}
