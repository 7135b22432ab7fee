package matcher

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

// A set grown one policy at a time stays sorted and keeps little unused
// room: a component holding five policies keeps room for at most six,
// not eight.
func TestHeldSetGrowsTightly(t *testing.T) {
	var s heldSet
	for _, id := range []string{"E", "B", "D", "A", "C"} {
		s.set(id, held{version: "1"})
	}
	if got := s.ids(); !slices.Equal(got, []string{"A", "B", "C", "D", "E"}) {
		t.Fatalf("ids %v, want sorted A-E", got)
	}
	if cap(s) > 6 {
		t.Errorf("five policies keep room for %d", cap(s))
	}
	for i := 0; i < 1000; i++ {
		s.set(fmt.Sprintf("P%04d", i), held{version: "2"})
	}
	if len(s) != 1005 || cap(s) > len(s)+len(s)/4+1 {
		t.Errorf("1005 policies: len %d, cap %d; want room for at most a quarter more", len(s), cap(s))
	}
	if v, ok := s.get("C"); !ok || v.version != "1" {
		t.Errorf("get C = %+v, %v", v, ok)
	}
	s.del("C")
	if _, ok := s.get("C"); ok || len(s) != 1004 {
		t.Errorf("C still held after del, len %d", len(s))
	}
}

// BenchmarkHeldSet gives 10,000 components five policies each, one at a
// time as changes bring them: the time and the memory the sets keep.
func BenchmarkHeldSet(b *testing.B) {
	const comps = 10_000
	ids := []string{"P3", "P1", "P4", "P0", "P2"}
	sets := make([]heldSet, comps)
	var kept float64
	for b.Loop() {
		clear(sets)
		for i := range sets {
			for _, id := range ids {
				sets[i].set(id, held{version: "1"})
			}
		}
		var bytes int
		for _, s := range sets {
			bytes += cap(s) * int(unsafe.Sizeof(heldEntry{}))
		}
		kept = float64(bytes) / comps
	}
	b.ReportMetric(kept, "kept-B/component")
}
