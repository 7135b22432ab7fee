package replicasync

import (
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
)

// mapView is a View over a map, applying changes as acm.sync would.
type mapView map[string]*events.ReplicaState

func (m mapView) Get(key string) (*events.ReplicaState, bool) { st, ok := m[key]; return st, ok }
func (m mapView) Keys() []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
func (m mapView) apply(cs []Change) {
	for _, c := range cs {
		if c.State == nil {
			delete(m, c.Key)
		} else {
			m[c.Key] = c.State
		}
	}
}

func sp(s string) *string { return &s }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func decide(t *testing.T, v mapView, m *events.ParticipantMessage, now time.Time) []Change {
	t.Helper()
	cs, err := Decide(Rules{OfflineAfter: 150 * time.Second}, v, m, now)
	if err != nil {
		t.Fatalf("%s: %v", m.Kind, err)
	}
	v.apply(cs)
	return cs
}

func TestRegistry(t *testing.T) {
	v := mapView{}
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgRegister, ParticipantID: "p1", ReplicaID: "r1", SupportedElementTypes: []string{"t2", "t1"}, SentAt: t0}, t0)
	r := v[acm.ReplicaKey("p1", "r1")]
	if r == nil || r.State != acm.OnLine || r.Kind != acm.KindReplica || r.HeartbeatMs != t0.UnixMilli() || strings.Join(r.SupportedElementTypes, ",") != "t1,t2" {
		t.Fatalf("after REGISTER: %+v", r)
	}
	hb := t0.Add(20 * time.Second)
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgHeartbeat, ParticipantID: "p1", ReplicaID: "r1", SentAt: hb}, hb)
	r = v[acm.ReplicaKey("p1", "r1")]
	if r.HeartbeatMs != hb.UnixMilli() || r.Version != 2 || len(r.SupportedElementTypes) != 2 {
		t.Fatalf("after HEARTBEAT: %+v", r)
	}
	// 150 s after the heartbeat: still on line; just past it: off line.
	if cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgTick}, hb.Add(150*time.Second)); len(cs) != 0 {
		t.Fatalf("tick at exactly the silence: %+v", cs)
	}
	cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgTick}, hb.Add(150*time.Second+time.Millisecond))
	if len(cs) != 1 || cs[0].State.State != acm.OffLine || !strings.Contains(cs[0].State.Detail, "no heartbeat") {
		t.Fatalf("tick past the silence: %+v", cs)
	}
	if cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgTick}, hb.Add(time.Hour)); len(cs) != 0 {
		t.Fatalf("an OFF_LINE replica is marked again: %+v", cs)
	}
	// A heartbeat brings it back; deregistering removes it.
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgHeartbeat, ParticipantID: "p1", ReplicaID: "r1", SentAt: hb.Add(time.Hour)}, hb.Add(time.Hour))
	if v[acm.ReplicaKey("p1", "r1")].State != acm.OnLine {
		t.Fatal("heartbeat did not bring the replica back ON_LINE")
	}
	cs = decide(t, v, &events.ParticipantMessage{Kind: acm.MsgDeregister, ParticipantID: "p1", ReplicaID: "r1"}, hb)
	if len(cs) != 1 || cs[0].State != nil || len(v) != 0 {
		t.Fatalf("after DEREGISTER: %+v, %v", cs, v)
	}
	if cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgDeregister, ParticipantID: "p1", ReplicaID: "r1"}, hb); len(cs) != 0 {
		t.Fatalf("second DEREGISTER: %+v", cs)
	}
}

func TestElementStates(t *testing.T) {
	v := mapView{}
	key := acm.ElementKey("p1", "i1", "e1")
	msg := func(kind, state string, rev int64, props string) *events.ParticipantMessage {
		return &events.ParticipantMessage{Kind: kind, ParticipantID: "p1", ReplicaID: "r1", CompositionID: sp("c1"),
			InstanceID: sp("i1"), ElementID: sp("e1"), ElementType: "consul", State: sp(state), Revision: rev,
			ResponseTo: sp("op1"), Properties: props, DeadlineMs: t0.Add(time.Second).UnixMilli()}
	}
	decide(t, v, msg(acm.MsgState, acm.Deploying, 5, `{"a":1}`), t0)
	st := v[key]
	if st.State != acm.Deploying || st.Revision != 5 || st.ReplicaID != "r1" || st.OperationID != "op1" || st.ElementType != "consul" || st.CompositionID != "c1" || st.DeadlineMs == 0 {
		t.Fatalf("DEPLOYING: %+v", st)
	}
	// Past the deadline with no result: TIMEOUT, naming the replica.
	cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgTick}, t0.Add(2*time.Second))
	if len(cs) != 1 || v[key].State != acm.Timeout || !strings.Contains(v[key].Detail, "replica r1") {
		t.Fatalf("tick past the deadline: %+v", v[key])
	}
	// The retry on another replica completes it.
	m := msg(acm.MsgResult, acm.Deployed, 5, `{"a":1,"out":2}`)
	m.ReplicaID = "r2"
	decide(t, v, m, t0)
	if st := v[key]; st.State != acm.Deployed || st.ReplicaID != "r2" || st.DeadlineMs != 0 || st.Properties != `{"a":1,"out":2}` {
		t.Fatalf("DEPLOYED: %+v", st)
	}
	// A STALE answer changes nothing, even naming a newer state.
	stale := msg(acm.MsgResult, acm.Failed, 9, `{}`)
	stale.Outcome = acm.Stale
	if cs := decide(t, v, stale, t0); len(cs) != 0 {
		t.Fatalf("STALE answer applied: %+v", cs)
	}
	// A late answer to an older revision changes nothing.
	if cs := decide(t, v, msg(acm.MsgResult, acm.Failed, 4, `{}`), t0); len(cs) != 0 {
		t.Fatalf("stale result applied: %+v", cs)
	}
	// A property change without a state keeps the state.
	pm := msg(acm.MsgState, "", 5, `{"a":3}`)
	pm.State = nil
	decide(t, v, pm, t0)
	if st := v[key]; st.State != acm.Deployed || st.Properties != `{"a":3}` {
		t.Fatalf("property change: %+v", st)
	}
	decide(t, v, msg(acm.MsgResult, acm.Deleted, 6, `{}`), t0)
	if _, ok := v[key]; ok {
		t.Fatal("DELETED element still held")
	}
}

func TestComposition(t *testing.T) {
	v := mapView{}
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgResult, ParticipantID: "p1", ReplicaID: "r1", CompositionID: sp("c1"), State: sp(acm.Primed), Properties: `{"elements":{}}`, Revision: 1}, t0)
	if st := v[acm.CompositionKey("p1", "c1")]; st == nil || st.Kind != acm.KindComposition || st.State != acm.Primed {
		t.Fatalf("composition: %+v", st)
	}
}

func TestResync(t *testing.T) {
	v := mapView{}
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgRegister, ParticipantID: "p1", ReplicaID: "r1", SentAt: t0}, t0)
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgRegister, ParticipantID: "p2", ReplicaID: "r1", SentAt: t0}, t0)
	if cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgSync, ParticipantID: "p1"}, t0); len(cs) != 1 || cs[0].Key != acm.ReplicaKey("p1", "r1") || cs[0].State.Version != 2 {
		t.Fatalf("resync p1: %+v", cs)
	}
	if cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgSync}, t0); len(cs) != 2 {
		t.Fatalf("resync all: %+v", cs)
	}
}

func TestRefused(t *testing.T) {
	for name, m := range map[string]*events.ParticipantMessage{
		"no participant":             {Kind: acm.MsgRegister, ReplicaID: "r1"},
		"no replica":                 {Kind: acm.MsgHeartbeat, ParticipantID: "p1"},
		"slash in id":                {Kind: acm.MsgRegister, ParticipantID: "p/1", ReplicaID: "r1"},
		"unknown kind":               {Kind: "UNKNOWN", ParticipantID: "p1", ReplicaID: "r1"},
		"result about nothing":       {Kind: acm.MsgResult, ParticipantID: "p1", ReplicaID: "r1", State: sp(acm.Deployed)},
		"properties not an object":   {Kind: acm.MsgResult, ParticipantID: "p1", ReplicaID: "r1", InstanceID: sp("i"), ElementID: sp("e"), State: sp(acm.Deployed), Properties: "[1]"},
		"no state for a new element": {Kind: acm.MsgState, ParticipantID: "p1", ReplicaID: "r1", InstanceID: sp("i"), ElementID: sp("e")},
	} {
		if _, err := Decide(Rules{OfflineAfter: time.Second}, mapView{}, m, t0); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestTickChecksOnlyOwnedParticipants(t *testing.T) {
	v := mapView{}
	for _, p := range []string{"p1", "p2"} {
		decide(t, v, &events.ParticipantMessage{Kind: acm.MsgRegister, ParticipantID: p, ReplicaID: "r1", SentAt: t0}, t0)
	}
	r := Rules{OfflineAfter: time.Second, Owns: func(p string) bool { return p == "p2" }}
	cs, err := Decide(r, v, &events.ParticipantMessage{Kind: acm.MsgTick}, t0.Add(time.Hour))
	if err != nil || len(cs) != 1 || cs[0].Key != acm.ReplicaKey("p2", "r1") {
		t.Fatalf("tick owning p2: %+v %v", cs, err)
	}
	cs, err = Decide(r, v, &events.ParticipantMessage{Kind: acm.MsgSync}, t0)
	if err != nil || len(cs) != 1 || cs[0].Key != acm.ReplicaKey("p2", "r1") {
		t.Fatalf("resync of the partition owning p2: %+v %v", cs, err)
	}
	// A participant's own SYNC comes on its partition: no filter.
	if cs, _ := Decide(r, v, &events.ParticipantMessage{Kind: acm.MsgSync, ParticipantID: "p1"}, t0); len(cs) != 1 {
		t.Fatalf("resync of p1: %+v", cs)
	}
}

// A replica silent for longer than ForgetAfter leaves the registry (it
// went OFF_LINE before); one that still heartbeats stays; with
// ForgetAfter 0 a silent replica stays OFF_LINE.
func TestTickForgetsReplicasGoneLong(t *testing.T) {
	v := mapView{}
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgRegister, ParticipantID: "p1", ReplicaID: "gone", SentAt: t0}, t0)
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgRegister, ParticipantID: "p1", ReplicaID: "alive", SentAt: t0}, t0)
	decide(t, v, &events.ParticipantMessage{Kind: acm.MsgHeartbeat, ParticipantID: "p1", ReplicaID: "alive", SentAt: t0.Add(time.Hour)}, t0.Add(time.Hour))
	r := Rules{OfflineAfter: time.Minute, ForgetAfter: 30 * time.Minute}
	cs := decide(t, v, &events.ParticipantMessage{Kind: acm.MsgTick}, t0.Add(10*time.Minute))
	if len(cs) != 1 || cs[0].Key != acm.ReplicaKey("p1", "gone") || cs[0].State == nil || cs[0].State.State != acm.OffLine {
		t.Fatalf("after 10 minutes: %+v, want gone OFF_LINE", cs)
	}
	cs, err := Decide(r, v, &events.ParticipantMessage{Kind: acm.MsgTick}, t0.Add(time.Hour+time.Second))
	if err != nil || len(cs) != 1 || cs[0].Key != acm.ReplicaKey("p1", "gone") || cs[0].State != nil {
		t.Fatalf("after an hour: %+v %v, want gone deleted and alive kept", cs, err)
	}
	if cs, _ := Decide(Rules{OfflineAfter: time.Minute}, v, &events.ParticipantMessage{Kind: acm.MsgTick}, t0.Add(time.Hour+time.Second)); len(cs) != 0 {
		t.Fatalf("without ForgetAfter: %+v, want nothing (gone stays OFF_LINE)", cs)
	}
}
