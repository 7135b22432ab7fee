package smoke

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/topology"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { backend.Main(m) }

// testTimeout is generous: the machine running the suite may be slow and
// busy, and every wait below polls until it sees what it expects.
const testTimeout = 2 * time.Minute

// TestTransactionalRecordReachesReadCommittedConsumer produces one record in
// a transaction that is aborted and one in a transaction that commits; a
// read_committed consumer in its own group sees only the committed one.
func TestTransactionalRecordReachesReadCommittedConsumer(t *testing.T) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	k := b.Kafka(prefix)
	topic := k.Topic("smoke")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	created, err := b.Admin(t).CreateTopic(ctx, 1, -1, nil, topic)
	if err == nil {
		err = created.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}

	opts, err := k.ClientOpts()
	if err != nil {
		t.Fatalf("client options: %v", err)
	}
	producer, err := kgo.NewClient(append(opts,
		kgo.TransactionalID(prefix+"smoke-producer"),
		kgo.DefaultProduceTopic(topic),
	)...)
	if err != nil {
		t.Fatalf("create transactional producer: %v", err)
	}
	defer producer.Close()
	produceInTxn(ctx, t, producer, "aborted", kgo.TryAbort)
	produceInTxn(ctx, t, producer, "committed", kgo.TryCommit)

	consumer, err := kgo.NewClient(append(opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup(prefix+"smoke"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)...)
	if err != nil {
		t.Fatalf("create read_committed consumer: %v", err)
	}
	defer consumer.Close()

	var got []string
	for !slices.Contains(got, "committed") {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no committed record on %s before the deadline; consumed %q", topic, got)
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				t.Fatalf("consume %s partition %d: %v", fe.Topic, fe.Partition, fe.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Value))
		})
	}
	if want := []string{"committed"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed consumer of %s got %q, want %q (the aborted record must stay invisible)", topic, got, want)
	}
}

// produceInTxn writes one record in its own transaction and ends it with
// commit or abort.
func produceInTxn(ctx context.Context, t *testing.T, cl *kgo.Client, value string, end kgo.TransactionEndTry) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction for %q: %v", value, err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("produce %q in a transaction: %v", value, err)
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatalf("end transaction of %q (commit=%v): %v", value, end, err)
	}
}

// TestTopologyAppliedUnderPrefix applies the starting topology under a
// prefix and finds every topic on the cluster with the asked partition count
// and its cleanup policy.
func TestTopologyAppliedUnderPrefix(t *testing.T) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	const partitions = 2
	b.ApplyTopology(t, prefix, partitions)

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adm := b.Admin(t)
	want := map[string]string{} // name -> cleanup.policy
	var names []string
	for _, tp := range topology.Default() {
		want[prefix+tp.Name] = tp.Cleanup
		names = append(names, prefix+tp.Name)
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		t.Fatalf("list topics under %q: %v", prefix, err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		t.Fatalf("describe topic configs under %q: %v", prefix, err)
	}
	for _, name := range names {
		d, ok := details[name]
		switch {
		case !ok || d.Err != nil:
			t.Errorf("topic %s: missing after apply (%v)", name, d.Err)
			continue
		case len(d.Partitions) != partitions:
			t.Errorf("topic %s: %d partitions, want %d", name, len(d.Partitions), partitions)
		}
		rc, err := configs.On(name, nil)
		if err != nil {
			t.Errorf("topic %s: configs: %v", name, err)
			continue
		}
		var cleanup string
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" {
				cleanup = c.MaybeValue()
			}
		}
		if cleanup != want[name] {
			t.Errorf("topic %s: cleanup.policy %q, want %q", name, cleanup, want[name])
		}
	}
}

// TestConsulKeyValueRoundTrip writes a value to Consul KV and reads the same
// bytes back.
func TestConsulKeyValueRoundTrip(t *testing.T) {
	b := backend.Get(t)
	cc, err := b.Consul().Client() // with the external backend's ACL token
	if err != nil {
		t.Fatalf("create Consul client for %s: %v", b.ConsulAddr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	q := (&api.QueryOptions{}).WithContext(ctx)
	w := (&api.WriteOptions{}).WithContext(ctx)

	folder := "policyflow-smoke/" + strings.TrimSuffix(b.Prefix(t), ".")
	key := consulkv.ItemKey(folder+"/svc", "DCAE.Config_smoke")
	value := []byte(`{"policy_id":"DCAE.Config_smoke","config":{"threshold":7}}`)
	t.Cleanup(func() {
		if _, err := cc.KV().DeleteTree(folder, nil); err != nil {
			t.Logf("delete Consul folder %s: %v", folder, err)
		}
	})

	if _, err := cc.KV().Put(&api.KVPair{Key: key, Value: value}, w); err != nil {
		t.Fatalf("put Consul key %s: %v", key, err)
	}
	pair, _, err := cc.KV().Get(key, q)
	if err != nil {
		t.Fatalf("get Consul key %s: %v", key, err)
	}
	if pair == nil {
		t.Fatalf("Consul key %s: not found after put", key)
	}
	if string(pair.Value) != string(value) {
		t.Fatalf("Consul key %s = %q, want %q", key, pair.Value, value)
	}
}
