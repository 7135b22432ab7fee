package northapi

import (
	"net/http"
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
// in one place. Only /healthcheck is served without a token. Tenants are
// scoped further in the handlers: to components whose tenant is theirs
// and to those components' folders, to their deployments, and to the
// application policies assigned to them or to every tenant; PDP policies
// are not tenant-scoped.
func (s *Server) routeTable() []route {
	return append([]route{
		{http.MethodPut, "/v1/components/{component_id}", s.putComponent, ownComponents},
		{http.MethodDelete, "/v1/components/{component_id}", s.deleteComponent, ownComponents},
		{http.MethodGet, "/v1/components/{component_id}/status", s.componentStatus, readers},
		{http.MethodPost, "/v1/pdp/notifications", s.pdpNotifications, operators},
		{http.MethodPost, "/v1/policies", s.pushPolicies, operators},
		{http.MethodPost, "/v1/catchup", s.catchup, operators},
		{http.MethodGet, "/policy_latest/{policy_id}", s.policyLatest, readers},
		// A read, though a POST: it carries a policy filter.
		{http.MethodPost, "/policies_latest", s.policiesLatest, readers},
		{http.MethodGet, "/service_component_all/{service_component_name}", s.serviceComponentAll, readers},
		{http.MethodGet, "/healthcheck", s.healthcheck, anyone},
	}, s.admissionRoutes()...)
}

// routes is the API mux. A path served with another method answers 405
// and an unknown path 404, both with a JSON reason, and both only to a
// caller with a valid token (401 otherwise).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
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
		return errorf(http.StatusNotFound, "no endpoint at %s; the API serves /v1/components/{component_id}, /v1/components/{component_id}/status, /v1/pdp/notifications, /v1/policies, /v1/catchup, /policy_latest/{policy_id}, /policies_latest, /service_component_all/{service_component_name}, /healthcheck, /v1/deployments, /v1/deployments/{deployment_id}, /policies, /policies/{policy_id}, /policies/{policy_id}/violations", r.URL.Path)
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
