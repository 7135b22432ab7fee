package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// TestSmallFleet runs the simulation on a small fleet and checks what it
// counts: the catch-up of an up-to-date fleet sends nothing, the fleet
// change reaches every component once on every topic after the matcher,
// the state is attributed per component, and the consul-writer writes
// the one item that changed and the event.
func TestSmallFleet(t *testing.T) {
	const n = 2000
	out := filepath.Join(t.TempDir(), "capsim.json")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"--components", "2000", "--partitions", "3", "--rounds", "2", "--consul-sample", "50",
		"--memory-limit", "0", "--quiet", "--json", out}, &stdout, &stderr); err != nil {
		t.Fatalf("capsim: %v\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if r.Matcher.CatchupCompared != n || r.Matcher.CatchupDiffered != 0 {
		t.Errorf("catch-up compared %d and found %d differing, want %d and 0", r.Matcher.CatchupCompared, r.Matcher.CatchupDiffered, n)
	}
	if r.Matcher.Deltas != n {
		t.Errorf("fleet change: %d component deltas, want %d", r.Matcher.Deltas, n)
	}
	records := map[string]Records{}
	for _, u := range r.Update {
		records[u.Topic] = u
	}
	for _, topic := range []string{topology.MatcherHoldings, topology.ComponentPolicies, topology.ComponentApplied} {
		if got := records[topic].Records; got != n {
			t.Errorf("%s: %d records for the fleet change, want %d", topic, got, n)
		}
	}
	// Deployments of ten spread over three partitions: each partition
	// writes a match per deployment it holds components of.
	if m := records[topology.PolicyMatches].Records; m < r.Deployments || m > 3*r.Deployments {
		t.Errorf("policy.matches: %d records for %d deployments over 3 partitions", m, r.Deployments)
	}
	if s := records[topology.PolicySegments].Records; s != records[topology.PolicyMatches].Records {
		t.Errorf("policy.segments: %d records for %d matches, each far under the record limit", s, records[topology.PolicyMatches].Records)
	}
	// A collection carries its five bodies.
	if c := records[topology.ComponentPolicies].PerComponent; c < float64(perComp*r.BodyBytes) {
		t.Errorf("component.policies: %.0f bytes per component, less than its %d bodies of %d", c, perComp, r.BodyBytes)
	}
	if r.Matcher.HeapPerComponent <= 0 || r.Executor.RegistrationsPerComponent <= 0 || r.Executor.CollectionsPerComponent <= 0 {
		t.Errorf("heap per component: matcher %.0f, executor registrations %.0f and collections %.0f; want each above 0",
			r.Matcher.HeapPerComponent, r.Executor.RegistrationsPerComponent, r.Executor.CollectionsPerComponent)
	}
	if r.Consul.Sampled != 50 || r.Consul.KeysPerComponent != 1 || r.Consul.OpsPerComponent != 2 {
		t.Errorf("consul-writer: %d sampled, %.2f keys and %.2f operations each; want 50, 1 (the fleet policy's item) and 2 (and the event)",
			r.Consul.Sampled, r.Consul.KeysPerComponent, r.Consul.OpsPerComponent)
	}
	if !strings.Contains(stdout.String(), "component.policies") {
		t.Errorf("the table does not list component.policies:\n%s", stdout.String())
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--components", "0"}, {"--partitions", "x"}, {"--body-bytes", "10"}, {"--memory-limit", "5TB"}} {
		if err := run(args, new(bytes.Buffer), new(bytes.Buffer)); err == nil {
			t.Errorf("capsim %v: no error", args)
		}
	}
}

// TestShard writes a small shard to a real Consul server, when the
// binary is there (make consul), and checks what it counts.
func TestShard(t *testing.T) {
	if _, err := devstack.ConsulBinary(); err != nil {
		t.Skip(err)
	}
	sh, err := shard(t.Context(), 300, 1024, 4, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if sh.Keys != 300*(perComp+2) {
		t.Errorf("%d keys written for 300 components, want %d", sh.Keys, 300*(perComp+2))
	}
	if sh.ValueBytes < 300*perComp*1024 || sh.SnapshotBytes == 0 || sh.RSSAfterMiB == 0 {
		t.Errorf("values %d bytes, snapshot %d bytes, agent %.0f MiB: want each above 0 and the values above the bodies",
			sh.ValueBytes, sh.SnapshotBytes, sh.RSSAfterMiB)
	}
	if sh.CheckTxns != 3 {
		t.Errorf("%d check-index transactions for 300 components, want 3 (128 each)", sh.CheckTxns)
	}
}
