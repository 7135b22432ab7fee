package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

func TestSummarizeUsesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := summarize(d)
	if got.P50 != 50 || got.P95 != 95 || got.P99 != 99 || got.Max != 100 || got.Mean != 50.5 {
		t.Fatalf("summary of 1..100 ms = %+v, want p50 50, p95 95, p99 99, max 100, mean 50.5", got)
	}
	if one := summarize([]time.Duration{7 * time.Millisecond}); one.P99 != 7 || one.P50 != 7 {
		t.Fatalf("summary of one sample = %+v", one)
	}
	if none := summarize(nil); none != (Latencies{}) {
		t.Fatalf("summary of nothing = %+v, want zero", none)
	}
}

func TestScrapeSumAddsEverySampleOfOneMetric(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`# HELP policyflow_records_in_total Records consumed.
# TYPE policyflow_records_in_total counter
policyflow_records_in_total{stage="matcher",topic="policy.changes"} 1200
policyflow_records_in_total{stage="matcher",topic="deploy.components"} 34
policyflow_records_in_total_other 99
policyflow_records_out_total{stage="matcher"} 5
`))
	}))
	defer srv.Close()
	got, err := scrapeSum(context.Background(), srv.URL, "policyflow_records_in_total")
	if err != nil || got != 1234 {
		t.Fatalf("scrapeSum = %v, %v; want 1234", got, err)
	}
}

func TestMarkerFoundInNotificationsAsTheyArrive(t *testing.T) {
	for _, payload := range []string{
		// A webhook body: the policy body as JSON, config as a string.
		`{"policies":[{"config":"{\"marker\":\"fleet-00002\",\"pad\":\"xx\"}","policyName":"E2E.Config_fleet.2.xml"}]}`,
		// The same with the config as an object.
		`{"policies":[{"config":{"marker": "fleet-00002"}}]}`,
	} {
		m := markerRE.FindStringSubmatch(payload)
		if m == nil || m[1] != "fleet-00002" {
			t.Fatalf("marker in %s = %v, want fleet-00002", payload, m)
		}
	}
}

// A stage has one name: its services/ directory, so its binary, is named
// like the stage, its consumer group and its dead-letter topic.
func TestEveryStageHasItsBinary(t *testing.T) {
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range topology.Stages() {
		if _, err := os.Stat(filepath.Join(root, "services", stage, "main.go")); err != nil {
			t.Errorf("stage %s has no services/%s/main.go, so no binary bin/%s: %v", stage, stage, stage, err)
		}
	}
}

func TestFlagsRefuseWhatCannotRun(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--changes 20 --policies 10", "--changes 20"},
		{"--consul-ops 200", "1 to 128 operations"},
		{"--partitions 0", "--partitions 0"},
		{"extra", "takes no arguments"},
	} {
		var out strings.Builder
		err := run(context.Background(), strings.Fields(tc.args), &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("pfbench %s: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// TestPlacementBench: the placement section measures what it says and
// the table shows it.
func TestPlacementBench(t *testing.T) {
	p, err := placementBench(1)
	if err != nil {
		t.Fatal(err)
	}
	if p.Reps != 1 || p.CheckMs.P50 <= 0 || p.Propose500Steps < 500 {
		t.Fatalf("placement run %+v", p)
	}
	var b strings.Builder
	Report{Placement: &p}.placementTable(&b)
	if !strings.Contains(b.String(), "check 1,000 resources in 100 groups on 10,000 leaves") || !strings.Contains(b.String(), "leaves tried") {
		t.Fatalf("table %q", b.String())
	}
}

// TestStageTableShowsAvroPassThrough: the stage-alone table gives each
// Kafka-to-Kafka stage's Avro pass-through rate and its ratio to it, and
// the ceiling table the Avro copy's rate next to the byte copies'.
func TestStageTableShowsAvroPassThrough(t *testing.T) {
	r := Report{
		Ceilings: Ceilings{Consul: &ConsulCeiling{Keys: 30000, KeysPerSec: 40000}},
		Stages: []StageRun{
			{
				Stage: "matcher", InputRecords: 1000, InputRecordBytes: 1500, Seconds: 0.2, RecordsPerSec: 5000,
				Ratio: 0.1, Target: 0.5, RatioAvro: 0.25, PeakRSSMiB: 60, StageCPU: 1, BenchCPU: 0.5,
				CeilingPlain:         &PassThrough{Mode: "plain", Records: 200000, RecordBytes: 1500, RecordsPerSec: 70000},
				CeilingTransactional: &PassThrough{Mode: "transactional", Records: 200000, RecordBytes: 1500, RecordsPerSec: 50000},
				CeilingAvro:          &PassThrough{Mode: "transactional+avro", Records: 200000, RecordBytes: 1500, RecordsPerSec: 20000},
			},
			{
				Stage: "consul-writer", InputRecords: 1000, InputRecordBytes: 1500, Seconds: 1, RecordsPerSec: 1000,
				KeysWritten: 36000, KeysPerSec: 36000, Ratio: 0.9, Target: 0.8, PeakRSSMiB: 40, StageCPU: 0.5, BenchCPU: 0.5,
			},
		},
	}
	var b strings.Builder
	r.table(&b)
	lines := strings.Split(b.String(), "\n")
	row := func(prefix string) []string {
		t.Helper()
		for _, l := range lines {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return strings.Fields(l)
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, b.String())
		return nil
	}
	head := strings.Join(row("stage alone"), " ")
	if !strings.Contains(head, "ratio target avro copy/s of avro peak RSS MiB") {
		t.Errorf("stage table header %q: want the columns avro copy/s and of avro after target", head)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"matcher", []string{"matcher", "1000", "rec", "1500", "5000", "rec", "50000", "0.10", "!", "0.5", "20000", "0.25", "60", "1.00/0.50", "in", "0.20"}},
		{"consul-writer", []string{"consul-writer", "1000", "rec", "1500", "36000", "keys", "40000", "0.90", "0.8", "-", "-", "40", "0.50/0.50", "in", "1.00"}},
		{"ceiling", []string{"ceiling", "records", "rec", "bytes", "plain", "rec/s", "transactional", "rec/s", "transactional", "avro", "rec/s"}},
		{"kafka pass-through (matcher input)", []string{"kafka", "pass-through", "(matcher", "input)", "200000", "1500", "70000", "50000", "20000"}},
	} {
		if got := row(tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("row %s = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}
