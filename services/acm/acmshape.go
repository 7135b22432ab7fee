package acm

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
)

// The shapes of the ACM runtime's participant monitoring API (ONAP
// policy-clamp, /onap/policy/clamp/acm/v2/participants): a participant is
// a ParticipantInformation, holding the Participant with its replicas and
// supported element types, the states of its primed element definitions
// (acNodeTemplateStateDefinitionMap) and its element instances
// (acElementInstanceMap). Information builds them from the acm.sync
// records the North API holds, so an ACM client reads policyflow's
// participants without change. What cannot be said in ACM's terms is
// added in fields ACM clients ignore (instanceId, compositionId,
// revision, stateChangeResult), and docs/differences.md lists it.

// LastMsgLayout is how lastMsg is written: ACM's java.sql.Timestamp text,
// in UTC.
const LastMsgLayout = "2006-01-02 15:04:05.000"

// Lock states of an element instance (ACM's LockState).
const (
	Locked   = "LOCKED"
	LockNone = "NONE"
)

// Results of a state change (ACM's StateChangeResult).
const (
	NoError = "NO_ERROR"
)

// ConceptID is a TOSCA concept identifier: a name and a version.
type ConceptID struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// ConceptOf reads "name:version" (the version dotted digits, as in
// org.onap.policy.clamp.acm.HttpAutomationCompositionElement:1.0.0) into
// a ConceptID; an id without such a suffix is all name, with no version.
func ConceptOf(id string) ConceptID {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 || i == len(id)-1 {
		return ConceptID{Name: id}
	}
	v := id[i+1:]
	for _, c := range v {
		if c != '.' && (c < '0' || c > '9') {
			return ConceptID{Name: id}
		}
	}
	return ConceptID{Name: id[:i], Version: v}
}

// SupportedElementType is ACM's ParticipantSupportedElementType; its id
// is the element type as the replicas registered it.
type SupportedElementType struct {
	ID          string `json:"id"`
	TypeName    string `json:"typeName"`
	TypeVersion string `json:"typeVersion"`
}

// ReplicaInfo is ACM's ParticipantReplica.
type ReplicaInfo struct {
	ReplicaID        string `json:"replicaId"`
	ParticipantState string `json:"participantState"`
	// LastMsg is when the replica last registered, heartbeat or answered
	// a status request (LastMsgLayout, UTC).
	LastMsg string `json:"lastMsg"`
}

// ParticipantShape is ACM's Participant: ON_LINE when one of its replicas
// is.
type ParticipantShape struct {
	ParticipantID                    string                          `json:"participantId"`
	ParticipantState                 string                          `json:"participantState"`
	ParticipantSupportedElementTypes map[string]SupportedElementType `json:"participantSupportedElementTypes"`
	Replicas                         map[string]ReplicaInfo          `json:"replicas"`
}

// NodeTemplateState is ACM's NodeTemplateState: one element definition of
// a composition primed on the participant, keyed
// <composition>/<definition>.
type NodeTemplateState struct {
	NodeTemplateStateID string         `json:"nodeTemplateStateId"`
	ParticipantID       string         `json:"participantId"`
	NodeTemplateID      ConceptID      `json:"nodeTemplateId"`
	State               string         `json:"state"`
	Message             string         `json:"message"`
	OutProperties       map[string]any `json:"outProperties"`
	CompositionID       string         `json:"compositionId"`
	StateChangeResult   string         `json:"stateChangeResult"`
}

// ElementInstance is ACM's AutomationCompositionElement, keyed
// <instance>/<element>.
type ElementInstance struct {
	ID            string    `json:"id"`
	Definition    ConceptID `json:"definition"`
	ParticipantID string    `json:"participantId"`
	DeployState   string    `json:"deployState"`
	LockState     string    `json:"lockState"`
	Message       string    `json:"message"`
	// Properties are the element's properties; the out properties its
	// participant added are merged into them (policyflow replicates one
	// object), so OutProperties is empty.
	Properties        map[string]any `json:"properties"`
	OutProperties     map[string]any `json:"outProperties"`
	InstanceID        string         `json:"instanceId"`
	CompositionID     string         `json:"compositionId"`
	Revision          int64          `json:"revision"`
	StateChangeResult string         `json:"stateChangeResult"`
}

// ParticipantInformation is one participant in the answers of the ACM
// runtime's GET /participants and GET /participants/{participantId}.
type ParticipantInformation struct {
	Participant                      ParticipantShape             `json:"participant"`
	AcNodeTemplateStateDefinitionMap map[string]NodeTemplateState `json:"acNodeTemplateStateDefinitionMap"`
	AcElementInstanceMap             map[string]ElementInstance   `json:"acElementInstanceMap"`
}

// Page is ACM's paging of a participant's element definitions and element
// instances (each sorted by key): page Page of Size entries; no paging
// when Size is 0.
type Page struct {
	Page, Size int
}

func (pg Page) keep(keys []string) []string {
	sort.Strings(keys)
	if pg.Size <= 0 {
		return keys
	}
	from := pg.Page * pg.Size
	if from >= len(keys) || from < 0 {
		return nil
	}
	return keys[from:min(from+pg.Size, len(keys))]
}

// Information returns the participants the acm.sync states describe,
// sorted by participant id, in ACM's shape.
func Information(states []*events.ReplicaState, pg Page) []ParticipantInformation {
	type parts struct {
		info  ParticipantInformation
		defs  map[string]NodeTemplateState
		elems map[string]ElementInstance
	}
	by := map[string]*parts{}
	get := func(id string) *parts {
		p, ok := by[id]
		if !ok {
			p = &parts{info: ParticipantInformation{Participant: ParticipantShape{ParticipantID: id, ParticipantState: OffLine,
				ParticipantSupportedElementTypes: map[string]SupportedElementType{}, Replicas: map[string]ReplicaInfo{}}},
				defs: map[string]NodeTemplateState{}, elems: map[string]ElementInstance{}}
			by[id] = p
		}
		return p
	}
	for _, st := range states {
		p := get(st.ParticipantID)
		switch st.Kind {
		case KindReplica:
			ps := &p.info.Participant
			ps.Replicas[st.ReplicaID] = ReplicaInfo{ReplicaID: st.ReplicaID, ParticipantState: st.State,
				LastMsg: time.UnixMilli(st.HeartbeatMs).UTC().Format(LastMsgLayout)}
			if st.State == OnLine {
				ps.ParticipantState = OnLine
			}
			for _, t := range st.SupportedElementTypes {
				c := ConceptOf(t)
				ps.ParticipantSupportedElementTypes[t] = SupportedElementType{ID: t, TypeName: c.Name, TypeVersion: c.Version}
			}
		case KindComposition:
			for id, d := range NodeTemplateStates(st) {
				p.defs[id] = d
			}
		case KindElement:
			e := ElementInstanceOf(st)
			p.elems[st.InstanceID+"/"+st.ElementID] = e
		}
	}
	ids := make([]string, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]ParticipantInformation, 0, len(ids))
	for _, id := range ids {
		p := by[id]
		p.info.AcNodeTemplateStateDefinitionMap = map[string]NodeTemplateState{}
		for _, k := range pg.keep(keysOf(p.defs)) {
			p.info.AcNodeTemplateStateDefinitionMap[k] = p.defs[k]
		}
		p.info.AcElementInstanceMap = map[string]ElementInstance{}
		for _, k := range pg.keep(keysOf(p.elems)) {
			p.info.AcElementInstanceMap[k] = p.elems[k]
		}
		out = append(out, p.info)
	}
	return out
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// stateChange is ACM's StateChangeResult of a state: TIMEOUT and FAILED
// are results in ACM, which keeps the transitional state beside them;
// acm.sync keeps only the result, so the state stays TIMEOUT or FAILED.
func stateChange(state string) string {
	switch state {
	case Timeout:
		return TimedOut
	case Failed:
		return Failure
	}
	return NoError
}

// NodeTemplateStates are the element definitions of one COMPOSITION
// state, by <composition>/<definition>: each in the composition's state.
func NodeTemplateStates(st *events.ReplicaState) map[string]NodeTemplateState {
	var def struct {
		Elements map[string]struct {
			Type string `json:"type"`
		} `json:"elements"`
	}
	_ = json.Unmarshal([]byte(st.Properties), &def)
	out := map[string]NodeTemplateState{}
	for id := range def.Elements {
		key := st.CompositionID + "/" + id
		out[key] = NodeTemplateState{NodeTemplateStateID: key, ParticipantID: st.ParticipantID, NodeTemplateID: ConceptOf(id),
			State: st.State, Message: st.Detail, OutProperties: map[string]any{}, CompositionID: st.CompositionID,
			StateChangeResult: stateChange(st.State)}
	}
	return out
}

// ElementInstanceOf is one ELEMENT state in ACM's shape: its definition
// is its element type, and it is LOCKED while deployed (ACM unlocks no
// element policyflow runs).
func ElementInstanceOf(st *events.ReplicaState) ElementInstance {
	props := map[string]any{}
	_ = json.Unmarshal([]byte(st.Properties), &props)
	lock := LockNone
	if st.State == Deployed || st.State == Updating {
		lock = Locked
	}
	return ElementInstance{ID: st.ElementID, Definition: ConceptOf(st.ElementType), ParticipantID: st.ParticipantID,
		DeployState: st.State, LockState: lock, Message: st.Detail, Properties: props, OutProperties: map[string]any{},
		InstanceID: st.InstanceID, CompositionID: st.CompositionID, Revision: st.Revision, StateChangeResult: stateChange(st.State)}
}
