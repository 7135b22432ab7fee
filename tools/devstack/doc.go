// Package devstack runs policyflow's embedded backend on one machine: an
// in-process Kafka-protocol broker (kfake) that can keep its state in a data
// directory, and a real Consul agent started from a local binary. Either can
// be secured as a production one is: the broker with TLS (LoopbackTLS makes
// a certificate), SASL users and ACLs, the agent with ACLs in default deny. The
// `policyctl dev` command, the `devbroker` command, the integration tests'
// embedded backend and the benchmarks all start their backend through it.
// It also keeps the dev stack's North API admin token (EnsureDevToken).
package devstack
