package runtime

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKeyPartitionIsWhereTheProducerPutsTheKey checks KeyPartition against
// a record produced with Partitioner to a topic of 6 partitions.
func TestKeyPartitionIsWhereTheProducerPutsTheKey(t *testing.T) {
	p := Partitioner().ForTopic("t")
	for _, key := range []string{"dep-1", "d-00042", "cud-000007", "x"} {
		want := p.Partition(&kgo.Record{Key: []byte(key)}, 6)
		if got := KeyPartition(key, 6); int(got) != want {
			t.Errorf("KeyPartition(%q, 6) = %d, the producer puts it on %d", key, got, want)
		}
	}
}
