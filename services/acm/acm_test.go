package acm

import (
	"errors"
	"testing"

	"github.com/policyflow/policyflow/services/check"
)

func TestKeys(t *testing.T) {
	for key, want := range map[string]string{
		ReplicaKey("p1", "r1"):           "p1/replica/r1",
		CompositionKey("p1", "c1"):       "p1/composition/c1",
		ElementKey("p1", "i1", "e1"):     "p1/instance/i1/e1",
		OperationKey("p1", "c1", "i1"):   "i1",
		OperationKey("p1", "c1", ""):     "c1",
		OperationKey("p1", "", ""):       "p1",
		ParticipantOf("p1/instance/i/e"): "p1",
	} {
		if key != want {
			t.Errorf("got %q, want %q", key, want)
		}
	}
}

func TestTransition(t *testing.T) {
	for _, op := range []string{OpPrime, OpDeprime, OpDeploy, OpUpdate, OpUndeploy, OpDelete} {
		during, after, ok := Transition(op)
		if !ok || !InTransition(during) || InTransition(after) {
			t.Errorf("%s: %s -> %s (%v)", op, during, after, ok)
		}
	}
	if _, _, ok := Transition("RESTART"); ok {
		t.Error("RESTART has a transition")
	}
}

func TestCheckID(t *testing.T) {
	for _, ok := range []string{"p1", "a.b:c_d-e", "5D1E3A5E-0000-4000-8000-000000000001"} {
		if err := check.ID("id", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "a b", "..", "a..b", string(make([]byte, 256))} {
		if err := check.ID("id", bad); !errors.Is(err, ErrBadID) {
			t.Errorf("%q: %v, want ErrBadID", bad, err)
		}
	}
}
