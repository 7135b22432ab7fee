package admit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// AppConfig is the config of an admitted application's component: what
// the application was admitted with, after mutation. It travels as the
// component's config on deploy.components.
type AppConfig struct {
	Application string         `json:"application"`
	Environment string         `json:"environment,omitempty"`
	Package     string         `json:"package,omitempty"`
	Class       string         `json:"class"`
	Instances   int            `json:"instances"`
	Flavor      string         `json:"flavor,omitempty"`
	Image       string         `json:"image,omitempty"`
	Properties  map[string]any `json:"properties,omitempty"`
	Scripts     []string       `json:"scripts,omitempty"`
}

// Components are the deploy.components records of an admitted request:
// one per application, <deployment_id>.<name>, with the application's
// admitted settings as config and its policy ids (its settings policy,
// SettingsPolicyID, first), filters and notify target. generation is the registration's generation. A component
// specification that cannot be registered (a filter Go cannot compile, a
// policy_id that is a full policy name, an unknown notify kind) is an
// error naming the application and the field. Notify targets are checked
// against the operator's rules by the North API when the request is
// submitted, and again by the agent-notifier before each notification.
func Components(r *Request, generation int64, at time.Time) ([]*events.Component, error) {
	out := make([]*events.Component, 0, len(r.Applications))
	for i := range r.Applications {
		a := &r.Applications[i]
		f := fmt.Sprintf("applications[%d].component", i)
		cfg, err := json.Marshal(appConfig(r, a))
		if err != nil {
			return nil, reqErr(f, "config: %v", err)
		}
		c := &events.Component{
			ComponentID:          r.ComponentID(a.Name),
			DeploymentID:         r.DeploymentID,
			ServiceComponentName: r.ServiceComponentName(a),
			Tenant:               r.Tenant,
			PolicyIDs:            []string{SettingsPolicyID(r.ComponentID(a.Name))},
			PolicyFilters:        []events.PolicyFilter{},
			Notify:               events.NotifyTarget{Kind: events.NotifyNone},
			Config:               string(cfg),
			Generation:           generation,
			UpdatedAt:            at.UTC(),
		}
		if spec := a.Component; spec != nil {
			seen := map[string]bool{c.PolicyIDs[0]: true}
			for j, id := range spec.PolicyIDs {
				derived, err := policy.PolicyID(id)
				if err != nil || derived != id || seen[id] {
					return nil, reqErr(fmt.Sprintf("%s.policy_ids[%d]", f, j), "%q is not a policy_id listed once (a policy name without .<version>.<ext>)", id)
				}
				seen[id] = true
				c.PolicyIDs = append(c.PolicyIDs, id)
			}
			fids := map[string]bool{}
			for j, fs := range spec.PolicyFilters {
				ff := fmt.Sprintf("%s.policy_filters[%d]", f, j)
				if fs.FilterID == "" || fids[fs.FilterID] {
					return nil, reqErr(ff+".filter_id", "is missing or used twice; give every filter its own id")
				}
				fids[fs.FilterID] = true
				attrsJSON := "{}"
				var attrs map[string]any
				if raw := bytes.TrimSpace(fs.ConfigAttributes); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
					m, err := policy.DecodeConfigAttributes(string(raw))
					if err != nil {
						return nil, reqErr(ff+".configAttributes", "%v", err)
					}
					var buf bytes.Buffer
					if err := json.Compact(&buf, raw); err != nil {
						return nil, reqErr(ff+".configAttributes", "%v", err)
					}
					attrs, attrsJSON = m, buf.String()
				}
				if fs.PolicyName == "" {
					return nil, reqErr(ff+".policyName", "is missing; a filter without policyName matches nothing")
				}
				if _, err := policy.CompileFilter(policy.Filter{PolicyName: fs.PolicyName, ConfigName: fs.ConfigName, OnapName: fs.OnapName, ConfigAttributes: attrs, Unique: fs.Unique}); err != nil {
					return nil, reqErr(ff+".policyName", "%v", err)
				}
				c.PolicyFilters = append(c.PolicyFilters, events.PolicyFilter{
					FilterID: fs.FilterID, PolicyName: fs.PolicyName, ConfigName: fs.ConfigName, OnapName: fs.OnapName,
					ConfigAttributes: attrsJSON, Unique: fs.Unique,
				})
			}
			n := spec.Notify
			c.Notify = events.NotifyTarget{ScriptPath: n.ScriptPath, WebhookURL: n.WebhookURL, TimeoutMs: n.TimeoutMs}
			switch strings.ToLower(n.Kind) {
			case "", "none":
				c.Notify.Kind = events.NotifyNone
			case "script":
				c.Notify.Kind = events.NotifyScript
			case "webhook":
				c.Notify.Kind = events.NotifyWebhook
			default:
				return nil, reqErr(f+".notify.kind", "%q is unknown; use \"script\", \"webhook\" or \"none\"", n.Kind)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// VerdictEvent is a verdict as the admission.verdicts record.
func VerdictEvent(requestID string, r *Request, v Verdict, components []string, at time.Time) (*events.AdmissionVerdict, error) {
	e := &events.AdmissionVerdict{
		RequestID: requestID, DeploymentID: r.DeploymentID, Tenant: r.Tenant, Admitted: v.Admitted,
		Violations: findingEvents(r.Tenant, v.Violations), Warnings: findingEvents(r.Tenant, v.Warnings),
		Mutations: []events.AdmissionMutation{}, Request: "{}", Components: components, Policies: v.Policies,
		DecidedAt: at.UTC(),
	}
	if e.Components == nil {
		e.Components = []string{}
	}
	if e.Policies == nil {
		e.Policies = []string{}
	}
	for _, m := range v.Mutations {
		e.Mutations = append(e.Mutations, events.AdmissionMutation{PolicyID: m.PolicyID, Rule: m.Rule, Application: m.Application, Field: m.Field, OldValue: m.Old, NewValue: m.New})
	}
	if v.Request != nil {
		b, err := v.Request.JSON()
		if err != nil {
			return nil, err
		}
		e.Request = string(b)
	}
	return e, nil
}

// DeletionVerdict is the verdict on a deletion of deployment e that
// EvaluateDeletion refused: denied, with the findings; the deployment
// stays as it is, so the verdict carries the request it was admitted
// with and the components it holds.
func DeletionVerdict(requestID string, e *events.Deployment, v Verdict, at time.Time) *events.AdmissionVerdict {
	req := e.Request
	if req == "" {
		req = "{}"
	}
	comps := slices.Clone(e.Components)
	if comps == nil {
		comps = []string{}
	}
	pols := slices.Clone(v.Policies)
	if pols == nil {
		pols = []string{}
	}
	return &events.AdmissionVerdict{
		RequestID: requestID, DeploymentID: e.DeploymentID, Tenant: e.Tenant, Admitted: v.Admitted,
		Violations: findingEvents(e.Tenant, v.Violations), Warnings: findingEvents(e.Tenant, v.Warnings),
		Mutations: []events.AdmissionMutation{}, Request: req, Components: comps, Policies: pols, DecidedAt: at.UTC(),
	}
}

// findingEvents turns findings into records whose message is the full
// text (tenant, object, message, rule, policy).
func findingEvents(tenant string, fs []Finding) []events.AdmissionFinding {
	out := make([]events.AdmissionFinding, len(fs))
	for i, f := range fs {
		out[i] = events.AdmissionFinding{PolicyID: f.PolicyID, Rule: f.Rule, Object: f.Object, Message: f.Text(tenant)}
	}
	return out
}

// Refused is the verdict on a request that cannot be decided: it is
// denied with the reason (rule "request"), naming no policy.
func Refused(requestID, deploymentID, tenant, reason string, at time.Time) *events.AdmissionVerdict {
	return &events.AdmissionVerdict{
		RequestID: requestID, DeploymentID: deploymentID, Tenant: tenant,
		Violations: []events.AdmissionFinding{{Rule: "request", Object: "request", Message: fmt.Sprintf("tenant %q: deployment request %s cannot be admitted: %s", tenant, requestID, reason)}},
		Warnings:   []events.AdmissionFinding{}, Mutations: []events.AdmissionMutation{}, Request: "{}",
		Components: []string{}, Policies: []string{}, DecidedAt: at.UTC(),
	}
}

// CompilePolicy compiles an app.policies record.
func CompilePolicy(p *events.AppPolicy) (*Compiled, error) {
	var tenants []string
	if p.TenantIDs != nil {
		tenants = *p.TenantIDs
		if tenants == nil {
			tenants = []string{}
		}
	}
	if p.Priority > MaxPriority || p.Priority < -MaxPriority {
		return nil, &ParamError{Field: "priority", Msg: fmt.Sprintf("%d is out of range: give a whole number from %d to %d", p.Priority, -MaxPriority, MaxPriority)}
	}
	c, err := Compile(p.PolicyID, json.RawMessage(p.ObjectModel), p.Mode, tenants)
	if err != nil {
		return nil, err
	}
	c.Priority, c.Created = int(p.Priority), p.Created
	return c, nil
}
