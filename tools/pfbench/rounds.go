package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/policyflow/policyflow/topology"
)

// Round is one run of a Kafka-to-Kafka stage alone and, right after it in
// the stage-alone run, one copy of each pass-through ceiling: the stage
// and its ceilings alternate, so each round's ratios compare runs that
// shared the machine's load.
type Round struct {
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	StageCPU      float64 `json:"stage_cpu_s"`
	// MemberCPU is each member's CPU seconds while the round was timed.
	MemberCPU  []float64 `json:"member_cpu_s"`
	PeakRSSMiB float64   `json:"peak_rss_mib"`
	// SteadyCPUPer1k is the members' CPU per 1,000 records handled once
	// every member worked (Membership.SteadyCPU); 0 when one handled none.
	SteadyCPUPer1k float64 `json:"steady_cpu_s_per_1k_records,omitempty"`
	// Ceiling rates of the copies after the stage (0: none measured, as in
	// the scaling runs), and the stage's rate over them.
	PlainPerSec float64 `json:"plain_per_sec,omitempty"`
	TxnPerSec   float64 `json:"transactional_per_sec,omitempty"`
	AvroPerSec  float64 `json:"transactional_avro_per_sec,omitempty"`
	Ratio       float64 `json:"ratio,omitempty"`
	RatioAvro   float64 `json:"ratio_to_avro,omitempty"`
	// Load is the machine's load average (1, 5, 15 minutes) as the round
	// started.
	Load [3]float64 `json:"load_average"`
}

// Spread is the median of a figure over rounds with its least and
// greatest value.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf is the median (the mean of the middle two for an even count),
// minimum and maximum of xs.
func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

func (s Spread) String() string {
	return fmt.Sprintf("%.2f (%.2f-%.2f)", s.Median, s.Min, s.Max)
}

// roundsOf collects one figure of every round.
func roundsOf(rs []Round, f func(Round) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes
// (zeros where /proc/loadavg cannot be read).
func loadAverage() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}

func formatLoad(l [3]float64) string {
	return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2])
}

// stageRounds runs a Kafka-to-Kafka stage alone rounds times on its
// prepared input, each round on the same input and from the same state:
// before every round but the first, resetStage puts the stage's consumer
// group and its output topic back as they were before the first. With
// ceilings, each round is followed by one copy of each pass-through
// ceiling (see ceilingCopies), so stage and ceiling alternate. The run
// returned carries the rounds' medians (rate, CPU, ratios; peak memory is
// the greatest), the membership of the round of median rate, and the
// output's digest after the last round.
func (b *bench) stageRounds(ctx context.Context, st aloneStage, members, rounds int, ceilings bool, progress func(string, ...any)) (StageRun, Membership, outputDigest, error) {
	group := b.kafka.Prefix + "policyflow-" + st.name
	saved, err := b.adm.FetchOffsets(ctx, group)
	if err == nil {
		err = saved.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		// A group that never committed: every round starts from its
		// input's start.
		saved, err = nil, nil
	}
	if err != nil {
		return StageRun{Stage: st.name}, Membership{}, outputDigest{}, fmt.Errorf("%s: offsets of %s before the first round: %w", st.name, group, err)
	}
	var (
		runs   []StageRun
		ms     []Membership
		copies *ceilingCopies
		last   struct{ plain, txn, avro PassThrough }
	)
	defer func() {
		if copies != nil {
			copies.close(ctx)
		}
	}()
	profile, tag := b.profile, b.runTag
	defer func() { b.profile, b.runTag = profile, tag }()
	for i := 0; i < rounds; i++ {
		if i > 0 {
			if err := b.resetStage(ctx, st, group, saved); err != nil {
				return StageRun{Stage: st.name}, Membership{}, outputDigest{}, fmt.Errorf("%s: before round %d: %w", st.name, i+1, err)
			}
			// Logs of later rounds beside the first's; a profile of the
			// first round only.
			b.profile, b.runTag = 0, fmt.Sprintf("%s.round%d", tag, i+1)
		}
		load := loadAverage()
		run, in, m, err := b.runAlone(ctx, st.name, st.input, members)
		if err != nil {
			return run, m, outputDigest{}, err
		}
		r := Round{Seconds: run.Seconds, RecordsPerSec: run.RecordsPerSec, StageCPU: run.StageCPU, MemberCPU: m.CPU, PeakRSSMiB: run.PeakRSSMiB, Load: load}
		if m.SteadyRecords > 0 {
			r.SteadyCPUPer1k = m.SteadyCPU / float64(m.SteadyRecords) * 1000
		}
		if ceilings {
			if copies == nil {
				progress("%s ceilings: pass-through of %d-byte records", st.name, in.meanBytes())
				if copies, err = b.newCeilingCopies(ctx, st.name, st.input, in); err != nil {
					return run, m, outputDigest{}, fmt.Errorf("%s: %w", st.name, err)
				}
			}
			if last.plain, last.txn, last.avro, err = copies.copyOnce(ctx, i); err != nil {
				return run, m, outputDigest{}, fmt.Errorf("%s: %w", st.name, err)
			}
			r.PlainPerSec, r.TxnPerSec, r.AvroPerSec = last.plain.RecordsPerSec, last.txn.RecordsPerSec, last.avro.RecordsPerSec
			r.Ratio, r.RatioAvro = r.RecordsPerSec/r.TxnPerSec, r.RecordsPerSec/r.AvroPerSec
			progress("%s round %d of %d (load %s): %.0f records/s; avro copy %.0f/s, of avro %.2f", st.name, i+1, rounds, formatLoad(load), r.RecordsPerSec, r.AvroPerSec, r.RatioAvro)
		} else {
			progress("%s round %d of %d (load %s): %.0f records/s, %.3f CPU s/1k records", st.name, i+1, rounds, formatLoad(load), r.RecordsPerSec, r.StageCPU/float64(run.InputRecords)*1000)
		}
		run.Rounds = nil
		runs, ms = append(runs, run), append(ms, m)
		runs[0].Rounds = append(runs[0].Rounds, r)
	}
	run, m := combineRounds(runs, ms)
	if ceilings {
		run.setCeilings(last.plain, last.txn, last.avro)
		run.RatioTo = "transactional pass-through of the same records, alternating with the stage (median of rounds)"
	}
	d, err := b.digestOutput(ctx, st.output)
	if err != nil {
		return run, m, d, fmt.Errorf("%s: digest of %s: %w", st.name, st.output, err)
	}
	run.OutputRecords = d.records
	return run, m, d, nil
}

// setCeilings sets the ceilings' figures to the medians of the rounds'
// copies (with the record counts and sizes of plain, txn and avro, copies
// of one round), and the ratios to the medians of the rounds' ratios.
func (run *StageRun) setCeilings(plain, txn, avro PassThrough) {
	med := func(pt PassThrough, f func(Round) float64) *PassThrough {
		pt.RecordsPerSec = spreadOf(roundsOf(run.Rounds, f)).Median
		if pt.RecordsPerSec > 0 {
			pt.Seconds = float64(pt.Records) / pt.RecordsPerSec
			pt.MiBPerSec = float64(pt.Bytes) / pt.Seconds / (1 << 20)
		}
		return &pt
	}
	run.CeilingPlain = med(plain, func(r Round) float64 { return r.PlainPerSec })
	run.CeilingTransactional = med(txn, func(r Round) float64 { return r.TxnPerSec })
	run.CeilingAvro = med(avro, func(r Round) float64 { return r.AvroPerSec })
	rs, ra := spreadOf(roundsOf(run.Rounds, func(r Round) float64 { return r.Ratio })), spreadOf(roundsOf(run.Rounds, func(r Round) float64 { return r.RatioAvro }))
	run.Ratio, run.RatioSpread = rs.Median, &rs
	run.RatioAvro, run.RatioAvroSpread = ra.Median, &ra
}

// ceilings measures the pass-through ceilings of a stage that ran once
// (admission): three copies of each kind after it, their medians, each
// ratio against the stage's one rate.
func (b *bench) ceilings(ctx context.Context, run *StageRun, in inputInfo) error {
	copies, err := b.newCeilingCopies(ctx, run.Stage, run.Input, in)
	if err != nil {
		return err
	}
	defer copies.close(ctx)
	var plain, txn, avro PassThrough
	for i := 0; i < 3; i++ {
		if plain, txn, avro, err = copies.copyOnce(ctx, i); err != nil {
			return err
		}
		run.Rounds = append(run.Rounds, Round{Seconds: run.Seconds, RecordsPerSec: run.RecordsPerSec,
			PlainPerSec: plain.RecordsPerSec, TxnPerSec: txn.RecordsPerSec, AvroPerSec: avro.RecordsPerSec,
			Ratio: run.RecordsPerSec / txn.RecordsPerSec, RatioAvro: run.RecordsPerSec / avro.RecordsPerSec, Load: loadAverage()})
	}
	run.setCeilings(plain, txn, avro)
	run.RatioTo = "transactional pass-through of the same records (median of three copies after the stage)"
	return nil
}

// combineRounds is one run of the rounds of runs[0].Rounds: the medians of
// rate, time and CPU, the greatest peak memory, and the membership of the
// round whose rate is the median (the faster middle one for an even
// count).
func combineRounds(runs []StageRun, ms []Membership) (StageRun, Membership) {
	run := runs[0]
	rs := run.Rounds
	rate := spreadOf(roundsOf(rs, func(r Round) float64 { return r.RecordsPerSec }))
	run.RecordsPerSec, run.RateSpread = rate.Median, &rate
	run.Seconds = spreadOf(roundsOf(rs, func(r Round) float64 { return r.Seconds })).Median
	run.StageCPU = spreadOf(roundsOf(rs, func(r Round) float64 { return r.StageCPU })).Median
	bench := make([]float64, len(runs))
	for i, r := range runs {
		bench[i] = r.BenchCPU
	}
	run.BenchCPU = spreadOf(bench).Median
	for _, r := range rs {
		run.PeakRSSMiB = max(run.PeakRSSMiB, r.PeakRSSMiB)
	}
	order := make([]int, len(rs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rs[a].RecordsPerSec < rs[b].RecordsPerSec:
			return -1
		case rs[a].RecordsPerSec > rs[b].RecordsPerSec:
			return 1
		}
		return 0
	})
	return run, ms[order[len(order)/2]]
}

// resetStage puts a stage that has run alone back as it was before its
// first round, so that the next round does the same work from the same
// state: its consumer group is deleted and given the offsets it had
// (saved), so it consumes its input again from the start, and the topics
// it keeps state in are deleted and created again, empty (resetTopics).
// The stage's processes have stopped.
func (b *bench) resetStage(ctx context.Context, st aloneStage, group string, saved kadm.OffsetResponses) error {
	deadline := time.Now().Add(b.timeout)
	for {
		resp, err := b.adm.DeleteGroup(ctx, group)
		if err == nil {
			err = resp.Err
		}
		if err == nil || errors.Is(err, kerr.GroupIDNotFound) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("delete group %s: %w", group, err)
		}
		// A member that has just stopped may not have left yet.
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	reset := resetTopics(st.name)
	full := make([]string, len(reset))
	for i, t := range reset {
		full[i] = b.kafka.Topic(t)
	}
	resp, err := b.adm.DeleteTopics(ctx, full...)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("delete %v: %w", full, err)
	}
	var spec []topology.Topic
	for _, t := range topology.Default() {
		if slices.Contains(reset, t.Name) {
			spec = append(spec, t)
		}
	}
	for {
		_, err := topology.Apply(ctx, b.adm, spec, topology.Options{Prefix: b.kafka.Prefix, Partitions: int32(b.partitions)})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("create %v again: %w", full, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	offs := kadm.Offsets{}
	saved.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && !slices.Contains(full, o.Topic) {
			offs.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.At, LeaderEpoch: -1})
		}
	})
	if len(offs) == 0 {
		return nil
	}
	opts, err := b.kafka.ClientOpts()
	if err != nil {
		return err
	}
	// OffsetCommit v10 names topics by id, which kadm's offsets do not
	// carry; v9 names them (as in skipInputs).
	cl, err := kgo.NewClient(append(opts, kgo.MaxVersions(kversion.V3_9_0()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	cresp, err := kadm.NewClient(cl).CommitOffsets(ctx, group, offs)
	if err != nil {
		return fmt.Errorf("commit the offsets of %s again: %w", group, err)
	}
	return cresp.Error()
}

// resetTopics are the topics (base names) a stage's every round starts
// empty: each topic the stage writes that a stage reads — its output,
// which the next stage reads (and the executor reads back), and a
// changelog the stage restores its state from (the matcher's
// matcher.holdings). Left as the first round ended it, matcher.holdings
// told the next round that every component had been sent the new
// versions, and the matcher wrote nothing.
func resetTopics(stage string) []string {
	var out []string
	for _, t := range topology.Default() {
		if slices.Contains(t.Writers, stage) && slices.ContainsFunc(t.Readers, func(r string) bool { return slices.Contains(topology.Stages(), r) }) {
			out = append(out, t.Name)
		}
	}
	return out
}
