package acmapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/topology"
)

// of returns the states of one participant (all when id is empty).
func (s *API) of(id string) []*events.ReplicaState {
	var out []*events.ReplicaState
	for _, st := range s.acm.Sorted() {
		if id == "" || st.ParticipantID == id {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].ParticipantID+"\x00"+out[i].InstanceID+"\x00"+out[i].ElementID+"\x00"+out[i].ReplicaID+"\x00"+out[i].CompositionID <
			out[j].ParticipantID+"\x00"+out[j].InstanceID+"\x00"+out[j].ElementID+"\x00"+out[j].ReplicaID+"\x00"+out[j].CompositionID
	})
	return out
}

// Replica is one replica in the answers of /v2/participants.
type Replica struct {
	ReplicaID             string    `json:"replicaId"`
	State                 string    `json:"participantState"`
	LastHeartbeat         time.Time `json:"lastMsg"`
	SupportedElementTypes []string  `json:"supportedElementTypes"`
	Detail                string    `json:"detail,omitempty"`
}

// ParticipantList is the answer of GET /v2/participants.
type ParticipantList struct {
	Participants []Participant `json:"participants"`
}

// Participant is one participant in the answers of /v2/participants.
type Participant struct {
	ParticipantID string `json:"participantId"`
	// State is ON_LINE when a replica is.
	State                 string    `json:"participantState"`
	SupportedElementTypes []string  `json:"supportedElementTypes"`
	Replicas              []Replica `json:"replicas"`
	Compositions          int       `json:"compositions"`
	Elements              int       `json:"elementInstances"`
}

func participantsOf(states []*events.ReplicaState) []Participant {
	byID := map[string]*Participant{}
	var order []string
	get := func(id string) *Participant {
		p, ok := byID[id]
		if !ok {
			p = &Participant{ParticipantID: id, State: acm.OffLine, Replicas: []Replica{}, SupportedElementTypes: []string{}}
			byID[id] = p
			order = append(order, id)
		}
		return p
	}
	for _, st := range states {
		p := get(st.ParticipantID)
		switch st.Kind {
		case acm.KindReplica:
			p.Replicas = append(p.Replicas, Replica{ReplicaID: st.ReplicaID, State: st.State, LastHeartbeat: time.UnixMilli(st.HeartbeatMs).UTC(),
				SupportedElementTypes: append([]string{}, st.SupportedElementTypes...), Detail: st.Detail})
			if st.State == acm.OnLine {
				p.State = acm.OnLine
			}
			for _, t := range st.SupportedElementTypes {
				if !contains(p.SupportedElementTypes, t) {
					p.SupportedElementTypes = append(p.SupportedElementTypes, t)
				}
			}
		case acm.KindComposition:
			p.Compositions++
		case acm.KindElement:
			p.Elements++
		}
	}
	sort.Strings(order)
	out := make([]Participant, 0, len(order))
	for _, id := range order {
		sort.Strings(byID[id].SupportedElementTypes)
		out = append(out, *byID[id])
	}
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (s *API) ListParticipants(w http.ResponseWriter, _ *http.Request) *web.Error {
	if e := s.Views.Need(topology.ACMSync); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, ParticipantList{Participants: participantsOf(s.of(""))})
	return nil
}

// participantOr404 returns the participant, or 404 when acm.sync holds
// nothing of it.
func (s *API) participantOr404(id string) (Participant, *web.Error) {
	if err := check.ID("participant_id", id); err != nil {
		return Participant{}, web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.ACMSync); e != nil {
		return Participant{}, e
	}
	ps := participantsOf(s.of(id))
	if len(ps) == 0 {
		return Participant{}, web.Errorf(http.StatusNotFound, "participant %s is unknown: none of its replicas has registered (GET /v2/participants lists the known ones)", id)
	}
	return ps[0], nil
}

func (s *API) GetParticipant(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.participantOr404(r.PathValue("participant_id"))
	if e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, p)
	return nil
}

// SyncAnswer is the answer of PUT /v2/participants[/{id}]/sync.
type SyncAnswer struct {
	ParticipantID string `json:"participantId,omitempty"`
	RequestID     string `json:"requestId"`
	// Partitions are the acm.runtime partitions a resync of every
	// participant was written to (one each, for the member owning it).
	Partitions int `json:"partitions,omitempty"`
}

// syncAll serves PUT /v2/participants/sync; a PUT on a participant is not
// served.
func (s *API) SyncAll(w http.ResponseWriter, r *http.Request) *web.Error {
	if r.PathValue("participant_id") != "sync" {
		w.Header().Set("Allow", http.MethodGet)
		return web.Errorf(http.StatusMethodNotAllowed, "PUT %s is not served; use GET, or PUT /v2/participants/sync to resync every participant", r.URL.Path)
	}
	r.SetPathValue("participant_id", "")
	return s.SyncParticipants(w, r)
}

// syncParticipants asks replica-sync to write the state of one
// participant (or of every participant) to acm.sync again, so every
// replica applies it again.
func (s *API) SyncParticipants(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("participant_id")
	var none struct{}
	if e := web.DecodeOptionalJSON(w, r, web.MaxRequestBytes, &none, "{}, or no body"); e != nil {
		return e
	}
	if id != "" {
		if _, e := s.participantOr404(id); e != nil {
			return e
		}
	}
	m := &events.ParticipantMessage{MessageID: web.NewID(), ParticipantID: id, ReplicaID: "north-api", Kind: acm.MsgSync,
		Properties: "{}", SentAt: time.Now().UTC().Truncate(time.Millisecond)}
	if id != "" {
		if e := s.ProduceEvent(r.Context(), topology.ACMRuntime, id, m); e != nil {
			return e
		}
		web.WriteJSON(w, http.StatusAccepted, SyncAnswer{ParticipantID: id, RequestID: m.MessageID})
		return nil
	}
	// Every participant: replica-sync's member that owns a partition of
	// acm.runtime rewrites the participants keyed to it, so the request
	// goes to every partition.
	n, e := s.ProduceEveryPartition(r.Context(), topology.ACMRuntime, "", m)
	if e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusAccepted, SyncAnswer{RequestID: m.MessageID, Partitions: int(n)})
	return nil
}

const operationExample = `{"kind": "DEPLOY", "compositionId": "c1", "instanceId": "i1", "elements": [{"id": "e1", "type": "org.policyflow.ConsulKV", "properties": {"key": "value"}}], "timeoutMs": 30000}`

// maxTimeoutMs bounds an operation's timeout (one day).
const maxTimeoutMs = int64(24 * time.Hour / time.Millisecond)

func (s *API) PostOperation(w http.ResponseWriter, r *http.Request) *web.Error {
	pid := r.PathValue("participant_id")
	var req api.OperationRequest
	if e := web.DecodeJSON(w, r, web.MaxRequestBytes, &req, true, operationExample); e != nil {
		return e
	}
	p, e := s.participantOr404(pid)
	if e != nil {
		return e
	}
	req.Kind = strings.ToUpper(req.Kind)
	instanceOp := true
	switch req.Kind {
	case acm.OpPrime, acm.OpDeprime:
		instanceOp = false
	case acm.OpDeploy, acm.OpUpdate, acm.OpUndeploy, acm.OpDelete:
	default:
		return web.Errorf(http.StatusBadRequest, "kind %q: want PRIME, DEPRIME, DEPLOY, UPDATE, UNDEPLOY or DELETE; e.g. %s", req.Kind, operationExample)
	}
	if instanceOp && req.CompositionID == "" && req.InstanceID != "" {
		// The instance says which composition it is of: a client may
		// leave the id out, as ONAP's runtime takes it from the
		// instance.
		cid, ok := s.compositionOf(pid, req.InstanceID)
		if !ok {
			return web.Errorf(http.StatusBadRequest, "compositionId is missing, and participant %s holds no instance %s to take it from: give compositionId", pid, req.InstanceID)
		}
		req.CompositionID = cid
	}
	if err := check.ID("compositionId", req.CompositionID); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if instanceOp {
		if err := check.ID("instanceId", req.InstanceID); err != nil {
			return web.Errorf(http.StatusBadRequest, "%v (a %s is about an instance)", err, req.Kind)
		}
	} else if req.InstanceID != "" {
		return web.Errorf(http.StatusBadRequest, "instanceId %q: a %s is about a composition definition, not an instance; leave instanceId out", req.InstanceID, req.Kind)
	}
	if req.TimeoutMs < 0 || req.TimeoutMs > maxTimeoutMs {
		return web.Errorf(http.StatusBadRequest, "timeoutMs %d: want 0 (the participant's default) to %d", req.TimeoutMs, maxTimeoutMs)
	}
	held := s.held(pid, req)
	if len(req.Elements) == 0 {
		switch req.Kind {
		case acm.OpDeprime, acm.OpUndeploy, acm.OpDelete:
			req.Elements = held.elements
		}
	}
	if len(req.Elements) == 0 {
		return web.Errorf(http.StatusBadRequest, "a %s needs elements, and participant %s holds none for it; e.g. %s", req.Kind, pid, operationExample)
	}
	op := &events.ParticipantOperation{
		MessageID: web.NewID(), ParticipantID: pid, Kind: req.Kind, CompositionID: &req.CompositionID,
		Properties: "{}", TimeoutMs: req.TimeoutMs, SentAt: time.Now().UTC().Truncate(time.Millisecond),
		Revision: max(time.Now().UnixMilli(), held.revision+1),
	}
	if instanceOp {
		op.InstanceID = &req.InstanceID
	}
	seen := map[string]bool{}
	for i, el := range req.Elements {
		if err := check.ID(fmt.Sprintf("elements[%d].id", i), el.ID); err != nil {
			return web.Errorf(http.StatusBadRequest, "%v", err)
		}
		if seen[el.ID] {
			return web.Errorf(http.StatusBadRequest, "elements[%d].id %q is given twice", i, el.ID)
		}
		seen[el.ID] = true
		if !contains(p.SupportedElementTypes, el.Type) {
			return web.Errorf(http.StatusBadRequest, "elements[%d] (%s) has type %q, which no replica of participant %s supports (it supports %v)", i, el.ID, el.Type, pid, p.SupportedElementTypes)
		}
		props := "{}"
		if el.Properties != nil {
			b, err := canonicalJSON(el.Properties)
			if err != nil {
				return web.Errorf(http.StatusBadRequest, "elements[%d].properties: %v", i, err)
			}
			props = string(b)
		}
		op.ElementIDs = append(op.ElementIDs, el.ID)
		op.Elements = append(op.Elements, events.OperationElement{ElementID: el.ID, ElementType: el.Type, Properties: props})
	}
	if p.State != acm.OnLine {
		return web.Errorf(http.StatusConflict, "participant %s has no replica ON_LINE; the operation would wait for one (start a replica, then retry)", pid)
	}
	if e := s.ProduceEvent(r.Context(), topology.ACMParticipant, acm.OperationKey(pid, req.CompositionID, req.InstanceID), op); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusAccepted, api.OperationAnswer{OperationID: op.MessageID, Revision: op.Revision})
	return nil
}

// compositionOf is the composition definition an instance the
// participant's replicas hold is of.
func (s *API) compositionOf(pid, instanceID string) (string, bool) {
	for _, st := range s.of(pid) {
		if st.Kind == acm.KindElement && st.InstanceID == instanceID && st.CompositionID != "" {
			return st.CompositionID, true
		}
	}
	return "", false
}

// heldState is what the replicas hold of an operation's subject: its
// elements and the highest revision.
type heldState struct {
	elements []api.OperationElement
	revision int64
}

func (s *API) held(pid string, req api.OperationRequest) heldState {
	var h heldState
	for _, st := range s.of(pid) {
		switch {
		case req.InstanceID != "" && st.Kind == acm.KindElement && st.InstanceID == req.InstanceID:
			h.elements = append(h.elements, api.OperationElement{ID: st.ElementID, Type: st.ElementType})
		case req.InstanceID == "" && st.Kind == acm.KindComposition && st.CompositionID == req.CompositionID:
			if defs, err := definitionElements(st.Properties); err == nil {
				h.elements = defs
			}
		default:
			continue
		}
		h.revision = max(h.revision, st.Revision)
	}
	return h
}

// StateAnswer is one element or composition in the answers of the GET
// routes on compositions and instances.
type StateAnswer struct {
	ElementID   string         `json:"elementId,omitempty"`
	ElementType string         `json:"elementType,omitempty"`
	State       string         `json:"state"`
	Properties  map[string]any `json:"properties"`
	Revision    int64          `json:"revision"`
	OperationID string         `json:"operationId,omitempty"`
	ReplicaID   string         `json:"replicaId"`
	Detail      string         `json:"detail,omitempty"`
	UpdatedAt   time.Time      `json:"updatedAt"`
}

func stateAnswer(st *events.ReplicaState) StateAnswer {
	props := map[string]any{}
	_ = decodeObject(st.Properties, &props)
	return StateAnswer{ElementID: st.ElementID, ElementType: st.ElementType, State: st.State, Properties: props,
		Revision: st.Revision, OperationID: st.OperationID, ReplicaID: st.ReplicaID, Detail: st.Detail, UpdatedAt: st.UpdatedAt}
}

// InstanceAnswer is the answer of GET /v2/participants/{id}/instances/{iid}.
type InstanceAnswer struct {
	ParticipantID string        `json:"participantId"`
	InstanceID    string        `json:"instanceId"`
	CompositionID string        `json:"compositionId"`
	Elements      []StateAnswer `json:"elements"`
}

func (s *API) GetInstance(w http.ResponseWriter, r *http.Request) *web.Error {
	pid, iid := r.PathValue("participant_id"), r.PathValue("instance_id")
	if _, e := s.participantOr404(pid); e != nil {
		return e
	}
	a := InstanceAnswer{ParticipantID: pid, InstanceID: iid, Elements: []StateAnswer{}}
	for _, st := range s.of(pid) {
		if st.Kind == acm.KindElement && st.InstanceID == iid {
			a.CompositionID = st.CompositionID
			a.Elements = append(a.Elements, stateAnswer(st))
		}
	}
	if len(a.Elements) == 0 {
		return web.Errorf(http.StatusNotFound, "participant %s holds no element of instance %s", pid, iid)
	}
	web.WriteJSON(w, http.StatusOK, a)
	return nil
}

func (s *API) GetComposition(w http.ResponseWriter, r *http.Request) *web.Error {
	pid, cid := r.PathValue("participant_id"), r.PathValue("composition_id")
	if _, e := s.participantOr404(pid); e != nil {
		return e
	}
	for _, st := range s.of(pid) {
		if st.Kind == acm.KindComposition && st.CompositionID == cid {
			web.WriteJSON(w, http.StatusOK, stateAnswer(st))
			return nil
		}
	}
	return web.Errorf(http.StatusNotFound, "participant %s holds no composition %s", pid, cid)
}

// canonicalJSON encodes v as compact JSON.
func canonicalJSON(v any) ([]byte, error) {
	return json.Marshal(v)
}

// decodeObject decodes a JSON object.
func decodeObject(s string, v *map[string]any) error {
	return json.Unmarshal([]byte(s), v)
}

// definitionElements reads the element definitions of a primed
// composition's properties: {"elements": {id: {"type": ..., "properties": ...}}}.
func definitionElements(props string) ([]api.OperationElement, error) {
	var def struct {
		Elements map[string]struct {
			Type string `json:"type"`
		} `json:"elements"`
	}
	if err := json.Unmarshal([]byte(props), &def); err != nil {
		return nil, err
	}
	out := make([]api.OperationElement, 0, len(def.Elements))
	for id, e := range def.Elements {
		out = append(out, api.OperationElement{ID: id, Type: e.Type})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
