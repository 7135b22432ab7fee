// Package web is the small kit every subsystem's HTTP API stands on: JSON
// in (one strict body reader) and out, the error answer, the access roles
// of the route table and the caller of a request, the per-client rate
// limit, the owner checks routes declare, and produce-and-wait (a Kit
// writes records, waits for Kafka, and waits for its own read views to
// show the write). The North API (services/north-api/northapi) assembles
// the subsystems' handlers into one server and one route table.
package web
