package consulparticipant

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
)

func TestCallbacksWriteAndDeleteTheElementKey(t *testing.T) {
	_, client := stagetest.Consul(t)
	cb := Callbacks(client.KV(), "test/acm/")[ElementType]
	ctx := context.Background()
	e := participant.Element{InstanceID: "i1", ElementID: "e1", ElementType: ElementType, Properties: json.RawMessage(`{"greeting":"hello"}`)}
	out, err := cb.Deploy(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	key := consulkv.ParticipantElementKey("test/acm", "i1", "e1")
	if key != "test/acm/i1/e1" || string(out) != `{"consulKey":"test/acm/i1/e1"}` {
		t.Errorf("key %s, out properties %s", key, out)
	}
	pair, _, err := client.KV().Get(key, nil)
	if err != nil || pair == nil || string(pair.Value) != `{"greeting":"hello"}` {
		t.Fatalf("Consul %s: %v %v", key, pair, err)
	}
	e.Properties = json.RawMessage(`{"greeting":"bye"}`)
	if _, err := cb.Update(ctx, e); err != nil {
		t.Fatal(err)
	}
	if pair, _, _ := client.KV().Get(key, nil); pair == nil || string(pair.Value) != `{"greeting":"bye"}` {
		t.Fatalf("after update: %v", pair)
	}
	if err := cb.Undeploy(ctx, e); err != nil {
		t.Fatal(err)
	}
	if pair, _, _ := client.KV().Get(key, nil); pair != nil {
		t.Fatalf("after undeploy the key holds %s", pair.Value)
	}
	// A cancelled operation writes nothing and says so.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cb.Deploy(cctx, e); err == nil {
		t.Error("a deploy with a cancelled context succeeded")
	}
}
