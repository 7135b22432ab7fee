package consulkv_test

import (
	"context"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// TestDependencyOfAFrozenAgent: an agent that accepts connections and
// answers nothing (frozen, SIGSTOP) fails the check within the runtime's
// dependency timeout; a running agent passes it.
func TestDependencyOfAFrozenAgent(t *testing.T) {
	cl, err := consulkv.Config{Addr: testkit.SilentListener(t)}.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runtime.DependencyTimeout)
	defer cancel()
	start := time.Now()
	if err := consulkv.Dependency(cl).Check(ctx); err == nil {
		t.Fatal("a frozen agent passed the check")
	}
	if took := time.Since(start); took > 2*runtime.DependencyTimeout {
		t.Errorf("the check of a frozen agent took %s; want about %s", took, runtime.DependencyTimeout)
	}

	_, up := stagetest.Consul(t)
	if err := consulkv.Dependency(up).Check(context.Background()); err != nil {
		t.Errorf("a running agent failed the check: %v", err)
	}
}
