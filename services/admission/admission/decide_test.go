package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/placement"
)

// A stage that stops while it decides a request gives no verdict: the
// request is decided again when the stage restarts, not denied.
func TestDecideGivesNoVerdictWhenStopping(t *testing.T) {
	p, err := admit.Compile("p", []byte(`{"validations":[{"expression":"app.name != ''","message":"m"}],"?":{"type":"io.policyflow.admission.CEL"}}`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dr := request("r1", "d1", "t1", `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"x.A"}]}`)
	noDCs := func(string) (*placement.Model, bool) { return nil, false }
	outs, err := Decide(ctx, dr, nil, State{Policies: []*admit.Compiled{p}, Datacenters: noDCs, Owners: NewNames()}, time.Now())
	if !errors.Is(err, context.Canceled) || len(outs) != 0 {
		t.Fatalf("Decide on a stopping stage = %d outputs, %v; want none and the context's error", len(outs), err)
	}
	outs, err = Decide(context.Background(), dr, nil, State{Policies: []*admit.Compiled{p}, Datacenters: noDCs, Owners: NewNames()}, time.Now())
	if err != nil || !outs[len(outs)-1].Value.(*events.AdmissionVerdict).Admitted {
		t.Fatalf("Decide = %v, %v; want the request admitted", outs, err)
	}
}
