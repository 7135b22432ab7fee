// Command executor assembles the pieces of each per-deployment policy update
// and writes every affected component's full policy collection to
// component.policies.
package main

import (
	"github.com/policyflow/policyflow/services/executor/executor"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(executor.Stage()) }
