// Package pdpingest turns policy engine (PDP) notifications and directly
// pushed policy bodies into the policy catalog and its change stream: it
// decides, per policy_id, the latest valid policy_body, and it holds the
// pdp-ingest stage that runs that decision over Kafka.
package pdpingest

import (
	"fmt"
	"strings"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// Keyed is a notification to produce to pdp.notifications under a
// policy_id.
type Keyed struct {
	PolicyID     string
	Notification *events.PdpNotification
}

// Route is what a notification asks of pdp-ingest.
type Route struct {
	// Resend, when not empty, are the notification's parts, one per
	// policy_id, to produce back to pdp.notifications keyed by that id so
	// that the partition owning the id's catalog state handles each; the
	// notification itself is then done.
	Resend []Keyed
	// PolicyID is the one policy_id the notification is about, when it is
	// handled here; "" when there is nothing to do.
	PolicyID string
	// AskPDP says the notification names loaded or removed versions: the
	// PDP is asked for every version it still has of PolicyID.
	AskPDP bool
	// Pushed are the pushed bodies as policy.Check accepted them, in
	// order.
	Pushed []policy.Checked
	// Tenant owns the pushed bodies ("" global); what the PDP answers is
	// always global.
	Tenant string
	// Withdraw says the notification is the admission stage's removal of
	// a settings policy it pushed for Tenant (Source
	// events.NotifierAdmission, a tenant, removed entries only, a
	// policy_id under policy.AdmissionPrefix): the PDP never had the
	// policy, so it is not asked; the entry is removed when Tenant holds
	// it and its version is at most WithdrawVersion (the greatest
	// version the removal names).
	Withdraw        bool
	WithdrawVersion int64
}

// withdrawal reports whether n, about the one policy_id id, is the
// admission stage's removal of its tenant's settings policy.
func withdrawal(id string, n *events.PdpNotification) bool {
	return n.Source == events.NotifierAdmission && n.Tenant != "" && strings.HasPrefix(id, policy.AdmissionPrefix) &&
		len(n.RemovedPolicies) > 0 && len(n.LoadedPolicies) == 0 && len(n.PushedBodies) == 0
}

// RouteNotification checks a notification received under key and says how
// to handle it. A notification naming more than one policy_id, or one
// policy_id different from its key, is split into per-policy_id
// notifications to resend. A notification with a loaded or removed entry
// whose policyName policy.CheckName refuses, or with a pushed body
// policy.Check refuses, is refused whole (the error says which entry and
// why); nothing of it is applied.
func RouteNotification(key []byte, n *events.PdpNotification) (Route, error) {
	var (
		ids    []string
		byID   = map[string]*events.PdpNotification{}
		pushed []policy.Checked
	)
	part := func(id string) *events.PdpNotification {
		p, ok := byID[id]
		if !ok {
			p = &events.PdpNotification{
				NotificationID:  n.NotificationID,
				Source:          n.Source,
				ReceivedAt:      n.ReceivedAt,
				LoadedPolicies:  []events.LoadedPolicy{},
				RemovedPolicies: []events.UnloadedPolicy{},
				PushedBodies:    []string{},
				Tenant:          n.Tenant,
			}
			byID[id] = p
			ids = append(ids, id)
		}
		return p
	}
	for i, l := range n.LoadedPolicies {
		id, _, err := policy.CheckName(l.PolicyName)
		if err != nil {
			return Route{}, fmt.Errorf("notification %s: loaded_policies[%d]: %w", n.NotificationID, i, err)
		}
		p := part(id)
		p.LoadedPolicies = append(p.LoadedPolicies, l)
	}
	for i, r := range n.RemovedPolicies {
		id, _, err := policy.CheckName(r.PolicyName)
		if err != nil {
			return Route{}, fmt.Errorf("notification %s: removed_policies[%d]: %w", n.NotificationID, i, err)
		}
		p := part(id)
		p.RemovedPolicies = append(p.RemovedPolicies, r)
	}
	for i, raw := range n.PushedBodies {
		pb, err := policy.Check([]byte(raw))
		if err != nil {
			return Route{}, fmt.Errorf("notification %s: refuse pushed_bodies[%d]: %w", n.NotificationID, i, err)
		}
		pushed = append(pushed, pb)
		p := part(pb.PolicyID)
		p.PushedBodies = append(p.PushedBodies, raw)
	}
	switch {
	case len(ids) == 0:
		return Route{}, nil
	case len(ids) > 1 || string(key) != ids[0]:
		out := Route{Resend: make([]Keyed, 0, len(ids))}
		for _, id := range ids {
			p := byID[id]
			if len(ids) > 1 {
				p.NotificationID = n.NotificationID + "/" + id
			}
			out.Resend = append(out.Resend, Keyed{PolicyID: id, Notification: p})
		}
		return out, nil
	}
	if withdrawal(ids[0], n) {
		r := Route{PolicyID: ids[0], Tenant: n.Tenant, Withdraw: true}
		for _, rp := range n.RemovedPolicies {
			_, v, _ := policy.CheckName(rp.PolicyName) // checked above
			r.WithdrawVersion = max(r.WithdrawVersion, v)
		}
		return r, nil
	}
	return Route{
		PolicyID: ids[0],
		AskPDP:   len(n.LoadedPolicies) > 0 || len(n.RemovedPolicies) > 0,
		Pushed:   pushed,
		Tenant:   n.Tenant,
	}, nil
}
