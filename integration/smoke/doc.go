// Package smoke checks that the integration backend chosen by PF_BACKEND
// works end to end: transactional produce and read-committed consume on a
// prefixed topic, the topology applied under a prefix, and Consul KV.
package smoke
