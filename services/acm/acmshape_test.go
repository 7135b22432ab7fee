package acm

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

func TestConceptOf(t *testing.T) {
	for in, want := range map[string]ConceptID{
		"org.onap.policy.clamp.acm.HttpAutomationCompositionElement:1.0.0": {"org.onap.policy.clamp.acm.HttpAutomationCompositionElement", "1.0.0"},
		"org.policyflow.ConsulKV": {Name: "org.policyflow.ConsulKV"},
		"a:b":                     {Name: "a:b"},
		"a:":                      {Name: "a:"},
		":1":                      {Name: ":1"},
	} {
		if got := ConceptOf(in); got != want {
			t.Errorf("ConceptOf(%q) = %+v, want %+v", in, got, want)
		}
	}
}

func sampleStates() []*events.ReplicaState {
	hb := time.Date(2026, 11, 26, 10, 0, 0, 123e6, time.UTC).UnixMilli()
	return []*events.ReplicaState{
		{ParticipantID: "p1", ReplicaID: "r1", Kind: KindReplica, State: OnLine, HeartbeatMs: hb, SupportedElementTypes: []string{"org.x.Http:1.0.0"}},
		{ParticipantID: "p1", ReplicaID: "r2", Kind: KindReplica, State: OffLine, HeartbeatMs: hb, SupportedElementTypes: []string{"org.x.Http:1.0.0"}},
		{ParticipantID: "p1", Kind: KindComposition, CompositionID: "c1", State: Primed, Properties: `{"elements":{"d1":{"type":"org.x.Http:1.0.0"},"d2":{"type":"org.x.Http:1.0.0"}}}`},
		{ParticipantID: "p1", Kind: KindElement, CompositionID: "c1", InstanceID: "i1", ElementID: "e1", ElementType: "org.x.Http:1.0.0", State: Deployed, Properties: `{"k":"v"}`, Revision: 4},
		{ParticipantID: "p1", Kind: KindElement, CompositionID: "c1", InstanceID: "i2", ElementID: "e1", ElementType: "org.x.Http:1.0.0", State: Timeout, Detail: "DEPLOY of e1 did not end within 1s", Properties: `{}`},
		{ParticipantID: "p2", ReplicaID: "r9", Kind: KindReplica, State: OffLine, HeartbeatMs: hb, SupportedElementTypes: []string{"org.policyflow.ConsulKV"}},
	}
}

// The answer carries ACM's field names: a client of the ACM runtime reads
// it without change.
func TestInformationHasACMShape(t *testing.T) {
	got := Information(sampleStates(), Page{})
	if len(got) != 2 || got[0].Participant.ParticipantID != "p1" || got[1].Participant.ParticipantID != "p2" {
		t.Fatalf("participants: %+v", got)
	}
	b, err := json.Marshal(got[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	p := m["participant"].(map[string]any)
	if p["participantId"] != "p1" || p["participantState"] != OnLine {
		t.Errorf("participant: %v", p)
	}
	types := p["participantSupportedElementTypes"].(map[string]any)
	if want := map[string]any{"id": "org.x.Http:1.0.0", "typeName": "org.x.Http", "typeVersion": "1.0.0"}; !reflect.DeepEqual(types["org.x.Http:1.0.0"], want) {
		t.Errorf("participantSupportedElementTypes: %v", types)
	}
	r1 := p["replicas"].(map[string]any)["r1"].(map[string]any)
	if want := map[string]any{"replicaId": "r1", "participantState": OnLine, "lastMsg": "2026-11-26 10:00:00.123"}; !reflect.DeepEqual(r1, want) {
		t.Errorf("replica r1: %v, want %v", r1, want)
	}
	defs := m["acNodeTemplateStateDefinitionMap"].(map[string]any)
	d1, ok := defs["c1/d1"].(map[string]any)
	if len(defs) != 2 || !ok || d1["state"] != Primed || d1["participantId"] != "p1" || d1["nodeTemplateStateId"] != "c1/d1" ||
		!reflect.DeepEqual(d1["nodeTemplateId"], map[string]any{"name": "d1", "version": ""}) {
		t.Errorf("acNodeTemplateStateDefinitionMap: %v", defs)
	}
	els := m["acElementInstanceMap"].(map[string]any)
	e1 := els["i1/e1"].(map[string]any)
	if e1["id"] != "e1" || e1["deployState"] != Deployed || e1["lockState"] != Locked || e1["stateChangeResult"] != NoError ||
		!reflect.DeepEqual(e1["definition"], map[string]any{"name": "org.x.Http", "version": "1.0.0"}) ||
		!reflect.DeepEqual(e1["properties"], map[string]any{"k": "v"}) || e1["participantId"] != "p1" {
		t.Errorf("element i1/e1: %v", e1)
	}
	e2 := els["i2/e1"].(map[string]any)
	if e2["deployState"] != Timeout || e2["stateChangeResult"] != TimedOut || e2["lockState"] != LockNone || !strings.Contains(e2["message"].(string), "did not end") {
		t.Errorf("element i2/e1: %v", e2)
	}
	if got[1].Participant.ParticipantState != OffLine || len(got[1].AcElementInstanceMap) != 0 {
		t.Errorf("p2: %+v", got[1])
	}
}

// page and size page each participant's definitions and instances, by
// key, as ACM's do.
func TestInformationPages(t *testing.T) {
	all := Information(sampleStates(), Page{})[0]
	var seen []string
	for page := 0; page < 3; page++ {
		got := Information(sampleStates(), Page{Page: page, Size: 1})[0]
		if len(got.AcNodeTemplateStateDefinitionMap) > 1 || len(got.AcElementInstanceMap) > 1 {
			t.Fatalf("page %d holds more than 1: %+v", page, got)
		}
		for k := range got.AcElementInstanceMap {
			seen = append(seen, k)
		}
		if len(got.Participant.Replicas) != 2 {
			t.Errorf("page %d: replicas are not paged, got %v", page, got.Participant.Replicas)
		}
	}
	if want := []string{"i1/e1", "i2/e1"}; !reflect.DeepEqual(seen, want) || len(all.AcElementInstanceMap) != 2 {
		t.Errorf("pages of size 1 held %v, want %v", seen, want)
	}
}
