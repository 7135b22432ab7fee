// Package schemas holds policyflow's Avro schemas, one .avsc per event, as
// the source of truth for the Go types in package events. Every released
// version of a schema is frozen under history/ so readers can decode
// records written by older writers.
package schemas

import "embed"

// Current holds the current version of every schema: <event>.avsc.
//
//go:embed *.avsc
var Current embed.FS

// History holds every released version: history/<event>.v<N>.avsc.
//
//go:embed history/*.avsc
var History embed.FS
