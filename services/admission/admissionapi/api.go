// Package admissionapi is the HTTP API of deployment admission and
// placement: tenant application policies (seed 001) written to
// app.policies, deployment requests and deletions queued on
// deploy.requests for the admission stage, their verdicts read back from
// admission.verdicts and what is deployed from deploy.deployments,
// and datacenter models (seed 002) with the placements computed on them.
// Each topic is read as a runtime table, each record compiled once. The
// North API (services/north-api/northapi) serves its handlers under the
// roles its route table gives them.
package admissionapi

import (
	"net/http"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/internal/web"
)

// Options are what admission asks of the rest of the API.
type Options struct {
	// MaxPlacements bounds the placement computations running at once
	// (default DefaultMaxPlacements); one more answers 503.
	MaxPlacements int
	// Owners name who holds the components, folders and deployments a
	// deployment would take (the components' and the verdicts' views).
	Owners admit.Owners
	// CheckComponents holds each application's component to the rules
	// of a component registration.
	CheckComponents func(*admit.Request) *web.Error
	// Hooks are the hosts policies' endpoints may be on: a policy naming
	// another is refused, and dry runs ask external engines through them.
	Hooks hooks.Rules
}

// API is admission's and placement's handlers and read views.
type API struct {
	*web.Kit
	opts     Options
	appPols  *appPoliciesView
	verdicts *verdictsView
	dcs      *datacentersView
	deps     *deploymentsView
	audit    *auditView
	placing  chan struct{} // a slot per placement computation running
	// placingBy and dryRunsBy hold each tenant to its share of the
	// placement slots and of dry runs at once.
	placingBy, dryRunsBy *tenantSlots
}

// New starts the views of app.policies, admission.verdicts,
// placement.datacenters and deploy.deployments on kit (closed with kit's views).
func New(kit *web.Kit, opts Options) (*API, error) {
	if opts.MaxPlacements <= 0 {
		opts.MaxPlacements = DefaultMaxPlacements
	}
	s := &API{Kit: kit, opts: opts, placing: make(chan struct{}, opts.MaxPlacements),
		placingBy: newTenantSlots(tenantShare(opts.MaxPlacements)), dryRunsBy: newTenantSlots(tenantShare(opts.MaxPlacements))}
	var err error
	if s.appPols, err = followAppPolicies(kit.Env); err != nil {
		return nil, err
	}
	kit.Views.Add(s.appPols)
	kit.Views.OnClose(s.appPols.Close)
	if s.verdicts, err = followVerdicts(kit.Env); err != nil {
		return nil, err
	}
	kit.Views.Add(s.verdicts)
	kit.Views.OnClose(s.verdicts.Close)
	if s.dcs, err = followDatacenters(kit.Env); err != nil {
		return nil, err
	}
	kit.Views.Add(s.dcs)
	kit.Views.OnClose(s.dcs.Close)
	if s.deps, err = followDeployments(kit.Env); err != nil {
		return nil, err
	}
	kit.Views.Add(s.deps)
	kit.Views.OnClose(s.deps.Close)
	if s.audit, err = followAudit(kit.Env); err != nil {
		return nil, err
	}
	kit.Views.Add(s.audit)
	kit.Views.OnClose(s.audit.Close)
	return s, nil
}

// Verdict is the latest verdict of a deployment.
func (s *API) Verdict(deploymentID string) (*events.AdmissionVerdict, bool) {
	return s.verdicts.get(deploymentID)
}

// ClaimNames refuses a write of names (a deployment, a component and its
// Consul folder) that someone else holds (admit.CheckClaim): 403 when
// another tenant holds it, 409 when it is another component's of the same
// tenant, either naming the holder.
func ClaimNames(c admit.Claim, owners admit.Owners) *web.Error {
	conflict := admit.CheckClaim(c, owners)
	switch {
	case conflict == nil:
		return nil
	case conflict.OtherTenant:
		return web.Errorf(http.StatusForbidden, "%v", conflict)
	}
	return web.Errorf(http.StatusConflict, "%v", conflict)
}
