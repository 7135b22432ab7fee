// Package runtime is the one consume-process-produce loop every policyflow
// stage runs on: transactional Kafka-to-Kafka processing, ordered
// at-least-once sinks for effects outside Kafka, dead-lettering, retries,
// recovery from panics, health, metrics, configuration and graceful
// shutdown. A stage supplies only its decision function, typed to the
// event it reads (Typed, TypedBatch, Route); state it needs from a
// compacted topic is a Table (a TableOf when each record is compiled or
// folded as it is read), or rows read back (Rows, Apply). Tables are also
// the North API's read views, which list them sorted and wait for their
// own writes. An effect that ends after its handler returned holds its
// input's offset (Input.Hold); what a stage writes besides its handler's
// outputs (on a timer, for such an effect, dead letters of followed
// records) goes through an Emitter.
package runtime
