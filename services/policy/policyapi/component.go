package policyapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/policy"
)

// ComponentRequest is the body of PUT /v1/components/{component_id}.
type ComponentRequest struct {
	// ComponentID is optional in the body; when given it must equal the
	// id in the path. policyctl reads it from the file it sends.
	ComponentID          string          `json:"component_id,omitempty"`
	DeploymentID         string          `json:"deployment_id"`
	ServiceComponentName string          `json:"service_component_name"`
	Tenant               string          `json:"tenant,omitempty"`
	PolicyIDs            []string        `json:"policy_ids,omitempty"`
	PolicyFilters        []FilterRequest `json:"policy_filters,omitempty"`
	Notify               NotifyRequest   `json:"notify"`
	// Config is the component's application config, a JSON object.
	Config json.RawMessage `json:"config,omitempty"`
}

// FilterRequest is one policy filter of a component, in the PDP
// /getConfig shape plus the filter's id.
type FilterRequest struct {
	FilterID         string          `json:"filter_id"`
	PolicyName       string          `json:"policyName"`
	ConfigName       string          `json:"configName,omitempty"`
	OnapName         string          `json:"onapName,omitempty"`
	ConfigAttributes json.RawMessage `json:"configAttributes,omitempty"`
	Unique           bool            `json:"unique,omitempty"`
}

// NotifyRequest says how the component is told its policies changed.
type NotifyRequest struct {
	// Kind is "script", "webhook" or "none" (any case; "" means none).
	Kind       string `json:"kind"`
	ScriptPath string `json:"script_path,omitempty"`
	WebhookURL string `json:"webhook_url,omitempty"`
	TimeoutMs  int32  `json:"timeout_ms,omitempty"`
}

// MaxNotifyTimeout is the longest timeout_ms a notify target may ask for.
const MaxNotifyTimeout = 10 * time.Minute

// MaxPolicyIDs bounds the policy_ids of one component.
const MaxPolicyIDs = 1000

// CheckID says what is wrong with an id used as a Kafka key, a Consul key
// segment or in a URL path (component_id, deployment_id,
// service_component_name): the one rule of ids, check.ID.
func CheckID(what, id string) error { return check.ID(what, id) }

// BuildComponent checks a component registration against the shape of
// the request and the operator's rules, and turns it into the
// deploy.components event. Every error says what is wrong and what to
// fix.
func BuildComponent(componentID string, req ComponentRequest, generation int64, now time.Time, rules ComponentRules) (*events.Component, error) {
	if err := CheckID("component_id", componentID); err != nil {
		return nil, err
	}
	if req.ComponentID != "" && req.ComponentID != componentID {
		return nil, fmt.Errorf("component_id %q in the body differs from %q in the path; make them equal or leave it out of the body",
			req.ComponentID, componentID)
	}
	if err := CheckID("deployment_id", req.DeploymentID); err != nil {
		return nil, fmt.Errorf("%w: every component belongs to a deployment", err)
	}
	if err := CheckID("service_component_name", req.ServiceComponentName); err != nil {
		return nil, fmt.Errorf("%w: it names the component's Consul folder %s", err, consulkv.Folder("<service_component_name>"))
	}
	c := &events.Component{
		ComponentID:          componentID,
		DeploymentID:         req.DeploymentID,
		ServiceComponentName: req.ServiceComponentName,
		Tenant:               req.Tenant,
		PolicyIDs:            []string{},
		PolicyFilters:        []events.PolicyFilter{},
		Config:               "{}",
		Generation:           generation,
		UpdatedAt:            now.UTC(),
	}

	if len(req.PolicyIDs) > MaxPolicyIDs {
		return nil, fmt.Errorf("policy_ids has %d ids; at most %d are allowed per component: name fewer, or match them with a policy filter",
			len(req.PolicyIDs), MaxPolicyIDs)
	}
	seenIDs := map[string]bool{}
	for i, id := range req.PolicyIDs {
		if err := policy.CheckID(id); err != nil {
			return nil, fmt.Errorf("policy_ids[%d]: %w; give a policy_id such as DCAE.Config_VM_MEMORY", i, err)
		}
		if derived, _ := policy.PolicyID(id); derived != id {
			return nil, fmt.Errorf("policy_ids[%d] %q is a full policyName, not a policy_id; use %q (the name without .<version>.<ext>)",
				i, id, derived)
		}
		if seenIDs[id] {
			return nil, fmt.Errorf("policy_ids[%d] %q is listed twice; list each policy_id once", i, id)
		}
		seenIDs[id] = true
		c.PolicyIDs = append(c.PolicyIDs, id)
	}

	if err := rules.checkFilterSizes(req.PolicyFilters); err != nil {
		return nil, err
	}
	seenFilters := map[string]int{}
	for i, f := range req.PolicyFilters {
		pf, err := buildFilter(i, f)
		if err != nil {
			return nil, err
		}
		if j, dup := seenFilters[f.FilterID]; dup {
			return nil, fmt.Errorf("policy_filters[%d] and policy_filters[%d] share filter_id %q; give every filter its own id",
				j, i, f.FilterID)
		}
		seenFilters[f.FilterID] = i
		c.PolicyFilters = append(c.PolicyFilters, pf)
	}

	notify, err := buildNotify(req.Notify, rules.Targets)
	if err != nil {
		return nil, err
	}
	c.Notify = notify

	if cfg := bytes.TrimSpace(req.Config); len(cfg) > 0 && !bytes.Equal(cfg, []byte("null")) {
		if !check.Object(cfg) {
			return nil, fmt.Errorf("config must be a JSON object (the component's application config), got %s", policy.RawKind(cfg))
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, cfg); err != nil {
			return nil, fmt.Errorf("config is not valid JSON: %w", err)
		}
		c.Config = buf.String()
	}
	return c, nil
}

func buildFilter(i int, f FilterRequest) (events.PolicyFilter, error) {
	where := fmt.Sprintf("policy_filters[%d]", i)
	if f.FilterID == "" {
		return events.PolicyFilter{}, fmt.Errorf("%s has no filter_id; give each filter an id unique within the component", where)
	}
	where = fmt.Sprintf("policy_filters[%d] (filter_id %q)", i, f.FilterID)
	if f.PolicyName == "" {
		return events.PolicyFilter{}, fmt.Errorf("%s has no policyName; a filter without policyName matches nothing: give a regular expression such as \"DCAE.Config_.*\"", where)
	}
	attrsJSON := "{}"
	var attrs map[string]any
	if raw := bytes.TrimSpace(f.ConfigAttributes); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		m, err := policy.DecodeConfigAttributes(string(raw))
		if err != nil {
			return events.PolicyFilter{}, fmt.Errorf("%s: configAttributes must be a JSON object of matchingConditions keys and values: %w", where, err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return events.PolicyFilter{}, fmt.Errorf("%s: configAttributes: %w", where, err)
		}
		attrs, attrsJSON = m, buf.String()
	}
	if _, err := policy.CompileFilter(policy.Filter{
		PolicyName:       f.PolicyName,
		ConfigName:       f.ConfigName,
		OnapName:         f.OnapName,
		ConfigAttributes: attrs,
		Unique:           f.Unique,
	}); err != nil {
		return events.PolicyFilter{}, fmt.Errorf("%s: %w; fix the expression (Go RE2 syntax: no lookaround or backreferences)", where, err)
	}
	return events.PolicyFilter{
		FilterID:         f.FilterID,
		PolicyName:       f.PolicyName,
		ConfigName:       f.ConfigName,
		OnapName:         f.OnapName,
		ConfigAttributes: attrsJSON,
		Unique:           f.Unique,
	}, nil
}

// notifiesNothing reports whether t is no notify target (kind none, or
// left empty): the component reads its policies from Consul and is told
// nothing, so it is done once Consul holds them.
func notifiesNothing(t events.NotifyTarget) bool {
	return t.Kind == events.NotifyNone || t.Kind == ""
}

func buildNotify(n NotifyRequest, targets notifytarget.Rules) (events.NotifyTarget, error) {
	t := events.NotifyTarget{ScriptPath: n.ScriptPath, WebhookURL: n.WebhookURL, TimeoutMs: n.TimeoutMs}
	if n.TimeoutMs < 0 || time.Duration(n.TimeoutMs)*time.Millisecond > MaxNotifyTimeout {
		return t, fmt.Errorf("notify.timeout_ms %d is out of range; give 0 (the notifier's default) up to %d",
			n.TimeoutMs, MaxNotifyTimeout.Milliseconds())
	}
	switch strings.ToLower(n.Kind) {
	case "", "none":
		t.Kind = events.NotifyNone
		if n.ScriptPath != "" || n.WebhookURL != "" {
			return t, fmt.Errorf("notify.kind is none but script_path or webhook_url is set; set kind to \"script\" or \"webhook\", or drop them")
		}
		if n.TimeoutMs != 0 {
			return t, fmt.Errorf("notify.kind is none but timeout_ms is %d; drop timeout_ms or set a kind", n.TimeoutMs)
		}
	case "script":
		t.Kind = events.NotifyScript
		if n.ScriptPath == "" {
			return t, fmt.Errorf("notify.kind is script but script_path is missing; give the absolute path of the executable run as <script_path> policies <json>")
		}
		if n.WebhookURL != "" {
			return t, fmt.Errorf("notify.kind is script but webhook_url is set too; a component has one notify target: drop webhook_url or set kind to webhook")
		}
		if _, err := targets.CheckScript(n.ScriptPath); err != nil {
			return t, fmt.Errorf("notify: %w", err)
		}
	case "webhook":
		t.Kind = events.NotifyWebhook
		if n.WebhookURL == "" {
			return t, fmt.Errorf("notify.kind is webhook but webhook_url is missing; give the http(s) URL that receives the JSON by POST")
		}
		if n.ScriptPath != "" {
			return t, fmt.Errorf("notify.kind is webhook but script_path is set too; a component has one notify target: drop script_path or set kind to script")
		}
		if _, err := targets.CheckWebhook(n.WebhookURL); err != nil {
			return t, fmt.Errorf("notify: %w", err)
		}
	default:
		return t, fmt.Errorf("notify.kind %q is unknown; use \"script\", \"webhook\" or \"none\"", n.Kind)
	}
	return t, nil
}
