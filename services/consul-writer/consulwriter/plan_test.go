package consulwriter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
)

var now = time.Date(2018, 2, 12, 10, 20, 30, 777_000_000, time.UTC)

func body(id, version, config string) string {
	return fmt.Sprintf(`{"policyName":"%s.%s.xml","policyVersion":"%s","config":%s}`, id, version, version, config)
}

func pol(id, version, config string) events.Policy {
	return events.Policy{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version, Body: body(id, version, config)}
}

func record(update string, gen int64, ps ...events.Policy) *events.ComponentPolicies {
	return &events.ComponentPolicies{
		ComponentID: "c1", DeploymentID: "d1", ServiceComponentName: "dcae-vm", UpdateID: update, Generation: gen,
		Policies: ps, Notify: events.NotifyTarget{Kind: events.NotifyNone},
	}
}

func pair(key string, value []byte, create, modify uint64) *api.KVPair {
	return &api.KVPair{Key: key, Value: value, CreateIndex: create, ModifyIndex: modify}
}

func eventPair(e consulkv.Event, create, modify uint64) *api.KVPair {
	return pair(consulkv.EventKey("dcae-vm"), e.JSON(), create, modify)
}

// describe lists a plan's operations as "verb key" strings, step by step.
func describe(p WritePlan) [][]string {
	var out [][]string
	for _, st := range p.Steps {
		var s []string
		if st.Guard {
			s = append(s, "check-index event")
		}
		for _, op := range st.Ops {
			s = append(s, string(op.KV.Verb)+" "+strings.TrimPrefix(op.KV.Key, consulkv.Folder("dcae-vm")))
		}
		if st.Event != nil {
			s = append(s, "cas event "+st.Event.Action)
		}
		if st.Put != nil {
			s = append(s, "put "+strings.TrimPrefix(st.Put.Key, consulkv.Folder("dcae-vm")))
		}
		out = append(out, s)
	}
	return out
}

func TestPlanSingleTransaction(t *testing.T) {
	a1, b1, b2, c1 := pol("A", "1", `{"a":1}`), pol("B", "1", `{"b":1}`), pol("B", "2", `{"b":2}`), pol("C", "1", `{"c":1}`)
	prior := consulkv.Event{Action: consulkv.ActionGathered, Timestamp: "2018-02-12T10:00:00.000Z", UpdateID: "u1", PoliciesCount: 2, Generation: 1}
	folder := api.KVPairs{
		eventPair(prior, 10, 10),
		pair(consulkv.ItemKey("dcae-vm", "A"), []byte(a1.Body), 10, 10),
		pair(consulkv.ItemKey("dcae-vm", "B"), []byte(b1.Body), 10, 10),
		pair(consulkv.ClaimKey("dcae-vm"), []byte(`{"update_id":"u1"}`), 11, 11),
	}
	cases := []struct {
		name    string
		current api.KVPairs
		rec     *events.ComponentPolicies
		action  string
		steps   [][]string
		keys    int
		index   uint64
	}{
		{
			name: "first collection", rec: record("u1", 1, a1, b1), action: consulkv.ActionGathered,
			steps: [][]string{{"set items/A", "set items/B", "cas event gathered"}}, keys: 2,
		},
		{
			name: "only changed keys are written", current: folder, rec: record("u2", 2, a1, b2, c1), action: consulkv.ActionUpdated,
			steps: [][]string{{"set items/B", "set items/C", "cas event updated"}}, keys: 2, index: 10,
		},
		{
			name: "removed policies are deleted, other keys of the folder stay", current: folder, rec: record("u2", 2, b1), action: consulkv.ActionUpdated,
			steps: [][]string{{"delete items/A", "cas event updated"}}, keys: 1, index: 10,
		},
		{
			name: "catch-up is gathered", current: folder, rec: func() *events.ComponentPolicies { r := record("u2", 2, a1, b1); r.CatchUp = true; return r }(),
			action: consulkv.ActionGathered, steps: [][]string{{"cas event gathered"}}, keys: 0, index: 10,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Plan(tc.current, tc.rec, now)
			if err != nil {
				t.Fatal(err)
			}
			if p.Skip || p.Action != tc.action || p.KeysChanged != tc.keys || p.EventIndex != tc.index {
				t.Fatalf("plan skip=%v action=%s keys=%d index=%d, want action=%s keys=%d index=%d", p.Skip, p.Action, p.KeysChanged, p.EventIndex, tc.action, tc.keys, tc.index)
			}
			if got := describe(p); !reflect.DeepEqual(got, tc.steps) {
				t.Fatalf("steps %v, want %v", got, tc.steps)
			}
			want := consulkv.Event{Action: tc.action, Timestamp: "2018-02-12T10:20:30.777Z", UpdateID: tc.rec.UpdateID, PoliciesCount: len(tc.rec.Policies), Generation: tc.rec.Generation}
			if p.Event != want {
				t.Fatalf("event %+v, want %+v", p.Event, want)
			}
		})
	}
}

func TestPlanSkipsWhatConsulHolds(t *testing.T) {
	a1 := pol("A", "1", `{"a":1}`)
	done := consulkv.Event{Action: consulkv.ActionUpdated, Timestamp: "2018-02-12T10:00:00.000Z", UpdateID: "u5", PoliciesCount: 1, Generation: 5}
	current := api.KVPairs{eventPair(done, 3, 42), pair(consulkv.ItemKey("dcae-vm", "A"), []byte(a1.Body), 3, 40)}
	cases := []struct {
		name   string
		rec    *events.ComponentPolicies
		replay bool
	}{
		{"the same update again is a replay", record("u5", 5, a1), true},
		{"an older generation is skipped", record("u4", 4), false},
		{"an older uninstall is skipped", func() *events.ComponentPolicies { r := record("u4", 4); r.Uninstalled = true; return r }(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Plan(current, tc.rec, now)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Skip || p.Replay != tc.replay || len(p.Steps) != 0 {
				t.Fatalf("plan skip=%v replay=%v steps=%v, want skip, replay=%v, no step", p.Skip, p.Replay, describe(p), tc.replay)
			}
			if tc.replay && (p.Event != done || p.EventIndex != 42 || p.Action != consulkv.ActionUpdated) {
				t.Fatalf("replay carries event %+v index %d action %s, want what Consul holds", p.Event, p.EventIndex, p.Action)
			}
		})
	}
	// A marker of a newer generation: its writer owns the folder.
	marker := done
	marker.Action, marker.Generation = consulkv.ActionUpdating, 6
	p, err := Plan(api.KVPairs{eventPair(marker, 3, 50)}, record("u5", 5, a1), now)
	if err != nil || !p.Skip || p.Replay {
		t.Fatalf("plan under a newer marker: %+v %v", p, err)
	}
}

// A plan keeps the index, as read, of each item it leaves as it is: the
// writer reports it on component.applied beside those it writes. An item
// whose value differs (edited by hand) is not held, even in a replay,
// which writes nothing.
func TestPlanHeldIndexes(t *testing.T) {
	a1, b1, b2 := pol("A", "1", `{"a":1}`), pol("B", "1", `{"b":1}`), pol("B", "2", `{"b":2}`)
	done := consulkv.Event{Action: consulkv.ActionGathered, Timestamp: "2018-02-12T10:00:00.000Z", UpdateID: "u1", PoliciesCount: 2, Generation: 1}
	folder := api.KVPairs{
		eventPair(done, 10, 12),
		pair(consulkv.ItemKey("dcae-vm", "A"), []byte(a1.Body), 10, 11),
		pair(consulkv.ItemKey("dcae-vm", "B"), []byte(b1.Body), 10, 12),
	}
	edited := api.KVPairs{folder[0], folder[1], pair(consulkv.ItemKey("dcae-vm", "B"), []byte(`{"b":"by hand"}`), 10, 30)}
	a, b := consulkv.ItemKey("dcae-vm", "A"), consulkv.ItemKey("dcae-vm", "B")
	cases := []struct {
		name    string
		current api.KVPairs
		rec     *events.ComponentPolicies
		plan    func(api.KVPairs, *events.ComponentPolicies, time.Time) (WritePlan, error)
		want    map[string]uint64
	}{
		{"first collection: none held", nil, record("u1", 1, a1, b1), Plan, map[string]uint64{}},
		{"an update holds the items it leaves", folder, record("u2", 2, a1, b2), Plan, map[string]uint64{a: 11}},
		{"a replay holds every item that agrees", folder, record("u1", 1, a1, b1), Plan, map[string]uint64{a: 11, b: 12}},
		{"a replay does not hold an item edited by hand", edited, record("u1", 1, a1, b1), Plan, map[string]uint64{a: 11}},
		{"a repair holds the items that agree", edited, record("u1", 1, a1, b1), PlanRepair, map[string]uint64{a: 11}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.plan(tc.current, tc.rec, now)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.HeldIndexes, tc.want) {
				t.Fatalf("held indexes %v, want %v", p.HeldIndexes, tc.want)
			}
		})
	}
}

func TestPlanUninstall(t *testing.T) {
	rec := record("u9", 9)
	rec.Uninstalled = true
	prior := consulkv.Event{Action: consulkv.ActionUpdated, UpdateID: "u8", Generation: 8}
	p, err := Plan(api.KVPairs{eventPair(prior, 1, 7), pair(consulkv.ItemKey("dcae-vm", "A"), []byte("{}"), 1, 1), pair(consulkv.ClaimKey("dcae-vm"), []byte("{}"), 2, 2)}, rec, now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Skip || p.Action != ActionUninstalled || p.KeysChanged != 3 || p.EventIndex != 7 ||
		!reflect.DeepEqual(describe(p), [][]string{{"check-index event", "delete-tree "}}) || p.Steps[0].Ops[0].KV.Key != consulkv.Folder("dcae-vm") {
		t.Fatalf("uninstall plan %+v %v", p, describe(p))
	}
	p, err = Plan(nil, rec, now)
	if err != nil || !p.Skip || !p.Replay || p.Action != ActionUninstalled {
		t.Fatalf("uninstall of an empty folder: %+v %v", p, err)
	}
}

func TestPlanRefusesWhatConsulCannotHold(t *testing.T) {
	huge := pol("H", "1", `{"blob":"`+strings.Repeat("x", consulkv.MaxValueBytes)+`"}`)
	cases := []struct {
		name string
		rec  *events.ComponentPolicies
		want string
	}{
		{"no folder", func() *events.ComponentPolicies { r := record("u", 1); r.ServiceComponentName = ""; return r }(), "no service_component_name"},
		{"value over 512 KiB", record("u", 1, huge), "over Consul's limit"},
		{"body not JSON", record("u", 1, events.Policy{PolicyID: "A", Body: "not json"}), "not a JSON object"},
		{"body a JSON string", record("u", 1, events.Policy{PolicyID: "A", Body: `"x"`}), "not a JSON object"},
		{"no policy_id", record("u", 1, events.Policy{PolicyName: "A.1.xml", Body: "{}"}), "no policy_id"},
		{"repeated policy_id", record("u", 1, pol("A", "1", "{}"), pol("A", "2", "{}")), "appears twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan(nil, tc.rec, now)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// bodySize is the size of a step's transaction body as the writer sends
// it, with realistic indexes.
func bodySize(t *testing.T, st Step) (ops int, size int) {
	t.Helper()
	all := api.TxnOps{}
	if st.Guard {
		all = append(all, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: consulkv.EventKey("dcae-vm"), Index: 123456789}})
	}
	all = append(all, st.Ops...)
	if st.Event != nil {
		all = append(all, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: consulkv.EventKey("dcae-vm"), Value: st.Event.JSON(), Index: 123456789}})
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return len(all), len(b) + 1
}

func TestPlanSeveralTransactions(t *testing.T) {
	// 10 MB in 100 KB bodies, 300 small ones, one body too big for any
	// transaction (450 KiB grows past 512 KiB in base64).
	var ps []events.Policy
	for i := 0; i < 100; i++ {
		ps = append(ps, pol(fmt.Sprintf("BIG.%03d", i), "1", `{"blob":"`+strings.Repeat("b", 100_000)+`"}`))
	}
	for i := 0; i < 300; i++ {
		ps = append(ps, pol(fmt.Sprintf("SMALL.%03d", i), "1", `{"n":1}`))
	}
	ps = append(ps, pol("HUGE", "1", `{"blob":"`+strings.Repeat("h", 450*1024)+`"}`))
	rec := record("u2", 2, ps...)
	prior := consulkv.Event{Action: consulkv.ActionGathered, UpdateID: "u1", Generation: 1}
	current := api.KVPairs{eventPair(prior, 5, 5), pair(consulkv.ItemKey("dcae-vm", "OLD"), []byte("{}"), 5, 5)}
	p, err := Plan(current, rec, now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Skip || p.Action != consulkv.ActionUpdated || p.KeysChanged != len(ps)+1 {
		t.Fatalf("plan skip=%v action=%s keys=%d", p.Skip, p.Action, p.KeysChanged)
	}
	first, last := p.Steps[0], p.Steps[len(p.Steps)-1]
	if first.Event == nil || first.Event.Action != consulkv.ActionUpdating || len(first.Ops) != 0 || first.Event.UpdateID != "u2" || first.Event.Generation != 2 {
		t.Fatalf("first step %v, want only the updating marker of u2", describe(WritePlan{Steps: []Step{first}}))
	}
	if last.Event == nil || last.Event.Action != consulkv.ActionUpdated || last.Event.PoliciesCount != len(ps) {
		t.Fatalf("last step does not write the final event: %+v", last.Event)
	}
	written := map[string]int{}
	puts := 0
	for i, st := range p.Steps {
		if st.Put != nil {
			puts++
			written[st.Put.Key]++
			if st.Put.ModifyIndex != 0 {
				t.Errorf("new key %s put with check-and-set index %d, want 0", st.Put.Key, st.Put.ModifyIndex)
			}
			continue
		}
		if i > 0 && i < len(p.Steps)-1 && !st.Guard {
			t.Errorf("step %d writes items without checking the event index", i)
		}
		n, size := bodySize(t, st)
		if n > consulkv.MaxTxnOps || size > consulkv.MaxTxnBytes {
			t.Errorf("step %d has %d operations in %d bytes, over %d / %d", i, n, size, consulkv.MaxTxnOps, consulkv.MaxTxnBytes)
		}
		for _, op := range st.Ops {
			written[op.KV.Key]++
		}
	}
	if puts != 1 || written[consulkv.ItemKey("dcae-vm", "HUGE")] != 1 {
		t.Errorf("%d single puts, want 1 for HUGE", puts)
	}
	var keys []string
	for k, n := range written {
		if n != 1 {
			t.Errorf("key %s written %d times", k, n)
		}
		keys = append(keys, k)
	}
	if len(keys) != len(ps)+1 {
		t.Errorf("%d keys written, want %d (every policy and the deleted OLD)", len(keys), len(ps)+1)
	}
	sort.Strings(keys)
	t.Logf("%d policies (%d keys) in %d steps", len(ps), len(keys), len(p.Steps))
}

func TestPlanResumesCutWrite(t *testing.T) {
	var ps []events.Policy
	for i := 0; i < 300; i++ {
		ps = append(ps, pol(fmt.Sprintf("P.%03d", i), "1", `{"n":1}`))
	}
	rec := record("u1", 1, ps...)
	marker := consulkv.Event{Action: consulkv.ActionUpdating, UpdateID: "u1", Generation: 1, PoliciesCount: 300}
	// Half the items were written before the writer stopped.
	current := api.KVPairs{eventPair(marker, 30, 30)}
	for _, p := range ps[:100] {
		current = append(current, pair(consulkv.ItemKey("dcae-vm", p.PolicyID), []byte(p.Body), 31, 31))
	}
	p, err := Plan(current, rec, now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Skip || p.Action != consulkv.ActionGathered || p.KeysChanged != 200 || p.EventIndex != 30 {
		t.Fatalf("resume plan skip=%v action=%s keys=%d index=%d", p.Skip, p.Action, p.KeysChanged, p.EventIndex)
	}
	if d := describe(p); len(d) < 2 || d[0][0] != "check-index event" || d[0][1] != "set items/P.100" {
		t.Fatalf("resume starts with %.3v, want the missing items guarded by the marker's index (no new marker)", d[0])
	}
	// The marker replaced an earlier event: the write is an update.
	current[0] = eventPair(marker, 3, 30)
	if p, _ = Plan(current, rec, now); p.Action != consulkv.ActionUpdated {
		t.Fatalf("resume after an earlier event: action %s, want updated", p.Action)
	}
}

func TestOpSize(t *testing.T) {
	keys := []string{"", consulkv.EventKey("dcae-vm"), "a<b>&c\"d\\e\n\t\b\f\r\x01\x1f", "é€😀\u2028\u2029", "bad\xff\xc3utf8"}
	values := [][]byte{nil, {}, []byte("a"), []byte("ab"), []byte("abc"), []byte(`{"x":"<&>"}`), bytes.Repeat([]byte{0xff}, 1000)}
	for _, verb := range []api.KVOp{api.KVSet, api.KVCAS, api.KVCheckIndex, api.KVDeleteTree} {
		for _, k := range keys {
			for _, v := range values {
				for _, index := range []uint64{0, 9, 10, 12345, math.MaxUint64} {
					op := &api.TxnOp{KV: &api.KVTxnOp{Verb: verb, Key: k, Value: v, Index: index, Flags: index / 3, Session: k}}
					b, err := json.Marshal(op)
					if err != nil {
						t.Fatal(err)
					}
					if got := opSize(op); got != len(b) {
						t.Fatalf("opSize of %s: %d, encoded %d bytes", b, got, len(b))
					}
				}
			}
		}
	}
}

// A body is checked once, and only a JSON object is remembered: a body
// that is not one is refused every time it comes, also after valid ones
// filled the memory and it started over.
func TestObjectMemoRemembersOnlyObjects(t *testing.T) {
	m := objectMemo{limit: 40}
	ok := func(body string) bool { return m.valid(body, []byte(body)) }
	for i := 0; i < 2; i++ {
		if !ok(`{"a":1}`) {
			t.Fatalf("pass %d: a JSON object refused", i)
		}
		if ok(`not json`) || ok(`"x"`) || ok(`{"a":`) {
			t.Fatalf("pass %d: a body that is not a JSON object accepted", i)
		}
	}
	if _, seen := m.seen[`{"a":1}`]; !seen {
		t.Error("a valid body was not remembered")
	}
	for _, bad := range []string{`not json`, `"x"`, `{"a":`} {
		if _, seen := m.seen[bad]; seen {
			t.Errorf("%q remembered as valid", bad)
		}
	}
	for i := 0; i < 20; i++ {
		ok(fmt.Sprintf(`{"key":%d}`, i))
	}
	if m.bytes > m.limit {
		t.Errorf("remembers %d bytes, over its limit of %d", m.bytes, m.limit)
	}
	if ok(`not json`) {
		t.Error("after starting over, a body that is not a JSON object accepted")
	}
}
