package consulkv_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
)

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		method, path  string
		recurse, keys bool
		want          consulkv.RequestKind
	}{
		{http.MethodGet, "/v1/kv/a:policies/event", false, false, consulkv.KVGet},
		{http.MethodGet, "/v1/kv/a:policies/", true, false, consulkv.KVList},
		{http.MethodGet, "/v1/kv/a:policies/items/", false, true, consulkv.KVKeys},
		{http.MethodPut, "/v1/kv/a:policies/event", false, false, consulkv.KVWrite},
		{http.MethodDelete, "/v1/kv/a:policies/", true, false, consulkv.KVWrite},
		{http.MethodPut, "/v1/txn", false, false, consulkv.Txn},
		{http.MethodPut, "/consul/v1/txn", false, false, consulkv.Txn}, // behind a path prefix
		{http.MethodPut, "/v1/session/create", false, false, consulkv.Session},
		{http.MethodGet, "/v1/status/leader", false, false, consulkv.Other},
		{http.MethodGet, "/v1/acl/token/self", false, false, consulkv.Other},
	} {
		if got := consulkv.KindOf(c.method, c.path, c.recurse, c.keys); got != c.want {
			t.Errorf("%s %s (recurse %v, keys %v): %q, want %q", c.method, c.path, c.recurse, c.keys, got, c.want)
		}
	}
}

// TestRequestCounter: a client made with a counter reaches the agent as
// any other, and each of its requests is counted by kind, the operations
// of its transactions by verb, the transactions by the verbs they hold.
func TestRequestCounter(t *testing.T) {
	cfg, _ := stagetest.Consul(t)
	cfg.Requests = consulkv.NewRequestCounter()
	cl, err := cfg.Connect(context.Background(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Requests.Counts(); got.Total() != 0 {
		t.Fatalf("Connect without a token: %s, want no request (no token to check)", got)
	}
	if err := consulkv.Dependency(cl).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := cfg.Requests.Counts()
	if got := start.Of(consulkv.Other); got != 1 || start.Total() != 1 {
		t.Fatalf("the dependency check: %s, want one other request (the leader)", start)
	}
	kv := cl.KV()
	if _, err := kv.Put(&api.KVPair{Key: "count/a", Value: []byte("1")}, nil); err != nil {
		t.Fatal(err)
	}
	ok, resp, _, err := cl.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "count/b", Value: []byte("2")}},
		{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: "count/a", Index: 1}}, // fails: the transaction is rolled back
		{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: "count/"}},
	}, nil)
	if err != nil || ok || len(resp.Errors) != 1 {
		t.Fatalf("transaction with a failing check: ok %v, %+v, %v", ok, resp, err)
	}
	if p, _, err := kv.Get("count/a", nil); err != nil || p == nil || string(p.Value) != "1" {
		t.Fatalf("get count/a through the counter: %+v, %v", p, err)
	}
	if ps, _, err := kv.List("count/", nil); err != nil || len(ps) != 1 {
		t.Fatalf("list count/ through the counter: %v, %v", ps, err)
	}
	if ks, _, err := kv.Keys("count/", "", nil); err != nil || len(ks) != 1 {
		t.Fatalf("keys of count/ through the counter: %v, %v", ks, err)
	}
	if _, _, err := cl.Session().Create(&api.SessionEntry{TTL: "10s"}, nil); err != nil {
		t.Fatal(err)
	}
	got := cfg.Requests.Counts().Since(start)
	want := map[consulkv.RequestKind]int64{consulkv.KVWrite: 1, consulkv.Txn: 1, consulkv.KVGet: 1, consulkv.KVList: 1, consulkv.KVKeys: 1, consulkv.Session: 1}
	if len(got.Requests) != len(want) || got.Total() != 6 {
		t.Fatalf("counted %s, want one of each: %v", got, want)
	}
	for k, n := range want {
		if got.Of(k) != n {
			t.Errorf("%s: %d, want %d (%s)", k, got.Of(k), n, got)
		}
	}
	if got.Ops() != 3 || got.OpsOf("kv set") != 1 || got.OpsOf("kv check-index") != 1 || got.OpsOf("kv get-tree") != 1 {
		t.Errorf("transaction operations %v, want kv set, kv check-index and kv get-tree once each", got.TxnOps)
	}
	if got.TxnsOf("kv check-index+kv get-tree+kv set") != 1 || len(got.Txns) != 1 {
		t.Errorf("transactions %v, want one of kv check-index+kv get-tree+kv set", got.Txns)
	}
	t.Logf("counted: %s", got)
}
