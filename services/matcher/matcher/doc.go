// Package matcher is the matcher stage: it decides which policies every
// component of its partitions must have (by policy_id and by policy filter,
// matched through a policy.Index) and turns policy changes, component
// registrations and catch-up requests into per-deployment PolicyMatch deltas
// against what each component already has: one PolicyMatch per deployment
// per input, however large.
//
// It never holds or sends a policy body. Its view of policy.catalog keeps
// each policy's header (policy.Header: what filters look at) and
// body_hash; a change brings the new version's header; what a component
// has is known by version and body_hash. Deltas name policies by
// reference (policy_id, policy_name, policy_version, body_hash, an empty
// body): the segmenter fills the bodies in from policy.catalog and cuts
// what is too large for one record.
//
// The decision logic (Matcher, Catalog, Partition) is pure and does no I/O;
// Stage wires it to Kafka through services/runtime. Preview runs the same
// decision on a state built for one question, for the North API's
// what-if of a policy publish.
//
// Choices operators can observe:
//
//   - A policy wanted by policy_id that is newly added is listed in
//     added_policies under the filter id "policy_ids" (ByIDFilterID), the
//     name of the component field that asked for it. A policy both wanted by
//     id and selected by a filter is listed once, under "policy_ids"; a
//     policy selected by several filters is listed once, under the first of
//     them in the component's declared order.
//   - updated_policies lists policies the component already has whose
//     catalog version is greater, or equal with a different body_hash. A lower
//     catalog version than the component has is never sent (version
//     fencing): a component keeps the newer version.
//   - removed_policies lists policies the component has that left the
//     catalog or that it no longer wants (no filter matches any more and
//     not wanted by id), with the version it had.
//   - The first time a component is registered, and on a catch-up of a
//     component whose collection was never written, a delta is sent even
//     when it is empty, so that its (possibly empty) collection is written.
//   - A component gets global policies and its own tenant's only
//     (policy.MayHold, with the owner each catalog entry and change
//     carries): neither a policy_id nor a filter such as ".*" brings it
//     another tenant's policy, and one it holds that stops being allowed is
//     removed.
//   - A tombstone of a component sends one delta removing everything it
//     has (the executor uninstalls it because deploy.components holds the
//     tombstone) and the matcher forgets it.
package matcher
