package stagetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/runtime"
)

// TestReadCommittedSkipsAbortedRecords: records of an aborted transaction
// are never read as committed, however the reader's fetches are cut.
// One partition holds 200 KiB committed, the other 600 KiB of an aborted
// transaction and a committed record; a reader fetching at most runtime.DefaultFetchMaxBytes a
// request and a partition, as the stages and runtime.ReadPartitions do,
// fills a fetch with the aborted records. Without ReadCommittedAsKafka,
// kfake listed no aborted transaction for a partition whose records
// filled the fetch, and runtime.ReadPartitions read all 600 aborted
// records.
func TestReadCommittedSkipsAbortedRecords(t *testing.T) {
	const topic = "aborted"
	c := NewCluster(t, 2, topic)
	// Keys of either partition.
	k0, k1 := "k0", "k1"
	for i := 2; runtime.KeyPartition(k0, 2) == runtime.KeyPartition(k1, 2); i++ {
		k1 = fmt.Sprintf("k%d", i)
	}
	value := func() []byte {
		v := make([]byte, 1000) // random: the batches do not compress
		rand.Read(v)
		return v
	}
	for range 200 {
		c.ProduceRecords(t, &kgo.Record{Topic: c.Kafka.Topic(topic), Key: []byte(k0), Value: value()})
	}
	var aborted []*kgo.Record
	for range 600 {
		aborted = append(aborted, &kgo.Record{Topic: c.Kafka.Topic(topic), Key: []byte(k1), Value: value()})
	}
	c.ProduceAborted(t, aborted...)
	c.ProduceRecords(t, &kgo.Record{Topic: c.Kafka.Topic(topic), Key: []byte(k1), Value: []byte("after")})

	read := map[string]int{}
	err := runtime.ReadPartitions(context.Background(), c.Kafka, topic, nil, func(r *kgo.Record) error {
		read[string(r.Key)]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if read[k0] != 200 || read[k1] != 1 {
		t.Fatalf("read %d records of the committed partition (want 200) and %d of the other (want 1, the one after the aborted transaction's 600)", read[k0], read[k1])
	}
}
