package nmpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/topology"
)

// MaxDirectiveWait bounds a directive long poll; a wait is also kept 10s
// under the server's write timeout, so the answer is never cut.
const MaxDirectiveWait = 5 * time.Minute

// maxWait is the longest wait this server grants.
func (s *API) maxWait() time.Duration {
	return max(min(MaxDirectiveWait, s.opts.WriteTimeout-10*time.Second), time.Second)
}

const nodeExample = `{"properties": [{"name": "arch", "value": "amd64"}], "constraints": [], "softwareVersion": "1.0.0"}`

// nodeKey is the org and node of a node's route, once the caller may act
// for that node (mayActForNode); an org token may not.
func (s *API) nodeKey(r *http.Request) (string, string, *web.Error) {
	return s.nodeKeyAs(r, false)
}

// nodeKeyAs is nodeKey; register says the request registers the node,
// which an org token may ask.
func (s *API) nodeKeyAs(r *http.Request, register bool) (string, string, *web.Error) {
	org, e := s.inOrg(r)
	if e != nil {
		return "", "", e
	}
	node := r.PathValue("node")
	if err := nmp.CheckName("node id", node); err != nil {
		return "", "", web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := mayActForNode(web.PrincipalOf(r.Context()), r, org, node, register); e != nil {
		return "", "", e
	}
	return org, node, nil
}

// putNode registers a node, or changes its registration. A node that has
// no own token yet is issued one, answered once as "token"; a node that
// has one keeps it, and an org token may not register it again (409):
// otherwise whoever holds the org token could take over any node.
func (s *API) PutNode(w http.ResponseWriter, r *http.Request) *web.Error {
	org, node, e := s.nodeKeyAs(r, true)
	if e != nil {
		return e
	}
	var req api.NodeRequest
	if e := web.DecodeJSON(w, r, nmp.MaxBodyBytes, &req, true, nodeExample); e != nil {
		return e
	}
	props, err := json.Marshal(req.Properties)
	if err != nil || req.Properties == nil {
		props = []byte("[]")
	}
	ev := &events.AgentNode{Org: org, Node: node, Pattern: req.Pattern, Properties: string(props), Constraints: req.Constraints,
		SoftwareVersion: req.SoftwareVersion, ConfigVersion: req.ConfigVersion, CertVersion: req.CertVersion, UpdatedAt: time.Now().UTC()}
	if ev.Constraints == nil {
		ev.Constraints = []string{}
	}
	if req.Pattern != "" && (len(req.Properties) > 0 || len(req.Constraints) > 0) {
		return web.Errorf(http.StatusBadRequest, "node %s/%s: a node uses a pattern or a node policy (properties, constraints), not both", org, node)
	}
	if _, err := nmp.CompileNode(ev); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.AgentNodes); e != nil {
		return e
	}
	defer s.Lock("node " + keyOf(org, node))()
	answer := api.NodeRegistered{Org: org, Node: node, Registered: true}
	p := web.PrincipalOf(r.Context())
	if old := s.nm.creds.node(keyOf(org, node)); old != nil && old.TokenSHA256 != "" {
		if p.Role == auth.RoleAgent && p.Node == "" {
			return web.Errorf(http.StatusConflict, "node %s/%s is registered and has its own token; token %s (an org token) may register only new nodes: the node uses its own token, "+
				"or an operator rotates it (policyctl node token rotate %s/%s) or revokes it (policyctl node token revoke %s/%s) so that it may be registered again",
				org, node, p.Name, org, node, org, node)
		}
		ev.TokenSHA256 = old.TokenSHA256
	} else {
		token, sum, e := newNodeToken()
		if e != nil {
			return e
		}
		ev.TokenSHA256, answer.Token = sum, token
	}
	ev.UpdatedAt = ev.UpdatedAt.Truncate(time.Millisecond)
	if e := s.writeNode(r, ev); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, answer)
	return nil
}

func (s *API) DeleteNode(w http.ResponseWriter, r *http.Request) *web.Error {
	org, node, e := s.nodeKey(r)
	if e != nil {
		return e
	}
	return s.produceAndAnswer(w, r, topology.AgentNodes, keyOf(org, node), nil, map[string]any{"org": org, "node": node, "removed": true})
}

func (s *API) produceAndAnswer(w http.ResponseWriter, r *http.Request, topic, key string, ev events.Event, answer any) *web.Error {
	if _, e := s.ProduceRecord(r.Context(), topic, key, ev); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, answer)
	return nil
}

// produceRecord writes ev (nil: a tombstone) under key to topic, and
// returns the record written.
func (s *API) produceRecord(r *http.Request, topic, key string, ev events.Event) (*kgo.Record, *web.Error) {
	rec := &kgo.Record{Topic: s.Env.Kafka.Topic(topic), Key: []byte(key)}
	if ev != nil {
		val, err := s.Env.Codec.Encode(ev)
		if err != nil {
			return nil, web.Errorf(http.StatusInternalServerError, "encode %s: %v", key, err)
		}
		rec.Value = val
	}
	if err := s.Produce(r.Context(), rec); err != nil {
		return nil, web.Errorf(http.StatusServiceUnavailable, "write %s to %s: %v; nothing was written, retry", key, topic, err)
	}
	return rec, nil
}

// getDirective answers a node's directive. With ?index=N (or
// If-None-Match: "N") it waits, up to ?wait= (default 60s, at most 5m),
// until the directive's index differs from N, then answers it, or 304
// when nothing changed.
func (s *API) GetDirective(w http.ResponseWriter, r *http.Request) *web.Error {
	org, node, e := s.nodeKey(r)
	if e != nil {
		return e
	}
	if e := s.Views.Need(topology.AgentDirectives); e != nil {
		return e
	}
	q := r.URL.Query()
	var after uint64
	var wait time.Duration
	idx := q.Get("index")
	if inm := strings.Trim(r.Header.Get("If-None-Match"), `"`); idx == "" && inm != "" {
		idx = inm
	}
	if idx != "" {
		n, err := strconv.ParseUint(idx, 10, 64)
		if err != nil {
			return web.Errorf(http.StatusBadRequest, "index %q: want the index of the directive you have", idx)
		}
		after, wait = n, min(60*time.Second, s.maxWait())
		if ws := q.Get("wait"); ws != "" {
			d, err := time.ParseDuration(ws)
			if err != nil || d < 0 || d > MaxDirectiveWait {
				return web.Errorf(http.StatusBadRequest, "wait %q: want a duration up to %s (30s)", ws, MaxDirectiveWait)
			}
			wait = min(d, s.maxWait())
		}
	}
	d, index := s.nm.directive(r.Context(), keyOf(org, node), after, wait)
	if d == nil {
		if idx != "" && index == after {
			w.Header().Set("ETag", `"0"`)
			w.WriteHeader(http.StatusNotModified)
			return nil
		}
		return web.Errorf(http.StatusNotFound, "node %s/%s has no directive yet (register it with PUT /v1/orgs/%s/nodes/%s)", org, node, org, node)
	}
	w.Header().Set("ETag", `"`+strconv.FormatUint(index, 10)+`"`)
	if idx != "" && index == after {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	web.WriteJSON(w, http.StatusOK, api.DirectiveAnswer{Index: index, DirectiveID: d.DirectiveID, Policy: d.Policy, Action: d.Action, TargetVersion: d.TargetVersion,
		PackageSHA256: d.PackageSHA256, AllowDowngrade: d.AllowDowngrade, FromVersions: d.FromVersions, StartAt: d.StartAt.UTC(), Reason: d.Reason, Conflicts: d.Conflicts})
	return nil
}

const statusExample = `{"directiveId": "…", "policy": "org/nmp", "status": "successful", "softwareVersion": "1.1.0", "agentVersion": {"package": {"version": "1.1.0"}, "failed": "", "upgradeStart": "2026-01-02T15:04:05Z"}}`

func (s *API) PutNodeStatus(w http.ResponseWriter, r *http.Request) *web.Error {
	org, node, e := s.nodeKey(r)
	if e != nil {
		return e
	}
	var req api.StatusRequest
	if e := web.DecodeJSON(w, r, nmp.MaxBodyBytes, &req, true, statusExample); e != nil {
		return e
	}
	if !nmp.ValidState(req.Status) {
		return web.Errorf(http.StatusBadRequest, "status %q: want one of %s", req.Status, strings.Join(nmp.States, ", "))
	}
	for _, v := range []struct{ what, v string }{{"softwareVersion", req.SoftwareVersion}, {"previousVersion", req.PreviousVersion}, {"agentVersion.failed", req.AgentVersion.Failed}} {
		if v.v != "" {
			if _, err := nmp.ParseSemver(v.v); err != nil {
				return web.Errorf(http.StatusBadRequest, "%s: %v", v.what, err)
			}
		}
	}
	ev := &events.AgentStatus{Org: org, Node: node, DirectiveID: req.DirectiveID, Policy: req.Policy, Status: req.Status,
		SoftwareVersion: req.SoftwareVersion, FailedVersion: req.AgentVersion.Failed, UpgradeStart: req.AgentVersion.UpgradeStart,
		UpgradeEnd: req.AgentVersion.UpgradeEnd, ErrorMessage: req.Error, ReportedAt: time.Now().UTC(), Package: string(req.AgentVersion.Package),
		PreviousVersion: req.PreviousVersion}
	return s.produceAndAnswer(w, r, topology.AgentStatus, keyOf(org, node), ev, api.NodeStatusAccepted{Org: org, Node: node, Status: req.Status})
}

func (s *API) GetNodeStatus(w http.ResponseWriter, r *http.Request) *web.Error {
	org, node, e := s.nodeKey(r)
	if e != nil {
		return e
	}
	if e := s.nmpViews(); e != nil {
		return e
	}
	st := s.nm.world.Status(keyOf(org, node))
	if st == nil {
		return web.Errorf(http.StatusNotFound, "node %s/%s has reported no status", org, node)
	}
	a := api.NodeStatusAnswer{Org: org, Node: node, Policy: st.Policy, Status: st.Status, SoftwareVersion: st.SoftwareVersion, PreviousVersion: st.PreviousVersion,
		Error: st.ErrorMessage, ReportedAt: st.ReportedAt,
		AgentVersion: api.AgentVersion{Failed: st.FailedVersion, UpgradeStart: st.UpgradeStart, UpgradeEnd: st.UpgradeEnd}}
	if st.Package != "" && json.Valid([]byte(st.Package)) {
		a.AgentVersion.Package = json.RawMessage(st.Package)
	}
	web.WriteJSON(w, http.StatusOK, a)
	return nil
}

// mayActForNode says whether the caller may act for node org/node (the
// org was checked by inOrg). A node's own token acts for its node only;
// an org token (role agent, from the tokens file) only registers nodes
// (register), which issues each node its own token; other roles that
// reached the handler may.
func mayActForNode(p auth.Principal, r *http.Request, org, node string, register bool) *web.Error {
	switch {
	case p.Role != auth.RoleAgent:
		return nil
	case p.Node != "" && (p.Tenant != org || p.Node != node):
		return web.Errorf(http.StatusForbidden, "token of node %s/%s acts for its own node only, not for %s/%s", p.Tenant, p.Node, org, node)
	case p.Node == "" && !register:
		return web.Errorf(http.StatusForbidden, "token %s is an org token: it only registers nodes (PUT /v1/orgs/%s/nodes/{node}), which issues each node its own token; %s %s takes node %s/%s's own token",
			p.Name, org, r.Method, r.URL.Path, org, node)
	}
	return nil
}
