package consulwriter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// consulProxy passes requests to a Consul agent, counting transactions
// and folder lists; a hook may act on a transaction before it is passed.
type consulProxy struct {
	cfg consulkv.Config // reaches the agent through the proxy

	mu     sync.Mutex
	txns   int // PUT /v1/txn
	lists  int // GET /v1/kv/...?recurse
	hook   func(body []byte)
	status map[int]int // of the transactions' responses
}

func newConsulProxy(t testing.TB, agent consulkv.Config) *consulProxy {
	t.Helper()
	target, err := url.Parse("http://" + agent.Addr)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &consulProxy{status: map[int]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/v1/txn" {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/kv/") && r.URL.Query().Has("recurse") {
				p.mu.Lock()
				p.lists++
				p.mu.Unlock()
			}
			rp.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		p.mu.Lock()
		p.txns++
		hook := p.hook
		p.mu.Unlock()
		if hook != nil {
			hook(body)
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		rp.ServeHTTP(rec, r)
		p.mu.Lock()
		p.status[rec.code]++
		p.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	p.cfg = consulkv.Config{Addr: srv.Listener.Addr().String()}
	return p
}

// setHook has hook called with the body of every transaction from now on.
func (p *consulProxy) setHook(hook func(body []byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = hook
}

func (p *consulProxy) counts() (txns, lists int, status map[int]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := map[int]int{}
	for k, v := range p.status {
		st[k] = v
	}
	return p.txns, p.lists, st
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

// kilobytePolicy is a policy whose body is about 1 KB.
func kilobytePolicy(id, version string) events.Policy {
	return events.Policy{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version,
		Body: fmt.Sprintf(`{"policyName":"%s.%s.xml","policyVersion":"%s","config":{"blob":"%s"}}`, id, version, version, strings.Repeat("k", 950))}
}

// component is a collection of component comp in folder scn.
func component(comp, scn, update string, gen int64, ps ...events.Policy) *events.ComponentPolicies {
	return &events.ComponentPolicies{
		ComponentID: comp, DeploymentID: "d-" + comp, ServiceComponentName: scn, UpdateID: update, Generation: gen,
		Policies: ps, UpdatedPolicies: ps, Notify: events.NotifyTarget{Kind: events.NotifyNone},
		UpdatedAt: time.UnixMilli(1000).UTC(),
	}
}

// checkFolder fails the test unless scn's folder holds exactly the
// collection of rec (its items and its event) and returns the event key.
func checkFolder(t testing.TB, c *api.Client, rec *events.ComponentPolicies, action string) *api.KVPair {
	t.Helper()
	pairs, _, err := c.KV().List(consulkv.Folder(rec.ServiceComponentName), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var event *api.KVPair
	for _, p := range pairs {
		if p.Key == consulkv.EventKey(rec.ServiceComponentName) {
			event = p
			continue
		}
		got[p.Key] = string(p.Value)
	}
	want := map[string]string{}
	for _, p := range rec.Policies {
		want[consulkv.ItemKey(rec.ServiceComponentName, p.PolicyID)] = p.Body
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("folder %s holds items %v, want %v", consulkv.Folder(rec.ServiceComponentName), keysOf(got), keysOf(want))
	}
	if event == nil {
		t.Fatalf("folder %s has no event key", consulkv.Folder(rec.ServiceComponentName))
	}
	e, err := consulkv.ParseEvent(event.Value)
	if err != nil {
		t.Fatal(err)
	}
	if e.Action != action || e.UpdateID != rec.UpdateID || e.Generation != rec.Generation || e.PoliciesCount != len(rec.Policies) {
		t.Fatalf("event of %s is %s, want %s of %s generation %d with %d policies", rec.ServiceComponentName, event.Value, action, rec.UpdateID, rec.Generation, len(rec.Policies))
	}
	return event
}

func keysOf(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// checkApplied fails the test unless a is the component.applied of rec
// written with action, keys key writes, at the event key's index.
func checkApplied(t testing.TB, a *events.ComponentApplied, rec *events.ComponentPolicies, action string, keys int, index uint64) {
	t.Helper()
	if a.ComponentID != rec.ComponentID || a.ServiceComponentName != rec.ServiceComponentName || a.UpdateID != rec.UpdateID ||
		a.Generation != rec.Generation || a.Action != action || a.PoliciesCount != int32(len(rec.Policies)) || a.KeysWritten != int32(keys) ||
		a.ConsulIndex != int64(index) || a.Uninstalled || a.CatchUp != rec.CatchUp ||
		!reflect.DeepEqual(a.PolicyRefs, events.Refs(rec.Policies)) || !reflect.DeepEqual(a.UpdatedRefs, events.Refs(rec.UpdatedPolicies)) {
		t.Fatalf("applied of %s %s: component %s, folder %s, generation %d, action %s, %d policies, %d keys written, index %d; want %s, %d keys, index %d",
			rec.ComponentID, rec.UpdateID, a.ComponentID, a.ServiceComponentName, a.Generation, a.Action, a.PoliciesCount, a.KeysWritten, a.ConsulIndex,
			action, keys, index)
	}
}

// checkItemIndexes fails the test unless a names the ModifyIndex of every
// item of its collection as Consul holds it now.
func checkItemIndexes(t testing.TB, c *api.Client, a *events.ComponentApplied) {
	t.Helper()
	got := map[string]uint64{}
	for _, ix := range a.ItemIndexes {
		got[consulkv.ItemKey(a.ServiceComponentName, ix.PolicyID)] = uint64(ix.ModifyIndex)
	}
	want := stagetest.ModifyIndexes(t, c, consulkv.ItemsPrefix(a.ServiceComponentName))
	if len(a.PolicyRefs) != len(want) || !reflect.DeepEqual(got, want) {
		t.Fatalf("applied of %s %s names item indexes %v for %d policies; Consul holds %v", a.ComponentID, a.UpdateID, got, len(a.PolicyRefs), want)
	}
}

// putEvent writes an event (and one item) to scn's folder, as another
// writer would.
func putEvent(c *api.Client, scn string, e consulkv.Event) error {
	ok, _, _, err := c.Txn().Txn(api.TxnOps{
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: consulkv.ItemKey(scn, "OTHER"), Value: []byte(`{"config":{"other":true}}`)}},
		{KV: &api.KVTxnOp{Verb: api.KVSet, Key: consulkv.EventKey(scn), Value: e.JSON()}},
	}, nil)
	if err == nil && !ok {
		err = errors.New("rolled back")
	}
	if err != nil {
		return fmt.Errorf("write the event of %s: %w", scn, err)
	}
	return nil
}

func TestConsulWriterManyComponents(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	proxy := newConsulProxy(t, consulCfg)
	c := newCluster(t)
	applied := c.Reader(t, topology.ComponentApplied)

	// Consul already holds a newer collection of one component.
	newer := consulkv.Event{Action: consulkv.ActionUpdated, Timestamp: "2018-02-12T10:20:30.777Z", UpdateID: "u-other", PoliciesCount: 1, Generation: 7}
	if err := putEvent(consul, "many-newer", newer); err != nil {
		t.Fatal(err)
	}
	before := stagetest.ModifyIndexes(t, consul, consulkv.Folder("many-newer"))

	const n = 300
	var recs []*events.ComponentPolicies
	var krecs []*kgo.Record
	add := func(rec *events.ComponentPolicies) {
		recs = append(recs, rec)
		krecs = append(krecs, c.Record(t, topology.ComponentPolicies, rec.ComponentID, rec))
	}
	for i := 0; i < n; i++ {
		var ps []events.Policy
		for k := 0; k <= i%3; k++ {
			ps = append(ps, kilobytePolicy(fmt.Sprintf("P%d", k), "1"))
		}
		add(component(fmt.Sprintf("m%03d", i), fmt.Sprintf("many-%03d", i), "u1", 1, ps...))
		if i == n/2 {
			add(component("m-newer", "many-newer", "u3", 3, kilobytePolicy("P0", "3")))
		}
	}
	// A component twice: its second collection keeps P0, changes P1,
	// drops P2 and adds P3.
	twice1 := component("m-twice", "many-twice", "u1", 1, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "1"), kilobytePolicy("P2", "1"))
	twice2 := component("m-twice", "many-twice", "u2", 2, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "2"), kilobytePolicy("P3", "1"))
	add(twice1)
	add(twice2)
	c.ProduceRecords(t, krecs...)

	// The stage starts with every record waiting, as after a burst, and
	// polls them all at once as it would in production.
	env := stagetest.Env(c.Kafka)
	env.PollRecords = 1000
	stagetest.Run(t, StageWith(Config{Consul: proxy.cfg}), env)
	want := len(recs) - 1 // not the newer-generation component
	got := applied.Until(want, 120*time.Second)
	applied.Poll(time.Second)
	if len(applied.Records()) != want {
		t.Fatalf("got %d component.applied records, want %d", len(applied.Records()), want)
	}

	byComp := map[string][]*events.ComponentApplied{}
	for _, r := range got {
		a := decodeApplied(t, r)
		if string(r.Key) != a.ComponentID {
			t.Fatalf("applied of %s keyed %q", a.ComponentID, r.Key)
		}
		byComp[a.ComponentID] = append(byComp[a.ComponentID], a)
	}
	for _, rec := range recs[:len(recs)-2] {
		if rec.ComponentID == "m-newer" {
			continue
		}
		as := byComp[rec.ComponentID]
		if len(as) != 1 {
			t.Fatalf("component %s has %d applied records, want 1", rec.ComponentID, len(as))
		}
		event := checkFolder(t, consul, rec, consulkv.ActionGathered)
		checkApplied(t, as[0], rec, consulkv.ActionGathered, len(rec.Policies)+1, event.ModifyIndex)
		checkItemIndexes(t, consul, as[0])
	}
	as := byComp["m-twice"]
	if len(as) != 2 {
		t.Fatalf("component m-twice has %d applied records, want 2", len(as))
	}
	event := checkFolder(t, consul, twice2, consulkv.ActionUpdated)
	checkApplied(t, as[1], twice2, consulkv.ActionUpdated, 4, event.ModifyIndex) // P1, P2, P3 and the event
	checkItemIndexes(t, consul, as[1])                                           // P0 as read, P1 and P3 as written
	checkApplied(t, as[0], twice1, consulkv.ActionGathered, 4, uint64(as[0].ConsulIndex))
	if as[0].ConsulIndex <= 0 || as[0].ConsulIndex >= as[1].ConsulIndex {
		t.Fatalf("m-twice applied at index %d then %d", as[0].ConsulIndex, as[1].ConsulIndex)
	}
	if len(byComp["m-newer"]) != 0 {
		t.Fatalf("the component Consul holds a newer collection of was applied: %+v", byComp["m-newer"][0])
	}
	if after := stagetest.ModifyIndexes(t, consul, consulkv.Folder("many-newer")); !reflect.DeepEqual(before, after) {
		t.Fatalf("the newer collection was changed: ModifyIndex before %v, after %v", before, after)
	}

	txns, lists, status := proxy.counts()
	t.Logf("%d records (%d components) in %d Consul transactions, %d folder lists (polls of %d records)", len(recs), len(byComp), txns, lists, env.PollRecords)
	if txns*5 > len(recs) || lists != 0 || status[http.StatusOK] != txns {
		t.Fatalf("%d records took %d transactions (%v by status) and %d folder lists; want at most one transaction per 5 records and no list",
			len(recs), txns, status, lists)
	}
}

// newWriter is the stage's batch handler on cfg.
func newWriter(t testing.TB, cfg consulkv.Config) *writer {
	t.Helper()
	w := &writer{cfg: Config{Consul: cfg}}
	if _, _, err := w.setup(context.Background(), stagetest.Env(runtime.Kafka{})); err != nil {
		t.Fatal(err)
	}
	return w
}

func inputs(recs ...*events.ComponentPolicies) []runtime.Msg[*events.ComponentPolicies] {
	ins := make([]runtime.Msg[*events.ComponentPolicies], len(recs))
	for i, rec := range recs {
		ins[i] = runtime.Msg[*events.ComponentPolicies]{
			Input: runtime.Input{Topic: topology.ComponentPolicies, Partition: 0, Offset: int64(i), Key: []byte(rec.ComponentID), Raw: []byte{0}},
			Value: rec,
		}
	}
	return ins
}

func TestBatchSharedTransactionConflict(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	proxy := newConsulProxy(t, consulCfg)
	w := newWriter(t, proxy.cfg)

	var recs []*events.ComponentPolicies
	for i := 0; i < 20; i++ {
		recs = append(recs, component(fmt.Sprintf("b%02d", i), fmt.Sprintf("batch-%02d", i), "u1", 1, kilobytePolicy("P0", "1"), kilobytePolicy("P1", "1")))
	}
	bad := component("b-bad", "batch-bad", "u1", 1, events.Policy{PolicyID: "NOTJSON", PolicyVersion: "1", Body: "not json"})
	again := component("b05", "batch-05", "u2", 2, kilobytePolicy("P0", "2"))
	recs = append(recs[:10], append([]*events.ComponentPolicies{bad}, recs[10:]...)...)
	recs = append(recs, again)

	// Another writer writes a newer collection of batch-07 between the
	// stage's read and its write.
	intruder := consulkv.Event{Action: consulkv.ActionUpdated, Timestamp: "2018-02-12T10:20:30.777Z", UpdateID: "u-other", PoliciesCount: 1, Generation: 9}
	var shared atomic.Int64 // components in the transaction the intruder spoiled
	proxy.setHook(func(body []byte) {
		if shared.Load() == 0 && bytes.Contains(body, []byte(`"Key":"`+consulkv.EventKey("batch-07")+`"`)) && bytes.Contains(body, []byte(`"Verb":"cas"`)) {
			// Each component's event key ends the same way.
			shared.Store(int64(bytes.Count(body, []byte(consulkv.EventKey("")+`"`))))
			if err := putEvent(consul, "batch-07", intruder); err != nil {
				t.Error(err)
			}
		}
	})
	outs := w.handleBatch(context.Background(), inputs(recs...))
	if len(outs) != len(recs) {
		t.Fatalf("%d outcomes for %d records", len(outs), len(recs))
	}
	if n := shared.Load(); n < 2 {
		t.Fatalf("the write of batch-07 was shared by %d components, want several", n)
	}
	for i, rec := range recs {
		oc := outs[i]
		switch {
		case rec == bad:
			if !runtime.IsPermanent(oc.Err) || !strings.Contains(oc.Err.Error(), "NOTJSON") {
				t.Fatalf("bad record: outcome %+v, want a permanent error naming the policy", oc)
			}
		case rec.ComponentID == "b07":
			if oc.Err != nil || len(oc.Outputs) != 0 {
				t.Fatalf("b07 (newer collection in Consul): outcome %+v, want skipped", oc)
			}
		case oc.Err != nil || len(oc.Outputs) != 1:
			t.Fatalf("%s %s: outcome %+v, want one component.applied", rec.ComponentID, rec.UpdateID, oc)
		case rec == again:
			event := checkFolder(t, consul, rec, consulkv.ActionUpdated)
			checkApplied(t, oc.Outputs[0].Value.(*events.ComponentApplied), rec, consulkv.ActionUpdated, 3, event.ModifyIndex) // P0, P1, event
		case rec.ComponentID == "b05":
			checkApplied(t, oc.Outputs[0].Value.(*events.ComponentApplied), rec, consulkv.ActionGathered, 3, uint64(oc.Outputs[0].Value.(*events.ComponentApplied).ConsulIndex))
		default:
			event := checkFolder(t, consul, rec, consulkv.ActionGathered)
			checkApplied(t, oc.Outputs[0].Value.(*events.ComponentApplied), rec, consulkv.ActionGathered, 3, event.ModifyIndex)
		}
	}
	p, _, err := consul.KV().Get(consulkv.EventKey("batch-07"), nil)
	if err != nil || p == nil || !bytes.Equal(p.Value, intruder.JSON()) {
		t.Fatalf("batch-07's event is %v (%v), want the other writer's", p, err)
	}
	if items := stagetest.ModifyIndexes(t, consul, consulkv.ItemsPrefix("batch-07")); len(items) != 1 {
		t.Fatalf("batch-07 holds items %v, want only the other writer's", items)
	}
	_, _, status := proxy.counts()
	if status[http.StatusConflict] != 1 {
		t.Fatalf("transactions by status %v, want one conflict", status)
	}
}

func TestBatchConsulDown(t *testing.T) {
	w := newWriter(t, consulkv.Config{Addr: fmt.Sprintf("127.0.0.1:%d", stagetest.FreePort(t))})
	recs := []*events.ComponentPolicies{
		component("d1", "down-1", "u1", 1, kilobytePolicy("P0", "1")),
		component("d2", "down-2", "u1", 1, kilobytePolicy("P0", "1")),
		component("d1", "down-1", "u2", 2, kilobytePolicy("P0", "2")),
	}
	outs := w.handleBatch(context.Background(), inputs(recs...))
	for i, oc := range outs {
		if oc.Err == nil || runtime.IsPermanent(oc.Err) || len(oc.Outputs) != 0 {
			t.Fatalf("record %d with Consul down: outcome %+v, want a transient error", i, oc)
		}
	}
	if !strings.Contains(outs[0].Err.Error(), "read "+consulkv.Folder("down-1")) {
		t.Fatalf("first error %q does not say which read failed", outs[0].Err)
	}
}

func TestWaves(t *testing.T) {
	var jobs []*job
	for i, scn := range []string{"a", "b", "a", consulkv.Folder("a") + "x", "c", "b", consulkv.Folder("d") + "y", "a"} {
		jobs = append(jobs, &job{i: i, folder: consulkv.Folder(scn)})
	}
	var got [][]int
	for _, w := range waves(jobs) {
		var is []int
		for _, j := range w {
			is = append(is, j.i)
		}
		got = append(got, is)
	}
	// a:policies/x:policies/ is inside a's folder, so it waits for a's
	// records before it.
	want := [][]int{{0, 1, 4, 6}, {2, 5}, {3}, {7}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("waves %v, want %v", got, want)
	}
}
