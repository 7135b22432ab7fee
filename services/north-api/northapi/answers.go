package northapi

import (
	"github.com/policyflow/policyflow/services/policy/policyapi"
)

// Registration is what a component registration may ask for
// (policyapi.Registration).
type Registration = policyapi.Registration

// RegistrationFromEnv is the Registration the environment gives.
func RegistrationFromEnv() Registration { return policyapi.RegistrationFromEnv() }

// The answers of the catch-up routes.
type (
	// CatchupAccepted is the answer of POST /v1/catchup.
	CatchupAccepted = policyapi.CatchupAccepted
	// CatchupStatus is the answer of GET /v1/catchup/{request_id}.
	CatchupStatus = policyapi.CatchupStatus
	// CatalogProgress is what pdp-ingest's catch-up found.
	CatalogProgress = policyapi.CatalogProgress
)
