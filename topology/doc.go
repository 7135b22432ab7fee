// Package topology is policyflow's Kafka topic layout as data: every topic
// with its key, value schema, cleanup policy, retention and the roles that
// write and read it, plus Apply and Verify, which make a cluster match that
// data and report where it does not. Services, the dev stack, the tests and
// `policyctl topology` all use this one definition.
package topology
