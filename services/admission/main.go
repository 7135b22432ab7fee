// Command admission decides deployment requests: it reads deploy.requests,
// mutates and validates each against the tenant's application policies
// (followed from app.policies) and against what is deployed (followed
// from deploy.deployments), checks the placement of its resources
// against the datacenter it names (followed from placement.datacenters)
// and the capacity earlier deployments use, writes the verdict to
// admission.verdicts, registers the components of an admitted request on
// deploy.components, records the deployment on deploy.deployments and
// bills it on billing.events, all in the input's transaction; a deletion
// releases the deployment and removes its components.
package main

import (
	"github.com/policyflow/policyflow/services/admission/admission"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(admission.Stage()) }
