package consulkv_test

import (
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
)

func TestTxnReasonsAndIndexes(t *testing.T) {
	resp := &api.TxnResponse{Errors: api.TxnErrors{
		{OpIndex: 2, What: `failed to set key "a:policies/event", index is stale`},
		nil,
		{OpIndex: 5, What: "permission denied"},
	}}
	if got, want := consulkv.TxnReasons(resp), `op 2: failed to set key "a:policies/event", index is stale; op 5: permission denied`; got != want {
		t.Fatalf("TxnReasons = %s, want %s", got, want)
	}
	if got := consulkv.TxnReasons(nil); got != "no reason given" {
		t.Fatalf("TxnReasons(nil) = %s", got)
	}
	resp = &api.TxnResponse{Results: api.TxnResults{
		{KV: &api.KVPair{Key: "a", ModifyIndex: 7}}, nil, {KV: &api.KVPair{Key: "b", ModifyIndex: 9}},
	}}
	if got := consulkv.TxnIndexes(resp); len(got) != 2 || got["a"] != 7 || got["b"] != 9 {
		t.Fatalf("TxnIndexes = %v, want a:7 b:9", got)
	}
}
