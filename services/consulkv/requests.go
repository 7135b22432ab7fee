package consulkv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// RequestKind is what a request to the Consul HTTP API does, as
// RequestCounter tells them apart.
type RequestKind string

// The kinds of requests a stage sends to Consul.
const (
	// KVGet reads one key: GET /v1/kv/<key>.
	KVGet RequestKind = "kv get"
	// KVList reads a folder, values and all: GET /v1/kv/<prefix>?recurse.
	KVList RequestKind = "kv list"
	// KVKeys lists a folder's keys: GET /v1/kv/<prefix>?keys.
	KVKeys RequestKind = "kv keys"
	// KVWrite writes or deletes keys outside a transaction: PUT or
	// DELETE /v1/kv/<key>.
	KVWrite RequestKind = "kv write"
	// Txn is a transaction, of reads or writes: PUT /v1/txn. Its
	// operations are counted apart (RequestCounts.TxnOps).
	Txn RequestKind = "txn"
	// Session is any request of /v1/session/.
	Session RequestKind = "session"
	// Other is any other request: the token check at start
	// (/v1/acl/token/self), the leader asked by a readiness probe
	// (/v1/status/leader).
	Other RequestKind = "other"
)

// RequestCounter counts the requests the Consul clients it is given to
// (Config.Requests) send, by kind, and the operations of their
// transactions, by verb. What a unit of work costs in requests to Consul
// is deterministic where its time is not, so a stage's budget of
// requests per component is a test that fails on any machine: a round
// trip per component shows as one more request per component, however
// fast the agent answers. It only looks at the requests: they go to the
// agent as they would without it.
type RequestCounter struct {
	mu   sync.Mutex
	n    map[RequestKind]int64
	ops  map[string]int64
	txns map[string]int64
}

// NewRequestCounter returns a counter at zero.
func NewRequestCounter() *RequestCounter {
	return &RequestCounter{n: map[RequestKind]int64{}, ops: map[string]int64{}, txns: map[string]int64{}}
}

// RoundTripper is next counting every request it is handed, sent or not.
func (c *RequestCounter) RoundTripper(next http.RoundTripper) http.RoundTripper {
	return &countingTransport{c: c, next: next}
}

type countingTransport struct {
	c    *RequestCounter
	next http.RoundTripper
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := KindOf(req.Method, req.URL.Path, req.URL.Query().Has("recurse"), req.URL.Query().Has("keys"))
	var ops []string
	if kind == Txn {
		body, sent, err := readBody(req)
		if err != nil {
			return nil, fmt.Errorf("read the body of the transaction to count its operations: %w", err)
		}
		req, ops = sent, txnVerbs(body)
	}
	t.c.mu.Lock()
	t.c.n[kind]++
	for _, v := range ops {
		t.c.ops[v]++
	}
	if kind == Txn {
		t.c.txns[shape(ops)]++
	}
	t.c.mu.Unlock()
	return t.next.RoundTrip(req)
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on.
func (t *countingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// readBody returns the request's body and the request to send: the
// request itself when it can give a copy of its body (GetBody: the Consul
// client's requests can), else a copy of it with its body read and put
// back.
func readBody(req *http.Request) ([]byte, *http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, req, nil
	}
	if req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			defer rc.Close()
			b, err := io.ReadAll(rc)
			return b, req, err
		}
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, nil, err
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(b))
	return b, out, nil
}

// KindOf is the kind of a request to the Consul HTTP API: its method, its
// URL path (a path prefix before /v1/ is ignored) and whether its query
// has recurse or keys.
func KindOf(method, path string, recurse, keys bool) RequestKind {
	i := strings.Index(path, "/v1/")
	if i < 0 {
		return Other
	}
	rest := path[i+len("/v1/"):]
	switch {
	case rest == "txn" && method == http.MethodPut:
		return Txn
	case strings.HasPrefix(rest, "kv/") && method == http.MethodGet && keys:
		return KVKeys
	case strings.HasPrefix(rest, "kv/") && method == http.MethodGet && recurse:
		return KVList
	case strings.HasPrefix(rest, "kv/") && method == http.MethodGet:
		return KVGet
	case strings.HasPrefix(rest, "kv/") && (method == http.MethodPut || method == http.MethodDelete):
		return KVWrite
	case strings.HasPrefix(rest, "session/"):
		return Session
	}
	return Other
}

// txnVerbs names the operations of a transaction's body, in order: "kv "
// and the verb of a KV operation ("kv get-tree", "kv cas", ...), "node",
// "service" or "check" for the others; one "unreadable" for a body that
// does not parse.
func txnVerbs(body []byte) []string {
	var ops []struct {
		KV *struct {
			Verb string
		}
		Node    json.RawMessage
		Service json.RawMessage
		Check   json.RawMessage
	}
	if err := json.Unmarshal(body, &ops); err != nil {
		return []string{"unreadable"}
	}
	out := make([]string, len(ops))
	for i, op := range ops {
		switch {
		case op.KV != nil:
			out[i] = "kv " + op.KV.Verb
		case op.Node != nil:
			out[i] = "node"
		case op.Service != nil:
			out[i] = "service"
		case op.Check != nil:
			out[i] = "check"
		default:
			out[i] = "unknown"
		}
	}
	return out
}

// shape names a transaction by the verbs it holds, each once, in order of
// name, joined by "+": "kv get-tree" for a read of folders, "kv cas+kv
// set" for a write of items and an event.
func shape(verbs []string) string {
	vs := slices.Clone(verbs)
	slices.Sort(vs)
	vs = slices.Compact(vs)
	if len(vs) == 0 {
		return "empty"
	}
	return strings.Join(vs, "+")
}

// Counts returns what was counted so far.
func (c *RequestCounter) Counts() RequestCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return RequestCounts{Requests: maps.Clone(c.n), TxnOps: maps.Clone(c.ops), Txns: maps.Clone(c.txns)}
}

// RequestCounts are requests to Consul by kind; the transactions among
// them by the verbs they hold ("kv get-tree", "kv cas+kv set"), and
// their operations by verb ("kv get-tree", "kv cas", ...).
type RequestCounts struct {
	Requests map[RequestKind]int64
	Txns     map[string]int64
	TxnOps   map[string]int64
}

// Since is what was counted after before was taken.
func (a RequestCounts) Since(before RequestCounts) RequestCounts {
	return RequestCounts{Requests: since(a.Requests, before.Requests), Txns: since(a.Txns, before.Txns), TxnOps: since(a.TxnOps, before.TxnOps)}
}

func since[K comparable](now, before map[K]int64) map[K]int64 {
	out := map[K]int64{}
	for k, v := range now {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// Total is the number of requests of every kind.
func (a RequestCounts) Total() int64 {
	var n int64
	for _, v := range a.Requests {
		n += v
	}
	return n
}

// Of is the number of requests of one kind.
func (a RequestCounts) Of(kind RequestKind) int64 { return a.Requests[kind] }

// Ops is the number of operations of all the transactions.
func (a RequestCounts) Ops() int64 {
	var n int64
	for _, v := range a.TxnOps {
		n += v
	}
	return n
}

// OpsOf is the number of transaction operations of one verb ("kv cas").
func (a RequestCounts) OpsOf(verb string) int64 { return a.TxnOps[verb] }

// TxnsOf is the number of transactions that hold the verbs of shape and
// no other ("kv get-tree", "kv cas+kv set").
func (a RequestCounts) TxnsOf(shape string) int64 { return a.Txns[shape] }

// String lists the requests by kind, the transactions by the verbs they
// hold, then their operations by verb, most first: "txn 12, kv keys 3;
// txns: kv cas+kv set 8, kv get-tree 4; ops: kv get-tree 300, ...".
func (a RequestCounts) String() string {
	s := mostFirst(a.Requests)
	if len(a.Txns) > 0 {
		s += "; txns: " + mostFirst(a.Txns)
	}
	if len(a.TxnOps) > 0 {
		s += "; ops: " + mostFirst(a.TxnOps)
	}
	return s
}

func mostFirst[K ~string](m map[K]int64) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y K) int {
		if m[x] != m[y] {
			return int(m[y] - m[x])
		}
		return strings.Compare(string(x), string(y))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
