package northapi

import (
	"github.com/policyflow/policyflow/services/policy/policyapi"
)

// Registration is what a component registration may ask for
// (policyapi.Registration).
type Registration = policyapi.Registration

// RegistrationFromEnv is the Registration the environment gives.
func RegistrationFromEnv() Registration { return policyapi.RegistrationFromEnv() }
