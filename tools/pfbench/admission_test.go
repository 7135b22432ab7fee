package main

import (
	"context"
	"testing"

	"github.com/policyflow/policyflow/services/admission/admit"
)

// The bench's policies all compile and its requests are decided both
// ways, so a run measures admissions and denials rather than failing.
func TestAdmissionWorkloadIsValid(t *testing.T) {
	var compiled []*admit.Compiled
	for i := 0; i < 200; i++ {
		c, err := admit.CompilePolicy(admissionPolicy(i, 20))
		if err != nil {
			t.Fatalf("policy %d: %v", i, err)
		}
		compiled = append(compiled, c)
	}
	admitted, denied := 0, 0
	for i := 0; i < 40; i++ {
		r := admissionRequest(i, 20, "d")
		if err := r.Normalize(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if v, _ := admit.Evaluate(context.Background(), r, compiled); v.Admitted {
			admitted++
		} else {
			denied++
		}
	}
	if admitted == 0 || denied == 0 {
		t.Errorf("%d admitted, %d denied: want both", admitted, denied)
	}
}
