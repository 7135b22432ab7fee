package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// PassThrough is one measured copy of a topic into another.
type PassThrough struct {
	Mode          string  `json:"mode"`            // "plain" or "transactional", "+avro" when values are recoded
	Records       int     `json:"records"`         // records copied
	Bytes         int64   `json:"bytes"`           // sum of value+key bytes produced
	RecordBytes   int     `json:"record_bytes"`    // mean value size produced
	Seconds       float64 `json:"seconds"`         // first fetched record to last offsets committed
	RecordsPerSec float64 `json:"records_per_sec"` // Records / Seconds
	MiBPerSec     float64 `json:"mib_per_sec"`     // Bytes / Seconds, in MiB
}

// valueTransform is what a pass-through does to each record's value on the
// way: apply returns the value produced in its place. Its name is added to
// the copy's mode.
type valueTransform struct {
	name  string
	apply func(ctx context.Context, value []byte) ([]byte, error)
}

// avroRecode decodes each value with codec into its event and encodes the
// event again: reading and writing the stage's input format, which any
// stage does at least. A tombstone (no value) stays one, as stages do not
// decode them.
func avroRecode(codec *events.Codec) *valueTransform {
	return &valueTransform{name: "avro", apply: func(ctx context.Context, value []byte) ([]byte, error) {
		if value == nil {
			return nil, nil
		}
		ev, err := codec.Decode(ctx, value)
		if err != nil {
			return nil, err
		}
		return codec.Encode(ev)
	}}
}

// kafkaPassThrough copies every record of src (already written, complete) to dst with a
// new consumer group of its own (group names one that never consumed) through franz-go, the way a stage would but
// with no handling, and measures the copy from the first fetched record to
// the last produced record acknowledged and offsets committed. transactional uses
// kgo.GroupTransactSession (read_committed, one transaction per poll of up to pollRecords
// records, commit offsets in the transaction) like the pipeline's transactional stages; plain
// produces each poll's records (ProducerLinger(0)), waits for acks, then commits offsets
// (at-least-once). opts are the base client options (brokers, FetchMaxWait etc.;
// from runtime.Kafka.ClientOpts()). With tf nil the values are copied as
// they are (no decode or encode); else each is replaced by tf.apply's result
// inside the timed copy, and a record tf fails on fails the copy naming its
// partition and offset. It returns when every record of src (its end offsets at the
// start, read_committed) has been copied. dst must exist with the same partition count; copy each
// record to the same partition number (kgo.ManualPartitioner, set rec.Partition).
//
// Plain mode marks each poll's records once its copies are acknowledged and
// commits the marks every second and once at the end, as the at-least-once
// stages do. Records beyond the last stable offsets seen at the start are not
// copied.
func kafkaPassThrough(ctx context.Context, opts []kgo.Opt, src, dst, group string, transactional bool, pollRecords int, tf *valueTransform) (PassThrough, error) {
	res := PassThrough{Mode: "plain"}
	if transactional {
		res.Mode = "transactional"
	}
	if tf != nil {
		res.Mode += "+" + tf.name
	}
	fail := func(err error) (PassThrough, error) {
		return res, fmt.Errorf("%s pass-through %s -> %s: %w", res.Mode, src, dst, err)
	}
	end, err := passThroughEnds(ctx, opts, src, dst)
	if err != nil {
		return fail(err)
	}
	// left holds the partitions whose consumer position (pos; a new group
	// starts at the log start) has not reached the end offset yet.
	pos := make(map[int32]int64)
	left := make(map[int32]bool)
	for p, e := range end {
		if e > 0 {
			left[p] = true
		}
	}
	if len(left) == 0 {
		return fail(fmt.Errorf("nothing to copy: %s is empty", src))
	}

	copyOpts := append(slices.Clip(opts),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(src),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers come back as records, so the position is
		// known to pass them: after a committed transaction the end
		// offset lies beyond the last data record.
		kgo.KeepControlRecords(),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	var (
		poll     func(context.Context, int) kgo.Fetches
		copyPoll func(polled, out []*kgo.Record) (bool, error)
		finish   func() error
	)
	if transactional {
		sess, err := kgo.NewGroupTransactSession(append(copyOpts,
			kgo.TransactionalID(group+"-"+randomSuffix()),
			kgo.RequireStableFetchOffsets(),
		)...)
		if err != nil {
			return fail(err)
		}
		defer sess.Close()
		poll = sess.PollRecords
		copyPoll = func(_, out []*kgo.Record) (bool, error) { return copyTransaction(ctx, sess, out) }
		finish = func() error { return nil }
	} else {
		cl, err := kgo.NewClient(append(copyOpts,
			kgo.BlockRebalanceOnPoll(),
			kgo.AutoCommitMarks(),
			kgo.AutoCommitInterval(time.Second),
		)...)
		if err != nil {
			return fail(err)
		}
		// A copy that fails between a poll and its acknowledgement has
		// not allowed rebalances again; Close alone would wait for that.
		defer cl.CloseAllowingRebalance()
		poll = cl.PollRecords
		copyPoll = func(polled, out []*kgo.Record) (bool, error) {
			defer cl.AllowRebalance()
			if err := cl.ProduceSync(ctx, out...).FirstErr(); err != nil {
				return false, fmt.Errorf("produce: %w", err)
			}
			cl.MarkCommitRecords(polled...)
			return true, nil
		}
		finish = func() error { return cl.CommitMarkedOffsets(ctx) }
	}

	var began time.Time
	var valueBytes int64
	for len(left) > 0 {
		fetches := poll(ctx, pollRecords)
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if err := fetchError(fetches); err != nil {
			return fail(err)
		}
		polled := fetches.Records()
		if len(polled) == 0 {
			continue
		}
		if began.IsZero() {
			began = time.Now()
		}
		out := make([]*kgo.Record, 0, len(polled))
		var keys, values int64
		for _, r := range polled {
			if r.Attrs.IsControl() || r.Offset >= end[r.Partition] {
				continue
			}
			value := r.Value
			if tf != nil {
				if value, err = tf.apply(ctx, r.Value); err != nil {
					return fail(fmt.Errorf("record %s[%d] at offset %d: %w", r.Topic, r.Partition, r.Offset, err))
				}
			}
			out = append(out, &kgo.Record{Topic: dst, Partition: r.Partition, Key: r.Key, Value: value, Headers: r.Headers})
			keys += int64(len(r.Key))
			values += int64(len(value))
		}
		ok, err := copyPoll(polled, out)
		if err != nil {
			return fail(err)
		}
		if !ok {
			continue // aborted by a rebalance: the session rewinds and the records come again
		}
		res.Records += len(out)
		res.Bytes += keys + values
		valueBytes += values
		for _, r := range polled {
			if r.Offset >= pos[r.Partition] {
				pos[r.Partition] = r.Offset + 1
			}
			if pos[r.Partition] >= end[r.Partition] {
				delete(left, r.Partition)
			}
		}
	}
	if err := finish(); err != nil {
		return fail(fmt.Errorf("commit offsets: %w", err))
	}
	res.Seconds = time.Since(began).Seconds()
	if res.Records > 0 {
		res.RecordBytes = int(valueBytes / int64(res.Records))
	}
	if res.Seconds > 0 {
		res.RecordsPerSec = float64(res.Records) / res.Seconds
		res.MiBPerSec = float64(res.Bytes) / (1 << 20) / res.Seconds
	}
	return res, nil
}

// copyTransaction writes out in one transaction that also commits the
// session's polled offsets. It reports false when a rebalance aborted the
// transaction.
func copyTransaction(ctx context.Context, sess *kgo.GroupTransactSession, out []*kgo.Record) (bool, error) {
	if err := sess.Begin(); err != nil {
		return false, fmt.Errorf("begin transaction: %w", err)
	}
	var (
		mu      sync.Mutex
		prodErr error
	)
	for _, r := range out {
		sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if prodErr == nil {
					prodErr = err
				}
				mu.Unlock()
			}
		})
	}
	// End flushes first, so every produce callback has run when it returns.
	commit := kgo.TryCommit
	mu.Lock()
	if prodErr != nil {
		commit = kgo.TryAbort
	}
	mu.Unlock()
	committed, err := sess.End(ctx, commit)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case prodErr != nil:
		return false, fmt.Errorf("produce: %w", prodErr)
	case err != nil:
		return false, fmt.Errorf("end transaction: %w", err)
	}
	return committed, nil
}

// passThroughEnds checks that dst exists with src's partition count and
// returns, per partition of src, the last stable offset: the copy goes up
// to it.
func passThroughEnds(ctx context.Context, opts []kgo.Opt, src, dst string) (map[int32]int64, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ns, err := runtime.PartitionCount(ctx, adm, src)
	if err != nil {
		return nil, err
	}
	nd, err := runtime.PartitionCount(ctx, adm, dst)
	if err != nil {
		return nil, err
	}
	if ns != nd {
		return nil, fmt.Errorf("%s has %d partitions but %s has %d", src, ns, dst, nd)
	}
	return runtime.Ends(ctx, adm, src)
}

// fetchError is the first error of a poll other than a context ending.
func fetchError(fs kgo.Fetches) error {
	if fs.IsClientClosed() {
		return kgo.ErrClientClosed
	}
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) || errors.Is(fe.Err, context.DeadlineExceeded) {
			continue
		}
		return fmt.Errorf("fetch %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
	}
	return nil
}

// randomSuffix keeps transactional ids of different runs apart.
func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fillTopic writes n records to topic (which must exist) by cycling through the given
// key/value samples in order, keeping each sample's partition (sample i goes to
// partition samples[i].Partition), produced non-transactionally with acks=all,
// batching freely for speed; used to build ceiling topics of the same record sizes
// as a stage's real input. It returns the bytes written.
//
// cl must place records by their Partition (kgo.ManualPartitioner); a record
// placed elsewhere fails the fill.
func fillTopic(ctx context.Context, cl *kgo.Client, topic string, samples []*kgo.Record, n int) (int64, error) {
	if n > 0 && len(samples) == 0 {
		return 0, fmt.Errorf("fill %s: no sample records", topic)
	}
	var (
		mu       sync.Mutex
		firstErr error
		written  int64
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return firstErr != nil
	}
	for i := 0; i < n && !failed(); i++ {
		s := samples[i%len(samples)]
		want := s.Partition
		r := &kgo.Record{Topic: topic, Partition: want, Key: s.Key, Value: s.Value, Headers: s.Headers}
		size := int64(len(s.Key) + len(s.Value))
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err == nil && r.Partition != want {
				err = fmt.Errorf("record for partition %d went to partition %d: the client must use kgo.ManualPartitioner", want, r.Partition)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			written += size
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, fmt.Errorf("fill %s: %w", topic, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return written, fmt.Errorf("fill %s: %w", topic, firstErr)
	}
	return written, nil
}

// ConsulCeiling is Consul's measured write rate for one way of writing:
// Clients concurrent writers of OpsPerTxn-operation transactions.
type ConsulCeiling struct {
	Keys       int     `json:"keys"`
	OpsPerTxn  int     `json:"ops_per_txn"`
	Clients    int     `json:"clients"`
	ValueBytes int     `json:"value_bytes"`
	Txns       int     `json:"txns"`
	Seconds    float64 `json:"seconds"`
	KeysPerSec float64 `json:"keys_per_sec"`
}

// consulCeiling writes keys keys of valueBytes each under prefix with KVSet ops, opsPerTxn per
// Txn, from clients concurrent writers sharing one client's connection pool
// (github.com/hashicorp/consul/api v1.34.5, as the consul-writer does), and measures the whole.
// It deletes the prefix afterwards (not timed).
func consulCeiling(ctx context.Context, cl *api.Client, prefix string, keys, opsPerTxn, clients, valueBytes int) (res ConsulCeiling, err error) {
	prefix = consulDir(prefix)
	defer func() {
		// Also after a failed write, so no partial run is left behind.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if _, derr := cl.KV().DeleteTree(prefix, (&api.WriteOptions{}).WithContext(dctx)); derr != nil {
			err = errors.Join(err, fmt.Errorf("consul ceiling: delete %s: %w", prefix, derr))
		}
	}()
	return writeConsulKeys(ctx, cl, prefix, keys, opsPerTxn, clients, valueBytes)
}

// bestConsulCeiling measures every way of writing the consul-writer may use (each count of
// concurrent writers with each transaction size) once, then the fastest of them runs more times,
// and returns the fastest run of all with every run of the sweep.
func bestConsulCeiling(ctx context.Context, cl *api.Client, prefix string, keys, valueBytes int, clients, opsPerTxn []int, again int) (best ConsulCeiling, sweep []ConsulCeiling, err error) {
	for _, c := range clients {
		for _, ops := range opsPerTxn {
			r, err := consulCeiling(ctx, cl, prefix, keys, ops, c, valueBytes)
			if err != nil {
				return best, sweep, err
			}
			sweep = append(sweep, r)
			if r.KeysPerSec > best.KeysPerSec {
				best = r
			}
		}
	}
	for range again {
		r, err := consulCeiling(ctx, cl, prefix, keys, best.OpsPerTxn, best.Clients, valueBytes)
		if err != nil {
			return best, sweep, err
		}
		sweep = append(sweep, r)
		if r.KeysPerSec > best.KeysPerSec {
			best = r
		}
	}
	return best, sweep, nil
}

// writeConsulKeys is the timed part of consulCeiling; the keys stay.
func writeConsulKeys(ctx context.Context, cl *api.Client, prefix string, keys, opsPerTxn, clients, valueBytes int) (ConsulCeiling, error) {
	res := ConsulCeiling{Keys: keys, OpsPerTxn: opsPerTxn, Clients: clients, ValueBytes: valueBytes}
	if keys <= 0 || opsPerTxn <= 0 || clients <= 0 || valueBytes < 0 {
		return res, fmt.Errorf("consul ceiling: need keys > 0, ops per transaction > 0, clients > 0 and value bytes >= 0 (got %d, %d, %d, %d)", keys, opsPerTxn, clients, valueBytes)
	}
	prefix = consulDir(prefix)
	value := make([]byte, valueBytes)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	// The operations are built before the clock starts.
	var txns []api.TxnOps
	for first := 0; first < keys; first += opsPerTxn {
		ops := make(api.TxnOps, 0, min(opsPerTxn, keys-first))
		for i := first; i < first+opsPerTxn && i < keys; i++ {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: consulKey(prefix, i), Value: value}})
		}
		txns = append(txns, ops)
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	errs := make([]error, len(txns))
	began := time.Now()
	runtime.Each(len(txns), clients, func(k int) {
		ok, resp, _, err := cl.Txn().Txn(txns[k], q)
		switch {
		case err != nil:
			errs[k] = fmt.Errorf("consul ceiling: transaction %d of %d: %w", k+1, len(txns), err)
		case !ok:
			errs[k] = fmt.Errorf("consul ceiling: transaction %d of %d rolled back: %s", k+1, len(txns), consulkv.TxnReasons(resp))
		}
	})
	res.Seconds = time.Since(began).Seconds()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	res.Txns = len(txns)
	if res.Seconds > 0 {
		res.KeysPerSec = float64(keys) / res.Seconds
	}
	return res, nil
}

// consulDir ends prefix with a slash, so deleting the tree removes only the
// keys written under it.
func consulDir(prefix string) string {
	return strings.TrimSuffix(prefix, "/") + "/"
}

// consulKey is the i-th key a ceiling run writes under dir.
func consulKey(dir string, i int) string {
	return fmt.Sprintf("%sk%08d", dir, i)
}
