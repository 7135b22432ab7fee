// Package stages lists every pipeline stage that exists, for processes
// that run several of them (the embedded stack, benchmarks, tests).
package stages

import "github.com/policyflow/policyflow/services/runtime"

// All returns every stage, in pipeline order.
func All() []runtime.Stage {
	return nil
}
