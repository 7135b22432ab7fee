package acmapi

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/topology"
)

// The ACM runtime's participant monitoring API (ONAP policy-clamp), at its
// own path and in its own shapes, so a client of the ACM runtime points at
// the North API and changes nothing else: participants (list, one), the
// status report requests and the resyncs. The /v2/participants routes
// keep policyflow's shape, which policyctl and the routes on compositions,
// instances and operations build on.

// RuntimeBase is the ACM runtime's REST base path.
const RuntimeBase = "/onap/policy/clamp/acm/v2"

// RequestIDHeader is ACM's request id header, taken as the id of what
// a request writes and given back in the answer.
const RequestIDHeader = "X-onap-RequestId"

// acmPage reads ACM's page and size query parameters (both or neither)
// and refuses any other.
func acmPage(q url.Values) (acm.Page, *web.Error) {
	var pg acm.Page
	for k := range q {
		switch k {
		case "page", "size":
		case "name", "version":
			return pg, web.Errorf(http.StatusBadRequest, "query parameter %s: the ACM runtime filters no participant by it either; leave it out (page and size are served)", k)
		default:
			return pg, web.Errorf(http.StatusBadRequest, "unknown query parameter %q: the participants are paged with page and size, e.g. ?page=0&size=100", k)
		}
	}
	ps, ss := q.Get("page"), q.Get("size")
	if ps == "" && ss == "" {
		return pg, nil
	}
	if ps == "" || ss == "" {
		return pg, web.Errorf(http.StatusBadRequest, "page %q and size %q: give both (page from 0, size from 1), or neither for everything", ps, ss)
	}
	p, perr := strconv.Atoi(ps)
	n, serr := strconv.Atoi(ss)
	if perr != nil || serr != nil || p < 0 || n < 1 {
		return pg, web.Errorf(http.StatusBadRequest, "page %q and size %q: want whole numbers, page from 0 and size from 1, e.g. ?page=0&size=100", ps, ss)
	}
	return acm.Page{Page: p, Size: n}, nil
}

// acmRequestID is the caller's X-onap-RequestId, or a new id; it is
// given back in the answer's header.
func acmRequestID(w http.ResponseWriter, r *http.Request) (string, *web.Error) {
	id := r.Header.Get(RequestIDHeader)
	if id == "" {
		id = web.NewID()
	} else if err := check.ID(RequestIDHeader, id); err != nil {
		return "", web.Errorf(http.StatusBadRequest, "%v; give a UUID, or leave the header out", err)
	}
	w.Header().Set(RequestIDHeader, id)
	return id, nil
}

func (s *API) ACMListParticipants(w http.ResponseWriter, r *http.Request) *web.Error {
	pg, e := acmPage(r.URL.Query())
	if e != nil {
		return e
	}
	if _, e := acmRequestID(w, r); e != nil {
		return e
	}
	if e := s.Views.Need(topology.ACMSync); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, acm.Information(s.of(""), pg))
	return nil
}

func (s *API) ACMGetParticipant(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("participantId")
	pg, e := acmPage(r.URL.Query())
	if e != nil {
		return e
	}
	if _, e := acmRequestID(w, r); e != nil {
		return e
	}
	if _, e := s.participantOr404(id); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, acm.Information(s.of(id), pg)[0])
	return nil
}

// StatusReportAnswer is the answer of the ACM runtime's PUT /participants
// and PUT /participants/{participantId} (ACM answers 202 with no body;
// its clients read none).
type StatusReportAnswer struct {
	ParticipantID string `json:"participantId,omitempty"`
	RequestID     string `json:"requestId"`
	// Partitions are the acm.participant partitions the request was
	// written to: the replicas of a participant share its partitions, so
	// each replica owning one is handed it and answers once.
	Partitions int `json:"partitions"`
}

func (s *API) ACMOrderAllReports(w http.ResponseWriter, r *http.Request) *web.Error {
	return s.orderReport(w, r, "")
}

// acmOrderReportOrSyncAll serves PUT .../participants/sync (a resync of
// every participant) and PUT .../participants/{participantId} (a status
// report of one).
func (s *API) ACMOrderReportOrSyncAll(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("participantId")
	if id == "sync" {
		r.SetPathValue("participant_id", "sync")
		return s.SyncAll(w, r)
	}
	return s.orderReport(w, r, id)
}

func (s *API) ACMSyncParticipant(w http.ResponseWriter, r *http.Request) *web.Error {
	r.SetPathValue("participant_id", r.PathValue("participantId"))
	return s.SyncParticipants(w, r)
}

// orderReport asks every replica of participant id (of every participant
// when id is empty) to report its status now: a STATUS request on every
// partition of acm.participant, which each replica answers with a
// heartbeat; GET .../participants then shows each replica's lastMsg.
func (s *API) orderReport(w http.ResponseWriter, r *http.Request, id string) *web.Error {
	var none struct{}
	if e := web.DecodeOptionalJSON(w, r, web.MaxRequestBytes, &none, "{}, or no body"); e != nil {
		return e
	}
	rid, e := acmRequestID(w, r)
	if e != nil {
		return e
	}
	if id != "" {
		if _, e := s.participantOr404(id); e != nil {
			return e
		}
	}
	op := &events.ParticipantOperation{MessageID: rid, ParticipantID: id, Kind: acm.OpStatus, Properties: "{}",
		SentAt: time.Now().UTC().Truncate(time.Millisecond)}
	n, e := s.ProduceEveryPartition(r.Context(), topology.ACMParticipant, "", op)
	if e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusAccepted, StatusReportAnswer{ParticipantID: id, RequestID: rid, Partitions: int(n)})
	return nil
}
