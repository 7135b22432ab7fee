package runtime

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKeyPartitionIsWhereTheProducerPutsTheKey checks KeyPartition against
// a record produced with Partitioner to a topic of 6 partitions.
func TestKeyPartitionIsWhereTheProducerPutsTheKey(t *testing.T) {
	p := Partitioner().ForTopic("t")
	for _, key := range []string{"dep-1", "d-00042", "cud-000007", "x", "", "ab", "abc", "abcd", "näme-ünïcode-ключ", "0123456789abcdef0123456789abcdef"} {
		for _, n := range []int{1, 3, 6, 7, 64} {
			want := p.Partition(&kgo.Record{Key: []byte(key)}, n)
			if got := KeyPartition(key, n); int(got) != want {
				t.Errorf("KeyPartition(%q, %d) = %d, the producer puts it on %d", key, n, got, want)
			}
		}
	}
}
