// Package policyapi is the policy flow's HTTP API: components register
// (deploy.components) and read their status and Consul folder; policy
// engines announce and push policies (pdp.notifications, policy.pushes),
// and anyone who reads asks what a publish would do first (the what-if of
// ?dry_run=true, decided by pdp-ingest's and the matcher's own code,
// writing nothing);
// operators ask for catch-ups and follow them (catchup.requests,
// catchup.progress), follow a policy's rollout and the pipeline's status;
// and the ONAP DCAE policy-handler and config-binding-service read routes.
// It answers from runtime tables of policy.catalog, deploy.components,
// component.applied and catchup.progress. The North API
// (services/north-api/northapi) serves its handlers under the roles its
// route table gives them.
package policyapi

import (
	capi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
)

// Options are what the policy flow's API needs of the North API.
type Options struct {
	// Consul is the agent whose folders the API reads (its address is
	// named in answers).
	Consul consulkv.Config
	// Rules are what a component registration may ask for.
	Rules ComponentRules
	// StageOps are the ops listeners of the stages, whose /readyz and
	// /metrics the status page reads; when empty it shows the stages
	// running in this process.
	StageOps []string
	// DeploymentTenant is the tenant of a deployment's latest verdict,
	// which holds the deployment's name beside its components.
	DeploymentTenant func(deploymentID string) (string, bool)
}

// API is the policy flow's handlers and read views.
type API struct {
	*web.Kit
	opts       Options
	rules      ComponentRules
	consul     *capi.Client
	catalog    *catalogView
	components *componentsView
	applied    *appliedView
	progress   *progressView
	staged     *rolloutsView
}

// New starts the views of policy.catalog, deploy.components,
// component.applied and catchup.progress on kit (closed with kit's
// views); consul reads the components' folders.
func New(kit *web.Kit, consul *capi.Client, opts Options) (_ *API, err error) {
	s := &API{Kit: kit, opts: opts, rules: opts.Rules, consul: consul}
	add := func(v interface {
		web.View
		Close()
	}) {
		kit.Views.Add(v)
		kit.Views.OnClose(v.Close)
	}
	if s.catalog, err = followCatalog(kit.Env); err != nil {
		return nil, err
	}
	add(s.catalog)
	if s.components, err = followComponents(kit.Env); err != nil {
		return nil, err
	}
	add(s.components)
	if s.applied, err = followApplied(kit.Env); err != nil {
		return nil, err
	}
	add(s.applied)
	if s.progress, err = followProgress(kit.Env); err != nil {
		return nil, err
	}
	add(s.progress)
	if s.staged, err = followRollouts(kit.Env); err != nil {
		return nil, err
	}
	add(s.staged)
	return s, nil
}
