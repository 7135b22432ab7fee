package admissionapi

import (
	"bytes"
	"encoding/json"
	"errors"
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
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/topology"
)

// The tenant application policies API of seed 001 (Murano application
// policies) is served at /policies, beside the PDP-shaped policy routes
// (/v1/policies pushes policy bodies; /policy_latest and /policies_latest
// read them): the two kinds of policy are unrelated.

const appPolicyExample = `{"description": "Policy to limit possible flavor", "tenantIds": ["726ed856965f43cc8e565bc991fa76c3"], "objectModel": {"maxFlavor": "m1.medium", "?": {"type": "io.policyflow.admission.FlavorLimit"}}}`

// maxPolicyNameBytes bounds a policy's name and description.
const (
	maxPolicyNameBytes        = 255
	maxPolicyDescriptionBytes = 4 << 10
)

// AppPolicyRequest is the body of POST /policies and PUT
// /policies/{policy_id} (seed 001): a PUT replaces every field.
type AppPolicyRequest struct {
	// Name is optional; when given it is unique (409 otherwise).
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	ObjectModel json.RawMessage `json:"objectModel"`
	// TenantIDs assigns the policy; absent or null is every tenant.
	TenantIDs json.RawMessage `json:"tenantIds,omitempty"`
	// Mode is "enforce" (the default) or "audit".
	Mode string `json:"mode,omitempty"`
	// Priority orders the policies' mutations: lower first, so the
	// highest priority is applied last and its value wins; ties by
	// creation time, then policy id. Default 0.
	Priority int64 `json:"priority,omitempty"`
}

// AppPolicyAnswer is a policy as the API shows it (seed 001's shape, with
// name, mode and type besides).
type AppPolicyAnswer struct {
	ID          string          `json:"id"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description"`
	Created     string          `json:"created"`
	Updated     string          `json:"updated"`
	TenantIDs   []string        `json:"tenant_ids"`
	Mode        string          `json:"mode"`
	Priority    int32           `json:"priority"`
	Type        string          `json:"type,omitempty"`
	ObjectModel json.RawMessage `json:"objectModel,omitempty"`
	// Error says why the stored policy does not compile (a record written
	// around the API); such a policy decides nothing.
	Error string `json:"error,omitempty"`
}

// AppPolicyList is the answer of GET /policies.
type AppPolicyList struct {
	Policies []AppPolicyAnswer `json:"policies"`
}

// timeFormat is the seed's timestamp shape.
const timeFormat = "2006-01-02T15:04:05Z"

func answerOf(p *appPolicy, withModel bool) AppPolicyAnswer {
	a := AppPolicyAnswer{
		ID: p.rec.PolicyID, Name: p.rec.Name, Description: p.rec.Description, Mode: p.rec.Mode, Priority: p.rec.Priority,
		Created: p.rec.Created.UTC().Format(timeFormat), Updated: p.rec.Updated.UTC().Format(timeFormat),
	}
	if p.rec.TenantIDs != nil {
		a.TenantIDs = *p.rec.TenantIDs
	}
	if p.compiled != nil {
		a.Type = p.compiled.Type
	}
	if p.err != nil {
		a.Error = p.err.Error()
	}
	if withModel {
		a.ObjectModel = json.RawMessage(p.rec.ObjectModel)
	}
	return a
}

// mayReadAppPolicy refuses a tenant a policy that does not apply to it.
func mayReadAppPolicy(p auth.Principal, ap *appPolicy) *web.Error {
	if p.Role != auth.RoleTenant || ap.rec.TenantIDs == nil || slices.Contains(*ap.rec.TenantIDs, p.Tenant) {
		return nil
	}
	return web.Errorf(http.StatusForbidden, "policy %s is not assigned to tenant %q; token %s may only look up its tenant's policies and the global ones", ap.rec.PolicyID, p.Tenant, p.Name)
}

func (s *API) ListAppPolicies(w http.ResponseWriter, r *http.Request) *web.Error {
	if e := s.Views.Need(topology.AppPolicies); e != nil {
		return e
	}
	caller := web.PrincipalOf(r.Context())
	out := AppPolicyList{Policies: []AppPolicyAnswer{}}
	for _, p := range s.appPols.list() {
		if mayReadAppPolicy(caller, p) == nil {
			out.Policies = append(out.Policies, answerOf(p, false))
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *API) GetAppPolicy(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.appPolicyOf(r)
	if e != nil {
		return e
	}
	if e := mayReadAppPolicy(web.PrincipalOf(r.Context()), p); e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, answerOf(p, true))
	return nil
}

// appPolicyOf is the policy the path names: 404 when there is none.
func (s *API) appPolicyOf(r *http.Request) (*appPolicy, *web.Error) {
	id := r.PathValue("policy_id")
	if err := check.ID("policy_id", id); err != nil {
		return nil, web.Errorf(http.StatusBadRequest, "%v: the segment after /policies/ names the policy", err)
	}
	if e := s.Views.Need(topology.AppPolicies); e != nil {
		return nil, e
	}
	p, ok := s.appPols.get(id)
	if !ok {
		return nil, web.Errorf(http.StatusNotFound, "policy %s does not exist; GET /policies lists the policies", id)
	}
	return p, nil
}

func (s *API) CreateAppPolicy(w http.ResponseWriter, r *http.Request) *web.Error {
	return s.writeAppPolicy(w, r, nil)
}

func (s *API) UpdateAppPolicy(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.appPolicyOf(r)
	if e != nil {
		return e
	}
	return s.writeAppPolicy(w, r, p)
}

// writeAppPolicy creates (existing nil) or replaces a policy.
func (s *API) writeAppPolicy(w http.ResponseWriter, r *http.Request, existing *appPolicy) *web.Error {
	var req AppPolicyRequest
	if e := web.DecodeJSON(w, r, web.MaxRequestBytes, &req, true, appPolicyExample); e != nil {
		return e
	}
	rec, e := buildAppPolicy(req)
	if e != nil {
		return e
	}
	if e := s.Views.Need(topology.AppPolicies); e != nil {
		return e
	}
	// One writer at a time, so two policies cannot take one name.
	unlock := s.Lock("app policies")
	defer unlock()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if existing == nil {
		rec.PolicyID, rec.Created = web.NewID(), now
	} else {
		if cur, ok := s.appPols.get(existing.rec.PolicyID); !ok {
			return web.Errorf(http.StatusNotFound, "policy %s was deleted meanwhile", existing.rec.PolicyID)
		} else {
			existing = cur
		}
		rec.PolicyID, rec.Created = existing.rec.PolicyID, existing.rec.Created
	}
	rec.Updated = now
	if rec.Name != "" {
		if other, taken := s.appPols.withName(rec.Name); taken && other != rec.PolicyID {
			return web.Errorf(http.StatusConflict, "a policy named %q exists already (%s); choose another name, or change that policy with PUT /policies/%s", rec.Name, other, other)
		}
	}
	compiled, err := admit.CompilePolicy(rec)
	if err == nil {
		err = compiled.CheckCost()
	}
	if err != nil {
		return policyCompileError(err)
	}
	for _, ep := range compiled.Endpoints() {
		if err := s.opts.Hooks.Check(ep.URL); err != nil {
			return web.Errorf(http.StatusBadRequest, "%s: %v", ep.Field, err)
		}
	}
	value, err := s.Env.Codec.Encode(rec)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode policy %s: %v", rec.PolicyID, err)
	}
	kr := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.AppPolicies), Key: []byte(rec.PolicyID), Value: value}
	if err := s.Produce(r.Context(), kr); err != nil {
		return s.ProduceFailed(err)
	}
	s.WaitOwnWrite(r.Context(), s.appPols, kr)
	verb := "created"
	if existing != nil {
		verb = "updated"
	}
	s.Log.Info().Str("policy_id", rec.PolicyID).Str("type", compiled.Type).Str("mode", compiled.Mode).Str("by", web.DescribeCaller(web.PrincipalOf(r.Context()))).Msg("application policy " + verb)
	web.WriteJSON(w, http.StatusOK, answerOf(&appPolicy{rec: rec, compiled: compiled}, true))
	return nil
}

// buildAppPolicy checks a body's shape and turns it into the record
// (without id and times); the objectModel is compiled later.
func buildAppPolicy(req AppPolicyRequest) (*events.AppPolicy, *web.Error) {
	if len(req.Name) > maxPolicyNameBytes || strings.ContainsFunc(req.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, web.Errorf(http.StatusBadRequest, "name: at most %d bytes without control characters", maxPolicyNameBytes)
	}
	if len(req.Description) > maxPolicyDescriptionBytes {
		return nil, web.Errorf(http.StatusBadRequest, "description: %d bytes; at most %d are allowed", len(req.Description), maxPolicyDescriptionBytes)
	}
	model := bytes.TrimSpace(req.ObjectModel)
	if len(model) == 0 || bytes.Equal(model, []byte("null")) {
		return nil, web.Errorf(http.StatusBadRequest, "objectModel is missing: give the policy as {\"<parameter>\": ..., \"?\": {\"type\": <policy kind>}}, one of the kinds %s", strings.Join(admit.Kinds(), ", "))
	}
	var canon bytes.Buffer
	if err := json.Compact(&canon, model); err != nil {
		return nil, web.Errorf(http.StatusBadRequest, "objectModel: %v", err)
	}
	if req.Priority > admit.MaxPriority || req.Priority < -admit.MaxPriority {
		return nil, web.Errorf(http.StatusBadRequest, "priority: %d is out of range: give a whole number from %d to %d (higher is applied later and wins)", req.Priority, -admit.MaxPriority, admit.MaxPriority)
	}
	rec := &events.AppPolicy{Name: req.Name, Description: req.Description, ObjectModel: canon.String(), Mode: req.Mode, Priority: int32(req.Priority)}
	if rec.Mode == "" {
		rec.Mode = admit.ModeEnforce
	}
	if t := bytes.TrimSpace(req.TenantIDs); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		var ids []string
		if err := json.Unmarshal(t, &ids); err != nil {
			return nil, web.Errorf(http.StatusBadRequest, "tenantIds must be an array of tenant ids, or null for every tenant; got %s", policy.RawKind(t))
		}
		// Checked here, before sorting, so that an error names the
		// index the caller gave.
		for i, id := range ids {
			if err := check.ID("tenant id", id); err != nil {
				return nil, web.Errorf(http.StatusBadRequest, "tenantIds[%d]: %v", i, err)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		rec.TenantIDs = &ids
	}
	return rec, nil
}

// policyCompileError is the answer to a policy that does not compile:
// 404 for an unknown kind (seed 001: "specified class doesn't exist or it
// is not an Aspect"), 400 naming the field otherwise.
func policyCompileError(err error) *web.Error {
	if admit.IsUnknownKind(err) {
		return web.Errorf(http.StatusNotFound, "%v", err)
	}
	var pe *admit.ParamError
	if errors.As(err, &pe) {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	return web.Errorf(http.StatusBadRequest, "objectModel: %v", err)
}

func (s *API) DeleteAppPolicy(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.appPolicyOf(r)
	if e != nil {
		return e
	}
	unlock := s.Lock("app policies")
	defer unlock()
	kr := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.AppPolicies), Key: []byte(p.rec.PolicyID)}
	if err := s.Produce(r.Context(), kr); err != nil {
		return s.ProduceFailed(err)
	}
	s.WaitOwnWrite(r.Context(), s.appPols, kr)
	s.Log.Info().Str("policy_id", p.rec.PolicyID).Str("by", web.DescribeCaller(web.PrincipalOf(r.Context()))).Msg("application policy deleted")
	web.WriteJSON(w, http.StatusOK, answerOf(p, true))
	return nil
}

// PolicyViolations is the answer of GET /policies/{policy_id}/violations:
// the admitted deployments the policy, enforced, would deny now.
type PolicyViolations struct {
	PolicyID string `json:"policy_id"`
	Mode     string `json:"mode"`
	// Checked counts the admitted deployments of the policy's tenants
	// (those the caller may see) that were checked.
	Checked    int                   `json:"checked"`
	Violations []DeploymentViolation `json:"violations"`
}

// DeploymentViolation is one admitted deployment a policy would deny.
type DeploymentViolation struct {
	DeploymentID string                    `json:"deployment_id"`
	RequestID    string                    `json:"request_id"`
	Tenant       string                    `json:"tenant"`
	Findings     []events.AdmissionFinding `json:"findings"`
}

func (s *API) AppPolicyViolations(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.appPolicyOf(r)
	if e != nil {
		return e
	}
	caller := web.PrincipalOf(r.Context())
	if e := mayReadAppPolicy(caller, p); e != nil {
		return e
	}
	if p.compiled == nil {
		return web.Errorf(http.StatusConflict, "policy %s does not compile (%v), so it finds nothing; fix it with PUT /policies/%s", p.rec.PolicyID, p.err, p.rec.PolicyID)
	}
	if e := s.Views.Need(topology.AdmissionVerdicts); e != nil {
		return e
	}
	out := PolicyViolations{PolicyID: p.rec.PolicyID, Mode: p.compiled.Mode, Violations: []DeploymentViolation{}}
	for _, v := range s.verdicts.admittedList() {
		if caller.Role == auth.RoleTenant && v.Tenant != caller.Tenant || !p.compiled.AppliesTo(v.Tenant) {
			continue
		}
		req, err := admit.ParseRequest([]byte(v.Request))
		if err != nil {
			continue
		}
		out.Checked++
		if fs := admit.Audit(r.Context(), req, p.compiled); len(fs) > 0 {
			dv := DeploymentViolation{DeploymentID: v.DeploymentID, RequestID: v.RequestID, Tenant: v.Tenant}
			for _, f := range fs {
				dv.Findings = append(dv.Findings, events.AdmissionFinding{PolicyID: f.PolicyID, Rule: f.Rule, Object: f.Object, Message: f.Text(v.Tenant)})
			}
			out.Violations = append(out.Violations, dv)
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}
