// Command nmp-hub computes the directive of every edge node from the node
// management policies, the nodes, the agent packages and the agents'
// statuses, and writes one directive per node to agent.directives.
package main

import (
	"github.com/policyflow/policyflow/services/nmp-hub/nmphub"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(nmphub.Stage()) }
