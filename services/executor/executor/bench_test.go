package executor

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// BenchmarkCompact keeps 10,000 collections of 5 policies of about 1 KiB
// out of 50 distinct, each decoded on its own (every string a copy of its
// own), as the executor keeps component.policies: the time per collection
// and the live heap they take once kept.
func BenchmarkCompact(b *testing.B) {
	const comps, distinct, each = 10_000, 50, 5
	body := func(id string) string {
		return fmt.Sprintf(`{"policyName":"%s.1.xml","config":{"blob":"%0950d"}}`, id, 0)
	}
	recs := make([]*events.ComponentPolicies, comps)
	for i := range recs {
		ps := make([]events.Policy, each)
		for j := range ps {
			id := fmt.Sprintf("P%02d", (i/10+j*7)%distinct) // a deployment's ten components hold the same
			ps[j] = events.Policy{PolicyID: id, PolicyName: id + ".1.xml", PolicyVersion: "1", Body: string([]byte(body(id))), BodyHash: "h-" + id, Revision: 1}
		}
		recs[i] = &events.ComponentPolicies{ComponentID: fmt.Sprintf("c%05d", i), DeploymentID: fmt.Sprintf("d%04d", i/10),
			ServiceComponentName: fmt.Sprintf("scn-%05d", i), UpdateID: "u1", Generation: 1, Policies: ps}
	}
	kept := make([]*kept, comps)
	var heap float64
	for b.Loop() {
		for i, rec := range recs {
			kept[i] = compact(rec.ComponentID, rec, nil)
		}
		b.StopTimer()
		var before, after runtime.MemStats
		clear(kept)
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i, rec := range recs {
			kept[i] = compact(rec.ComponentID, rec, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc-before.HeapAlloc) / comps
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*comps), "ns/collection")
	b.ReportMetric(heap, "kept-B/collection")
	runtime.KeepAlive(kept)
}
