package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// Membership is how the member processes of one stage-alone run shared
// the work, and what joining the group cost them.
type Membership struct {
	Members int `json:"members"`
	// StartToFirstRecord is the time from starting the processes to the
	// first record any member handled: starting, joining the group and
	// restoring state. It is not part of Seconds.
	StartToFirstRecord float64 `json:"start_to_first_record_s"`
	// StartToEveryMember is the time from starting the processes to the
	// first record of the last member to handle one; absent when a member
	// handled none (the others had finished before it was given
	// partitions).
	StartToEveryMember float64 `json:"start_to_every_member_s,omitempty"`
	// Handled is each member's policyflow_records_in_total at the end:
	// their sum exceeds the input when a rebalance had records handled
	// again by a partition's next owner.
	Handled []int `json:"records_handled_per_member"`
	// CPU is each member's CPU seconds while the run was timed: with
	// Handled, how evenly the work spread over the members.
	CPU []float64 `json:"cpu_s_per_member"`
	// SteadyCPU and SteadyRecords are the members' CPU seconds and
	// records handled, summed, from the moment every member had handled
	// one to the end: the work once the group has settled, without the
	// rebalance of a member joining late (the embedded broker, unlike
	// Kafka's group.initial.rebalance.delay.ms, does not wait for the
	// members starting together). Zero when a member handled none.
	SteadyCPU     float64 `json:"steady_cpu_s,omitempty"`
	SteadyRecords int     `json:"steady_records,omitempty"`
	// AbortedTxns are the transactions the members aborted, summed.
	AbortedTxns int `json:"aborted_transactions"`
}

func (m Membership) handled() int {
	n := 0
	for _, h := range m.Handled {
		n += h
	}
	return n
}

func (m Membership) membersThatHandled() int {
	n := 0
	for _, h := range m.Handled {
		if h > 0 {
			n++
		}
	}
	return n
}

// ScaleRun is one Kafka-to-Kafka stage run alone with some number of
// member processes in its consumer group, on a fresh stack loaded with the
// same workload as every other run of the stage.
type ScaleRun struct {
	Stage string `json:"stage"`
	Membership
	InputRecords  int     `json:"input_records"`
	OutputRecords int     `json:"output_records"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	// RatioToOne is RecordsPerSec over that of the stage's first run with
	// one member (0 when --members has no 1).
	RatioToOne float64 `json:"ratio_to_1_member"`
	// CPUSeconds is the members' CPU time while the run was timed,
	// summed; CPUPer1k is that per 1,000 input records.
	CPUSeconds float64 `json:"cpu_s"`
	CPUPer1k   float64 `json:"cpu_s_per_1k_records"`
	// CPUToOne is CPUPer1k over that of the stage's first run with one
	// member: what a further member costs (1 is nothing).
	CPUToOne float64 `json:"cpu_per_1k_to_1_member,omitempty"`
	// SteadyCPUPer1k is the members' CPU per 1,000 records handled once
	// every member worked (see Membership.SteadyCPU), and SteadyToOne
	// that over the first run's with one member.
	SteadyCPUPer1k float64 `json:"steady_cpu_s_per_1k_records,omitempty"`
	SteadyToOne    float64 `json:"steady_cpu_per_1k_to_1_member,omitempty"`
	// Rounds are the runs CPUPer1k and RecordsPerSec are the medians of.
	Rounds     []Round `json:"rounds,omitempty"`
	PeakRSSMiB float64 `json:"peak_rss_mib"` // the largest member's
	// OutputDigest names the output topic's records as a multiset of
	// (key, record without what is random by design); see outputDigest.
	OutputDigest string `json:"output_digest"`
	// Reference marks the stage's first run (the stage-alone run), which
	// every other run of the stage is compared with; SameOutput says
	// whether this run wrote the same records.
	Reference  bool `json:"reference,omitempty"`
	SameOutput bool `json:"same_output"`
	// SameInput says whether the stage ran on the input of its first run:
	// each stage's input is what the stage before it wrote in the same
	// run, so a stage after one whose output differed ran on other
	// records, and its output differs for that reason too.
	SameInput bool `json:"same_input"`
	// digest is the output's record hashes, to tell how two runs'
	// outputs differ (not in the JSON report).
	digest outputDigest
}

// newScaleRun is the scaling entry of one run; ref is the stage's first
// run (nil: this is it).
func newScaleRun(run StageRun, m Membership, d outputDigest, ref *ScaleRun) ScaleRun {
	s := ScaleRun{Stage: run.Stage, Membership: m, InputRecords: run.InputRecords, OutputRecords: d.records,
		Seconds: run.Seconds, RecordsPerSec: run.RecordsPerSec, CPUSeconds: run.StageCPU, PeakRSSMiB: run.PeakRSSMiB,
		OutputDigest: d.String(), Reference: ref == nil, SameOutput: true, SameInput: true, Rounds: run.Rounds, digest: d}
	if run.InputRecords > 0 {
		s.CPUPer1k = run.StageCPU / float64(run.InputRecords) * 1000
	}
	if len(run.Rounds) > 0 {
		s.SteadyCPUPer1k = spreadOf(roundsOf(run.Rounds, func(r Round) float64 { return r.SteadyCPUPer1k })).Median
	} else if m.SteadyRecords > 0 {
		s.SteadyCPUPer1k = m.SteadyCPU / float64(m.SteadyRecords) * 1000
	}
	if ref != nil {
		s.SameOutput = ref.OutputDigest == s.OutputDigest && ref.OutputRecords == s.OutputRecords
	}
	return s
}

// reference is the stage's first scaling entry, or nil.
func (r *Report) reference(stage string) *ScaleRun {
	for i := range r.Scaling {
		if r.Scaling[i].Stage == stage && r.Scaling[i].Reference {
			return &r.Scaling[i]
		}
	}
	return nil
}

// scalingVerdict fails the scaling section: an error naming every run
// that wrote other records than its stage's first run, and how, or nil
// when every run wrote the same. Adding members must change nothing but
// speed, so such a run is a failure of the bench, not a figure of it.
func (r *Report) scalingVerdict() error {
	var differ []string
	for _, s := range r.Scaling {
		if s.Reference || s.SameOutput {
			continue
		}
		differ = append(differ, r.howOutputDiffers(s))
	}
	if len(differ) == 0 {
		return nil
	}
	return fmt.Errorf("scaling: %d of the runs with more members wrote other records than the stage's first run:\n  %s",
		len(differ), strings.Join(differ, "\n  "))
}

// howOutputDiffers says how a run's output differs from its stage's first
// run's: the record counts, the records of each not in the other, the
// digests, and whether its input differed already.
func (r *Report) howOutputDiffers(s ScaleRun) string {
	ref := r.reference(s.Stage)
	if ref == nil {
		return fmt.Sprintf("%s with %d members: %d records, digest %s; no first run to compare with", s.Stage, s.Members, s.OutputRecords, s.OutputDigest)
	}
	how := fmt.Sprintf("%s with %d members wrote %d records where its first run wrote %d", s.Stage, s.Members, s.OutputRecords, ref.OutputRecords)
	if s.digest.records == s.OutputRecords && ref.digest.records == ref.OutputRecords {
		extra, missing := s.digest.against(ref.digest)
		how += fmt.Sprintf(": %d not among the first run's, %d of the first run's missing", extra, missing)
	}
	how += fmt.Sprintf(" (digest %s, first run %s)", s.OutputDigest, ref.OutputDigest)
	if !s.SameInput {
		if i := stageOrder(s.Stage); i > 0 {
			how += fmt.Sprintf("; its input, the %s's output in the same run, differed already", aloneStages[i-1].name)
		} else {
			how += "; its input differed already"
		}
	}
	return how
}

// scalingRatios sets each entry's rate against the stage's first run with
// one member.
func (r *Report) scalingRatios() {
	one := map[string]ScaleRun{}
	for _, s := range r.Scaling {
		if _, ok := one[s.Stage]; !ok && s.Members == 1 {
			one[s.Stage] = s
		}
	}
	for i := range r.Scaling {
		base, ok := one[r.Scaling[i].Stage]
		if !ok {
			continue
		}
		if base.RecordsPerSec > 0 {
			r.Scaling[i].RatioToOne = r.Scaling[i].RecordsPerSec / base.RecordsPerSec
		}
		if base.CPUPer1k > 0 {
			r.Scaling[i].CPUToOne = r.Scaling[i].CPUPer1k / base.CPUPer1k
		}
		if base.SteadyCPUPer1k > 0 && r.Scaling[i].SteadyCPUPer1k > 0 {
			r.Scaling[i].SteadyToOne = r.Scaling[i].SteadyCPUPer1k / base.SteadyCPUPer1k
		}
	}
}

// scaleOut repeats the Kafka-to-Kafka stages' stage-alone runs on this
// (fresh) stack with members processes each, on the same workload as the
// first run, and compares each stage's output with the first run's. The
// consul-writer is not repeated; a stage the first run did not reach
// (--until) is not either.
func (b *bench) scaleOut(ctx context.Context, o options, members int, rep *Report, progress func(string, ...any)) error {
	w := o.work
	w.Notify = events.NotifyNone
	if err := w.load(ctx, b.kafka, b.codec, int32(o.partitions)); err != nil {
		return err
	}
	sameInput := true // the matcher's input is the workload
	for _, st := range aloneStages {
		ref := rep.reference(st.name)
		if !st.kafkaToKafka() || ref == nil {
			break
		}
		if err := b.prepare(ctx, st, w); err != nil {
			return err
		}
		progress("%s alone with %d members on %s, %d rounds", st.name, members, st.input, o.rounds)
		run, m, d, err := b.stageRounds(ctx, st, members, o.rounds, false, progress)
		if err != nil {
			return err
		}
		s := newScaleRun(run, m, d, ref)
		s.SameInput, sameInput = sameInput, s.SameOutput
		rep.Scaling = append(rep.Scaling, s)
		same := "the same output as the first run"
		if !s.SameOutput {
			same = fmt.Sprintf("OUTPUT DIFFERS from the first run (%d records, digest %s; first run %d records, digest %s)",
				s.OutputRecords, s.OutputDigest, ref.OutputRecords, ref.OutputDigest)
		}
		progress("%s with %d members: %.0f records/s, %s", st.name, members, s.RecordsPerSec, same)
	}
	return nil
}

// memberLog is the log file of member i of n of a stage's binary bin: the
// first run's single member logs to <bin>.log, as the other phases' stages
// do; every other member to <bin><run tag>.member<i>.log.
func (b *bench) memberLog(bin string, i, n int) string {
	if b.runTag == "" && n == 1 {
		return filepath.Join(b.logDir, bin+".log")
	}
	return filepath.Join(b.logDir, fmt.Sprintf("%s%s.member%d.log", bin, b.runTag, i+1))
}

// outputDigest names the records of a stage's output topic so that two
// runs of the stage on the same workload can be compared: a multiset of
// (key, normalized record), where normalizing clears what differs from run
// to run by design (update ids, which the matcher draws at random, and the
// time stamps a stage writes). The order of records is left out: the
// matcher writes a deployment's matches from every partition its
// components live on, in whatever order those partitions are handled.
type outputDigest struct {
	records int
	sums    [][sha256.Size]byte
}

// add counts one record; ev nil is a tombstone.
func (d *outputDigest) add(key []byte, ev events.Event) error {
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(key), key)
	if ev == nil {
		h.Write([]byte("tombstone"))
	} else {
		n, err := normalize(ev)
		if err != nil {
			return fmt.Errorf("record with key %q: %w", key, err)
		}
		b, err := json.Marshal(n)
		if err != nil {
			return fmt.Errorf("record with key %q: %w", key, err)
		}
		fmt.Fprintf(h, "%s:", ev.SchemaName())
		h.Write(b)
	}
	var s [sha256.Size]byte
	h.Sum(s[:0])
	d.sums = append(d.sums, s)
	d.records++
	return nil
}

// against counts the records of d that ref does not hold and those of
// ref that d does not hold, as multisets (a record written twice where
// ref has it once counts once in extra).
func (d outputDigest) against(ref outputDigest) (extra, missing int) {
	a, b := d.sorted(), ref.sorted()
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var c int // below 0: a[i] is not in b; above: b[j] is not in a
		switch {
		case j == len(b):
			c = -1
		case i == len(a):
			c = 1
		default:
			c = bytes.Compare(a[i][:], b[j][:])
		}
		switch {
		case c < 0:
			extra++
			i++
		case c > 0:
			missing++
			j++
		default:
			i++
			j++
		}
	}
	return extra, missing
}

// sorted is a copy of the records' hashes in order.
func (d outputDigest) sorted() [][sha256.Size]byte {
	sorted := slices.Clone(d.sums)
	slices.SortFunc(sorted, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	return sorted
}

// String is the digest: a hash of the records' hashes in sorted order.
func (d outputDigest) String() string {
	h := sha256.New()
	for _, s := range d.sorted() {
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// normalize returns a copy of a Kafka-to-Kafka stage's output record
// without what is random by design: PolicyMatch and PolicySegment without
// update_id and created_at, ComponentPolicies without update_id and
// updated_at. Every other field, bodies and generations included, counts.
func normalize(ev events.Event) (events.Event, error) {
	switch v := ev.(type) {
	case *events.PolicyMatch:
		c := *v
		c.UpdateID, c.CreatedAt = "", time.Time{}
		return &c, nil
	case *events.PolicySegment:
		c := *v
		c.UpdateID, c.CreatedAt = "", time.Time{}
		return &c, nil
	case *events.ComponentPolicies:
		c := *v
		c.UpdateID, c.UpdatedAt = "", time.Time{}
		return &c, nil
	}
	return nil, fmt.Errorf("no digest of %s: it is not the output of a Kafka-to-Kafka stage", ev.SchemaName())
}

// digestOutput reads a stage's output topic (read committed) into its
// digest.
func (b *bench) digestOutput(ctx context.Context, base string) (outputDigest, error) {
	var d outputDigest
	err := runtime.ReadPartitions(ctx, b.kafka, base, nil, func(r *kgo.Record) error {
		if r.Value == nil {
			return d.add(r.Key, nil)
		}
		ev, err := b.codec.Decode(ctx, r.Value)
		if err != nil {
			return fmt.Errorf("decode %s partition %d offset %d: %w", r.Topic, r.Partition, r.Offset, err)
		}
		return d.add(r.Key, ev)
	})
	return d, err
}
