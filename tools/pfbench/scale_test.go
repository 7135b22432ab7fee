package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

// keyed is one record of an output topic.
type keyed struct {
	key string
	ev  events.Event // nil: tombstone
}

// digestOf digests records as digestOutput does: each value encoded and
// decoded as it travels through Kafka.
func digestOf(t *testing.T, recs []keyed) outputDigest {
	t.Helper()
	codec := events.Default()
	var d outputDigest
	for _, r := range recs {
		var ev events.Event
		if r.ev != nil {
			b, err := codec.Encode(r.ev)
			if err != nil {
				t.Fatalf("encode %T: %v", r.ev, err)
			}
			if ev, err = codec.Decode(context.Background(), b); err != nil {
				t.Fatalf("decode %T: %v", r.ev, err)
			}
		}
		if err := d.add([]byte(r.key), ev); err != nil {
			t.Fatalf("digest record %s: %v", r.key, err)
		}
	}
	return d
}

// stageOutputs are records of the three Kafka-to-Kafka stages' outputs as
// one run writes them; updateID and at are what differ between runs.
func stageOutputs(updateID string, at time.Time, body string) []keyed {
	pol := events.Policy{PolicyID: "BENCH.Config_p00001", PolicyName: "BENCH.Config_p00001.2.xml", PolicyVersion: "2", BodyHash: "h2"}
	delta := func(comp string, p events.Policy) []events.ComponentDelta {
		return []events.ComponentDelta{{ComponentID: comp, UpdatedPolicies: []events.Policy{p}}}
	}
	withBody := pol
	withBody.Body = body
	cp := func(comp string) *events.ComponentPolicies {
		return &events.ComponentPolicies{ComponentID: comp, DeploymentID: "d-00001", ServiceComponentName: "scn-" + comp,
			UpdateID: updateID + "-" + comp, Generation: 1, Policies: []events.Policy{withBody}, UpdatedPolicies: []events.Policy{withBody},
			RemovedPolicies: []events.Policy{}, Notify: events.NotifyTarget{Kind: events.NotifyNone}, UpdatedAt: at}
	}
	return []keyed{
		{"d-00001", &events.PolicyMatch{UpdateID: updateID + "-a", DeploymentID: "d-00001", Components: delta("c-000010", pol), CreatedAt: at}},
		{"d-00001", &events.PolicyMatch{UpdateID: updateID + "-b", DeploymentID: "d-00001", Components: delta("c-000011", pol), CreatedAt: at}},
		{"d-00001", &events.PolicySegment{UpdateID: updateID + "-a", DeploymentID: "d-00001", Index: 1, Count: 1, Components: delta("c-000010", withBody), CreatedAt: at}},
		{"c-000010", cp("c-000010")},
		{"c-000011", cp("c-000011")},
		{"c-000012", nil},
	}
}

func TestDigestIgnoresUpdateIDsTimestampsAndOrder(t *testing.T) {
	first := stageOutputs("upd-1", time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), "v2")
	again := stageOutputs("upd-2", time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC), "v2")
	// The matcher's matches of one deployment from two partitions land in
	// the other order.
	again[0], again[1] = again[1], again[0]
	a, b := digestOf(t, first), digestOf(t, again)
	if a.String() != b.String() || a.records != b.records || a.records != len(first) {
		t.Fatalf("digests of two runs that differ only in update ids, time stamps and order: %s (%d records) and %s (%d); want equal, %d records",
			a.String(), a.records, b.String(), b.records, len(first))
	}
}

func TestDigestSeesAnotherRecord(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	want := digestOf(t, stageOutputs("upd", at, "v2")).String()
	for name, change := range map[string]func([]keyed) []keyed{
		"a changed body": func(r []keyed) []keyed {
			cp := *r[3].ev.(*events.ComponentPolicies)
			p := cp.Policies[0]
			p.Body = "v3"
			cp.Policies = []events.Policy{p}
			r[3].ev = &cp
			return r
		},
		"a missing record": func(r []keyed) []keyed { return r[1:] },
		"a record twice, another not at all": func(r []keyed) []keyed {
			r[1] = r[0]
			return r
		},
		"another key": func(r []keyed) []keyed {
			r[4].key = "c-000099"
			return r
		},
		"a tombstone for a record": func(r []keyed) []keyed {
			r[4].ev = nil
			return r
		},
		"another generation": func(r []keyed) []keyed {
			cp := *r[4].ev.(*events.ComponentPolicies)
			cp.Generation = 2
			r[4].ev = &cp
			return r
		},
	} {
		if got := digestOf(t, change(stageOutputs("upd", at, "v2"))).String(); got == want {
			t.Errorf("digest with %s = %s, the same as without", name, got)
		}
	}
}

func TestDigestRefusesWhatNoKafkaToKafkaStageWrites(t *testing.T) {
	var d outputDigest
	err := d.add([]byte("c-1"), &events.ComponentApplied{ComponentID: "c-1", UpdateID: "u"})
	if err == nil || !strings.Contains(err.Error(), "c-1") {
		t.Fatalf("digest of a component.applied record: error %v, want one naming the record", err)
	}
}

func TestScalingComparesEveryRunWithTheStagesFirst(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ref := digestOf(t, stageOutputs("upd-1", at, "v2"))
	same := digestOf(t, stageOutputs("upd-2", at.Add(time.Hour), "v2"))
	other := digestOf(t, stageOutputs("upd-3", at, "v3"))
	rep := Report{Settings: Settings{Members: []int{1, 2, 2}}}
	run := func(stage string, rate, cpu float64) StageRun {
		return StageRun{Stage: stage, InputRecords: 2000, Seconds: 2000 / rate, RecordsPerSec: rate, StageCPU: cpu, PeakRSSMiB: 100}
	}
	first := newScaleRun(run("matcher", 1000, 3), Membership{Members: 1, StartToFirstRecord: 0.5, Handled: []int{2000}}, ref, nil)
	rep.Scaling = append(rep.Scaling, first, newScaleRun(run("segmenter", 4000, 1), Membership{Members: 1, Handled: []int{2000}}, ref, nil))
	rep.Scaling = append(rep.Scaling,
		newScaleRun(run("matcher", 1500, 4), Membership{Members: 2, StartToFirstRecord: 0.6, StartToEveryMember: 0.9, Handled: []int{1200, 900}, AbortedTxns: 1}, same, rep.reference("matcher")),
		newScaleRun(run("matcher", 500, 4), Membership{Members: 2, StartToFirstRecord: 0.6, Handled: []int{2000, 0}}, other, rep.reference("matcher")))
	rep.scalingRatios()

	got := slices.Delete(slices.Clone(rep.Scaling), 1, 2)
	if !got[0].Reference || !got[0].SameOutput || got[0].RatioToOne != 1 || got[0].CPUPer1k != 1.5 {
		t.Fatalf("first run = %+v, want the reference, same output, ratio 1, 1.5 CPU s per 1k records", got[0])
	}
	if got[1].Reference || !got[1].SameOutput || got[1].RatioToOne != 1.5 || got[1].CPUPer1k != 2 || got[1].handled() != 2100 {
		t.Fatalf("run with the same output = %+v, want same output, ratio 1.5, 2 CPU s per 1k, 2100 handled", got[1])
	}
	if got[2].SameOutput || got[2].RatioToOne != 0.5 {
		t.Fatalf("run with another body = %+v, want same_output false, ratio 0.5", got[2])
	}

	var out strings.Builder
	rep.scalingTable(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("scaling table has %d lines, want a header, 4 runs and a line saying what differs:\n%s", len(lines), out.String())
	}
	for i, want := range [][]string{
		{"matcher", "1", "1000", "1.00", "1.500", "reference"},
		{"matcher", "2", "1500", "1.50", "2.000", "0.60 (all 0.90)", "2100 = 1200+900", "yes"},
		{"matcher", "2", "500", "0.50", "(1 of 2 handled any)", "NO !"},
		{"segmenter", "1", "4000", "1.00", "0.500", "reference"}, // the runs of one stage together
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("table line %q lacks %q", lines[i+1], w)
			}
		}
	}
	if !strings.HasPrefix(lines[5], "! matcher with 2 members wrote 6 records where its first run wrote 6: 3 not among the first run's, 3 of the first run's missing") ||
		!strings.Contains(lines[5], other.String()) {
		t.Errorf("last line %q, want one saying the 2-member matcher wrote 3 other records, with its digest", lines[5])
	}
}

// TestScalingFailsTheBenchWhenAnOutputDiffers: a scaling run that wrote
// other records than its stage's first run fails the bench (run returns
// finish's error, and pfbench exits 1) after the report is written,
// naming the stage, its member count and how its output differs; a stage
// that ran on such a stage's output says its input differed already.
func TestScalingFailsTheBenchWhenAnOutputDiffers(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ref := digestOf(t, stageOutputs("upd-1", at, "v2"))
	same := digestOf(t, stageOutputs("upd-2", at.Add(time.Hour), "v2"))
	// One record written twice: what a second generation or a re-sent
	// delta looks like.
	twice := digestOf(t, append(stageOutputs("upd-3", at, "v2"), stageOutputs("upd-3", at, "v2")[3]))
	run := StageRun{InputRecords: 6, Seconds: 1, RecordsPerSec: 6}
	one, two := Membership{Members: 1, Handled: []int{6}}, Membership{Members: 2, Handled: []int{3, 3}}
	report := func(matcher, segmenter outputDigest) *Report {
		rep := &Report{}
		for _, st := range []string{"matcher", "segmenter"} {
			r := run
			r.Stage = st
			rep.Stages = append(rep.Stages, r)
			rep.Scaling = append(rep.Scaling, newScaleRun(r, one, ref, nil))
		}
		sameInput := true
		for i, d := range []outputDigest{matcher, segmenter} {
			r := run
			r.Stage = aloneStages[i].name
			s := newScaleRun(r, two, d, rep.reference(r.Stage))
			s.SameInput, sameInput = sameInput, s.SameOutput
			rep.Scaling = append(rep.Scaling, s)
		}
		return rep
	}
	finishOf := func(rep *Report) (string, error) {
		path := filepath.Join(t.TempDir(), "bench.json")
		var out strings.Builder
		err := finish(rep, path, &out)
		if _, serr := os.Stat(path); serr != nil {
			t.Fatalf("no report written: %v", serr)
		}
		return out.String(), err
	}

	if _, err := finishOf(report(same, same)); err != nil {
		t.Fatalf("every run wrote the first run's records: %v, want no error", err)
	}
	table, err := finishOf(report(twice, twice))
	if err == nil {
		t.Fatalf("the 2-member runs wrote a record twice, and the bench passed; table:\n%s", table)
	}
	for _, want := range []string{
		"2 of the runs with more members wrote other records",
		"matcher with 2 members wrote 7 records where its first run wrote 6: 1 not among the first run's, 0 of the first run's missing",
		"segmenter with 2 members wrote 7 records where its first run wrote 6: 1 not among the first run's, 0 of the first run's missing",
		"its input, the matcher's output in the same run, differed already",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Count(err.Error(), "differed already") != 1 {
		t.Errorf("error %q: only the segmenter ran on another input", err)
	}
	if !strings.Contains(table, "NO !") {
		t.Errorf("the table does not mark the runs that differ:\n%s", table)
	}
	// The matcher wrote the same records, the segmenter did not: its
	// input was the same.
	_, err = finishOf(report(same, twice))
	if err == nil || !strings.Contains(err.Error(), "segmenter with 2 members") || strings.Contains(err.Error(), "matcher with") ||
		strings.Contains(err.Error(), "differed already") {
		t.Fatalf("only the segmenter differs, on the same input: error %v", err)
	}
}

func TestWorkloadIsTheSameEveryRun(t *testing.T) {
	w := workload{Components: 30, PerDeployment: 10, Policies: 3, Changes: 2, BodyBytes: 1024, Notify: events.NotifyNone}
	for i := 0; i < w.Components; i++ {
		a, b := w.component(i), w.component(i)
		a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("component %d differs between two generations: %+v and %+v", i, a, b)
		}
	}
	for p := 0; p < w.Policies; p++ {
		ea, ha, err1 := w.version(policyIDOf(p), "2", "v2", time.Unix(1, 0))
		eb, hb, err2 := w.version(policyIDOf(p), "2", "v2", time.Unix(2, 0))
		if err1 != nil || err2 != nil {
			t.Fatalf("policy %d: %v, %v", p, err1, err2)
		}
		if ea.Body != eb.Body || ea.BodyHash != eb.BodyHash || !reflect.DeepEqual(ha, hb) {
			t.Fatalf("policy %d differs between two generations: %s and %s", p, ea.Body, eb.Body)
		}
	}
}
