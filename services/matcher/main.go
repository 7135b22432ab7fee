// Command matcher runs the matcher stage: it matches policy changes,
// component registrations and catch-up requests to the components of its
// partitions and writes per-deployment deltas to policy.matches.
package main

import (
	"github.com/policyflow/policyflow/services/matcher/matcher"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(matcher.Stage()) }
