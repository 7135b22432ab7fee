package northapi

import (
	"time"

	"github.com/policyflow/policyflow/services/admission/admissionapi"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/topology"
)

// Authenticator names the holder of a bearer token; *auth.Store (a tokens
// file, reloaded) and *auth.Set are ones.
type Authenticator interface {
	Lookup(token string) (auth.Principal, bool)
}

// anonymous is the caller of every request when authentication is off.
var anonymous = auth.Principal{Name: "anonymous (--insecure-no-auth)", Role: auth.RoleAdmin}

// authRealm names the API in WWW-Authenticate challenges.
const authRealm = `Bearer realm="policyflow-north-api"`

// guard authenticates the caller, applies the rate limit (per token name,
// or per client address before authentication) and checks the caller's
// role against the route's access, before h reads anything of the request.
func (s *Server) guard(a web.Access, h web.HandlerFunc) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *web.Error {
		p, known, hadToken := s.authenticate(r)
		key := "addr " + clientAddr(r)
		if known {
			key = "token " + p.Name
		}
		if ok, wait := s.limiter.Allow(key); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
			return web.Errorf(http.StatusTooManyRequests, "too many requests from %s: the limit is %g per second with bursts of %d; retry after %d s",
				key, s.limiter.Rate(), s.limiter.Burst(), max(secs, 1))
		}
		if a.Public {
			return h(w, r)
		}
		switch {
		case !hadToken:
			w.Header().Set("WWW-Authenticate", authRealm)
			return web.Errorf(http.StatusUnauthorized, "%s %s needs a bearer token: send Authorization: Bearer <token> (policyctl takes --token, PF_TOKEN or --token-file)", r.Method, r.URL.Path)
		case !known && auth.IsNodeToken(bearerOf(r)) && s.needViews(topology.AgentNodes) != nil:
			// Nodes' own tokens are known once agent.nodes is read.
			return s.needViews(topology.AgentNodes)
		case !known:
			w.Header().Set("WWW-Authenticate", authRealm+`, error="invalid_token"`)
			return web.Errorf(http.StatusUnauthorized, "the bearer token is not one of the North API's tokens (revoked, mistyped, or for another deployment); ask an administrator for a token")
		case !a.Allows(p.Role):
			return web.Errorf(http.StatusForbidden, "token %s has role %s, which may not call %s %s; it needs one of the roles %s",
				p.Name, p.Role, r.Method, r.URL.Path, a.RoleNames())
		}
		return h(w, r.WithContext(web.WithPrincipal(r.Context(), p)))
	}
}

// authenticate returns the caller named by the request's bearer token,
// whether the token is known and whether the request carried one.
func (s *Server) authenticate(r *http.Request) (p auth.Principal, known, hadToken bool) {
	if s.opts.InsecureNoAuth {
		return anonymous, true, true
	}
	token, ok := auth.BearerToken(r)
	if !ok {
		return auth.Principal{}, false, false
	}
	if auth.IsNodeToken(token) {
		p, known = s.nmp.LookupNodeToken(token)
		return p, known, true
	}
	p, known = s.opts.Tokens.Lookup(token)
	return p, known, true
}

// bearerOf is the request's bearer token ("" for none).
func bearerOf(r *http.Request) string {
	t, _ := auth.BearerToken(r)
	return t
}

// clientAddr is the host of the request's remote address.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// mayReadPolicy reports whether p may see the catalog entry e: a tenant
// sees global policies and its own (policy.MayHold, the rule the matcher
// applies to components), other roles every policy. Where it is false a
// read answers as if the policy did not exist.
func mayReadPolicy(p auth.Principal, e *catalogEntry) bool {
	return p.Role != auth.RoleTenant || policy.MayHold(p.Tenant, e.Tenant)
}

// mayHoldPolicies refuses a registration whose policy_ids name a policy
// of another tenant than the component's (policy.MayHold): the matcher
// would never give it to the component. A policy_id the catalog does not
// hold yet is accepted; if it comes as another tenant's, the matcher
// leaves it out.
func (s *Server) mayHoldPolicies(c *events.Component) *web.Error {
	for i, id := range c.PolicyIDs {
		if e, ok := s.catalog.get(id); ok && !policy.MayHold(c.Tenant, e.Tenant) {
			return web.Errorf(http.StatusForbidden, "component %s: policy_ids[%d] %s belongs to another tenant; a component of tenant %q may hold global policies and its own tenant's only: remove it from policy_ids",
				c.ComponentID, i, id, c.Tenant)
		}
	}
	return nil
}

// mayWriteComponent refuses a tenant's write of a component that is not
// its tenant's: the component as registered (existing, nil when new) and
// the tenant the request gives it (wantTenant; "" for a delete) must both
// be the token's tenant. Other roles that reached the handler may.
func mayWriteComponent(p auth.Principal, id string, existing *events.Component, wantTenant *string) *web.Error {
	if p.Role != auth.RoleTenant {
		return nil
	}
	if existing != nil && existing.Tenant != p.Tenant {
		return web.Errorf(http.StatusForbidden, "component %s belongs to tenant %q; token %s is scoped to tenant %q", id, existing.Tenant, p.Name, p.Tenant)
	}
	if wantTenant != nil && *wantTenant != p.Tenant {
		return web.Errorf(http.StatusForbidden, "token %s is scoped to tenant %q and may only register components with \"tenant\": %q; the body says %q",
			p.Name, p.Tenant, p.Tenant, *wantTenant)
	}
	return nil
}

// mayReadComponent refuses a tenant's read of a component that is not
// registered to its tenant (a deleted component's tenant is not known).
func mayReadComponent(p auth.Principal, id string, c *events.Component, registered bool) *web.Error {
	if p.Role != auth.RoleTenant {
		return nil
	}
	if !registered {
		return web.Errorf(http.StatusForbidden, "component %s is not registered, so its tenant is unknown; token %s (tenant %q) may only read its tenant's registered components",
			id, p.Name, p.Tenant)
	}
	if c.Tenant != p.Tenant {
		return web.Errorf(http.StatusForbidden, "component %s belongs to tenant %q; token %s is scoped to tenant %q", id, c.Tenant, p.Name, p.Tenant)
	}
	return nil
}

// mayReadFolder refuses a tenant's read of a service component's Consul
// folder unless a registered component of its tenant has that
// service_component_name.
func (s *Server) mayReadFolder(p auth.Principal, scn string) *web.Error {
	if p.Role != auth.RoleTenant {
		return nil
	}
	if e := s.needViews(topology.DeployComponents); e != nil {
		return e
	}
	for _, c := range s.components.withServiceComponent(scn) {
		if c.Tenant == p.Tenant {
			return nil
		}
	}
	return web.Errorf(http.StatusForbidden, "no registered component of tenant %q has service_component_name %s; token %s may only read its tenant's components' folders",
		p.Tenant, scn, p.Name)
}

// claimNames refuses a write of names that someone else holds
// (admissionapi.ClaimNames).
func (s *Server) claimNames(c admit.Claim) *web.Error {
	return admissionapi.ClaimNames(c, viewOwners{s})
}

// viewOwners answers admit.Owners from the views of deploy.components and
// admission.verdicts.
type viewOwners struct{ s *Server }

func (o viewOwners) Component(id string) (string, bool) {
	c, ok := o.s.components.get(id)
	if !ok {
		return "", false
	}
	return c.Tenant, true
}

func (o viewOwners) Folder(scn string) []admit.Holder {
	var out []admit.Holder
	for _, c := range o.s.components.withServiceComponent(scn) {
		out = append(out, admit.Holder{ComponentID: c.ComponentID, Tenant: c.Tenant})
	}
	return out
}

func (o viewOwners) Deployment(id string) []string {
	tenants := o.s.components.deploymentTenants(id)
	if v, ok := o.s.adm.Verdict(id); ok && v.Tenant != "" { // a refused request of no tenant holds nothing
		tenants = append(tenants, v.Tenant)
	}
	slices.Sort(tenants)
	return slices.Compact(tenants)
}

// checkDeploymentComponents holds each application's component to the
// rules of a component registration (notify targets the operator allows,
// filter limits).
func (s *Server) checkDeploymentComponents(req *admit.Request) *web.Error {
	for i := range req.Applications {
		a := &req.Applications[i]
		cr := ComponentRequest{DeploymentID: req.DeploymentID, ServiceComponentName: req.ServiceComponentName(a), Tenant: req.Tenant}
		if spec := a.Component; spec != nil {
			cr.PolicyIDs = spec.PolicyIDs
			for _, f := range spec.PolicyFilters {
				cr.PolicyFilters = append(cr.PolicyFilters, FilterRequest(f))
			}
			cr.Notify = NotifyRequest(spec.Notify)
		}
		id := req.ComponentID(a.Name)
		if _, err := BuildComponent(id, cr, 1, time.Now(), s.rules); err != nil {
			return web.Errorf(http.StatusBadRequest, "deployment request: applications[%d].component (component %s): %v", i, id, err)
		}
	}
	return nil
}
