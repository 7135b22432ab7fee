// Package admit is the decision logic of the admission stage: the
// deployment request a tenant submits, the application policies an
// operator assigns to tenants (seed 001, Murano application policies), and
// Evaluate, which mutates a request with the policies that change it and
// then validates the result against the policies that constrain it,
// returning a Verdict. It does no I/O; the stage, the North API and
// policyctl call it.
//
// Order of evaluation: the policies that apply to the request's tenant
// (those assigned to it and the global ones, which name no tenant) are
// taken in order of priority, lowest first, then creation time, then
// policy id (Applicable), so the highest priority mutates last and wins.
// First every mutation runs, policy by
// policy in that order and, within a policy, rule by rule in the order the
// policy lists them, each seeing the request as the previous ones left it.
// Then every validation runs on the mutated request. A violation of a
// policy in enforce mode denies the deployment; a violation of a policy in
// audit mode, and a notice (the instance-count notification), is reported
// as a warning and the request is admitted.
package admit
