package northapi

import "github.com/policyflow/policyflow/services/nmp/nmpapi"

// The answer types and headers clients of the API read, from the
// subsystem packages that define them.
type (
	// NMPStatus is the answer of GET /v1/orgs/{org}/nmps/{name}/status.
	NMPStatus = nmpapi.NMPStatus
	// DirectiveAnswer is a node's directive as agents read it.
	DirectiveAnswer = nmpapi.DirectiveAnswer
)

// The headers of GET /v1/agentpackages/{version}/file.
const (
	SignatureHeader  = nmpapi.SignatureHeader
	SigningKeyHeader = nmpapi.SigningKeyHeader
)
