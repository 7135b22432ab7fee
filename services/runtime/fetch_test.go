package runtime

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestConsumerFetchesAreBounded: the stage's consumer asks for at most
// Env.FetchMaxBytes a fetch and a partition, NewEnv sets the default, and
// 0 leaves franz-go's own.
func TestConsumerFetchesAreBounded(t *testing.T) {
	if got := NewEnv(Kafka{}, NewLogger(nil, "error", false)).FetchMaxBytes; got != DefaultFetchMaxBytes {
		t.Fatalf("NewEnv's FetchMaxBytes = %d, want DefaultFetchMaxBytes %d", got, DefaultFetchMaxBytes)
	}
	for _, tc := range []struct {
		set            int32
		total, partOne int32
	}{
		{set: 64 << 10, total: 64 << 10, partOne: 64 << 10},
		{set: 0, total: 50 << 20, partOne: 1 << 20}, // franz-go's defaults
	} {
		cl := stageClient(t, Env{FetchMaxBytes: tc.set})
		total, part := cl.OptValue(kgo.FetchMaxBytes), cl.OptValue(kgo.FetchMaxPartitionBytes)
		cl.Close()
		if total != tc.total || part != tc.partOne {
			t.Errorf("FetchMaxBytes %d: the consumer fetches at most %v a fetch and %v a partition, want %d and %d", tc.set, total, part, tc.total, tc.partOne)
		}
	}
}

// TestProducerBuffersAreBounded: the stage's producer holds at most
// Env.MaxBufferedOutputs unacknowledged outputs, NewEnv sets the default,
// and 0 leaves franz-go's own.
func TestProducerBuffersAreBounded(t *testing.T) {
	if got := NewEnv(Kafka{}, NewLogger(nil, "error", false)).MaxBufferedOutputs; got != DefaultMaxBufferedOutputs {
		t.Fatalf("NewEnv's MaxBufferedOutputs = %d, want DefaultMaxBufferedOutputs %d", got, DefaultMaxBufferedOutputs)
	}
	for _, tc := range []struct{ set, want int }{{set: 100, want: 100}, {set: 0, want: 50000}} {
		cl := stageClient(t, Env{MaxBufferedOutputs: tc.set})
		got := cl.OptValue(kgo.MaxBufferedRecords)
		cl.Close()
		if got != int64(tc.want) {
			t.Errorf("MaxBufferedOutputs %d: the producer buffers %v records (%T), want %d", tc.set, got, got, tc.want)
		}
	}
}

// stageClient is the client a transactional stage would consume and
// produce with under env (its brokers set to one that is never dialled).
func stageClient(t *testing.T, env Env) *kgo.Client {
	t.Helper()
	env.Kafka = Kafka{Brokers: []string{"127.0.0.1:1"}}
	r := &runner{stage: Stage{Name: "echo", Mode: Transactional, Inputs: []string{"in"}}, env: env}
	opts, err := r.consumeOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
