package northapi

import (
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
)

// route is one endpoint of the API and who may call it.
type route struct {
	method, path string
	h            handlerFunc
	access       access
}

// routeTable is every route of the API with the roles that may call it,
// in one place. Only /healthcheck and the status page /ui/ (which holds
// no data; its script reads /v1/status with a token) are served without
// a token. Tenants are
// scoped further in the handlers: to components whose tenant is theirs
// and to those components' folders, to their deployments, and to the
// application policies assigned to them or to every tenant; PDP policies
// to global ones and their tenant's (policy.MayHold).
func (s *Server) routeTable() []route {
	return append([]route{
		{http.MethodPut, "/v1/components/{component_id}", s.putComponent, ownComponents},
		{http.MethodDelete, "/v1/components/{component_id}", s.deleteComponent, ownComponents},
		{http.MethodGet, "/v1/components/{component_id}/status", s.componentStatus, readers},
		{http.MethodPost, "/v1/components/{component_id}/renotify", s.renotify, operators},
		{http.MethodPost, "/v1/pdp/notifications", s.pdpNotifications, operators},
		{http.MethodPost, "/v1/policies", s.pushPolicies, operators},
		{http.MethodGet, "/v1/policies/{policy_id}/rollout", s.policyRollout, readers},
		{http.MethodPost, "/v1/catchup", s.catchup, operators},
		{http.MethodGet, "/v1/catchup/{request_id}", s.catchupStatus, operators},
		// The seed's policy-handler endpoint: a catch-up of everything.
		{http.MethodGet, "/catch_up", s.catchup, operators},
		{http.MethodGet, "/policy_latest/{policy_id}", s.policyLatest, readers},
		// A read, though a POST: it carries a policy filter.
		{http.MethodPost, "/policies_latest", s.policiesLatest, readers},
		{http.MethodGet, "/service_component_all/{service_component_name}", s.serviceComponentAll, readers},
		{http.MethodGet, "/healthcheck", s.healthcheck, anyone},
		// The document of this API (openapi.json next to this file).
		{http.MethodGet, "/openapi.json", s.openAPI, readers},
		// The status page's data and the page itself, which holds no
		// data: it asks /v1/status with the token given in its form.
		{http.MethodGet, "/v1/status", s.pipelineStatus, statusReaders},
		{http.MethodGet, "/ui/", s.statusPage, anyone},
	}, slices.Concat(s.participantRoutes(), s.acmRuntimeRoutes(), s.nodeManagementRoutes(), s.admissionRoutes(), s.placementRoutes())...)
}

// recordingMux is the API's mux, remembering every pattern registered, so
// a test can check that the OpenAPI document describes each route.
type recordingMux struct {
	*http.ServeMux
	patterns []string
}

func (m *recordingMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// ServeHTTP refuses a path with '.' or '..' segments or doubled slashes:
// http.ServeMux would answer it with a redirect to the cleaned path, before
// any token check and without a reason, and a client that follows it calls
// another route than the one it named.
func (m *recordingMux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && p != cleanPath(p) {
		writeError(w, errorf(http.StatusBadRequest, "path %s is not clean: send it as %s (no '.' or '..' segment, no doubled '/')", p, cleanPath(p)))
		return
	}
	m.ServeMux.ServeHTTP(w, r)
}

// cleanPath is the path http.ServeMux serves for p: p rooted and without
// '.' or '..' segments or doubled slashes, its trailing slash kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

func (m *recordingMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// routes is the API mux. A path served with another method answers 405
// and an unknown path 404, both with a JSON reason, and both only to a
// caller with a valid token (401 otherwise).
func (s *Server) routes() http.Handler { return s.mux() }

// mux builds the API mux (see routes).
func (s *Server) mux() *recordingMux {
	mux := &recordingMux{ServeMux: http.NewServeMux()}
	methods := map[string][]string{}
	var paths []string
	for _, rt := range s.routeTable() {
		mux.Handle(rt.method+" "+rt.path, s.wrap(rt.method+" "+rt.path, s.guard(rt.access, rt.h)))
		if methods[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	for _, p := range paths {
		allowed := methods[p]
		sort.Strings(allowed)
		mux.Handle(p, s.wrap("method not allowed", s.guard(authenticated, func(w http.ResponseWriter, r *http.Request) *httpError {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			return errorf(http.StatusMethodNotAllowed, "%s %s is not served; use %s", r.Method, r.URL.Path, strings.Join(allowed, " or "))
		})))
	}
	mux.Handle("/", s.wrap("not found", s.guard(authenticated, func(_ http.ResponseWriter, r *http.Request) *httpError {
		return errorf(http.StatusNotFound, "no endpoint at %s; the API serves %s (GET /openapi.json describes each)", r.URL.Path, strings.Join(paths, ", "))
	})))
	return mux
}

// needViews answers 503 while one of the named topics' views has not
// caught up, so no answer is built from a partial view.
func (s *Server) needViews(bases ...string) *httpError {
	for _, b := range bases {
		t := s.env.Kafka.Topic(b)
		if ok, why := s.reader.ready(t); !ok {
			return errorf(http.StatusServiceUnavailable, "the North API is still reading %s (%s); retry in a few seconds", t, why)
		}
	}
	return nil
}
