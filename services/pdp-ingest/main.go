// Command pdp-ingest turns policy engine notifications and pushed policy
// bodies into the policy catalog and the change stream.
package main

import (
	"github.com/policyflow/policyflow/services/pdp-ingest/pdpingest"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(pdpingest.Stage()) }
