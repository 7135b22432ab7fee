package executor

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

// TestModelDecidesAsNext: the model's decision on an update is Next's on
// the same collection and registration, once the collection was kept
// compacted, and an update of a component it does not know is refused as
// the stage refuses it.
func TestModelDecidesAsNext(t *testing.T) {
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	reg := &events.Component{ComponentID: "c1", DeploymentID: "d1", ServiceComponentName: "c1",
		Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://127.0.0.1/hook/c1", TimeoutMs: 1000}}
	cur := &events.ComponentPolicies{ComponentID: "c1", DeploymentID: "d1", ServiceComponentName: "c1", UpdateID: "u1",
		Generation: 1, Policies: []events.Policy{pol("A", "1"), pol("B", "1")}, Notify: reg.Notify}
	upd := &Update{UpdateID: "u2", DeploymentID: "d1", Components: []events.ComponentDelta{
		{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("A", "2")}},
	}}

	m := NewModel()
	if err := m.Register("c1", reg); err != nil {
		t.Fatal(err)
	}
	m.Commit(cur)
	if m.Registrations() != 1 || m.Collections() != 1 {
		t.Fatalf("model holds %d registrations and %d collections, want 1 and 1", m.Registrations(), m.Collections())
	}
	got, err := m.Apply(upd, at)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Next(cur, reg, Delta{ComponentDelta: upd.Components[0], UpdateID: "u2", DeploymentID: "d1", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("model decided %+v, want %+v", got, want)
	}

	// The same update again, once its collection is kept, changes nothing.
	m.Wrote(got)
	if k := m.Kept("c1"); k == nil || k.Generation != 2 || !reflect.DeepEqual(k.Policies, want.Policies) {
		t.Fatalf("kept %+v after the write, want generation 2 with %+v", k, want.Policies)
	}
	if again, err := m.Apply(upd, at); err != nil || len(again) != 0 {
		t.Fatalf("the update applied again gave %d collections, %v; want none", len(again), err)
	}

	unknown := &Update{UpdateID: "u3", DeploymentID: "d1", Components: []events.ComponentDelta{{ComponentID: "c2"}}}
	if _, err := m.Apply(unknown, at); !errors.Is(err, errUnknownComponent) {
		t.Fatalf("an update of an unregistered component: %v, want errUnknownComponent", err)
	}
	if err := m.Register("c1", nil); err != nil || m.Registrations() != 0 {
		t.Fatalf("a tombstone left %d registrations (%v)", m.Registrations(), err)
	}
}
