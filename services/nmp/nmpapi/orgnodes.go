package nmpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp"
)

// Paging of GET /v1/orgs/{org}/nodes.
const (
	DefaultNodesLimit = 100
	MaxNodesLimit     = 1000
)

// ListOrgNodes is GET /v1/orgs/{org}/nodes: the org's nodes by node id,
// with their registration and last report, selected by software_version,
// status, pattern (name or org/name) and property=name=value (all must
// hold), a page of limit at a time from page_token.
func (s *API) ListOrgNodes(w http.ResponseWriter, r *http.Request) *web.Error {
	org, e := s.inOrg(r)
	if e != nil {
		return e
	}
	q := r.URL.Query()
	f := nmp.NodeFilter{SoftwareVersion: q.Get("software_version"), Status: q.Get("status"), Pattern: q.Get("pattern")}
	if f.Status != "" && !nmp.ValidState(f.Status) {
		return web.Errorf(http.StatusBadRequest, "status %q: want one of %s", f.Status, strings.Join(nmp.States, ", "))
	}
	if err := f.Qualify(org); err != nil {
		return web.Errorf(http.StatusBadRequest, "pattern: %v", err)
	}
	if p := q.Get("property"); p != "" {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" {
			return web.Errorf(http.StatusBadRequest, "property %q: want name=value", p)
		}
		f.Properties = append(f.Properties, [2]string{name, value})
	}
	limit := DefaultNodesLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxNodesLimit {
			return web.Errorf(http.StatusBadRequest, "limit %q: want a number from 1 to %d", v, MaxNodesLimit)
		}
		limit = n
	}
	if e := s.nmpViews(); e != nil {
		return e
	}
	page, next, err := s.nm.world.NodePage(org, f, q.Get("page_token"), limit)
	if errors.Is(err, nmp.ErrPageToken) {
		return web.Errorf(http.StatusBadRequest, "page_token: %v", err)
	}
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "%v", err)
	}
	a := api.OrgNodes{Org: org, Nodes: make([]api.OrgNode, 0, len(page)), NextPageToken: next}
	for _, ln := range page {
		n, st := ln.Node.Ev, ln.Status
		o := api.OrgNode{Node: n.Node, Pattern: n.Pattern, SoftwareVersion: n.SoftwareVersion, Status: nmp.ReportedState(st)}
		if n.Properties != "" && json.Valid([]byte(n.Properties)) {
			o.Properties = json.RawMessage(n.Properties)
		}
		if st != nil {
			at := st.ReportedAt.UTC()
			o.Policy, o.FailedVersion, o.Error, o.ReportedAt = st.Policy, st.FailedVersion, st.ErrorMessage, &at
		}
		a.Nodes = append(a.Nodes, o)
	}
	web.WriteJSON(w, http.StatusOK, a)
	return nil
}
