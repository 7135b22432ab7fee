package northapi

import (
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/policyflow/policyflow/services/acm/acmapi"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
)

// route is one endpoint of the API and who may call it.
type route struct {
	method, path string
	h            web.HandlerFunc
	access       web.Access
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
		{http.MethodPut, "/v1/components/{component_id}", s.pol.PutComponent, web.OwnComponents},
		{http.MethodDelete, "/v1/components/{component_id}", s.pol.DeleteComponent, web.OwnComponents},
		{http.MethodGet, "/v1/components/{component_id}/status", s.pol.ComponentStatus, web.Readers},
		{http.MethodPost, "/v1/components/{component_id}/renotify", s.pol.Renotify, web.Operators},
		{http.MethodPost, "/v1/pdp/notifications", s.pol.PdpNotifications, web.Operators},
		{http.MethodPost, "/v1/policies", s.pol.PushPolicies, web.Operators},
		{http.MethodGet, "/v1/policies/{policy_id}/rollout", s.pol.PolicyRollout, web.Readers},
		// A staged rollout's actions: the same callers as the pushes.
		{http.MethodPost, "/v1/policies/{policy_id}/rollout/promote", s.pol.RolloutAction("promote"), web.Operators},
		{http.MethodPost, "/v1/policies/{policy_id}/rollout/pause", s.pol.RolloutAction("pause"), web.Operators},
		{http.MethodPost, "/v1/policies/{policy_id}/rollout/resume", s.pol.RolloutAction("resume"), web.Operators},
		{http.MethodPost, "/v1/policies/{policy_id}/rollout/abort", s.pol.RolloutAction("abort"), web.Operators},
		{http.MethodPost, "/v1/catchup", s.pol.Catchup, web.Operators},
		{http.MethodGet, "/v1/catchup/{request_id}", s.pol.CatchupStatus, web.Operators},
		// The seed's policy-handler endpoint: a catch-up of everything.
		{http.MethodGet, "/catch_up", s.pol.Catchup, web.Operators},
		{http.MethodGet, "/policy_latest/{policy_id}", s.pol.PolicyLatest, web.Readers},
		// A read, though a POST: it carries a policy filter.
		{http.MethodPost, "/policies_latest", s.pol.PoliciesLatest, web.Readers},
		{http.MethodGet, "/service_component_all/{service_component_name}", s.pol.ServiceComponentAll, web.Readers},
		{http.MethodGet, "/healthcheck", s.healthcheck, web.Anyone},
		// The document of this API (openapi.json next to this file).
		{http.MethodGet, "/openapi.json", s.openAPI, web.Readers},
		// The status page's data and the page itself, which holds no
		// data: it asks /v1/status with the token given in its form.
		{http.MethodGet, "/v1/status", s.pol.PipelineStatus, web.StatusReaders},
		{http.MethodGet, "/ui/", s.statusPage, web.Anyone},
	}, slices.Concat(s.participantRoutes(), s.acmRuntimeRoutes(), s.nodeManagementRoutes(), s.admissionRoutes(), s.placementRoutes())...)
}

// routeQueries are the query parameters of the routes that take any, by
// "METHOD path" as the route table names them; every other route takes
// none. The router refuses (400) a parameter a route does not take, on
// every method: on a write, an ignored parameter is a write the caller did
// not ask for (POST /v1/policies?dry_run=true once published); on a read,
// an ignored filter or page shows something else than asked, and no
// reference system's client sends these routes parameters they do not
// take (the ACM runtime's GET /participants takes page and size, as ONAP's
// does). Only the
// status page and /healthcheck, opened by browsers and probes that add
// their own, ignore unknown ones.
func routeQueries() map[string]web.Query {
	acmParticipants := web.Takes("page", "size")
	return map[string]web.Query{
		"POST /v1/policies":                                           web.Takes(web.DryRunParam),
		"POST /v1/pdp/notifications":                                  web.Takes(web.DryRunParam),
		"GET /v1/policies/{policy_id}/rollout":                        web.Takes("limit", "version"),
		"POST /v1/deployments":                                        web.Takes(web.DryRunParam),
		"PUT /v1/orgs/{org}/nmps/{name}":                              web.Takes("dryRun"),
		"GET /v1/orgs/{org}/nodes/{node}/directive":                   web.Takes("index", "wait"),
		"GET /v1/orgs/{org}/nodes":                                    web.Takes("software_version", "status", "pattern", "property", "limit", "page_token"),
		"POST /v1/agentpackages":                                      web.Takes("sha256"),
		"GET " + acmapi.RuntimeBase + "/participants":                 acmParticipants,
		"GET " + acmapi.RuntimeBase + "/participants/{participantId}": acmParticipants,
		"GET /ui/":         {Lenient: true},
		"GET /healthcheck": {Lenient: true},
	}
}

// bodiless are the write routes that take no body: the router refuses
// one with fields in it (400), as every other write route's handler
// decodes its body strictly (web.DecodeJSON with strict, or
// policy.Check for a pushed policy body, whose fields are the policy's
// own).
var bodiless = map[string]bool{
	"DELETE /v1/components/{component_id}":        true,
	"POST /v1/components/{component_id}/renotify": true,
	"DELETE /v1/orgs/{org}/nmps/{name}":           true,
	"DELETE /v1/orgs/{org}/nodes/{node}":          true,
	"POST /v1/orgs/{org}/nodes/{node}/token":      true,
	"DELETE /v1/orgs/{org}/nodes/{node}/token":    true,
	"DELETE /policies/{policy_id}":                true,
	"DELETE /v1/datacenters/{datacenter_id}":      true,
	"DELETE /v1/deployments/{deployment_id}":      true,
}

// dryRunners may call a route with ?dry_run=true besides the roles the
// route table gives it: a dry run writes nothing, and a tenant's answer
// shows only its own components.
var dryRunners = map[string]web.Access{
	"POST /v1/policies":          web.Readers,
	"POST /v1/pdp/notifications": web.Readers,
}

// dryRunAccess is the access of a route that write (the roles of the
// route) and dry (the roles that may only ask for a dry run) may call, and
// h behind the check that a caller of a dry role asked for a dry run.
func dryRunAccess(write, dry web.Access, h web.HandlerFunc) (web.Access, web.HandlerFunc) {
	all := web.Roles(write.Roles...)
	for _, r := range dry.Roles {
		if !all.Allows(r) {
			all.Roles = append(all.Roles, r)
		}
	}
	return all, func(w http.ResponseWriter, r *http.Request) *web.Error {
		isDry, e := web.DryRun(r)
		if e != nil {
			return e
		}
		if p := web.PrincipalOf(r.Context()); !isDry && !write.Allows(p.Role) {
			return web.Errorf(http.StatusForbidden, "token %s has role %s, which may not call %s %s; it needs one of the roles %s (with ?%s=true, which writes nothing, every reader may)",
				p.Name, p.Role, r.Method, r.URL.Path, write.RoleNames(), web.DryRunParam)
		}
		return h(w, r)
	}
}

// Who may call the node management routes. Tenants and agents whose token
// names a tenant act only in the org of that name.
var (
	nmpWriters        = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleTenant)
	nmpReaders        = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly, auth.RoleTenant)
	agentCallers      = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleAgent)
	packageWriters    = web.Roles(auth.RoleAdmin, auth.RoleOperator)
	nodeStatusReaders = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly, auth.RoleTenant, auth.RoleAgent)
	// orgNodesReaders read the org-wide node list: those who read node
	// status but agents, whose node token reads its own node only and
	// whose org token only registers.
	orgNodesReaders = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly, auth.RoleTenant)
	packageReaders  = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly, auth.RoleAgent)
)

// nodeManagementRoutes are the routes of node management (NMPs, nodes and
// their agents, agent packages).
func (s *Server) nodeManagementRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/orgs/{org}/nmps", s.nmp.ListNMPs, nmpReaders},
		{http.MethodGet, "/v1/orgs/{org}/nmps/{name}", s.nmp.GetNMP, nmpReaders},
		{http.MethodPut, "/v1/orgs/{org}/nmps/{name}", s.nmp.PutNMP, nmpWriters},
		{http.MethodDelete, "/v1/orgs/{org}/nmps/{name}", s.nmp.DeleteNMP, nmpWriters},
		{http.MethodGet, "/v1/orgs/{org}/nmps/{name}/nodes", s.nmp.NmpNodes, nmpReaders},
		{http.MethodGet, "/v1/orgs/{org}/nmps/{name}/status", s.nmp.NmpStatus, nmpReaders},
		{http.MethodPost, "/v1/orgs/{org}/nmps/{name}/enable", s.nmp.NmpAction("enable"), nmpWriters},
		{http.MethodPost, "/v1/orgs/{org}/nmps/{name}/disable", s.nmp.NmpAction("disable"), nmpWriters},
		{http.MethodPost, "/v1/orgs/{org}/nmps/{name}/resume", s.nmp.NmpAction("resume"), nmpWriters},
		{http.MethodPost, "/v1/orgs/{org}/nmps/{name}/rollback", s.nmp.NmpAction("rollback"), nmpWriters},
		{http.MethodPut, "/v1/orgs/{org}/nodes/{node}", s.nmp.PutNode, agentCallers},
		{http.MethodDelete, "/v1/orgs/{org}/nodes/{node}", s.nmp.DeleteNode, agentCallers},
		{http.MethodGet, "/v1/orgs/{org}/nodes/{node}/directive", s.nmp.GetDirective, agentCallers},
		{http.MethodPut, "/v1/orgs/{org}/nodes/{node}/status", s.nmp.PutNodeStatus, agentCallers},
		{http.MethodGet, "/v1/orgs/{org}/nodes/{node}/status", s.nmp.GetNodeStatus, nodeStatusReaders},
		{http.MethodGet, "/v1/orgs/{org}/nodes", s.nmp.ListOrgNodes, orgNodesReaders},
		{http.MethodPost, "/v1/orgs/{org}/nodes/{node}/token", s.nmp.NodeTokenChange(true), web.Operators},
		{http.MethodDelete, "/v1/orgs/{org}/nodes/{node}/token", s.nmp.NodeTokenChange(false), web.Operators},
		{http.MethodGet, "/v1/agentpackages", s.nmp.ListPackages, packageReaders},
		{http.MethodPost, "/v1/agentpackages", s.nmp.UploadPackage, packageWriters},
		{http.MethodGet, "/v1/agentpackages/{version}", s.nmp.GetPackage, packageReaders},
		{http.MethodGet, "/v1/agentpackages/{version}/file", s.nmp.DownloadPackage, packageReaders},
	}
}

// acmReaders read the registry and the state; participants are no
// tenant's.
var acmReaders = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleReadOnly)

// participantRoutes are the /v2 routes; routes.go lists them.
func (s *Server) participantRoutes() []route {
	return []route{
		{http.MethodGet, "/v2/participants", s.acm.ListParticipants, acmReaders},
		{http.MethodGet, "/v2/participants/{participant_id}", s.acm.GetParticipant, acmReaders},
		// PUT /v2/participants/sync: a literal segment beside the
		// {participant_id} wildcard would conflict in the mux's
		// method-not-allowed patterns, so the wildcard route takes it.
		{http.MethodPut, "/v2/participants/{participant_id}", s.acm.SyncAll, web.Operators},
		{http.MethodPut, "/v2/participants/{participant_id}/sync", s.acm.SyncParticipants, web.Operators},
		{http.MethodPost, "/v2/participants/{participant_id}/operations", s.acm.PostOperation, web.Operators},
		{http.MethodGet, "/v2/participants/{participant_id}/compositions/{composition_id}", s.acm.GetComposition, acmReaders},
		{http.MethodGet, "/v2/participants/{participant_id}/instances/{instance_id}", s.acm.GetInstance, acmReaders},
	}
}

// acmRuntimeRoutes are the ACM runtime's participant routes (ONAP
// policy-clamp's paths and shapes, services/acm/acmapi/acmruntime.go).
func (s *Server) acmRuntimeRoutes() []route {
	base := acmapi.RuntimeBase
	return []route{
		{http.MethodGet, base + "/participants", s.acm.ACMListParticipants, acmReaders},
		{http.MethodPut, base + "/participants", s.acm.ACMOrderAllReports, web.Operators},
		{http.MethodGet, base + "/participants/{participantId}", s.acm.ACMGetParticipant, acmReaders},
		// PUT .../participants/sync, ACM's resync of every participant:
		// a literal segment beside the {participantId} wildcard would
		// conflict in the mux's method-not-allowed patterns, so the
		// wildcard route takes it.
		{http.MethodPut, base + "/participants/{participantId}", s.acm.ACMOrderReportOrSyncAll, web.Operators},
		{http.MethodPut, base + "/participants/sync/{participantId}", s.acm.ACMSyncParticipant, web.Operators},
	}
}

// deployers submit deployments: operators, and tenants for their own
// tenant (the handler checks).
var deployers = web.Roles(auth.RoleAdmin, auth.RoleOperator, auth.RoleTenant)

// admissionRoutes are the routes of deployment admission and of tenant
// application policies (seed 001).
func (s *Server) admissionRoutes() []route {
	return []route{
		{http.MethodPost, "/v1/deployments", s.adm.PostDeployment, deployers},
		{http.MethodGet, "/v1/deployments/{deployment_id}", s.adm.GetDeployment, web.Readers},
		// The handler holds a tenant to its own deployments.
		{http.MethodDelete, "/v1/deployments/{deployment_id}", s.adm.DeleteDeployment, deployers},
		{http.MethodGet, "/policies", s.adm.ListAppPolicies, web.Readers},
		{http.MethodPost, "/policies", s.adm.CreateAppPolicy, web.Operators},
		{http.MethodGet, "/policies/{policy_id}", s.adm.GetAppPolicy, web.Readers},
		{http.MethodPut, "/policies/{policy_id}", s.adm.UpdateAppPolicy, web.Operators},
		{http.MethodDelete, "/policies/{policy_id}", s.adm.DeleteAppPolicy, web.Operators},
		{http.MethodGet, "/policies/{policy_id}/violations", s.adm.AppPolicyViolations, web.Readers},
		{http.MethodGet, "/policies/{policy_id}/report", s.adm.AppPolicyReport, web.Readers},
	}
}

// placementRoutes are the routes of datacenter models and placement
// proposals (seed 002). Datacenters are operator-level: operators write
// them, every reader may read them (a tenant names one in its deployment
// requests); anyone who may deploy may ask for a placement.
func (s *Server) placementRoutes() []route {
	return []route{
		{http.MethodGet, "/v1/datacenters", s.adm.ListDatacenters, web.Readers},
		{http.MethodGet, "/v1/datacenters/{datacenter_id}", s.adm.GetDatacenter, web.Readers},
		{http.MethodPut, "/v1/datacenters/{datacenter_id}", s.adm.PutDatacenter, web.Operators},
		{http.MethodDelete, "/v1/datacenters/{datacenter_id}", s.adm.DeleteDatacenter, web.Operators},
		{http.MethodPost, "/v1/placements", s.adm.PostPlacement, deployers},
	}
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
		web.WriteError(w, web.Errorf(http.StatusBadRequest, "path %s is not clean: send it as %s (no '.' or '..' segment, no doubled '/')", p, cleanPath(p)))
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
	queries := routeQueries()
	for _, rt := range s.routeTable() {
		pattern := rt.method + " " + rt.path
		h, access := rt.h, rt.access
		if bodiless[pattern] {
			h = web.NoBody(h)
		}
		h = web.StrictQuery(queries[pattern], h)
		if dry, ok := dryRunners[pattern]; ok {
			access, h = dryRunAccess(rt.access, dry, h)
		}
		mux.Handle(pattern, s.wrap(pattern, s.guard(access, h)))
		if methods[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	for _, p := range paths {
		allowed := methods[p]
		sort.Strings(allowed)
		mux.Handle(p, s.wrap("method not allowed", s.guard(web.Authenticated, func(w http.ResponseWriter, r *http.Request) *web.Error {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			return web.Errorf(http.StatusMethodNotAllowed, "%s %s is not served; use %s", r.Method, r.URL.Path, strings.Join(allowed, " or "))
		})))
	}
	mux.Handle("/", s.wrap("not found", s.guard(web.Authenticated, func(_ http.ResponseWriter, r *http.Request) *web.Error {
		return web.Errorf(http.StatusNotFound, "no endpoint at %s; the API serves %s (GET /openapi.json describes each)", r.URL.Path, strings.Join(paths, ", "))
	})))
	return mux
}

// wrap turns a web.HandlerFunc into an http.Handler that writes its
// error as JSON and counts the request under route (web.Handler).
func (s *Server) wrap(route string, h web.HandlerFunc) http.Handler {
	return web.Handler(route, h, s.env.Tracer, s.log, s.requests)
}

// Health is the answer of GET /healthcheck.
type Health struct {
	Service string            `json:"service"`
	Status  string            `json:"status"`
	Views   map[string]string `json:"views"`
}

func (s *Server) healthcheck(w http.ResponseWriter, _ *http.Request) *web.Error {
	h := Health{Service: "policyflow-north-api", Status: "ok", Views: map[string]string{}}
	for t, why := range s.kit.Views.States() {
		if why == "" {
			h.Views[t] = "caught up"
			continue
		}
		h.Status = "starting"
		h.Views[t] = why
	}
	web.WriteJSON(w, http.StatusOK, h)
	return nil
}
