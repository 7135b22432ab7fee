// Package ingest turns policy engine (PDP) notifications and directly
// pushed policy bodies into the policy catalog and its change stream: it
// decides, per policy_id, the latest valid policy_body, and it holds the
// pdp-ingest stage that runs that decision over Kafka.
package ingest

import (
	"fmt"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

// Pushed is one pushed policy_body that passed the checks.
type Pushed struct {
	PolicyID string
	Version  int64
	// Body is the Normalize'd body (a config string holding JSON parsed).
	Body policy.Body
}

// CheckPushed accepts a policy_body pushed with no PDP behind it when it is
// a JSON object whose policyName gives a policy_id, whose policyVersion is
// an integer, which Validate accepts (policyConfigStatus CONFIG_RETRIEVED,
// config not empty) and whose JSON is at most policy.MaxBodyBytes. The
// error says which rule the body broke.
func CheckPushed(raw string) (Pushed, error) {
	b, err := policy.DecodeBody([]byte(raw))
	if err != nil {
		return Pushed{}, err
	}
	id, err := b.PolicyID()
	if err != nil {
		return Pushed{}, fmt.Errorf("policy_body has no policy_id: %w", err)
	}
	v, ok := b.Version()
	if !ok {
		return Pushed{}, fmt.Errorf("policy_body %q: policyVersion %q is not an integer", b.PolicyName(), b.VersionString())
	}
	nb := policy.Normalize(b)
	if err := policy.Validate(nb); err != nil {
		return Pushed{}, err
	}
	if err := policy.CheckSize(nb); err != nil {
		return Pushed{}, err
	}
	return Pushed{PolicyID: id, Version: v, Body: nb}, nil
}

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
	// Pushed are the checked pushed bodies, in order.
	Pushed []Pushed
}

// RouteNotification checks a notification received under key and says how
// to handle it. A notification naming more than one policy_id, or one
// policy_id different from its key, is split into per-policy_id
// notifications to resend. A notification with a loaded or removed entry
// that gives no policy_id, or with a pushed body CheckPushed refuses, is
// refused whole (the error says which entry and why); nothing of it is
// applied.
func RouteNotification(key []byte, n *events.PdpNotification) (Route, error) {
	var (
		ids    []string
		byID   = map[string]*events.PdpNotification{}
		pushed []Pushed
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
			}
			byID[id] = p
			ids = append(ids, id)
		}
		return p
	}
	for i, l := range n.LoadedPolicies {
		id, err := policy.PolicyID(l.PolicyName)
		if err != nil {
			return Route{}, fmt.Errorf("notification %s: loaded_policies[%d]: %w", n.NotificationID, i, err)
		}
		p := part(id)
		p.LoadedPolicies = append(p.LoadedPolicies, l)
	}
	for i, r := range n.RemovedPolicies {
		id, err := policy.PolicyID(r.PolicyName)
		if err != nil {
			return Route{}, fmt.Errorf("notification %s: removed_policies[%d]: %w", n.NotificationID, i, err)
		}
		p := part(id)
		p.RemovedPolicies = append(p.RemovedPolicies, r)
	}
	for i, raw := range n.PushedBodies {
		pb, err := CheckPushed(raw)
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
	return Route{
		PolicyID: ids[0],
		AskPDP:   len(n.LoadedPolicies) > 0 || len(n.RemovedPolicies) > 0,
		Pushed:   pushed,
	}, nil
}
