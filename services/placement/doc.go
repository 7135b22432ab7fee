// Package placement checks where the resources of a deployment are placed
// against a datacenter model (seed 002, the Heat policy extension): the
// datacenter is a location tree and a network tree sharing their leaves,
// the template groups its resources and applies placement policies
// (collocation, anti-collocation, LLMN anti-collocation, network hop-count
// limit, bandwidth, and the recorded-only kinds) to resources, groups or
// pairs of them. Check reports every policy a placement breaks; Propose
// searches for a placement that meets every hard policy. It does no I/O:
// the admission stage, the North API and policyctl call it.
package placement
