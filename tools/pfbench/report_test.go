package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
