package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// StageRun is one stage run alone on a prepared input topic.
type StageRun struct {
	Stage            string  `json:"stage"`
	Input            string  `json:"input_topic"`
	InputRecords     int     `json:"input_records"`
	InputRecordBytes int     `json:"input_record_bytes"`
	OutputRecords    int     `json:"output_records"`
	Seconds          float64 `json:"seconds"`
	RecordsPerSec    float64 `json:"records_per_sec"`
	// KeysWritten and KeysPerSec: consul-writer only (from component.applied).
	KeysWritten int     `json:"keys_written,omitempty"`
	KeysPerSec  float64 `json:"keys_per_sec,omitempty"`
	// Ratio is RecordsPerSec (KeysPerSec for consul-writer) over the
	// ceiling named by RatioTo, measured in the same run.
	Ratio      float64 `json:"ratio"`
	RatioTo    string  `json:"ratio_to"`
	Target     float64 `json:"target"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// StageCPU and BenchCPU are the CPU seconds the stage's process and
	// this process (the broker, Consul's client side) used while the
	// stage was timed: a stage far below its ceiling but using little CPU
	// waits on the broker.
	StageCPU float64 `json:"stage_cpu_s"`
	BenchCPU float64 `json:"bench_broker_cpu_s"`
	// Ceilings are the pass-through copies of this stage's input records
	// (Kafka-to-Kafka stages): as bytes, plain and transactional, and
	// transactional with each value Avro-decoded and encoded again
	// (CeilingAvro), what reading and writing the stage's format costs.
	CeilingPlain         *PassThrough `json:"ceiling_plain,omitempty"`
	CeilingTransactional *PassThrough `json:"ceiling_transactional,omitempty"`
	CeilingAvro          *PassThrough `json:"ceiling_transactional_avro,omitempty"`
	// RatioAvro is RecordsPerSec over CeilingAvro's: what the stage costs
	// beyond decoding its input and encoding its output.
	RatioAvro float64 `json:"ratio_to_avro,omitempty"`
	// Rounds are the stage's runs alone (--rounds), each followed by one
	// copy of each ceiling; RecordsPerSec, Ratio and RatioAvro are their
	// medians, the spreads their medians with the least and greatest.
	Rounds          []Round `json:"rounds,omitempty"`
	RateSpread      *Spread `json:"records_per_sec_spread,omitempty"`
	RatioSpread     *Spread `json:"ratio_spread,omitempty"`
	RatioAvroSpread *Spread `json:"ratio_to_avro_spread,omitempty"`
}

// inputInfo is what was read of a prepared input topic.
type inputInfo struct {
	records []*kgo.Record
	bytes   int64
	last    map[int32]int64 // offset of each partition's last record
}

func readInput(ctx context.Context, k runtime.Kafka, base string) (inputInfo, error) {
	in := inputInfo{last: map[int32]int64{}}
	err := runtime.ReadPartitions(ctx, k, base, nil, func(r *kgo.Record) error {
		in.records = append(in.records, r)
		in.bytes += int64(len(r.Key) + len(r.Value))
		if r.Offset > in.last[r.Partition] || in.last[r.Partition] == 0 {
			in.last[r.Partition] = r.Offset
		}
		return nil
	})
	return in, err
}

func (in inputInfo) meanBytes() int {
	if len(in.records) == 0 {
		return 0
	}
	var v int64
	for _, r := range in.records {
		v += int64(len(r.Value))
	}
	return int(v / int64(len(in.records)))
}

// skipInputs commits a group's offsets at the end of topics it should not
// replay: the matcher has already handled the component registrations.
func skipInputs(ctx context.Context, k runtime.Kafka, group string, topics ...string) error {
	opts, err := k.ClientOpts()
	if err != nil {
		return err
	}
	// OffsetCommit v10 names topics by id, which kadm's offsets do not
	// carry; v9 names them.
	cl, err := kgo.NewClient(append(opts, kgo.MaxVersions(kversion.V3_9_0()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	offs := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		offs.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset, LeaderEpoch: -1})
	})
	resp, err := adm.CommitOffsets(ctx, group, offs)
	if err != nil {
		return err
	}
	return resp.Error()
}

// runAlone runs members processes of one stage binary, one consumer group,
// on its prepared input and measures them from the first record any of
// them handled (records_in > 0) until the group has committed every input
// record. The time before (starting, joining the group, restoring state)
// is not counted; Membership reports it. CPU and records handled are
// summed over the members, peak memory is the largest member's.
func (b *bench) runAlone(ctx context.Context, name, input string, members int, extra ...string) (StageRun, inputInfo, Membership, error) {
	run := StageRun{Stage: name, Input: input}
	gs := Membership{Members: members}
	in, err := readInput(ctx, b.kafka, input)
	if err != nil {
		return run, in, gs, fmt.Errorf("%s: read prepared %s: %w", name, input, err)
	}
	run.InputRecords, run.InputRecordBytes = len(in.records), in.meanBytes()
	if run.InputRecords == 0 {
		return run, in, gs, fmt.Errorf("%s: prepared input %s is empty; the stage before it produced nothing (see the logs in %s)", name, input, b.logDir)
	}
	group := b.kafka.Prefix + "policyflow-" + name
	if b.profile > 0 {
		extra = append(extra, "--pprof")
	}
	// The input is complete before the members start, so none of them
	// waits for the others: whatever the group's joining and rebalancing
	// costs is part of what is measured.
	started := time.Now()
	procs := make([]*stageProc, 0, members)
	defer func() { stopAll(procs) }() // runs after the profiles (deferred later) are written
	for i := 0; i < members; i++ {
		p, err := startStageLogged(ctx, b.binDir, b.memberLog(name, i, members), name, b.kafka, b.consulAddr, extra...)
		if err != nil {
			return run, in, gs, err
		}
		procs = append(procs, p)
	}
	alive := func() error {
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return err
			}
		}
		return nil
	}
	logs := procs[0].logFile
	if members > 1 {
		logs = fmt.Sprintf("the logs of its %d members in %s", members, b.logDir)
	}

	// first[i] is when member i was last seen with no record handled
	// before it was seen with one; zero while it has handled none.
	const every = 5 * time.Millisecond
	deadline := time.Now().Add(b.timeout)
	first := make([]time.Time, members)
	lastZero := make([]time.Time, members)
	for i := range lastZero {
		lastZero[i] = started
	}
	seen := func() (some, all bool) {
		all = true
		for i, p := range procs {
			if !first[i].IsZero() {
				some = true
				continue
			}
			if n, err := p.recordsIn(ctx); err == nil && n > 0 {
				first[i], some = lastZero[i], true
				continue
			}
			lastZero[i], all = time.Now(), false
		}
		return some, all
	}
	var t0 time.Time
	stageCPU0 := make([]float64, members)
	var benchCPU0 float64
	for {
		if err := alive(); err != nil {
			return run, in, gs, err
		}
		if time.Now().After(deadline) {
			return run, in, gs, fmt.Errorf("%s handled no record within %s; see %s", name, b.timeout, logs)
		}
		for i, p := range procs {
			stageCPU0[i], _ = cpuSeconds(p.cmd.Process.Pid)
		}
		benchCPU0, _ = cpuSeconds(os.Getpid())
		if some, _ := seen(); some {
			for _, f := range first {
				if !f.IsZero() && (t0.IsZero() || f.Before(t0)) {
					t0 = f
				}
			}
			break
		}
		if err := sleep(ctx, every); err != nil {
			return run, in, gs, err
		}
	}
	if b.profile > 0 {
		// Profile from the first record on; the stage is stopped only once
		// the profiles are written.
		var wg sync.WaitGroup
		for i, p := range procs {
			path := filepath.Join(b.logDir, name+".cpu.pprof")
			if members > 1 {
				path = filepath.Join(b.logDir, fmt.Sprintf("%s.member%d.cpu.pprof", name, i+1))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := saveProfile(ctx, "http://"+p.http+"/debug/pprof/profile?seconds="+fmt.Sprint(int(b.profile.Seconds())), path); err != nil {
					b.log.Warn().Err(err).Str("stage", name).Msg("CPU profile not saved")
				}
			}()
		}
		defer wg.Wait()
	}
	topic := b.kafka.Topic(input)
	allSeen := members == 1
	// With one member the steady window is the whole run.
	steadyCPU0, steadyIn0 := slices.Clone(stageCPU0), make([]float64, members)
	for {
		if err := alive(); err != nil {
			return run, in, gs, err
		}
		if time.Now().After(deadline) {
			return run, in, gs, fmt.Errorf("%s did not commit all %d records of %s within %s; see %s", name, run.InputRecords, input, b.timeout, logs)
		}
		if !allSeen {
			if _, allSeen = seen(); allSeen {
				// Every member works from here on: the steady
				// window's CPU and records start now.
				for i, p := range procs {
					steadyCPU0[i], _ = cpuSeconds(p.cmd.Process.Pid)
					n, _ := p.recordsIn(ctx)
					steadyIn0[i] = float64(n)
				}
			}
		}
		resp, err := b.adm.FetchOffsets(ctx, group)
		if err == nil && resp.Error() == nil {
			done := true
			for part, last := range in.last {
				o, ok := resp.Lookup(topic, part)
				done = done && ok && o.At > last
			}
			if done {
				break
			}
		}
		if err := sleep(ctx, every); err != nil {
			return run, in, gs, err
		}
	}
	t1 := time.Now()
	for i, p := range procs {
		c, err := cpuSeconds(p.cmd.Process.Pid)
		if err == nil {
			run.StageCPU += c - stageCPU0[i]
		}
		gs.CPU = append(gs.CPU, c-stageCPU0[i])
		if rss, err := p.peakRSS(); err == nil {
			run.PeakRSSMiB = max(run.PeakRSSMiB, float64(rss)/(1<<20))
		}
		n, _ := p.recordsIn(ctx)
		gs.Handled = append(gs.Handled, int(n))
		if allSeen {
			gs.SteadyCPU += c - steadyCPU0[i]
			gs.SteadyRecords += int(float64(n) - steadyIn0[i])
		}
		if a, err := p.abortedTxns(ctx); err == nil {
			gs.AbortedTxns += int(a)
		}
	}
	if c, err := cpuSeconds(os.Getpid()); err == nil {
		run.BenchCPU = c - benchCPU0
	}
	run.Seconds = t1.Sub(t0).Seconds()
	run.RecordsPerSec = float64(run.InputRecords) / run.Seconds
	gs.StartToFirstRecord = t0.Sub(started).Seconds()
	if allSeen {
		var last time.Time
		for _, f := range first {
			if f.After(last) {
				last = f
			}
		}
		gs.StartToEveryMember = last.Sub(started).Seconds()
	}
	return run, in, gs, nil
}

// countApplied counts the records of component.applied (read committed)
// and sums their keys_written.
func (b *bench) countApplied(ctx context.Context, base string) (n, keys int, err error) {
	err = runtime.ReadPartitions(ctx, b.kafka, base, nil, func(r *kgo.Record) error {
		n++
		if r.Value != nil {
			v, err := b.codec.Decode(ctx, r.Value)
			if err != nil {
				return err
			}
			if a, ok := v.(*events.ComponentApplied); ok {
				keys += int(a.KeysWritten)
			}
		}
		return nil
	})
	return n, keys, err
}

// ceilingCopies are the pass-through ceilings of one stage's input: the
// input's own records, cycled up to a size that takes long enough to time,
// in a topic of their own, copied as bytes (plain and transactional) and
// transactionally with each value Avro-decoded and encoded again. Each
// round of the stage is followed by one copy of each kind, so that stage
// and ceilings alternate and each ratio is taken within one round.
type ceilingCopies struct {
	b        *bench
	stage    string
	src, dst string
	opts     []kgo.Opt
}

// newCeilingCopies fills the ceilings' source topic with in's records; close
// deletes its topics.
func (b *bench) newCeilingCopies(ctx context.Context, stage, input string, in inputInfo) (*ceilingCopies, error) {
	n := max(len(in.records), b.ceilingRecords)
	if mean := max(in.meanBytes(), 1); n*mean > b.ceilingBytes {
		n = max(len(in.records), b.ceilingBytes/mean)
	}
	c := &ceilingCopies{b: b, stage: stage, src: b.kafka.Topic("bench.ceiling." + stage), dst: b.kafka.Topic("bench.ceiling." + stage + ".out")}
	parts := int32(len(in.last))
	if pc, err := runtime.PartitionCount(ctx, b.adm, b.kafka.Topic(input)); err == nil {
		parts = pc
	}
	cfg := map[string]*string{"max.message.bytes": ptr(topology.MaxMessageBytes)}
	for _, t := range []string{c.src, c.dst} {
		if _, err := b.adm.CreateTopic(ctx, parts, 1, cfg, t); err != nil {
			return nil, fmt.Errorf("create %s: %w", t, err)
		}
	}
	opts, err := b.kafka.ClientOpts()
	if err != nil {
		c.close(ctx)
		return nil, err
	}
	c.opts = append(opts, kgo.ProducerBatchMaxBytes(topology.MaxRecordBytes), kgo.BrokerMaxWriteBytes(2*topology.MaxRecordBytes))
	fill, err := kgo.NewClient(append(slices.Clip(c.opts), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(50_000))...)
	if err != nil {
		c.close(ctx)
		return nil, err
	}
	_, err = fillTopic(ctx, fill, c.src, in.records, n)
	fill.Close()
	if err != nil {
		c.close(ctx)
		return nil, fmt.Errorf("fill %s: %w", c.src, err)
	}
	return c, nil
}

func (c *ceilingCopies) close(ctx context.Context) {
	_, _ = c.b.adm.DeleteTopics(context.WithoutCancel(ctx), c.src, c.dst)
}

// copyOnce runs one copy of each kind (round i names their groups).
func (c *ceilingCopies) copyOnce(ctx context.Context, i int) (plain, txn, avro PassThrough, err error) {
	one := func(mode string, transactional bool, tf *valueTransform) (PassThrough, error) {
		pt, err := kafkaPassThrough(ctx, c.opts, c.src, c.dst, fmt.Sprintf("pfbench-ceiling-%s-%s-%d", mode, c.stage, i), transactional, c.b.pollRecords, tf)
		if err != nil {
			return pt, fmt.Errorf("%s pass-through ceiling: %w", mode, err)
		}
		return pt, nil
	}
	if plain, err = one("plain", false, nil); err != nil {
		return
	}
	if txn, err = one("txn", true, nil); err != nil {
		return
	}
	avro, err = one("avro", true, avroRecode(c.b.codec))
	return
}

// consulCeilingRuns is how many runs the Consul ceiling's fastest way of
// writing is the best of.
const consulCeilingRuns = 3

func ptr[T any](v T) *T { return &v }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type aloneStage struct {
	name, input, output string
	target              float64
}

// kafkaToKafka tells the stages that read and write only Kafka (in
// transactions) from the consul-writer.
func (s aloneStage) kafkaToKafka() bool { return s.name != topology.StageConsulWriter }

// aloneStages are the stage-alone runs in pipeline order: each stage's
// input is what the one before it produced in this run.
var aloneStages = []aloneStage{
	{topology.StageMatcher, topology.PolicyChanges, topology.PolicyMatches, 0.3},
	{topology.StageSegmenter, topology.PolicyMatches, topology.PolicySegments, 0.5},
	{topology.StageExecutor, topology.PolicySegments, topology.ComponentPolicies, 0.5},
	{topology.StageConsulWriter, topology.ComponentPolicies, topology.ComponentApplied, 0.8},
}

// saveProfile fetches a pprof profile over HTTP into path.
func saveProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
