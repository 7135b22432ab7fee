// Package stagetest is the shared support of the stage tests: an in-process
// Kafka (kfake) with the helpers to produce events and read topics back,
// a real Consul dev agent, and a stage environment tuned for tests. It is
// imported only by _test.go files.
package stagetest
