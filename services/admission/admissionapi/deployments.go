package admissionapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/topology"
)

// DeploymentExample is a deployment request, for the answers that say what to send.
const DeploymentExample = `{"deployment_id": "dep-1", "tenant": "t1", "environment": "prod", "applications": [{"name": "web", "class": "io.murano.apps.apache.ApacheHttpServer", "inherits": ["io.murano.Application"], "instances": 2, "flavor": "m1.medium", "image": "ubuntu-22.04"}]}`

// DeploymentAccepted is the answer to a deployment request that was
// queued for admission.
type DeploymentAccepted struct {
	RequestID    string `json:"request_id"`
	DeploymentID string `json:"deployment_id"`
	Tenant       string `json:"tenant"`
	// Status is "pending": GET /v1/deployments/{deployment_id} shows the
	// verdict once the admission stage made it.
	Status string `json:"status"`
}

// Decision is what a verdict says, in the answers that show one: the
// deployment, its tenant, admitted or not and why, what the policies
// changed, and the request as they mutated it.
type Decision struct {
	DeploymentID string                     `json:"deployment_id"`
	Tenant       string                     `json:"tenant"`
	Admitted     bool                       `json:"admitted"`
	Violations   []events.AdmissionFinding  `json:"violations"`
	Warnings     []events.AdmissionFinding  `json:"warnings"`
	Mutations    []events.AdmissionMutation `json:"mutations"`
	Policies     []string                   `json:"policies"`
	Components   []string                   `json:"components"`
	// Request is the request as the policies mutated it.
	Request json.RawMessage `json:"request"`
}

// decisionOf is what verdict v says.
func decisionOf(v *events.AdmissionVerdict) Decision {
	return Decision{DeploymentID: v.DeploymentID, Tenant: v.Tenant, Admitted: v.Admitted,
		Violations: v.Violations, Warnings: v.Warnings, Mutations: v.Mutations, Policies: v.Policies,
		Components: v.Components, Request: json.RawMessage(v.Request)}
}

// DryRunVerdict is the answer of POST /v1/deployments?dry_run=true: what
// admission would decide now, and nothing deployed.
type DryRunVerdict struct {
	DryRun bool `json:"dry_run"`
	Decision
}

// DeploymentVerdict is the answer of GET /v1/deployments/{deployment_id}:
// the latest verdict on the deployment.
type DeploymentVerdict struct {
	RequestID string `json:"request_id"`
	Decision
	DecidedAt string `json:"decided_at"`
}

func (s *API) PostDeployment(w http.ResponseWriter, r *http.Request) *web.Error {
	dryRun, e := web.DryRun(r)
	if e != nil {
		return e
	}
	var req admit.Request
	if e := web.DecodeJSON(w, r, web.MaxRequestBytes, &req, true, DeploymentExample); e != nil {
		return e
	}
	caller := web.PrincipalOf(r.Context())
	if caller.Role == auth.RoleTenant {
		if req.Tenant == "" {
			req.Tenant = caller.Tenant
		}
		if req.Tenant != caller.Tenant {
			return web.Errorf(http.StatusForbidden, "token %s is scoped to tenant %q and may only deploy for it; the request says tenant %q", caller.Name, caller.Tenant, req.Tenant)
		}
	}
	if err := req.Normalize(); err != nil {
		return web.Errorf(http.StatusBadRequest, "deployment request: %v", err)
	}
	if e := s.opts.CheckComponents(&req); e != nil {
		return e
	}
	if e := s.Views.Need(topology.AppPolicies, topology.AdmissionVerdicts, topology.DeployComponents, topology.Deployments); e != nil {
		return e
	}
	if e := ClaimNames(admit.Claim{Tenant: req.Tenant, DeploymentID: req.DeploymentID}, s.opts.Owners); e != nil {
		return e
	}
	if dryRun {
		if req.Datacenter != "" {
			if e := s.Views.Need(topology.Datacenters); e != nil {
				return e
			}
		}
		return s.dryRun(r.Context(), w, &req)
	}
	for i, c := range req.Claims() {
		if e := ClaimNames(c, s.opts.Owners); e != nil {
			return web.Errorf(e.Status, "deployment request: applications[%d]: %s", i, e.Msg)
		}
	}
	body, err := req.JSON()
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode deployment request: %v", err)
	}
	dr := &events.DeploymentRequest{
		RequestID: web.NewID(), DeploymentID: req.DeploymentID, Tenant: req.Tenant, Request: string(body), Action: events.ActionDeploy,
		SubmittedBy: caller.Name, SubmittedAt: time.Now().UTC(),
	}
	value, err := s.Env.Codec.Encode(dr)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode deployment request: %v", err)
	}
	if err := s.Produce(r.Context(), &kgo.Record{Topic: s.Env.Kafka.Topic(topology.DeployRequests), Key: []byte(topology.DeployRequestsKey), Value: value}); err != nil {
		return s.ProduceFailed(err)
	}
	s.Log.Info().Str("request_id", dr.RequestID).Str("deployment_id", dr.DeploymentID).Str("tenant", dr.Tenant).Str("by", web.DescribeCaller(caller)).Msg("deployment request queued for admission")
	web.WriteJSON(w, http.StatusAccepted, DeploymentAccepted{RequestID: dr.RequestID, DeploymentID: dr.DeploymentID, Tenant: dr.Tenant, Status: "pending"})
	return nil
}

func (s *API) dryRun(ctx context.Context, w http.ResponseWriter, req *admit.Request) *web.Error {
	tenant := web.PrincipalOf(ctx).Tenant
	mine, e := s.dryRunSlot(w, tenant)
	if e != nil {
		return e
	}
	defer mine()
	deployed := s.deps.set().For(req, s.dcs.model)
	v, err := admit.EvaluateWith(ctx, req, s.appPols.compiled(), admit.Env{External: s.opts.Hooks.Call, Deployed: deployed})
	if err != nil {
		// The client left: nobody reads the answer.
		return web.Errorf(http.StatusServiceUnavailable, "dry run: %v", err)
	}
	if req.Datacenter != "" {
		release, e := s.placementSlot(w, tenant)
		if e != nil {
			return e
		}
		defer release()
		admit.CheckPlacement(&v, s.dcs.model, deployed.Usage)
	}
	admit.CheckNames(&v, s.opts.Owners)
	ve, err := admit.VerdictEvent("dry-run", req, v, nil, time.Now())
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "dry run: %v", err)
	}
	out := DryRunVerdict{DryRun: true, Decision: decisionOf(ve)}
	out.Components = []string{}
	if v.Admitted {
		comps, err := admit.Components(v.Request, 0, time.Now())
		if err != nil {
			return web.Errorf(http.StatusBadRequest, "deployment request: %v", err)
		}
		for _, c := range comps {
			out.Components = append(out.Components, c.ComponentID)
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *API) GetDeployment(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("deployment_id")
	if err := check.ID("deployment_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v: the last segment of /v1/deployments/{deployment_id} names the deployment", err)
	}
	if e := s.Views.Need(topology.AdmissionVerdicts); e != nil {
		return e
	}
	v, ok := s.verdicts.get(id)
	if !ok {
		return web.Errorf(http.StatusNotFound, "deployment %s has no verdict: it was never submitted, it was deleted (DELETE /v1/deployments/{deployment_id}), or its request is still waiting for the admission stage (retry in a moment)", id)
	}
	caller := web.PrincipalOf(r.Context())
	if caller.Role == auth.RoleTenant && v.Tenant != caller.Tenant {
		return web.Errorf(http.StatusForbidden, "deployment %s belongs to tenant %q; token %s is scoped to tenant %q", id, v.Tenant, caller.Name, caller.Tenant)
	}
	web.WriteJSON(w, http.StatusOK, DeploymentVerdict{RequestID: v.RequestID, Decision: decisionOf(v), DecidedAt: v.DecidedAt.UTC().Format(time.RFC3339Nano)})
	return nil
}

// DeploymentDeleting is the answer to a deletion queued for admission.
type DeploymentDeleting struct {
	RequestID    string `json:"request_id"`
	DeploymentID string `json:"deployment_id"`
	Tenant       string `json:"tenant"`
	// Status is "deleting": the admission stage releases the deployment
	// (GET /v1/deployments/{deployment_id} answers 404 once it did) and
	// removes its components.
	Status string `json:"status"`
}

// DeleteDeployment queues the deletion of a deployment on deploy.requests,
// in order with every request: the admission stage releases its record
// (its capacity, instances and names) and removes its components. 404 for
// a deployment nobody holds, 403 for another tenant's, 409 for a deletion
// a policy refuses (admit.EvaluateDeletion: the environment would keep
// deployments but lose its required application).
func (s *API) DeleteDeployment(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("deployment_id")
	if err := check.ID("deployment_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v: the last segment of /v1/deployments/{deployment_id} names the deployment", err)
	}
	if e := s.Views.Need(topology.AppPolicies, topology.AdmissionVerdicts, topology.DeployComponents, topology.Deployments); e != nil {
		return e
	}
	holders := s.opts.Owners.Deployment(id)
	if rec, ok := s.deps.get(id); ok && !slices.Contains(holders, rec.Tenant) {
		holders = append(holders, rec.Tenant)
	}
	if len(holders) == 0 {
		return web.Errorf(http.StatusNotFound, "deployment %s does not exist: it was never admitted, or it was deleted already", id)
	}
	caller := web.PrincipalOf(r.Context())
	if len(holders) > 1 {
		return web.Errorf(http.StatusConflict, "deployment %s is held by tenants %q; an operator must sort its components out (DELETE /v1/components/{component_id}) first", id, holders)
	}
	tenant := holders[0]
	if caller.Role == auth.RoleTenant && tenant != caller.Tenant {
		return web.Errorf(http.StatusForbidden, "deployment %s belongs to tenant %q; token %s is scoped to tenant %q", id, tenant, caller.Name, caller.Tenant)
	}
	// A deletion that would break a policy (an environment left with
	// deployments but without its required application) is refused now;
	// the stage decides it again, in order with every request, for what
	// this view has not read yet.
	if rec, ok := s.deps.get(id); ok {
		set := s.deps.set()
		if v := admit.EvaluateDeletion(rec, set.Others(rec), s.appPols.compiled()); !v.Admitted {
			return web.Errorf(http.StatusConflict, "deployment %s is not deleted: %s", id, strings.Join(admit.Texts(rec.Tenant, v.Violations), "; "))
		}
	}
	dr := &events.DeploymentRequest{
		RequestID: web.NewID(), DeploymentID: id, Tenant: tenant, Request: "", Action: events.ActionDelete,
		SubmittedBy: caller.Name, SubmittedAt: time.Now().UTC(),
	}
	value, err := s.Env.Codec.Encode(dr)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode deletion: %v", err)
	}
	if err := s.Produce(r.Context(), &kgo.Record{Topic: s.Env.Kafka.Topic(topology.DeployRequests), Key: []byte(topology.DeployRequestsKey), Value: value}); err != nil {
		return s.ProduceFailed(err)
	}
	s.Log.Info().Str("request_id", dr.RequestID).Str("deployment_id", id).Str("tenant", tenant).Str("by", web.DescribeCaller(caller)).Msg("deployment deletion queued for admission")
	web.WriteJSON(w, http.StatusAccepted, DeploymentDeleting{RequestID: dr.RequestID, DeploymentID: id, Tenant: tenant, Status: "deleting"})
	return nil
}
