// Command replica-sync keeps the registry of participant replicas and
// writes every change they report to the compacted acm.sync, from which
// every replica of a participant rebuilds the same state (seed 003).
package main

import (
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(replicasync.Stage()) }
