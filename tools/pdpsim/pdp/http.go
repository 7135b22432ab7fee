package pdp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/policyflow/policyflow/services/policy"
)

// notifyTimeout bounds one notification sent by the admin API.
const notifyTimeout = 30 * time.Second

// Handler serves the simulated PDP:
//
//	POST   /getConfig (also /pdp/api/getConfig)  {"policyName": regex, "configName", "onapName", "configAttributes"}
//	       -> 200 and a JSON array of every matching policy version, or 404 and the PDP's CONFIG_NOT_FOUND answer
//	PUT    /sim/policies                 one policy_body or an array of them -> {"loaded": [...]}
//	DELETE /sim/policies/{policyName}    a full policyName (one version) or a policy_id (all versions) -> {"removed": [...]}
//	GET    /sim/policies                 every stored version
//	GET    /healthz
//
// With a notify URL, PUT and DELETE send the matching PDP notification
// before answering, and answer 502 (the change is kept) when it fails.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /getConfig", s.handleGetConfig)
	mux.HandleFunc("POST /pdp/api/getConfig", s.handleGetConfig)
	mux.HandleFunc("PUT /sim/policies", s.handlePut)
	mux.HandleFunc("DELETE /sim/policies/{policyName...}", s.handleDelete)
	mux.HandleFunc("GET /sim/policies", s.handleList)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return mux
}

// getConfigRequest is the body of /getConfig; requestID and other PDP
// parameters are accepted and ignored.
type getConfigRequest struct {
	PolicyName       string         `json:"policyName"`
	ConfigName       string         `json:"configName"`
	OnapName         string         `json:"onapName"`
	ConfigAttributes map[string]any `json:"configAttributes"`
	Unique           bool           `json:"unique"`
}

// pdpError is one element of the PDP's error answer.
func pdpError(message string) []map[string]any {
	return []map[string]any{{
		policy.FieldConfigMessage:      message,
		policy.FieldConfigStatus:       policy.ConfigNotFound,
		policy.FieldPolicyName:         nil,
		policy.FieldPolicyVersion:      nil,
		policy.FieldType:               nil,
		policy.FieldConfig:             nil,
		policy.FieldMatchingConditions: nil,
		policy.FieldResponseAttributes: map[string]any{},
		policy.FieldProperty:           nil,
	}}
}

func (s *Server) handleGetConfig(w http.ResponseWriter, r *http.Request) {
	var req getConfigRequest
	if err := decodeJSON(r, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, pdpError("PE300 - Data Issue: "+err.Error()))
		return
	}
	f := policy.Filter{
		PolicyName:       req.PolicyName,
		ConfigName:       req.ConfigName,
		OnapName:         req.OnapName,
		ConfigAttributes: req.ConfigAttributes,
		Unique:           req.Unique,
	}
	bodies, err := s.GetConfig(f)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, pdpError("PE300 - Data Issue: "+err.Error()))
		return
	}
	s.log.Debug().Str("policyName", req.PolicyName).Int("versions", len(bodies)).Msg("getConfig")
	if len(bodies) == 0 {
		writeJSON(w, http.StatusNotFound, pdpError(NotFoundMessage))
		return
	}
	writeJSON(w, http.StatusOK, bodies)
}

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("read request: %w", err))
		return
	}
	var bodies []policy.Body
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '[' {
		bodies, err = policy.DecodeBodies(data)
	} else {
		var b policy.Body
		b, err = policy.DecodeBody(data)
		bodies = []policy.Body{b}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	// Check every body before storing any, so a bad one changes nothing.
	prepared := make([]policy.Body, 0, len(bodies))
	for _, b := range bodies {
		pb, err := prepare(b)
		if err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		prepared = append(prepared, pb)
	}
	s.mu.Lock()
	loaded := make([]policy.LoadedPolicy, 0, len(prepared))
	for _, b := range prepared {
		loaded = append(loaded, s.store(b))
	}
	err = s.saveLocked()
	s.mu.Unlock()
	if err != nil {
		// Served from memory until the simulator stops; say so.
		s.log.Error().Err(err).Msg("the loaded policies are kept in memory only")
	}
	for _, l := range loaded {
		s.log.Info().Str("policyName", l.PolicyName).Str("versionNo", l.VersionNo).Str("updateType", l.UpdateType).Msg("policy loaded")
	}
	s.answerChange(r.Context(), w, policy.Notification{LoadedPolicies: loaded, NotificationType: policy.NotificationUpdate},
		map[string]any{"loaded": loaded})
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("policyName")
	removed := s.Remove(name)
	if len(removed) == 0 {
		writeError(w, http.StatusNotFound, fmt.Errorf("remove policy %q: no such policyName or policy_id", name))
		return
	}
	for _, rp := range removed {
		s.log.Info().Str("policyName", rp.PolicyName).Str("versionNo", rp.VersionNo).Msg("policy removed")
	}
	s.answerChange(r.Context(), w, policy.Notification{RemovedPolicies: removed, NotificationType: policy.NotificationRemove},
		map[string]any{"removed": removed})
}

// answerChange sends the notification when a notify URL is set and writes
// the admin answer.
func (s *Server) answerChange(ctx context.Context, w http.ResponseWriter, n policy.Notification, answer map[string]any) {
	if s.notifyURL == "" {
		writeJSON(w, http.StatusOK, answer)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	if err := notify(ctx, s.client, s.notifyURL, n); err != nil {
		s.log.Error().Err(err).Msg("send PDP notification")
		answer["error"] = fmt.Sprintf("the change is kept, but the notification failed: %v", err)
		writeJSON(w, http.StatusBadGateway, answer)
		return
	}
	answer["notified"] = s.notifyURL
	writeJSON(w, http.StatusOK, answer)
}

func (s *Server) handleList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Policies())
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode request body: %w", err)
	}
	return nil
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data, _ = json.Marshal(map[string]string{"error": "encode answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
