// Package api is the North API's wire format: the request and answer
// bodies and the headers that the server (the subsystem handlers under
// services/*/…api) writes and reads, and that its clients — policyctl and
// the edge agent — send and decode. Both ends import these types, so a
// field added on one side is on the other.
//
// It holds plain structs with JSON tags and no server code: a client that
// imports it pulls in nothing of the server's runtime.
package api

// The headers of GET /v1/agentpackages/{version}/file (and of its upload).
const (
	// ChecksumHeader is the package's SHA-256, hex.
	ChecksumHeader = "X-Checksum-Sha256"
	// SignatureHeader is the package's signature.
	SignatureHeader = "X-Package-Signature"
	// SigningKeyHeader names the key that signed it.
	SigningKeyHeader = "X-Package-Signing-Key"
)
