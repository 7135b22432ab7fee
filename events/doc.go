// Package events holds the Go types of policyflow's Avro events (one per
// schema in package schemas) and the codec that writes them in Avro
// single-object encoding and reads records written by any known version.
package events
