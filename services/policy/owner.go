package policy

// MayHold is the one rule of policy ownership: whether a component of the
// tenant componentTenant, or a caller scoped to that tenant, may hold, read
// or subscribe to a policy owned by policyTenant. A global policy
// (policyTenant "", what the PDP, an operator or policyctl publishes)
// anyone may; a tenant's policy (the admission stage's settings policy
// admission.<component_id>) only that tenant's. A component registered
// with no tenant holds only global policies.
//
// The North API's reads, listings and registrations and the matcher's
// matching by policy_id and by filter all ask this, so a filter such as
// ".*" never brings one tenant's policy to another's component.
func MayHold(componentTenant, policyTenant string) bool {
	return policyTenant == "" || policyTenant == componentTenant
}
