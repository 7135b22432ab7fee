package agentnotifier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// ReconfigureType is the first argument of the script: the notification
// carries the whole collection of policies.
const ReconfigureType = "policies"

// ShouldNotify decides whether a component.applied record is notified: not
// when the component was uninstalled or has no notify target, and not
// when the claim shows this generation (or a newer one) was already
// claimed, so each update_id is notified at most once and a replay
// notifies nobody. reason says why not.
func ShouldNotify(claim *consulkv.Claim, a *events.ComponentApplied) (ok bool, reason string) {
	switch {
	case a.Uninstalled:
		return false, "the component is uninstalled"
	case a.Notify.Kind == events.NotifyNone || a.Notify.Kind == "":
		return false, "the component has no notify target"
	case claim != nil && claim.Generation >= a.Generation:
		return false, fmt.Sprintf("generation %d (update %s) was already claimed", claim.Generation, claim.UpdateID)
	}
	return true, ""
}

// payload is the notification JSON. Field order is the documented one.
type payload struct {
	Policies        []json.RawMessage `json:"policies"`
	UpdatedPolicies []json.RawMessage `json:"updated_policies"`
	RemovedPolicies []json.RawMessage `json:"removed_policies"`
}

// Payload builds the notification a component receives,
// {"policies": [...], "updated_policies": [...], "removed_policies": [...]},
// each a list of policy_body objects (the parsed bodies, not strings), from
// items, the pairs under the component's consulkv.ItemsPrefix as Consul
// holds them now: policies are their bodies, in Consul's key order (by
// policy_id); updated_policies the bodies among them of the policies the
// record updated, in the record's order, left out when Consul no longer
// holds the policy; removed_policies the last bodies the record carries.
// A body that is not a JSON object is an error.
func Payload(a *events.ComponentApplied, items api.KVPairs) ([]byte, error) {
	p := payload{Policies: []json.RawMessage{}, UpdatedPolicies: []json.RawMessage{}}
	held := make(map[string]json.RawMessage, len(items))
	for _, it := range items {
		id, ok := consulkv.ItemPolicyID(a.ServiceComponentName, it.Key)
		if !ok {
			continue
		}
		b, err := object(it.Value, "policies", id)
		if err != nil {
			return nil, fmt.Errorf("%w (Consul key %s)", err, it.Key)
		}
		held[id] = b
		p.Policies = append(p.Policies, b)
	}
	for _, u := range a.Updated() {
		if b, ok := held[u.PolicyID]; ok {
			p.UpdatedPolicies = append(p.UpdatedPolicies, b)
		}
	}
	p.RemovedPolicies = make([]json.RawMessage, 0, len(a.RemovedPolicies))
	for _, r := range a.RemovedPolicies {
		b, err := object([]byte(r.Body), "removed_policies", r.PolicyID)
		if err != nil {
			return nil, err
		}
		p.RemovedPolicies = append(p.RemovedPolicies, b)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("build notification of update %s for component %s: %w", a.UpdateID, a.ComponentID, err)
	}
	return b, nil
}

// object is body as the notification carries it, when it is a JSON object.
func object(body []byte, list, policyID string) (json.RawMessage, error) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return nil, fmt.Errorf("build notification: %s: policy %s body is not a JSON object", list, policyID)
	}
	return json.RawMessage(b), nil
}

// ErrClaimTaken is wrapped by the (transient) error of a record whose
// claim lost a check-and-set race; on the retry the claim shows whether
// the update was already claimed.
var ErrClaimTaken = errors.New("the notification claim changed while it was taken")

// job is one component.applied record of a batch on its way through
// claim, notification and record.
type job struct {
	i    int // the record's place in the batch
	a    *events.ComponentApplied
	key  string // the component's claim key
	body []byte // the notification, built once its folder is read
	log  zerolog.Logger
	// index is the claim key's ModifyIndex: as read, then as claimed.
	index uint64
	claim consulkv.Claim
	// origin is where and when the change entered the pipeline, for
	// the end-to-end latency.
	origin    runtime.OriginInfo
	hasOrigin bool
	// trace is the record's trace context (nil when not tracing).
	trace context.Context
}

// prepare checks a component.applied record. It returns no job when the
// record needs no notification whatever the claim says, and a Permanent
// error when it can never be notified.
func (n *notifier) prepare(a *events.ComponentApplied) (*job, error) {
	log := n.log.With().Str("component_id", a.ComponentID).Str("update_id", a.UpdateID).Int64("generation", a.Generation).Logger()
	if ok, why := ShouldNotify(nil, a); !ok {
		log.Debug().Str("reason", why).Msg("not notified")
		return nil, nil
	}
	if a.ServiceComponentName == "" {
		return nil, runtime.Permanentf("agent-notifier: component %s update %s has no service_component_name, so no place for its claim", a.ComponentID, a.UpdateID)
	}
	switch {
	case a.Notify.Kind == events.NotifyScript && a.Notify.ScriptPath == "":
		return nil, runtime.Permanentf("agent-notifier: component %s is notified by script but names no script_path", a.ComponentID)
	case a.Notify.Kind == events.NotifyWebhook && a.Notify.WebhookURL == "":
		return nil, runtime.Permanentf("agent-notifier: component %s is notified by webhook but names no webhook_url", a.ComponentID)
	case a.Notify.Kind != events.NotifyScript && a.Notify.Kind != events.NotifyWebhook:
		return nil, runtime.Permanentf("agent-notifier: component %s has notify kind %q", a.ComponentID, a.Notify.Kind)
	}
	return &job{a: a, key: consulkv.ClaimKey(a.ServiceComponentName), log: log}, nil
}
