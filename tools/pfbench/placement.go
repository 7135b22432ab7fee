package main

import (
	"fmt"
	"io"
	"time"

	"github.com/policyflow/policyflow/services/placement"
)

// PlacementRun is the placement section of the report: seed 002's
// checks and proposals, in this process (no Kafka: the admission stage
// runs the same check per request, the North API the same proposal per
// POST /v1/placements).
type PlacementRun struct {
	Reps int `json:"reps"`
	// CheckMs: the placement of 1,000 resources in 100 groups (hard LLMN
	// each, soft anti-collocation and bandwidth between neighbours) checked
	// against 10,000 leaves.
	CheckMs Latencies `json:"check_1000_resources_100_groups_10000_leaves_ms"`
	// CompileMs: validating and indexing that datacenter, once per
	// record read.
	CompileMs Latencies `json:"compile_10000_leaves_ms"`
	// ProposeHAMs: the seed's 3 clusters of 4 VMs, LLMN rack/pm/2, on 3
	// racks of 4 PMs.
	ProposeHAMs Latencies `json:"propose_ha_3x4_ms"`
	// Propose500Ms: 500 resources in 50 such clusters on 10,000 leaves.
	Propose500Ms    Latencies `json:"propose_500_ms"`
	Propose500Steps int       `json:"propose_500_leaves_tried"`
}

// placementBench measures the placement checks and proposals reps times
// each.
func placementBench(reps int) (PlacementRun, error) {
	run := PlacementRun{Reps: reps}
	big := placement.SyntheticDatacenter(100, 100)
	m, err := placement.Compile(big)
	if err != nil {
		return run, fmt.Errorf("placement: synthetic datacenter: %w", err)
	}
	placed := placement.SyntheticClusters(100, 10, 100, true)
	free := placement.SyntheticClusters(50, 10, 100, false)
	for _, t := range []*placement.Template{placed, free} {
		if err := t.Validate(); err != nil {
			return run, fmt.Errorf("placement: synthetic template: %w", err)
		}
	}
	dcJSON, err := placement.Examples.ReadFile("examples/datacenter.json")
	if err != nil {
		return run, err
	}
	example, err := placement.ParseDatacenter(dcJSON)
	if err != nil {
		return run, err
	}
	haJSON, err := placement.Examples.ReadFile("examples/ha-clusters.json")
	if err != nil {
		return run, err
	}
	ha, err := placement.ParseTemplate(haJSON)
	if err != nil {
		return run, err
	}
	ha.Placement = nil
	timed := func(f func() error) (Latencies, error) {
		var d []time.Duration
		for range reps {
			t0 := time.Now()
			if err := f(); err != nil {
				return Latencies{}, err
			}
			d = append(d, time.Since(t0))
		}
		return summarize(d), nil
	}
	if run.CheckMs, err = timed(func() error {
		fs, err := placement.Check(m, placed)
		for _, f := range fs {
			if f.Hard {
				return fmt.Errorf("placement: the synthetic placement breaks %s: %s", f.PolicyID, f.Message)
			}
		}
		return err
	}); err != nil {
		return run, err
	}
	if run.CompileMs, err = timed(func() error { _, err := placement.Compile(big); return err }); err != nil {
		return run, err
	}
	if run.ProposeHAMs, err = timed(func() error { _, err := placement.Propose(example, ha, placement.Options{}); return err }); err != nil {
		return run, err
	}
	if run.Propose500Ms, err = timed(func() error {
		p, err := placement.Propose(m, free, placement.Options{})
		if err == nil {
			run.Propose500Steps = p.Steps
		}
		return err
	}); err != nil {
		return run, err
	}
	return run, nil
}

// placementTable prints the placement section.
func (r Report) placementTable(w io.Writer) {
	p := r.Placement
	if p == nil {
		return
	}
	fmt.Fprintf(w, "placement (seed 002, in process, %d reps each)\n", p.Reps)
	fmt.Fprintf(w, "  check 1,000 resources in 100 groups on 10,000 leaves: p50 %.2f ms  p99 %.2f ms (indexing the datacenter, once per record: p50 %.2f ms)\n",
		p.CheckMs.P50, p.CheckMs.P99, p.CompileMs.P50)
	fmt.Fprintf(w, "  propose the seed's 3x4 HA clusters: p50 %.3f ms; propose 500 resources on 10,000 leaves: p50 %.2f ms  p99 %.2f ms (%d leaves tried)\n",
		p.ProposeHAMs.P50, p.Propose500Ms.P50, p.Propose500Ms.P99, p.Propose500Steps)
}
