package runtime

import (
	"sync"
	"sync/atomic"
)

// Helpers for batch handlers (BatchHandler) that handle many keys at once.

// Waves cuts items, keeping their order, into waves in which each key
// appears at most once: a key's first item is in the first wave, its
// second in the second, and so on. Handling the waves one after another,
// and a wave's items in any order or at once, keeps each key's items in
// order.
func Waves[T any](items []T, key func(T) string) [][]T {
	seen := make(map[string]int, len(items))
	var out [][]T
	for _, it := range items {
		k := key(it)
		w := seen[k]
		seen[k] = w + 1
		if w == len(out) {
			out = append(out, nil)
		}
		out[w] = append(out[w], it)
	}
	return out
}

// Each runs f(0) to f(count-1), at most limit at once, and waits for them
// all.
func Each(count, limit int, f func(k int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(limit, count) {
		wg.Go(func() {
			for k := next.Add(1) - 1; k < int64(count); k = next.Add(1) - 1 {
				f(int(k))
			}
		})
	}
	wg.Wait()
}
