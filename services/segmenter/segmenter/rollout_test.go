package segmenter

import (
	"context"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// withPrevious is a catalog that also holds a rollout's previous version.
type withPrevious struct {
	*lagging
	id, hash, body string
}

func (w withPrevious) Previous(id, hash string) (string, bool) {
	if id == w.id && hash == w.hash {
		return w.body, true
	}
	return "", false
}

// TestFillTakesARolloutsPreviousVersion: while version 2 rolls out, a
// component outside the step is named version 1, which the catalog no
// longer holds; its body comes from the rollout, never the latest's.
func TestFillTakesARolloutsPreviousVersion(t *testing.T) {
	v1E, v1 := version("DCAE.Config_a", "1", 100)
	v2E, _ := version("DCAE.Config_a", "2", 100)
	cat := withPrevious{lagging: &lagging{seen: entries(v2E), committed: entries(v2E)}, id: v1E.PolicyID, hash: v1E.BodyHash, body: v1E.Body}
	m := refMatch(eventsDelta("c1", v1))
	notes, err := Fill(context.Background(), cat, m)
	if err != nil {
		t.Fatal(err)
	}
	got := m.Components[0].UpdatedPolicies[0]
	if len(notes) != 0 || got.PolicyVersion != "1" || got.Body != v1E.Body || got.BodyHash != v1E.BodyHash {
		t.Fatalf("filled %s@%s (notes %+v), want version 1's body", got.PolicyID, got.PolicyVersion, notes)
	}
	// Without the rollout the latest is taken, as before.
	m = refMatch(eventsDelta("c1", v1))
	if _, err := Fill(context.Background(), cat.lagging, m); err != nil {
		t.Fatal(err)
	}
	if got := m.Components[0].UpdatedPolicies[0]; got.PolicyVersion != "2" {
		t.Fatalf("without a rollout filled version %s, want the latest 2", got.PolicyVersion)
	}
}

func eventsDelta(id string, p events.Policy) events.ComponentDelta {
	return events.ComponentDelta{ComponentID: id, UpdatedPolicies: []events.Policy{p}}
}
