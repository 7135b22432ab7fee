// Package runtime is the one consume-process-produce loop every policyflow
// stage runs on: transactional Kafka-to-Kafka processing, ordered
// at-least-once sinks for effects outside Kafka, dead-lettering, retries,
// health, metrics, configuration and graceful shutdown. A stage supplies
// only a pure handler.
package runtime
