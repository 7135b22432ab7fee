package runtime

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	consulapi "github.com/hashicorp/consul/api"
)

// Helpers for batch handlers (BatchHandler) that write to Consul.

// Consul's limits (the agent's defaults): one value, and one transaction
// request body (JSON, values in base64), may not exceed 512 KiB; one
// transaction holds at most 128 operations.
const (
	ConsulMaxValueBytes = 512 * 1024
	ConsulMaxTxnBytes   = 512 * 1024
	ConsulMaxTxnOps     = 128
)

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

// TxnReasons says why Consul rolled a transaction back: each failed
// operation's index and reason.
func TxnReasons(resp *consulapi.TxnResponse) string {
	if resp == nil || len(resp.Errors) == 0 {
		return "no reason given"
	}
	whys := make([]string, 0, len(resp.Errors))
	for _, e := range resp.Errors {
		if e != nil {
			whys = append(whys, fmt.Sprintf("op %d: %s", e.OpIndex, e.What))
		}
	}
	return strings.Join(whys, "; ")
}

// TxnIndexes maps each key a committed transaction wrote to its new
// ModifyIndex.
func TxnIndexes(resp *consulapi.TxnResponse) map[string]uint64 {
	index := make(map[string]uint64, len(resp.Results))
	for _, r := range resp.Results {
		if r != nil && r.KV != nil {
			index[r.KV.Key] = r.KV.ModifyIndex
		}
	}
	return index
}
