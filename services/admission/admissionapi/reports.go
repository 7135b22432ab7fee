package admissionapi

import (
	"net/http"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// auditView is admission.audit: the entries of the policies' audit
// reports, which the admission stage keeps.
type auditView struct {
	*runtime.TableOf[*events.AuditEntry, *events.AuditEntry]
}

func followAudit(env runtime.Env) (*auditView, error) {
	t, err := runtime.FollowTableOf(env, topology.AdmissionAudit, func(m runtime.Msg[*events.AuditEntry], _ *events.AuditEntry, _ bool) (*events.AuditEntry, error) {
		return m.Value, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &auditView{t}, nil
}

// PolicyReport is the answer of GET /policies/{policy_id}/report: the
// policy's audit report as the admission stage keeps it.
type PolicyReport struct {
	PolicyID string `json:"policy_id"`
	Mode     string `json:"mode"`
	// Violations are the admitted deployments (those the caller may
	// see) the policy, enforced, would deny, by deployment id.
	Violations []ReportEntry `json:"violations"`
}

// ReportEntry is one deployment of a report: a deployment the policy
// would deny, as GET /policies/{policy_id}/violations says it, and when
// the stage last checked it.
type ReportEntry struct {
	DeploymentViolation
	CheckedAt string `json:"checked_at"`
}

// AppPolicyReport serves a policy's persisted audit report: a tenant
// reads the reports of the policies that apply to it, and in them its
// own deployments only. A deployment deleted (its verdict's tombstone)
// is left out at once, before the stage removes its entry.
func (s *API) AppPolicyReport(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.appPolicyOf(r)
	if e != nil {
		return e
	}
	caller := web.PrincipalOf(r.Context())
	if e := mayReadAppPolicy(caller, p); e != nil {
		return e
	}
	if e := s.Views.Need(topology.AdmissionAudit); e != nil {
		return e
	}
	if e := s.Views.Need(topology.AdmissionVerdicts); e != nil {
		return e
	}
	out := PolicyReport{PolicyID: p.rec.PolicyID, Mode: p.rec.Mode, Violations: []ReportEntry{}}
	for _, en := range s.audit.Sorted() {
		if en.PolicyID != p.rec.PolicyID {
			continue
		}
		if caller.Role == auth.RoleTenant && en.Tenant != caller.Tenant {
			continue
		}
		if v, ok := s.verdicts.get(en.DeploymentID); !ok || v.Tenant != en.Tenant {
			continue
		}
		re := ReportEntry{DeploymentViolation: DeploymentViolation{DeploymentID: en.DeploymentID, RequestID: en.RequestID, Tenant: en.Tenant}, CheckedAt: en.CheckedAt.UTC().Format(timeFormat)}
		for _, f := range en.Findings {
			re.Findings = append(re.Findings, events.AdmissionFinding{PolicyID: en.PolicyID, Rule: f.Rule, Object: f.Object, Message: f.Message})
		}
		out.Violations = append(out.Violations, re)
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}
