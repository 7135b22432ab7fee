package matcher

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

const (
	benchComponents = 100_000
	benchServices   = 500   // blueprints: components of one service share its filter
	benchPolicies   = 5_000 // catalog size
)

// benchMatcher registers 100k components in 10k deployments. Every
// component wants one policy by id and has the filter of its service
// ({"policyName": "DCAE.Config_svc<k>_.*", "onapName": "DCAE",
// "configAttributes": {"key1": "value<k%5>"}}); one in ten also has
// {"policyName": "DCAE.Config_.*", "configName": "cfg<k%50>"}. When
// distinct is set, every component's service filter also names the
// component's own instance attribute, so no two components share a filter.
func benchMatcher(b *testing.B, distinct bool) *Matcher {
	b.Helper()
	m := New()
	m.Now = func() time.Time { return t0 }
	for i := 0; i < benchPolicies; i++ {
		k := i % benchServices
		id := fmt.Sprintf("DCAE.Config_svc%d_p%d", k, i/benchServices)
		mc := map[string]any{"ONAPName": "DCAE", "key1": fmt.Sprintf("value%d", k%5)}
		if distinct {
			mc["instance"] = "none"
		}
		e := &events.PolicyCatalogEntry{PolicyID: id, PolicyVersion: "1", Body: policyBody(id, "1", mc, nil), Status: events.StatusValid}
		if err := m.ApplyCatalog(id, e, t0); err != nil {
			b.Fatal(err)
		}
	}
	p := NewPartition()
	for i := 0; i < benchComponents; i++ {
		k := i % benchServices
		attrs := fmt.Sprintf(`{"key1": "value%d"}`, k%5)
		if distinct {
			attrs = fmt.Sprintf(`{"key1": "value%d", "instance": "i%d"}`, k%5, i)
		}
		c := comp(fmt.Sprintf("comp-%06d", i), fmt.Sprintf("dep-%05d", i/10),
			[]string{fmt.Sprintf("DCAE.Config_svc%d_p%d", (k+1)%benchServices, (i/benchServices)%10)},
			events.PolicyFilter{FilterID: "svc", PolicyName: fmt.Sprintf("DCAE.Config_svc%d_.*", k), OnapName: "DCAE", ConfigAttributes: attrs})
		if i%10 == 0 {
			c.PolicyFilters = append(c.PolicyFilters, events.PolicyFilter{FilterID: "all", PolicyName: "DCAE.Config_.*",
				ConfigName: fmt.Sprintf("cfg%d", k%50), ConfigAttributes: "{}"})
		}
		if err := p.Restore(c.ComponentID, c); err != nil {
			b.Fatal(err)
		}
	}
	m.Assign(0, p)
	return m
}

// BenchmarkOnChange100k is one policy change against 100k registered
// components: the changed policy is selected by the filter of one service
// (200 components) and wanted by id by another 20.
func BenchmarkOnChange100k(b *testing.B) {
	for _, bc := range []struct {
		name     string
		distinct bool
	}{{"shared-blueprint-filters", false}, {"distinct-filters", true}} {
		b.Run(bc.name, func(b *testing.B) {
			m := benchMatcher(b, bc.distinct)
			const id = "DCAE.Config_svc17_p3"
			mc := map[string]any{"ONAPName": "DCAE", "key1": "value2"}
			if bc.distinct {
				mc["instance"] = "none"
			}
			// Build the changes, as pdp-ingest writes them, outside the
			// timed loop.
			changes := make([]*events.PolicyChange, b.N+1)
			for i := range changes {
				v := fmt.Sprint(i + 2)
				h := headerOf(policyBody(id, v, mc, nil))
				changes[i] = &events.PolicyChange{ChangeID: "c", PolicyID: id, Action: events.ActionUpdated, NewVersion: &v,
					PolicyName: h.PolicyName, MatchingConditions: h.MatchingConditions, BodyHash: h.BodyHash}
			}
			if _, err := m.OnChange(0, changes[0]); err != nil {
				b.Fatal(err)
			}
			// Collect the registration's garbage now, so the loop measures
			// changes, and report the live heap the state takes.
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap := float64(ms.HeapAlloc) / (1 << 20)
			b.ReportAllocs()
			b.ResetTimer()
			deltas := 0
			for i := 0; i < b.N; i++ {
				ms, err := m.OnChange(0, changes[i+1])
				if err != nil {
					b.Fatal(err)
				}
				for _, pm := range ms {
					deltas += len(pm.Components)
				}
			}
			b.StopTimer()
			if bc.distinct {
				// Every component's filter also wants instance=i<n>, which
				// the policy does not carry: only the 20 by-id components.
				if deltas != 20*b.N {
					b.Fatalf("%d component deltas per change, want 20", deltas/b.N)
				}
			} else if deltas != 220*b.N {
				b.Fatalf("%d component deltas per change, want 220", deltas/b.N)
			}
			b.ReportMetric(float64(deltas)/float64(b.N), "deltas/op")
			b.ReportMetric(float64(m.Partition(0).Filters()), "filters")
			b.ReportMetric(heap, "heap-MiB")
		})
	}
}

// BenchmarkOnComponent is one component registration against a catalog of
// 5k policies with 100k components already registered.
func BenchmarkOnComponent(b *testing.B) {
	m := benchMatcher(b, false)
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % benchServices
		c := comp(fmt.Sprintf("new-%d", i), "dep-new", []string{"DCAE.Config_svc1_p1"},
			events.PolicyFilter{FilterID: "svc", PolicyName: fmt.Sprintf("DCAE.Config_svc%d_.*", k), OnapName: "DCAE",
				ConfigAttributes: fmt.Sprintf(`{"key1": "value%d"}`, k%5)})
		ms, err := m.OnComponent(0, c.ComponentID, c)
		if err != nil {
			b.Fatal(err)
		}
		if len(ms) != 1 || len(ms[0].Components[0].AddedPolicies) != 2 {
			b.Fatalf("registration produced %q, want the by-id policy and the service's policies", render(ms))
		}
	}
}

// BenchmarkCatchupAll100k is a periodic catch-up of all 100k components
// when every one already has what it wants (nothing is sent).
func BenchmarkCatchupAll100k(b *testing.B) {
	m := benchMatcher(b, false)
	req := &events.CatchupRequest{RequestID: "cu", Scope: events.ScopeAll}
	first, err := m.OnCatchup(0, req)
	if err != nil || len(first) == 0 {
		b.Fatalf("first catch-up: %d matches, %v", len(first), err)
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ms, err := m.OnCatchup(0, req)
		if err != nil || len(ms) != 0 {
			b.Fatalf("catch-up of an up-to-date partition: %d matches, %v", len(ms), err)
		}
	}
}
