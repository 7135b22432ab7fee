package executor

import (
	"reflect"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/events"
)

// pol is policy id at version as the segmenter sends it: with its body
// and body_hash.
func pol(id, version string) events.Policy {
	return hashed(events.Policy{
		PolicyID:      id,
		PolicyName:    id + "." + version + ".xml",
		PolicyVersion: version,
		Body:          `{"policyName":"` + id + "." + version + `.xml","policyVersion":"` + version + `","config":{"v":"` + version + `"}}`,
	})
}

func seg(update string, index, count int32, comps ...events.ComponentDelta) *events.PolicySegment {
	return &events.PolicySegment{UpdateID: update, DeploymentID: "dep-1", Index: index, Count: count, Components: comps}
}

func ids(ps []events.Policy) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.PolicyID+"@"+p.PolicyVersion)
	}
	return out
}

func TestAssemblerSinglePiece(t *testing.T) {
	a := NewAssembler()
	upd, abandoned, err := a.Add(0, seg("u1", 1, 1, events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("A", "1")}}))
	if err != nil || len(abandoned) != 0 {
		t.Fatalf("Add: %v, abandoned %v", err, abandoned)
	}
	if upd == nil || upd.UpdateID != "u1" || len(upd.Components) != 1 || upd.Components[0].ComponentID != "c1" {
		t.Fatalf("single piece did not give its update: %+v", upd)
	}
	if n := len(a.Pending()); n != 0 {
		t.Fatalf("a single piece left %d pending updates", n)
	}
}

func TestAssemblerCollectsPiecesInAnyOrderAndToleratesRepeats(t *testing.T) {
	a := NewAssembler()
	p1 := seg("u1", 1, 3, events.ComponentDelta{ComponentID: "c1", RemovedPolicies: []events.RemovedPolicy{{PolicyID: "Z"}}})
	p2 := seg("u1", 2, 3,
		events.ComponentDelta{ComponentID: "c1", UpdatedPolicies: []events.Policy{pol("A", "2")}},
		events.ComponentDelta{ComponentID: "c2", UpdatedPolicies: []events.Policy{pol("B", "1")}})
	p3 := seg("u1", 3, 3, events.ComponentDelta{ComponentID: "c1", AddedPolicies: []events.FilterMatch{
		{FilterID: "f1", Policies: []events.Policy{pol("C", "4")}}}})
	p3b := seg("u1", 3, 3, events.ComponentDelta{ComponentID: "c1", AddedPolicies: []events.FilterMatch{
		{FilterID: "f1", Policies: []events.Policy{pol("D", "5")}}}})

	for _, s := range []*events.PolicySegment{p2, p2, p1} {
		upd, _, err := a.Add(4, s)
		if err != nil || upd != nil {
			t.Fatalf("piece %d/3: got update %v err %v before every piece was in", s.Index, upd, err)
		}
	}
	upd, _, err := a.Add(4, p3)
	if err != nil || upd == nil {
		t.Fatalf("last piece: update %v err %v", upd, err)
	}
	if len(upd.Components) != 2 || upd.Components[0].ComponentID != "c1" || upd.Components[1].ComponentID != "c2" {
		t.Fatalf("components %+v, want c1 then c2", upd.Components)
	}
	c1 := upd.Components[0]
	if len(c1.RemovedPolicies) != 1 || !reflect.DeepEqual(ids(c1.UpdatedPolicies), []string{"A@2"}) ||
		len(c1.AddedPolicies) != 1 || !reflect.DeepEqual(ids(c1.AddedPolicies[0].Policies), []string{"C@4"}) {
		t.Fatalf("c1 delta not merged across pieces: %+v", c1)
	}
	// The last piece again (a retry after a failed apply) gives the same
	// update until Done; a repeated piece keeps the first copy.
	again, _, err := a.Add(4, p3b)
	if err != nil || again == nil || !reflect.DeepEqual(ids(again.Components[0].AddedPolicies[0].Policies), []string{"C@4"}) {
		t.Fatalf("repeat of the last piece: %+v %v", again, err)
	}
	a.Done("u1")
	if n := len(a.Pending()); n != 0 {
		t.Fatalf("%d pending after Done", n)
	}
}

func TestAssemblerAbandonsIncompleteUpdateOfSameDeployment(t *testing.T) {
	a := NewAssembler()
	if _, _, err := a.Add(1, seg("old", 1, 2)); err != nil {
		t.Fatal(err)
	}
	// Another deployment in the same partition does not abandon it.
	other := seg("x", 1, 2)
	other.DeploymentID = "dep-2"
	if _, ab, _ := a.Add(1, other); len(ab) != 0 {
		t.Fatalf("another deployment abandoned %v", ab)
	}
	_, ab, err := a.Add(1, seg("new", 1, 1))
	if err != nil || !reflect.DeepEqual(ab, []string{"old"}) {
		t.Fatalf("abandoned %v (err %v), want [old]", ab, err)
	}
	for _, p := range a.Pending() {
		if p.UpdateID == "old" {
			t.Fatal("abandoned update still pending")
		}
	}
}

func TestAssemblerRefusesContradictions(t *testing.T) {
	cases := []struct {
		name  string
		first *events.PolicySegment
		bad   *events.PolicySegment
		want  string
	}{
		{"index out of range", nil, seg("u", 3, 2), "out of range"},
		{"zero count", nil, seg("u", 1, 0), "out of range"},
		{"no update id", nil, seg("", 1, 1), "no update_id"},
		{"count changes", seg("u", 1, 3), seg("u", 2, 4), "says 4 pieces"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAssembler()
			if tc.first != nil {
				if _, _, err := a.Add(0, tc.first); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := a.Add(0, tc.bad)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestAssemblerDropForgetsPartition(t *testing.T) {
	a := NewAssembler()
	_, _, _ = a.Add(0, seg("u0", 1, 2))
	s := seg("u5", 1, 2)
	_, _, _ = a.Add(5, s)
	a.Drop(0)
	got := a.Pending()
	if len(got) != 1 || got[0].UpdateID != "u5" || got[0].Partition != 5 || got[0].Complete() {
		t.Fatalf("pending after Drop(0): %+v", got)
	}
	// A piece of the dropped update starts over rather than completing.
	if upd, _, _ := a.Add(0, seg("u0", 2, 2)); upd != nil {
		t.Fatal("dropped update completed from one piece")
	}
}
