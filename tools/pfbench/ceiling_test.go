package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/tools/devstack"
)

const ceilingPartitions = 3

// ceilingCluster starts an in-process Kafka with topics of
// ceilingPartitions partitions and returns the base client options.
func ceilingCluster(t *testing.T, topics ...string) []kgo.Opt {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(ceilingPartitions, topics...))
	if err != nil {
		t.Fatalf("start an in-process Kafka: %v", err)
	}
	t.Cleanup(kc.Close)
	return []kgo.Opt{
		kgo.SeedBrokers(kc.ListenAddrs()...),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.MetadataMinAge(200 * time.Millisecond),
	}
}

// ceilingSamples are records of different sizes spread over the partitions,
// partition 2 getting more than the others.
func ceilingSamples() []*kgo.Record {
	var samples []*kgo.Record
	for i, p := range []int32{0, 2, 1, 2, 0, 2, 1} {
		samples = append(samples, &kgo.Record{
			Partition: p,
			Key:       fmt.Appendf(nil, "key-%d", i),
			Value:     bytes.Repeat([]byte{byte('a' + i)}, 40+60*i),
		})
	}
	return samples
}

func ceilingClient(t *testing.T, opts []kgo.Opt, more ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...), more...)...)
	if err != nil {
		t.Fatalf("create client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readCeilingTopic returns the committed records of topic by partition, in order,
// once no transaction is open on it.
func readCeilingTopic(t *testing.T, opts []kgo.Opt, topic string) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(ceilingClient(t, opts))
	var end kadm.ListedOffsets
	for {
		hw, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hw.Error()
		}
		if err != nil {
			t.Fatalf("list end offsets of %s: %v", topic, err)
		}
		lso, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			t.Fatalf("list stable offsets of %s: %v", topic, err)
		}
		stable := true
		hw.Each(func(o kadm.ListedOffset) {
			if l, _ := lso.Lookup(topic, o.Partition); l.Offset != o.Offset {
				stable = false
			}
		})
		if stable {
			end = hw
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s still has open transactions", topic)
		case <-time.After(50 * time.Millisecond):
		}
	}

	cl := ceilingClient(t, opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	got := make(map[int32][]*kgo.Record)
	next := make(map[int32]int64)
	done := func() bool {
		for p, o := range end[topic] {
			if next[p] < o.Offset {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: got %d partitions' records before the deadline", topic, len(got))
		}
		if err := fetchError(fs); err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		for _, r := range fs.Records() {
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				got[r.Partition] = append(got[r.Partition], r)
			}
		}
	}
	return got
}

// expectCopied checks that got holds exactly want (key, value, partition
// and order within each partition).
func expectCopied(t *testing.T, topic string, got, want map[int32][]*kgo.Record) {
	t.Helper()
	for p := int32(0); p < ceilingPartitions; p++ {
		g, w := got[p], want[p]
		if len(g) != len(w) {
			t.Errorf("%s[%d] has %d records, want %d", topic, p, len(g), len(w))
			continue
		}
		for i := range w {
			if !bytes.Equal(g[i].Key, w[i].Key) || !bytes.Equal(g[i].Value, w[i].Value) {
				t.Errorf("%s[%d] record %d is key %q (%d value bytes), want key %q (%d value bytes)",
					topic, p, i, g[i].Key, len(g[i].Value), w[i].Key, len(w[i].Value))
				break
			}
		}
	}
}

func countCopied(recs map[int32][]*kgo.Record) (n int, keyValueBytes, valueBytes int64) {
	for _, rs := range recs {
		for _, r := range rs {
			n++
			keyValueBytes += int64(len(r.Key) + len(r.Value))
			valueBytes += int64(len(r.Value))
		}
	}
	return n, keyValueBytes, valueBytes
}

func TestFillTopicCyclesSamplesOverTheirPartitions(t *testing.T) {
	opts := ceilingCluster(t, "in")
	cl := ceilingClient(t, opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	samples := ceilingSamples()
	const n = 1000

	written, err := fillTopic(context.Background(), cl, "in", samples, n)
	if err != nil {
		t.Fatalf("fillTopic: %v", err)
	}

	want := make(map[int32][]*kgo.Record)
	var wantBytes int64
	for i := range n {
		s := samples[i%len(samples)]
		want[s.Partition] = append(want[s.Partition], s)
		wantBytes += int64(len(s.Key) + len(s.Value))
	}
	if written != wantBytes {
		t.Errorf("fillTopic wrote %d bytes, want %d", written, wantBytes)
	}
	got := readCeilingTopic(t, opts, "in")
	expectCopied(t, "in", got, want)
}

func TestFillTopicRefusesAClientThatMovesRecords(t *testing.T) {
	opts := ceilingCluster(t, "in")
	cl := ceilingClient(t, opts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	samples := []*kgo.Record{{Partition: 0, Key: []byte("k"), Value: []byte("v")}}
	if _, err := fillTopic(context.Background(), cl, "in", samples, 6); err == nil {
		t.Fatal("fillTopic with a round-robin client succeeded; want an error naming kgo.ManualPartitioner")
	}
}

// writeTransactions writes batches of samples to topic in transactions,
// aborting those whose index is in abort, and returns the committed records
// by partition.
func writeTransactions(t *testing.T, opts []kgo.Opt, topic string, batches, perBatch int, abort map[int]bool) map[int32][]*kgo.Record {
	t.Helper()
	ctx := context.Background()
	cl := ceilingClient(t, opts,
		kgo.TransactionalID("ceiling-test-writer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	samples := ceilingSamples()
	committed := make(map[int32][]*kgo.Record)
	for b := range batches {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction %d: %v", b, err)
		}
		var recs []*kgo.Record
		for i := range perBatch {
			s := samples[(b*perBatch+i)%len(samples)]
			recs = append(recs, &kgo.Record{Topic: topic, Partition: s.Partition, Key: fmt.Appendf(nil, "%s-%d-%d", s.Key, b, i), Value: s.Value})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce transaction %d: %v", b, err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort[b])); err != nil {
			t.Fatalf("end transaction %d: %v", b, err)
		}
		if !abort[b] {
			for _, r := range recs {
				committed[r.Partition] = append(committed[r.Partition], r)
			}
		}
	}
	return committed
}

func TestPassThroughCopiesEveryRecord(t *testing.T) {
	for _, source := range []string{"filled", "transactional"} {
		for _, transactional := range []bool{false, true} {
			mode := map[bool]string{false: "plain", true: "transactional"}[transactional]
			t.Run(source+"-source/"+mode, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				opts := ceilingCluster(t, "in", "out")

				var want map[int32][]*kgo.Record
				if source == "filled" {
					cl := ceilingClient(t, opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
					if _, err := fillTopic(ctx, cl, "in", ceilingSamples(), 2000); err != nil {
						t.Fatalf("fillTopic: %v", err)
					}
					want = readCeilingTopic(t, opts, "in")
				} else {
					// An aborted transaction in the middle and one at the
					// end: its abort markers are the last offsets.
					want = writeTransactions(t, opts, "in", 12, 150, map[int]bool{4: true, 11: true})
				}
				n, wantBytes, wantValues := countCopied(want)

				res, err := kafkaPassThrough(ctx, opts, "in", "out", "ceiling-"+mode, transactional, 300, nil)
				if err != nil {
					t.Fatalf("kafkaPassThrough: %v", err)
				}
				t.Logf("%s pass-through of %d records (%d bytes): %.3fs, %.0f records/s, %.2f MiB/s",
					res.Mode, res.Records, res.Bytes, res.Seconds, res.RecordsPerSec, res.MiBPerSec)

				if res.Mode != mode || res.Records != n || res.Bytes != wantBytes || res.RecordBytes != int(wantValues/int64(n)) {
					t.Errorf("result = %+v, want mode %s, %d records, %d bytes, %d mean value bytes",
						res, mode, n, wantBytes, wantValues/int64(n))
				}
				if res.Seconds <= 0 || res.RecordsPerSec <= 0 || res.MiBPerSec <= 0 {
					t.Errorf("result = %+v, want positive time and rates", res)
				}
				expectCopied(t, "out", readCeilingTopic(t, opts, "out"), want)

				// The group's offsets point past the whole source,
				// transaction markers included.
				adm := kadm.NewClient(ceilingClient(t, opts))
				ends, err := adm.ListEndOffsets(ctx, "in")
				if err != nil {
					t.Fatalf("list end offsets of in: %v", err)
				}
				offs, err := adm.FetchOffsets(ctx, "ceiling-"+mode)
				if err != nil {
					t.Fatalf("fetch offsets of the group: %v", err)
				}
				ends.Each(func(e kadm.ListedOffset) {
					if o, ok := offs.Lookup("in", e.Partition); !ok || o.At != e.Offset {
						t.Errorf("group committed offset of in[%d] = %d (found %v), want %d", e.Partition, o.At, ok, e.Offset)
					}
				})
			})
		}
	}
}

// avroSamples are policy changes of different sizes, encoded as the
// matcher reads them, spread over the partitions, and a tombstone.
func avroSamples(t *testing.T) []*kgo.Record {
	t.Helper()
	codec := events.Default()
	var samples []*kgo.Record
	for i, p := range []int32{0, 2, 1, 2, 0, 1} {
		v := fmt.Sprintf("%d", i+2)
		b, err := codec.Encode(&events.PolicyChange{
			ChangeID: fmt.Sprintf("change-%d", i), PolicyID: fmt.Sprintf("policy-%d", i), Action: "UPDATED",
			NewVersion: &v, PolicyName: fmt.Sprintf("Config_%d", i), MatchingConditions: strings.Repeat("c", 50*i),
			BodyHash: "hash", ChangedAt: time.UnixMilli(1_700_000_000_000 + int64(i)).UTC(), Revision: int64(i + 1),
		})
		if err != nil {
			t.Fatalf("encode sample %d: %v", i, err)
		}
		samples = append(samples, &kgo.Record{Partition: p, Key: fmt.Appendf(nil, "policy-%d", i), Value: b})
	}
	return append(samples, &kgo.Record{Partition: 1, Key: []byte("removed")})
}

// decodedEvents decodes every record's value; a tombstone is nil.
func decodedEvents(t *testing.T, topic string, recs map[int32][]*kgo.Record) map[int32][]events.Event {
	t.Helper()
	codec := events.Default()
	out := make(map[int32][]events.Event)
	for p, rs := range recs {
		for _, r := range rs {
			var ev events.Event
			if r.Value != nil {
				var err error
				if ev, err = codec.Decode(context.Background(), r.Value); err != nil {
					t.Fatalf("%s[%d] offset %d: %v", topic, p, r.Offset, err)
				}
			}
			out[p] = append(out[p], ev)
		}
	}
	return out
}

func TestAvroPassThroughCopiesEveryEvent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := ceilingCluster(t, "in", "out")
	cl := ceilingClient(t, opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := fillTopic(ctx, cl, "in", avroSamples(t), 1500); err != nil {
		t.Fatalf("fillTopic: %v", err)
	}
	src := readCeilingTopic(t, opts, "in")
	n, _, _ := countCopied(src)

	res, err := kafkaPassThrough(ctx, opts, "in", "out", "ceiling-avro", true, 200, avroRecode(events.Default()))
	if err != nil {
		t.Fatalf("kafkaPassThrough with Avro: %v", err)
	}
	t.Logf("%s pass-through of %d records (%d bytes): %.3fs, %.0f records/s",
		res.Mode, res.Records, res.Bytes, res.Seconds, res.RecordsPerSec)

	dst := readCeilingTopic(t, opts, "out")
	m, dstBytes, _ := countCopied(dst)
	if res.Mode != "transactional+avro" || res.Records != n || m != n || res.Bytes != dstBytes {
		t.Errorf("result = %+v with %d records (%d bytes) on out; want mode transactional+avro and the %d records of in",
			res, m, dstBytes, n)
	}
	if res.Seconds <= 0 || res.RecordsPerSec <= 0 {
		t.Errorf("result = %+v, want positive time and rate", res)
	}
	want, got := decodedEvents(t, "in", src), decodedEvents(t, "out", dst)
	for p := int32(0); p < ceilingPartitions; p++ {
		if len(got[p]) != len(want[p]) {
			t.Errorf("out[%d] has %d records, want %d", p, len(got[p]), len(want[p]))
			continue
		}
		for i := range want[p] {
			if !reflect.DeepEqual(got[p][i], want[p][i]) || !bytes.Equal(dst[p][i].Key, src[p][i].Key) {
				t.Errorf("out[%d] record %d is %q %+v, want %q %+v", p, i, dst[p][i].Key, got[p][i], src[p][i].Key, want[p][i])
				break
			}
		}
	}
}

// The ceilings copy with Avro transactionally; a plain copy that fails
// between a poll and its acknowledgement must return as well.
func TestAvroPassThroughFailsOnARecordThatIsNotAvro(t *testing.T) {
	for _, transactional := range []bool{true, false} {
		t.Run(map[bool]string{false: "plain", true: "transactional"}[transactional], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			opts := ceilingCluster(t, "in", "out")
			cl := ceilingClient(t, opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			var recs []*kgo.Record
			for i, s := range avroSamples(t) {
				for j := range 5 {
					recs = append(recs, &kgo.Record{Topic: "in", Partition: s.Partition, Key: fmt.Appendf(nil, "%s-%d-%d", s.Key, i, j), Value: s.Value})
				}
			}
			bad := &kgo.Record{Topic: "in", Partition: 1, Key: []byte("bad"), Value: []byte("not an Avro record")}
			recs = append(recs, bad, &kgo.Record{Topic: "in", Partition: 1, Key: []byte("after"), Value: recs[0].Value})
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}

			_, err := kafkaPassThrough(ctx, opts, "in", "out", "ceiling-avro-bad", transactional, 200, avroRecode(events.Default()))
			where := fmt.Sprintf("in[1] at offset %d", bad.Offset)
			if err == nil || !strings.Contains(err.Error(), where) {
				t.Fatalf("kafkaPassThrough over a record that is not Avro: error %v, want one naming %s", err, where)
			}
			t.Log(err)
		})
	}
}

func TestPassThroughRefusesMismatchedTopics(t *testing.T) {
	opts := ceilingCluster(t, "in")
	ctx := context.Background()
	adm := kadm.NewClient(ceilingClient(t, opts))
	if _, err := adm.CreateTopic(ctx, ceilingPartitions+1, 1, nil, "wide"); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	cl := ceilingClient(t, opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if _, err := fillTopic(ctx, cl, "in", ceilingSamples(), 10); err != nil {
		t.Fatalf("fillTopic: %v", err)
	}
	if _, err := kafkaPassThrough(ctx, opts, "in", "wide", "g", false, 100, nil); err == nil {
		t.Error("pass-through into a topic with more partitions succeeded")
	}
	if _, err := kafkaPassThrough(ctx, opts, "in", "missing", "g", false, 100, nil); err == nil {
		t.Error("pass-through into a missing topic succeeded")
	}
}

func TestConsulCeilingWritesThenRemovesKeys(t *testing.T) {
	if _, err := devstack.ConsulBinary(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but there is no consul binary: %v", err)
		}
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agent, err := devstack.StartConsul(ctx, devstack.ConsulOptions{})
	if err != nil {
		t.Fatalf("start consul: %v", err)
	}
	defer agent.Stop()
	cl, err := api.NewClient(&api.Config{Address: agent.Addr})
	if err != nil {
		t.Fatalf("consul client: %v", err)
	}
	kv := cl.KV()
	const keys, opsPerTxn, valueBytes = 1000, 64, 300
	wantTxns := (keys + opsPerTxn - 1) / opsPerTxn

	// The timed part leaves every key in place.
	w, err := writeConsulKeys(ctx, cl, "pfbench-test/written", keys, opsPerTxn, 4, valueBytes)
	if err != nil {
		t.Fatalf("writeConsulKeys: %v", err)
	}
	written, _, err := kv.Keys("pfbench-test/written/", "", nil)
	if err != nil {
		t.Fatalf("list keys: %v", err)
	}
	if len(written) != keys || w.Txns != wantTxns {
		t.Errorf("wrote %d keys in %d transactions, want %d in %d", len(written), w.Txns, keys, wantTxns)
	}
	last, _, err := kv.Get(consulKey("pfbench-test/written/", keys-1), nil)
	if err != nil || last == nil || len(last.Value) != valueBytes {
		t.Errorf("last key = %v (err %v), want a value of %d bytes", last, err, valueBytes)
	}
	if _, err := kv.DeleteTree("pfbench-test/", nil); err != nil {
		t.Fatalf("delete keys: %v", err)
	}

	res, err := consulCeiling(ctx, cl, "pfbench-test/ceiling", keys, opsPerTxn, 1, valueBytes)
	if err != nil {
		t.Fatalf("consulCeiling: %v", err)
	}
	t.Logf("consul: %d keys of %d bytes in %d transactions of %d: %.3fs, %.0f keys/s",
		res.Keys, res.ValueBytes, res.Txns, res.OpsPerTxn, res.Seconds, res.KeysPerSec)
	if res.Keys != keys || res.OpsPerTxn != opsPerTxn || res.ValueBytes != valueBytes || res.Txns != wantTxns {
		t.Errorf("result = %+v, want %d keys of %d bytes in %d transactions of %d", res, keys, valueBytes, wantTxns, opsPerTxn)
	}
	if res.Seconds <= 0 || res.KeysPerSec <= 0 {
		t.Errorf("result = %+v, want positive time and rate", res)
	}
	best, sweep, err := bestConsulCeiling(ctx, cl, "pfbench-test/sweep", keys, valueBytes, []int{1, 3}, []int{64, 128}, 1)
	if err != nil {
		t.Fatalf("bestConsulCeiling: %v", err)
	}
	if len(sweep) != 5 {
		t.Errorf("sweep has %d runs, want 2 writer counts x 2 sizes + 1 again", len(sweep))
	}
	for _, r := range sweep {
		if r.KeysPerSec > best.KeysPerSec || r.Keys != keys {
			t.Errorf("sweep run %+v: beats the best %+v or wrote another count", r, best)
		}
	}
	if last := sweep[len(sweep)-1]; last.Clients != best.Clients || last.OpsPerTxn != best.OpsPerTxn {
		t.Errorf("the run again %+v is not of the fastest way %+v", last, best)
	}
	left, _, err := kv.Keys("pfbench-test/", "", nil)
	if err != nil {
		t.Fatalf("list keys: %v", err)
	}
	if len(left) != 0 {
		t.Errorf("%d keys left under pfbench-test/ after the run, e.g. %s", len(left), left[0])
	}
}
