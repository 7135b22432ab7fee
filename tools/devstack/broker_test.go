package devstack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/runtime"
)

// testClient returns a client on the broker with the short fetch wait and
// metadata age the tests of this repository use against kfake.
func testClient(t *testing.T, b *Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(b.Addrs...),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.MetadataMinAge(200 * time.Millisecond),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("create client: %v", err)
	}
	return cl
}

func startBroker(t *testing.T, o BrokerOptions) *Broker {
	t.Helper()
	b, err := StartBroker(o)
	if err != nil {
		t.Fatalf("StartBroker(%+v): %v", o, err)
	}
	return b
}

func createTopic(ctx context.Context, t *testing.T, b *Broker, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	cl := testClient(t, b)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, configs, topic)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if resp.Err != nil {
		t.Fatalf("create topic %s: %v", topic, resp.Err)
	}
}

func produce(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		r := &kgo.Record{Topic: topic, Key: []byte(kv[i]), Value: []byte(kv[i+1])}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s=%s to %s: %v", kv[i], kv[i+1], topic, err)
		}
	}
}

// consumeN polls until n records arrived or the context ends.
func consumeN(ctx context.Context, t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %d of %d records before the deadline: %v", len(out), n, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s[%d]: %v", topic, p, err)
		})
		out = append(out, fs.Records()...)
	}
	return out
}

func TestBrokerRecordsAndGroupOffsetsSurviveRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const topic, group = "orders", "billing"

	b := startBroker(t, BrokerOptions{DataDir: dir, Partitions: 3})
	createTopic(ctx, t, b, topic, -1, nil)

	var kv []string
	for i := range 30 {
		kv = append(kv, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
	}
	prod := testClient(t, b)
	produce(ctx, t, prod, topic, kv...)
	prod.Close()

	// A group member reads everything, commits and leaves.
	member := testClient(t, b,
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if got := consumeN(ctx, t, member, 30); len(got) != 30 {
		t.Fatalf("group member read %d records before restart, want 30", len(got))
	}
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit offsets of group %s: %v", group, err)
	}
	member.Close()
	b.Close()

	b = startBroker(t, BrokerOptions{DataDir: dir})
	defer b.Close()

	// Every record is still there, under its key, with its value.
	reader := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]string{}
	for _, r := range consumeN(ctx, t, reader, 30) {
		got[string(r.Key)] = string(r.Value)
	}
	reader.Close()
	for i := range 30 {
		k, want := "k"+strconv.Itoa(i), "v"+strconv.Itoa(i)
		if got[k] != want {
			t.Errorf("after restart %s=%q, want %q", k, got[k], want)
		}
	}
	if len(got) != 30 {
		t.Errorf("after restart read %d distinct keys, want 30", len(got))
	}
	// The topic kept its partition count.
	adm := testClient(t, b)
	defer adm.Close()
	tds, err := kadm.NewClient(adm).ListTopics(ctx, topic)
	if err != nil {
		t.Fatalf("list topic %s after restart: %v", topic, err)
	}
	if n := len(tds[topic].Partitions); n != 3 {
		t.Errorf("after restart %s has %d partitions, want 3", topic, n)
	}

	// The group resumes after its committed offsets: it sees only what
	// was produced after the restart, not the 30 records it committed.
	prod = testClient(t, b)
	produce(ctx, t, prod, topic, "after", "restart")
	prod.Close()
	member = testClient(t, b,
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	defer member.Close()
	recs := consumeN(ctx, t, member, 1)
	if len(recs) != 1 || string(recs[0].Key) != "after" || string(recs[0].Value) != "restart" {
		var seen []string
		for _, r := range recs {
			seen = append(seen, string(r.Key)+"="+string(r.Value))
		}
		t.Fatalf("group %s after restart read %v, want only after=restart", group, seen)
	}
}

func TestBrokerCompactsTopicsLoadedFromDataDir(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const topic = "catalog"
	opts := BrokerOptions{DataDir: dir, BrokerConfigs: map[string]string{"log.cleaner.backoff.ms": "100"}}

	b := startBroker(t, opts)
	compact := "compact"
	createTopic(ctx, t, b, topic, 1, map[string]*string{"cleanup.policy": &compact})
	b.Close()

	b = startBroker(t, opts)
	defer b.Close()
	cl := testClient(t, b)
	defer cl.Close()
	// Five separate batches for one key: compaction keeps the newest
	// of the closed batches plus the active (last) one.
	for i := 1; i <= 5; i++ {
		produce(ctx, t, cl, topic, "policy-a", "v"+strconv.Itoa(i))
	}

	var values, prev []string
	for {
		prev, values = values, nil
		r := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		// The high watermark stays 5, so reading up to offset 4 reads
		// everything that survived.
		for done := false; !done; {
			fs := r.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("policy-a still has values %v on compacted topic %s after a restart: %v", prev, topic, ctx.Err())
			}
			fs.EachRecord(func(rec *kgo.Record) {
				values = append(values, string(rec.Value))
				done = done || rec.Offset == 4
			})
		}
		r.Close()
		if len(values) < 5 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if last := values[len(values)-1]; last != "v5" {
		t.Errorf("after compaction the last value of policy-a is %q, want v5 (all: %v)", last, values)
	}
}

func TestBrokerListensAndAdvertisesWhereAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)

	b := startBroker(t, BrokerOptions{Brokers: 1, Listen: addr, Advertise: "localhost"})
	defer b.Close()
	want := "localhost:" + port
	if len(b.Addrs) != 1 || b.Addrs[0] != want {
		t.Fatalf("broker addrs %v, want [%s]", b.Addrs, want)
	}

	// A client seeded with the listening address is told to use the
	// advertised one and still produces and reads back.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumeTopics("t"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	createTopic(ctx, t, b, "t", 1, nil)
	produce(ctx, t, cl, "t", "k", "v")
	if recs := consumeN(ctx, t, cl, 1); string(recs[0].Value) != "v" {
		t.Fatalf("read %q back, want v", recs[0].Value)
	}
	brokers, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		t.Fatalf("list brokers: %v", err)
	}
	if len(brokers) != 1 || fmt.Sprintf("%s:%d", brokers[0].Host, brokers[0].Port) != want {
		t.Fatalf("metadata lists brokers %v, want one at %s", brokers, want)
	}
}

// freeRun finds n consecutive free loopback ports and returns the first.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		first, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if first+n-1 > 65535 {
			continue
		}
		ok := true
		for p := first; p < first+n && ok; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		if ok {
			return first
		}
	}
	t.Skipf("found no %d consecutive free ports", n)
	return 0
}

// The default cluster has three brokers on consecutive ports, each
// advertised on its own port, and a topic created with the broker's
// default replication factor gets three replicas spread over them.
func TestBrokerDefaultIsThreeBrokersWithThreeReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := freeRun(t, 3)
	b := startBroker(t, BrokerOptions{Listen: "127.0.0.1:" + strconv.Itoa(first), Advertise: "localhost:" + strconv.Itoa(first)})
	defer b.Close()
	var want []string
	for i := 0; i < DefaultBrokers; i++ {
		want = append(want, "localhost:"+strconv.Itoa(first+i))
	}
	if fmt.Sprint(b.Addrs) != fmt.Sprint(want) {
		t.Fatalf("broker addrs %v, want %v", b.Addrs, want)
	}
	cl := testClient(t, b)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	brokers, err := adm.ListBrokers(ctx)
	if err != nil {
		t.Fatalf("list brokers: %v", err)
	}
	if len(brokers) != DefaultBrokers {
		t.Fatalf("metadata lists %d brokers (%v), want %d", len(brokers), brokers, DefaultBrokers)
	}
	createTopic(ctx, t, b, "replicated", 6, nil)
	tds, err := adm.ListTopics(ctx, "replicated")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tds["replicated"].Partitions {
		if len(p.Replicas) != 3 {
			t.Errorf("partition %d has replicas %v, want 3", p.Partition, p.Replicas)
		}
	}
	// Moving every leader to node 2 shows that clients follow leaders:
	// a record produced after the move is read back.
	for p := int32(0); p < 6; p++ {
		if err := b.Cluster.MoveTopicPartition("replicated", p, 2); err != nil {
			t.Fatal(err)
		}
		if l := b.Cluster.LeaderFor("replicated", p); l != 2 {
			t.Fatalf("partition %d led by node %d after the move, want 2", p, l)
		}
	}
	produce(ctx, t, cl, "replicated", "k", "v")
}

// A cluster can be started again on the ports Addrs lists, and a data dir
// written by a single broker loads into three and back.
func TestBrokerRestartsOnItsAddrsAndAnyBrokerCount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	b := startBroker(t, BrokerOptions{Brokers: 1, DataDir: dir})
	createTopic(ctx, t, b, "kept", 3, nil)
	cl := testClient(t, b)
	produce(ctx, t, cl, "kept", "k1", "v1")
	cl.Close()
	b.Close()

	b = startBroker(t, BrokerOptions{DataDir: dir})
	addrs := b.Addrs
	if len(addrs) != 3 {
		t.Fatalf("started %d brokers on the data dir, want 3", len(addrs))
	}
	cl = testClient(t, b)
	produce(ctx, t, cl, "kept", "k2", "v2")
	cl.Close()
	b.Close()

	b = startBroker(t, BrokerOptions{DataDir: dir, Listen: strings.Join(addrs, ",")})
	defer b.Close()
	if fmt.Sprint(b.Addrs) != fmt.Sprint(addrs) {
		t.Fatalf("restarted on %v, want the same addresses %v", b.Addrs, addrs)
	}
	r := testClient(t, b, kgo.ConsumeTopics("kept"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer r.Close()
	got := map[string]string{}
	for _, rec := range consumeN(ctx, t, r, 2) {
		got[string(rec.Key)] = string(rec.Value)
	}
	if got["k1"] != "v1" || got["k2"] != "v2" {
		t.Fatalf("after restarts read %v, want k1=v1 and k2=v2", got)
	}
}

func TestBrokerRejectsBadCounts(t *testing.T) {
	for _, o := range []BrokerOptions{
		{Brokers: -1},
		{Brokers: MaxBrokers + 1},
		{Brokers: 2, Listen: "127.0.0.1:0,127.0.0.1:0,127.0.0.1:0"},
		{Listen: "127.0.0.1:0,localhost:0"},
		{Brokers: 3, Listen: "127.0.0.1:65534"},
	} {
		if b, err := StartBroker(o); err == nil {
			b.Close()
			t.Errorf("StartBroker(Brokers %d, Listen %q) started, want an error", o.Brokers, o.Listen)
		}
	}
}

// A broker restarted in a rolling restart drops its connections, and
// comes back under its node id on its port; clients keep producing and
// reading through it.
func TestBrokerRestartIsARollingRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, BrokerOptions{})
	defer b.Close()
	createTopic(ctx, t, b, "rolling", 3, nil)
	cl := testClient(t, b)
	defer cl.Close()
	produce(ctx, t, cl, "rolling", "before", "1")

	// A connection to broker 1 is closed when it stops.
	conn, err := net.Dial("tcp", b.Addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stopped := make(chan error, 1)
	go func() { stopped <- b.Restart(ctx, 1, 300*time.Millisecond) }()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection to the stopped broker read %v, want it closed", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	brokers, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil || len(brokers) != 3 {
		t.Fatalf("after the restart the metadata lists %v (%v), want 3 brokers", brokers, err)
	}
	for _, br := range brokers {
		if br.NodeID == 1 && fmt.Sprintf("%s:%d", br.Host, br.Port) != b.Addrs[1] {
			t.Fatalf("broker 1 came back at %s:%d, want %s", br.Host, br.Port, b.Addrs[1])
		}
	}
	produce(ctx, t, cl, "rolling", "after", "2")
	if err := b.Restart(ctx, 3, 0); err == nil {
		t.Fatal("restarting broker 3 of a cluster of 3 worked, want an error")
	}
}

// A consumer that read everything keeps its place when partition leaders
// move while nothing is written: it checks its position with the cluster
// (KIP-320) and must be told its epoch ends where the log ends, not that
// the epoch is unknown, which franz-go answers by resetting it to the
// start of the partition: every record read again after each move.
func TestBrokerConsumersKeepTheirPlaceWhenLeadersMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, BrokerOptions{Listen: "127.0.0.1:0"})
	defer b.Close()
	createTopic(ctx, t, b, "moved", 3, nil)
	pcl := testClient(t, b)
	defer pcl.Close()
	for i := 0; i < 30; i++ {
		produce(ctx, t, pcl, "moved", "k"+strconv.Itoa(i), "before")
	}
	cl := testClient(t, b, kgo.ConsumeTopics("moved"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer cl.Close()
	consumeN(ctx, t, cl, 30)

	for round := 0; round < 3; round++ {
		// Leaders move twice with nothing written in between, then a
		// record per key: the consumer gets these and nothing else.
		b.Cluster.ShufflePartitionLeaders()
		b.Cluster.ShufflePartitionLeaders()
		for i := 0; i < 30; i++ {
			produce(ctx, t, pcl, "moved", "k"+strconv.Itoa(i), "after-"+strconv.Itoa(round))
		}
		got := consumeN(ctx, t, cl, 30)
		// Anything read again arrives in the same polls or just after.
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		got = append(got, cl.PollFetches(pctx).Records()...)
		pcancel()
		again := 0
		for _, r := range got {
			if string(r.Value) != "after-"+strconv.Itoa(round) {
				again++
			}
		}
		if again > 0 || len(got) != 30 {
			t.Fatalf("round %d: after two leader moves the consumer read %d records, %d of them read before; want the 30 new ones only", round, len(got), again)
		}
	}
}

// What --broker-sync costs: records produced one at a time (each waits for
// its acknowledgement, as a stage's transaction end does), to a broker with
// a data dir, without and with an fsync per batch. `go test -run '^$'
// -bench ProduceToDataDir ./devstack/`.
func BenchmarkProduceToDataDir(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%t", sync), func(b *testing.B) {
			ctx := context.Background()
			br, err := StartBroker(BrokerOptions{Brokers: 1, DataDir: b.TempDir(), Sync: sync, Partitions: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(br.Addrs...), kgo.DefaultProduceTopic("bench"), kgo.ProducerLinger(0))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, "bench"); err != nil {
				b.Fatal(err)
			}
			value := make([]byte, 512)
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestBrokerKeepsAbortedRecordsFromReadCommitted: records of an aborted
// transaction are never read as committed, however the reader's fetches
// are cut. One partition holds 200 KiB committed, the other 600 KiB of an
// aborted transaction and one committed record; runtime.ReadPartitions,
// fetching at most runtime.DefaultFetchMaxBytes a request and a partition
// as the stages do, fills fetches with the aborted records. Without
// readCommittedAsKafka it read most of them (488 of the 600).
func TestBrokerKeepsAbortedRecordsFromReadCommitted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := startBroker(t, BrokerOptions{Listen: "127.0.0.1:0"})
	defer b.Close()
	const topic = "aborted"
	createTopic(ctx, t, b, topic, 2, nil)
	k0, k1 := "k0", "k1"
	for i := 2; runtime.KeyPartition(k0, 2) == runtime.KeyPartition(k1, 2); i++ {
		k1 = "k" + strconv.Itoa(i)
	}
	value := func() string {
		v := make([]byte, 1000) // random: the batches do not compress
		rand.Read(v)
		return string(v)
	}
	pcl := testClient(t, b, kgo.RecordPartitioner(runtime.Partitioner()))
	defer pcl.Close()
	for range 200 {
		produce(ctx, t, pcl, topic, k0, value())
	}
	tcl := testClient(t, b, kgo.RecordPartitioner(runtime.Partitioner()), kgo.TransactionalID("aborted"))
	defer tcl.Close()
	if err := tcl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for range 600 {
		produce(ctx, t, tcl, topic, k1, value())
	}
	if err := tcl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	produce(ctx, t, pcl, topic, k1, "after")

	read := map[string]int{}
	err := runtime.ReadPartitions(ctx, runtime.Kafka{Brokers: b.Addrs}, topic, nil, func(r *kgo.Record) error {
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
