package policyapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admissionapi"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/topology"
)

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
func (s *API) mayHoldPolicies(c *events.Component) *web.Error {
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
func (s *API) mayReadFolder(p auth.Principal, scn string) *web.Error {
	if p.Role != auth.RoleTenant {
		return nil
	}
	if e := s.Views.Need(topology.DeployComponents); e != nil {
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
func (s *API) claimNames(c admit.Claim) *web.Error {
	return admissionapi.ClaimNames(c, viewOwners{s})
}

// Owners answers who holds components, their folders and deployments
// (admit.Owners), for admission's claims.
func (s *API) Owners() admit.Owners { return viewOwners{s} }

// viewOwners answers admit.Owners from the views of deploy.components and
// admission.verdicts.
type viewOwners struct{ s *API }

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

func (o viewOwners) FoldersUnder(scn string) []admit.Holder {
	var out []admit.Holder
	for _, c := range o.s.components.Sorted() {
		if strings.HasPrefix(c.ServiceComponentName, scn+":") {
			out = append(out, admit.Holder{ComponentID: c.ComponentID, Tenant: c.Tenant})
		}
	}
	return out
}

func (o viewOwners) Deployment(id string) []string {
	tenants := o.s.components.deploymentTenants(id)
	if t, ok := o.s.opts.DeploymentTenant(id); ok && t != "" { // a refused request of no tenant holds nothing
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	return slices.Compact(tenants)
}

// CheckDeploymentComponents holds each application's component to the
// rules of a component registration (notify targets the operator allows,
// filter limits).
func (s *API) CheckDeploymentComponents(req *admit.Request) *web.Error {
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
