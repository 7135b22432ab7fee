// Package policy holds the policy semantics every policyflow stage shares:
// policy_id derivation, latest-version selection and validation of PDP
// policy_body objects, PDP notification types, and policy-filter matching
// (one filter, or many at once through an Index), all pure and without I/O.
//
// The rules follow the ONAP DCAE policy-handler and the PDP /getConfig API:
//
//   - policy_id is policyName without its trailing ".<version>.<ext>".
//   - The latest body of a policy_id has the greatest integer policyVersion;
//     versions that are not all ASCII digits are skipped; an invalid latest
//     body is reported as errored, never replaced by an older version.
//   - A filter's policyName is a Go regular expression anchored at the start
//     of the full policyName and not at its end: "DCAE.Config_VM" matches
//     "DCAE.Config_VM_MEMORY.5.xml". This is what the policy-handler's
//     matcher and its PDP mock do (Python re.match), and it is how a bare
//     policy_id given as policyName finds all versions of that policy. A
//     filter also matches when its policyName equals the body's policy_id
//     or full policyName literally.
package policy
