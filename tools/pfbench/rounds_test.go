package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/topology"
)

// The median of an odd number of rounds is the middle one, of an even
// number the mean of the middle two; the spread is the least and greatest.
func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want Spread
	}{
		{[]float64{0.3, 0.1, 0.2}, Spread{Median: 0.2, Min: 0.1, Max: 0.3}},
		{[]float64{4, 1, 3, 2}, Spread{Median: 2.5, Min: 1, Max: 4}},
		{[]float64{7}, Spread{Median: 7, Min: 7, Max: 7}},
		{nil, Spread{}},
	} {
		if got := spreadOf(tc.xs); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.xs, got, tc.want)
		}
	}
}

// A stage's figures are the medians of its rounds, each ratio the median
// of the rounds' own ratios (stage over the ceiling copied right after it),
// not a rate over a ceiling taken from another round; peak memory is the
// greatest of the rounds, and the membership is the median round's.
func TestRoundsGiveMediansAndSpread(t *testing.T) {
	rounds := []Round{
		{Seconds: 2, RecordsPerSec: 500, StageCPU: 3, PeakRSSMiB: 100, TxnPerSec: 1000, AvroPerSec: 1000, Ratio: 0.5, RatioAvro: 0.5},
		{Seconds: 1, RecordsPerSec: 1000, StageCPU: 2, PeakRSSMiB: 300, TxnPerSec: 4000, AvroPerSec: 4000, Ratio: 0.25, RatioAvro: 0.25},
		{Seconds: 4, RecordsPerSec: 250, StageCPU: 1, PeakRSSMiB: 200, TxnPerSec: 2500, AvroPerSec: 2500, Ratio: 0.1, RatioAvro: 0.1},
	}
	runs := []StageRun{{Stage: "matcher", InputRecords: 1000, Rounds: rounds}, {}, {}}
	ms := []Membership{{Handled: []int{1}}, {Handled: []int{2}}, {Handled: []int{3}}}
	run, m := combineRounds(runs, ms)
	if run.RecordsPerSec != 500 || run.Seconds != 2 || run.StageCPU != 2 || run.PeakRSSMiB != 300 {
		t.Errorf("combined run %+v: want rate 500, seconds 2, CPU 2, peak 300", run)
	}
	if m.Handled[0] != 1 {
		t.Errorf("membership of round %d, want the median round's (1)", m.Handled[0])
	}
	run.setCeilings(PassThrough{Records: 10}, PassThrough{Records: 10}, PassThrough{Records: 10})
	if run.Ratio != 0.25 || *run.RatioAvroSpread != (Spread{Median: 0.25, Min: 0.1, Max: 0.5}) {
		t.Errorf("ratio %v, of avro %+v: want the medians of the rounds' ratios, 0.25 (0.1-0.5)", run.Ratio, *run.RatioAvroSpread)
	}
	if run.CeilingAvro.RecordsPerSec != 2500 {
		t.Errorf("avro ceiling %v/s, want the median of the rounds' copies, 2500", run.CeilingAvro.RecordsPerSec)
	}
	// The table prints the medians with their spread, and the load.
	r := Report{Settings: Settings{Rounds: 3}, LoadBefore: [3]float64{1.5, 2, 3}, LoadAfter: [3]float64{4, 5, 6}, Stages: []StageRun{run}}
	var b strings.Builder
	r.table(&b)
	for _, want := range []string{"0.25 (0.10-0.50)", "before 1.50 2.00 3.00, after 4.00 5.00 6.00", "3 rounds"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table has no %q:\n%s", want, b.String())
		}
	}
}

// A second member's cost is its CPU per 1,000 records over the first run's
// with one member.
func TestScalingComparesCPUPer1k(t *testing.T) {
	r := Report{Scaling: []ScaleRun{
		{Stage: "matcher", Membership: Membership{Members: 1}, RecordsPerSec: 100, CPUPer1k: 0.2, SteadyCPUPer1k: 0.2},
		{Stage: "matcher", RecordsPerSec: 150, CPUPer1k: 0.22, SteadyCPUPer1k: 0.21, Membership: Membership{Members: 2, CPU: []float64{1.5, 1.25}}},
	}}
	r.scalingRatios()
	if got := r.Scaling[1].CPUToOne; got < 1.099 || got > 1.101 {
		t.Errorf("CPU per 1k against 1 member = %v, want 1.1", got)
	}
	var b strings.Builder
	r.scalingTable(&b)
	if got := r.Scaling[1].SteadyToOne; got < 1.049 || got > 1.051 {
		t.Errorf("steady CPU per 1k against 1 member = %v, want 1.05", got)
	}
	if !strings.Contains(b.String(), "1.10") || !strings.Contains(b.String(), "1.5+1.2") || !strings.Contains(b.String(), "0.210 (1.05)") {
		t.Errorf("scaling table lacks the CPU ratio or the per-member CPU:\n%s", b.String())
	}
}

// TestRoundsStartFromTheSameState: between rounds a stage's output and
// the changelog it restores from are emptied, and nothing else it writes
// (its dead letters, catch-up progress) is.
func TestRoundsStartFromTheSameState(t *testing.T) {
	for _, st := range aloneStages {
		got := resetTopics(st.name)
		if !slices.Contains(got, st.output) {
			t.Errorf("%s: a round starts with %v empty, not its output %s", st.name, got, st.output)
		}
		want := []string{st.output}
		if st.name == topology.StageMatcher {
			want = append(want, topology.MatcherHoldings)
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("%s: a round starts with %v empty, want %v", st.name, got, want)
		}
	}
}
