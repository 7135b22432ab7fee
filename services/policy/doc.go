// Package policy holds the policy semantics every policyflow stage shares:
// the one validation of a policy_body entering policyflow (Check), the
// header that stands for a body where only it is needed (Header),
// policy_id derivation, latest-version selection, PDP notification types,
// and policy-filter matching (one filter, or many at once through an
// Index), and who may hold a policy (MayHold: global policies anyone, a
// tenant's policy only that tenant), all pure and without I/O.
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
//     or full policyName literally. A body without matchingConditions
//     matches as if they were {}; one whose matchingConditions are not an
//     object matches no filter.
//
// A body is checked once, where it enters (the North API's push, and
// pdp-ingest for pushed bodies and for what the PDP answers), and travels
// on as the canonical JSON Check returns. Its Header (policyName,
// policyVersion, matchingConditions as canonical JSON, and BodyHash, the
// SHA-256 name of the canonical bytes) is what stages that only match or
// compare policies carry instead of the body. Check accepts a body when:
//
//   - it is one JSON object in UTF-8, with no key given twice in any
//     object, nesting at most MaxDepth deep;
//   - policyName is <policy_id>.<version>.<ext>, at most MaxNameBytes long,
//     of ASCII letters, digits, '.', '_', '-' and ':' only (no '/', space or
//     control character), with no "..", the policy_id starting with a letter
//     or a digit, the version an integer and the extension letters; such a
//     policy_id is one Consul key segment;
//   - policyVersion, when given, is a string of digits equal to the version
//     in policyName (when not given, that version is filled in);
//   - matchingConditions, when given, is a JSON object;
//   - policyConfigStatus is CONFIG_RETRIEVED and config is not empty;
//   - its canonical JSON is at most MaxBodyBytes (512 KiB: one Consul value,
//     and well within what the Avro decoder of every stage reads).
package policy
