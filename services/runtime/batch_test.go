package runtime_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/policyflow/policyflow/services/runtime"
)

func TestWavesKeepEachKeysItemsInOrder(t *testing.T) {
	items := []string{"a1", "b1", "a2", "c1", "a3", "b2"}
	got := fmt.Sprint(runtime.Waves(items, func(s string) string { return s[:1] }))
	if want := "[[a1 b1 c1] [a2 b2] [a3]]"; got != want {
		t.Fatalf("waves = %s, want %s", got, want)
	}
}

func TestEachRunsEveryIndexOnceWithinTheLimit(t *testing.T) {
	var calls [100]atomic.Int32
	var running, most atomic.Int32
	runtime.Each(len(calls), 3, func(k int) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		calls[k].Add(1)
		running.Add(-1)
	})
	for k := range calls {
		if c := calls[k].Load(); c != 1 {
			t.Fatalf("f(%d) ran %d times, want once", k, c)
		}
	}
	if m := most.Load(); m > 3 {
		t.Fatalf("%d ran at once, limit 3", m)
	}
}
