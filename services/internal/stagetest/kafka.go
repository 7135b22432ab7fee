package stagetest

import (
	"context"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// prefix is the topic prefix of every test cluster.
const prefix = "t."

// Linger is how long a poll of Read and ReadUntil must bring nothing
// before they stop (after a poll per broker at most), once they have what
// they waited for, so that records beyond it (duplicates) show too.
const Linger = 500 * time.Millisecond

// Brokers is the number of brokers of every test cluster: PF_BROKER_COUNT,
// three by default, so that partition leaders and the group and
// transaction coordinators are spread over brokers as on a real cluster.
func Brokers(t testing.TB) int {
	t.Helper()
	v := os.Getenv("PF_BROKER_COUNT")
	if v == "" {
		return DefaultBrokers
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 16 {
		t.Fatalf("PF_BROKER_COUNT=%q: want a number of brokers between 1 and 16", v)
	}
	return n
}

// DefaultBrokers is the number of brokers without PF_BROKER_COUNT.
const DefaultBrokers = 3

// Cluster is a kfake cluster of Brokers brokers running in the test process,
// with an admin client and a producer that places keyed records the way
// the stages do (the key's murmur2 hash, as Kafka's default partitioner).
type Cluster struct {
	Kafka runtime.Kafka
	Admin *kadm.Client
	// Fake is the kfake cluster, for tests that move leaders or
	// coordinators or inject errors.
	Fake *kfake.Cluster

	cl         *kgo.Client // produces; Admin talks through it too
	partitions int32       // of every topic the cluster creates
}

// NewCluster starts an in-process Kafka, closed when the test ends, and
// creates the topics (base names, without the prefix "t.") with the given
// number of partitions, the broker's default replication (as many
// replicas as brokers, up to three) and the broker's default configs.
func NewCluster(t testing.TB, partitions int32, topics ...string) *Cluster {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(Brokers(t)), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("start an in-process Kafka: %v", err)
	}
	t.Cleanup(kc.Close)
	ReadCommittedAsKafka(kc)
	k := runtime.Kafka{Brokers: kc.ListenAddrs(), Prefix: prefix, FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	cl, err := kgo.NewClient(producerOpts(k)...)
	if err != nil {
		t.Fatalf("create a client of %v: %v", k.Brokers, err)
	}
	t.Cleanup(cl.Close)
	c := &Cluster{Kafka: k, Admin: kadm.NewClient(cl), Fake: kc, cl: cl, partitions: partitions}
	c.CreateTopics(t, nil, topics...)
	return c
}

// ReadCommittedAsKafka makes a kfake cluster keep aborted records from
// read_committed consumers as Kafka does, whatever the fetch's size.
// kfake stops filling a fetch response once it reaches the request's
// MaxBytes, and then leaves out the aborted transactions of the
// partition it was filling (the list a consumer skips aborted records
// by): that partition's aborted records reach the consumer as committed.
// The stages fetch at most runtime.DefaultFetchMaxBytes a request and a
// partition alike, so every fetch that a partition fills is cut that way;
// on kfake, before this, a stage handled the records of its input's
// aborted transactions and restored state (the executor's collections)
// from them. A read_committed fetch is asked with no request-wide bound:
// each partition's own bound (PartitionMaxBytes), which kfake applies
// without that fault, still bounds what it returns. tools/devstack does
// the same to the embedded broker.
func ReadCommittedAsKafka(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r, ok := req.(*kmsg.FetchRequest); ok && r.IsolationLevel == 1 {
			r.MaxBytes = math.MaxInt32
		}
		return nil, nil, false // kfake answers the fetch as rewritten
	})
}

// producerOpts place keyed records as the stages do and take records as
// big as the stages may write.
func producerOpts(k runtime.Kafka) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(topology.MaxRecordBytes),
		kgo.ProducerLinger(0),
	}
}

// CreateTopics creates topics (base names) with the cluster's partition
// count and the given topic configs (nil: the broker's defaults).
func (c *Cluster) CreateTopics(t testing.TB, configs map[string]string, topics ...string) {
	t.Helper()
	var cfg map[string]*string
	if len(configs) > 0 {
		cfg = make(map[string]*string, len(configs))
		for name, v := range configs {
			cfg[name] = &v
		}
	}
	for _, base := range topics {
		resp, err := c.Admin.CreateTopic(context.Background(), c.partitions, -1, cfg, c.Kafka.Topic(base))
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("create topic %s: %v", c.Kafka.Topic(base), err)
		}
	}
}

// Record is ev encoded as a record of topic (a base name) keyed by key;
// a nil ev is a tombstone.
func (c *Cluster) Record(t testing.TB, topic, key string, ev events.Event) *kgo.Record {
	t.Helper()
	rec := &kgo.Record{Topic: c.Kafka.Topic(topic), Key: []byte(key)}
	if ev != nil {
		b, err := events.Default().Encode(ev)
		if err != nil {
			t.Fatalf("encode %s for %s: %v", ev.SchemaName(), rec.Topic, err)
		}
		rec.Value = b
	}
	return rec
}

// Produce writes ev (nil: a tombstone) keyed by key to topic (a base name)
// and waits until the broker has it.
func (c *Cluster) Produce(t testing.TB, topic, key string, ev events.Event) {
	t.Helper()
	c.ProduceRecords(t, c.Record(t, topic, key, ev))
}

// ProduceRecords writes records as they are (full topic names, keys and
// values, Partition ignored) and waits until the broker has them all.
func (c *Cluster) ProduceRecords(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	if err := c.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records: %v", len(recs), err)
	}
}

var txnSeq atomic.Int64

// ProduceCommitted writes records in one committed transaction, as the
// transactional stages do, so that the partitions end in a transaction
// marker.
func (c *Cluster) ProduceCommitted(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	id := "stagetest-" + strconv.FormatInt(txnSeq.Add(1), 10)
	cl, err := kgo.NewClient(append(producerOpts(c.Kafka), kgo.TransactionalID(id))...)
	if err != nil {
		t.Fatalf("create transactional client %s: %v", id, err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction %s: %v", id, err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records in transaction %s: %v", len(recs), id, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit transaction %s: %v", id, err)
	}
}

// ProduceAborted writes records in one transaction and aborts it, as a
// transactional stage's transaction that a rebalance aborted leaves them:
// in the log, and never to be read by a reader of committed records.
func (c *Cluster) ProduceAborted(t testing.TB, recs ...*kgo.Record) {
	t.Helper()
	id := "stagetest-" + strconv.FormatInt(txnSeq.Add(1), 10)
	cl, err := kgo.NewClient(append(producerOpts(c.Kafka), kgo.TransactionalID(id))...)
	if err != nil {
		t.Fatalf("create transactional client %s: %v", id, err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction %s: %v", id, err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records in transaction %s: %v", len(recs), id, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatalf("abort transaction %s: %v", id, err)
	}
}

// Reader reads one topic from its start, read_committed, and keeps every
// record it has read.
type Reader struct {
	cl  *kgo.Client
	got []*kgo.Record
}

// Reader starts reading topic (a base name); it stops when the test ends.
func (c *Cluster) Reader(t testing.TB, topic string) *Reader {
	t.Helper()
	r := c.newReader(t, topic)
	t.Cleanup(r.cl.Close)
	return r
}

func (c *Cluster) newReader(t testing.TB, topic string) *Reader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Kafka.Brokers...), kgo.ConsumeTopics(c.Kafka.Topic(topic)),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("create a reader of %s: %v", c.Kafka.Topic(topic), err)
	}
	return &Reader{cl: cl}
}

// Until reads until the reader holds at least want records or wait has
// passed, and returns every record read so far.
func (r *Reader) Until(want int, wait time.Duration) []*kgo.Record {
	return r.until(func(got []*kgo.Record) bool { return len(got) >= want }, wait)
}

func (r *Reader) until(done func([]*kgo.Record) bool, wait time.Duration) []*kgo.Record {
	deadline := time.Now().Add(wait)
	for !done(r.got) && time.Now().Before(deadline) {
		r.Poll(500 * time.Millisecond)
	}
	return r.got
}

// Poll reads for at most d (less when records come) and returns the
// records this poll read.
func (r *Reader) Poll(d time.Duration) []*kgo.Record {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	recs := r.cl.PollFetches(ctx).Records()
	r.got = append(r.got, recs...)
	return recs
}

// Records returns every record read so far.
func (r *Reader) Records() []*kgo.Record { return r.got }

// Read reads topic (a base name) from its start, read_committed, until
// want records arrived or wait passed, then lingers for extra ones, and
// returns them all.
func (c *Cluster) Read(t testing.TB, topic string, want int, wait time.Duration) []*kgo.Record {
	t.Helper()
	return c.ReadUntil(t, topic, wait, func(got []*kgo.Record) bool { return len(got) >= want })
}

// ReadUntil is Read with a condition on the records read so far in place
// of their number.
func (c *Cluster) ReadUntil(t testing.TB, topic string, wait time.Duration, done func([]*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	r := c.newReader(t, topic)
	defer r.cl.Close()
	r.until(done, wait)
	// Linger until a poll brings nothing: with several brokers one fetch
	// may bring the records of some partitions only. A poll per broker
	// at most, so that a topic written all the time (heartbeats) does not
	// keep the read going.
	for range len(c.Kafka.Brokers) + 1 {
		if len(r.Poll(Linger)) == 0 {
			break
		}
	}
	return r.got
}

// Decode decodes a record's value as a T, failing the test when it is not
// one.
func Decode[T events.Event](t testing.TB, rec *kgo.Record) T {
	t.Helper()
	ev, err := events.Default().Decode(context.Background(), rec.Value)
	if err != nil {
		t.Fatalf("decode the record at %s[%d]@%d: %v", rec.Topic, rec.Partition, rec.Offset, err)
	}
	v, ok := ev.(T)
	if !ok {
		t.Fatalf("the record at %s[%d]@%d holds a %s, want a %T", rec.Topic, rec.Partition, rec.Offset, ev.SchemaName(), v)
	}
	return v
}

// Header returns the value of a record's header, or "" without it.
func Header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
