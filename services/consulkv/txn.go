package consulkv

import (
	"fmt"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Consul's limits (the agent's defaults): one value, and one transaction
// request body (JSON, values in base64), may not exceed 512 KiB; one
// transaction holds at most 128 operations.
const (
	MaxValueBytes = 512 * 1024
	MaxTxnBytes   = 512 * 1024
	MaxTxnOps     = 128
)

// ReadTxnBytes budgets the folders read in one transaction, by the size
// of the bodies they are expected to hold: Consul does not limit a read
// transaction's response, and one response should stay moderate. A
// folder expected to hold more is read on its own.
const ReadTxnBytes = 8 * MaxTxnBytes

// TxnReasons says why Consul rolled a transaction back: each failed
// operation's index and reason.
func TxnReasons(resp *api.TxnResponse) string {
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
func TxnIndexes(resp *api.TxnResponse) map[string]uint64 {
	index := make(map[string]uint64, len(resp.Results))
	for _, r := range resp.Results {
		if r != nil && r.KV != nil {
			index[r.KV.Key] = r.KV.ModifyIndex
		}
	}
	return index
}
