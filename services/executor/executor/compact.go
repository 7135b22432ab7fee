package executor

import (
	"strings"
	"unique"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// compact is what the executor keeps of a component's committed
// collection: what Next and the read-back of its own writes need (the
// policies, generation, update, registration fields), without the updated
// and removed policies, which only the consul-writer and the notifier
// read. Every string of the policies and of the registration is
// canonicalised with package unique, so the components that hold the
// same version of a policy share one copy of its body: at 100,000
// components that hold the same few policies the executor keeps each body
// once instead of 100,000 times. A body no collection holds any more is
// freed by the garbage collector.
func compact(cp *events.ComponentPolicies) *events.ComponentPolicies {
	if cp == nil {
		return nil
	}
	out := &events.ComponentPolicies{
		ComponentID:          strings.Clone(cp.ComponentID),
		DeploymentID:         intern(cp.DeploymentID),
		ServiceComponentName: strings.Clone(cp.ServiceComponentName),
		// An update id is shared by one deployment's components at most:
		// a copy costs less than an entry in unique's map.
		UpdateID:   strings.Clone(cp.UpdateID),
		CatchUp:    cp.CatchUp,
		Generation: cp.Generation,
		Policies:   make([]events.Policy, len(cp.Policies)),
		Notify: events.NotifyTarget{Kind: intern(cp.Notify.Kind), ScriptPath: intern(cp.Notify.ScriptPath),
			WebhookURL: strings.Clone(cp.Notify.WebhookURL), TimeoutMs: cp.Notify.TimeoutMs},
		Uninstalled: cp.Uninstalled,
		UpdatedAt:   cp.UpdatedAt,
	}
	for i, p := range cp.Policies {
		out.Policies[i] = events.Policy{PolicyID: intern(p.PolicyID), PolicyName: intern(p.PolicyName),
			PolicyVersion: intern(p.PolicyVersion), Body: intern(p.Body), BodyHash: intern(p.BodyHash), Revision: p.Revision}
	}
	return out
}

// registration is what the executor keeps of a component's record of
// deploy.components: the fields Next and the collection store read (its
// deployment, service_component_name, tenant and notify target), copied
// out of the decoded record. Keeping the decoded record itself would keep
// its filters, policy ids and config, and the decoder's shared string
// slabs with them: about 3 KiB per component, 300 MiB of the executor's
// heap at 100,000 components.
func registration(m runtime.Msg[*events.Component], _ *events.Component, _ bool) (*events.Component, error) {
	c := m.Value
	return &events.Component{
		ComponentID:          strings.Clone(c.ComponentID),
		DeploymentID:         intern(c.DeploymentID),
		ServiceComponentName: strings.Clone(c.ServiceComponentName),
		Tenant:               intern(c.Tenant),
		Notify: events.NotifyTarget{Kind: intern(c.Notify.Kind), ScriptPath: intern(c.Notify.ScriptPath),
			WebhookURL: strings.Clone(c.Notify.WebhookURL), TimeoutMs: c.Notify.TimeoutMs},
		Generation: c.Generation,
		UpdatedAt:  c.UpdatedAt,
	}, nil
}

// intern is s's canonical copy.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
