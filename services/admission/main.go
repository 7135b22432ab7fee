// Command admission decides deployment requests: it reads deploy.requests,
// mutates and validates each against the tenant's application policies
// (followed from app.policies), checks the placement of its resources
// against the datacenter it names (followed from placement.datacenters),
// writes the verdict to admission.verdicts and registers the components
// of an admitted request on deploy.components, all in the input's
// transaction.
package main

import (
	"github.com/policyflow/policyflow/services/admission/admission"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(admission.Stage()) }
