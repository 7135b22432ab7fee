package segmenter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

func ptr(s string) *string { return &s }

// smallMax is a segment limit under the 1 MiB record limit Kafka brokers
// apply by default, so that deltas of a few MiB are cut into many pieces.
const smallMax = 900 << 10

// body returns a policy_body JSON of about size bytes.
func body(id, version string, size int) string {
	head := fmt.Sprintf(`{"policyName":"%s.%s.xml","policyVersion":"%s","config":{"blob":"`, id, version, version)
	tail := `"}}`
	n := size - len(head) - len(tail)
	if n < 0 {
		n = 0
	}
	return head + strings.Repeat("x", n) + tail
}

func pol(id, version string, size int) events.Policy {
	return events.Policy{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version, Body: body(id, version, size)}
}

// bigMatch is a delta of about total bytes over comps components: each
// component gets removals, updated policies and policies added by two
// filters, bodies of bodySize bytes.
func bigMatch(comps, total, bodySize int) *events.PolicyMatch {
	m := &events.PolicyMatch{
		UpdateID:     "u-big",
		DeploymentID: "dep-1",
		CatchUp:      true,
		CreatedAt:    time.UnixMilli(1700000000000).UTC(),
	}
	perComp := total / comps / bodySize
	for c := 0; c < comps; c++ {
		d := events.ComponentDelta{ComponentID: fmt.Sprintf("comp-%02d", c)}
		for r := 0; r < 3; r++ {
			d.RemovedPolicies = append(d.RemovedPolicies, events.RemovedPolicy{PolicyID: fmt.Sprintf("DCAE.Config_old_%d_%d", c, r), PolicyVersion: ptr("4")})
		}
		for i := 0; i < perComp; i++ {
			p := pol(fmt.Sprintf("DCAE.Config_p_%d_%d", c, i), fmt.Sprint(i+1), bodySize)
			switch i % 3 {
			case 0:
				d.UpdatedPolicies = append(d.UpdatedPolicies, p)
			default:
				f := fmt.Sprintf("filter-%d", i%3)
				if len(d.AddedPolicies) < 2 {
					d.AddedPolicies = append(d.AddedPolicies, events.FilterMatch{FilterID: "filter-1"}, events.FilterMatch{FilterID: "filter-2"})
				}
				for j := range d.AddedPolicies {
					if d.AddedPolicies[j].FilterID == f {
						d.AddedPolicies[j].Policies = append(d.AddedPolicies[j].Policies, p)
					}
				}
			}
		}
		m.Components = append(m.Components, d)
	}
	return m
}

// normalize makes nil and empty lists alike, for comparisons.
func normalize(m *events.PolicyMatch) *events.PolicyMatch {
	out := *m
	out.Components = nil
	for _, d := range m.Components {
		n := d
		if len(n.UpdatedPolicies) == 0 {
			n.UpdatedPolicies = nil
		}
		if len(n.RemovedPolicies) == 0 {
			n.RemovedPolicies = nil
		}
		if len(n.AddedPolicies) == 0 {
			n.AddedPolicies = nil
		}
		n.AddedPolicies = nil
		for _, fm := range d.AddedPolicies {
			if len(fm.Policies) == 0 {
				fm.Policies = nil
			}
			n.AddedPolicies = append(n.AddedPolicies, fm)
		}
		out.Components = append(out.Components, n)
	}
	return &out
}

// byComponent indexes a match's deltas by component id.
func byComponent(m *events.PolicyMatch) map[string]events.ComponentDelta {
	out := map[string]events.ComponentDelta{}
	for _, d := range normalize(m).Components {
		out[d.ComponentID] = d
	}
	return out
}

func encodedSize(t testing.TB, s *events.PolicySegment) int {
	t.Helper()
	b, err := events.Default().Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// kinds says which kinds of change a segment carries.
func kinds(s events.PolicySegment) (removals, others bool) {
	for _, d := range s.Components {
		if len(d.RemovedPolicies) > 0 {
			removals = true
		}
		if len(d.UpdatedPolicies) > 0 || len(d.AddedPolicies) > 0 {
			others = true
		}
	}
	return
}

func TestSplit(t *testing.T) {
	small := &events.PolicyMatch{
		UpdateID: "u-1", DeploymentID: "dep-1", CreatedAt: time.UnixMilli(1).UTC(),
		Components: []events.ComponentDelta{
			{ComponentID: "vm_2_9d982", UpdatedPolicies: []events.Policy{{
				PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
				Body: `{"config":{"min_memory":"8GB"},"policyVersion":"222","policyName":"DCAE.Config_VM_MEMORY.222.xml"}`,
			}}},
			{ComponentID: "vm_3", RemovedPolicies: []events.RemovedPolicy{{PolicyID: "DCAE.Config_old", PolicyVersion: ptr("3")}}},
		},
	}
	// An uninstalled component with no policy left: its delta carries no
	// policy, and must still reach the executor.
	withBare := bigMatch(4, 3<<20, 40<<10)
	withBare.Components = append(withBare.Components, events.ComponentDelta{ComponentID: "gone"})
	// Many tiny removals cross Avro's array block boundaries inside a
	// small limit.
	removals := &events.PolicyMatch{UpdateID: "u-rm", DeploymentID: "dep-rm", CreatedAt: time.UnixMilli(2).UTC()}
	for c := 0; c < 3; c++ {
		d := events.ComponentDelta{ComponentID: fmt.Sprintf("c%d", c)}
		for i := 0; i < 700; i++ {
			d.RemovedPolicies = append(d.RemovedPolicies, events.RemovedPolicy{PolicyID: fmt.Sprintf("DCAE.Config_r%04d", i), PolicyVersion: ptr(fmt.Sprint(i))})
		}
		d.UpdatedPolicies = []events.Policy{pol("DCAE.Config_u", "1", 100)}
		removals.Components = append(removals.Components, d)
	}
	// One filter that selects nothing new still travels.
	emptyFilter := bigMatch(2, 2<<20, 100<<10)
	emptyFilter.Components[1].AddedPolicies = append(emptyFilter.Components[1].AddedPolicies, events.FilterMatch{FilterID: "filter-empty"})

	tests := []struct {
		name      string
		match     *events.PolicyMatch
		max       int
		minPieces int
		maxPieces int
	}{
		{name: "under the limit is one piece 1/1", match: small, max: DefaultMaxBytes, minPieces: 1, maxPieces: 1},
		{name: "10 MB delta is cut under 900 KiB", match: bigMatch(8, 10<<20, 64<<10), max: smallMax, minPieces: 12, maxPieces: 14},
		{name: "bodies at the 512 KiB policy limit", match: bigMatch(2, 4<<20, 512<<10), max: smallMax, minPieces: 6, maxPieces: 8},
		{name: "component without policy is kept", match: withBare, max: 256 << 10, minPieces: 12, maxPieces: 20},
		{name: "thousands of removals across array blocks", match: removals, max: 8 << 10, minPieces: 4, maxPieces: 12},
		{name: "filter match with no policy is kept", match: emptyFilter, max: 300 << 10, minPieces: 7, maxPieces: 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			segs, err := Split(tc.match, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) < tc.minPieces || len(segs) > tc.maxPieces {
				t.Fatalf("got %d pieces, want %d..%d", len(segs), tc.minPieces, tc.maxPieces)
			}
			seenOthers := false
			for i, s := range segs {
				if s.Index != int32(i+1) || s.Count != int32(len(segs)) {
					t.Fatalf("piece %d is %d/%d, want %d/%d", i, s.Index, s.Count, i+1, len(segs))
				}
				if s.UpdateID != tc.match.UpdateID || s.DeploymentID != tc.match.DeploymentID ||
					s.CatchUp != tc.match.CatchUp || !s.CreatedAt.Equal(tc.match.CreatedAt) {
					t.Fatalf("piece %d carries update %s deployment %s catch_up %v created %v, want those of the match",
						s.Index, s.UpdateID, s.DeploymentID, s.CatchUp, s.CreatedAt)
				}
				if n := encodedSize(t, &segs[i]); n > tc.max {
					t.Fatalf("piece %d/%d encodes to %d bytes, over the limit of %d", s.Index, s.Count, n, tc.max)
				}
				removals, others := kinds(s)
				if removals && seenOthers {
					t.Fatalf("piece %d carries removals after a piece that carried updates", s.Index)
				}
				seenOthers = seenOthers || others
			}
			back, err := Assemble(segs)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := byComponent(back), byComponent(tc.match); !reflect.DeepEqual(got, want) {
				t.Fatalf("reassembled deltas differ from the original")
			}
			if len(back.Components) != len(tc.match.Components) {
				t.Fatalf("reassembled %d components, want %d", len(back.Components), len(tc.match.Components))
			}
			if back.UpdateID != tc.match.UpdateID || back.DeploymentID != tc.match.DeploymentID || back.CatchUp != tc.match.CatchUp {
				t.Fatalf("reassembled envelope %+v differs from the match", back)
			}
		})
	}
}

func TestSplitUnderLimitKeepsTheMatchAsIs(t *testing.T) {
	m := bigMatch(3, 200<<10, 10<<10)
	segs, err := Split(m, smallMax)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 1 || segs[0].Index != 1 || segs[0].Count != 1 {
		t.Fatalf("got %d pieces, want one 1/1", len(segs))
	}
	if !reflect.DeepEqual(segs[0].Components, m.Components) {
		t.Fatal("the single piece does not carry the match's components unchanged")
	}
}

func TestSplitReassemblesInComponentOrderWhenEveryComponentRemoves(t *testing.T) {
	m := bigMatch(5, 6<<20, 50<<10)
	segs, err := Split(m, smallMax)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 2 {
		t.Fatalf("got %d pieces, want several", len(segs))
	}
	back, err := Assemble(segs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(back), normalize(m)) {
		t.Fatal("reassembled match differs from the original")
	}
}

func TestSplitRefusesAPolicyBiggerThanASegment(t *testing.T) {
	m := &events.PolicyMatch{UpdateID: "u-x", DeploymentID: "dep-x", Components: []events.ComponentDelta{{
		ComponentID:     "c",
		UpdatedPolicies: []events.Policy{pol("DCAE.Config_small", "1", 1000), pol("DCAE.Config_huge", "7", 600<<10)},
	}}}
	_, err := Split(m, 512<<10)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	for _, want := range []string{"DCAE.Config_huge", "version 7", "component c", "524288"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
}

func TestSplitRefusesATinyLimit(t *testing.T) {
	if _, err := Split(&events.PolicyMatch{UpdateID: "u"}, 100); err == nil {
		t.Fatal("a 100-byte limit was accepted")
	}
	if _, err := Split(nil, DefaultMaxBytes); err == nil {
		t.Fatal("a nil match was accepted")
	}
}

// The size estimate must bound the real encoding of every part, or a piece
// could exceed the limit.
func TestSizeEstimateBoundsTheEncoding(t *testing.T) {
	base := &events.PolicySegment{UpdateID: "u-1", DeploymentID: "dep-1", Components: []events.ComponentDelta{{ComponentID: "c"}}}
	p := pol("DCAE.Config_a", "12", 3000)
	r1 := events.RemovedPolicy{PolicyID: "DCAE.Config_b", PolicyVersion: ptr("9")}
	r2 := events.RemovedPolicy{PolicyID: "DCAE.Config_c"}
	fm := events.FilterMatch{FilterID: "f-1"}
	cases := []struct {
		name string
		set  func(d *events.ComponentDelta)
		est  int
	}{
		{"policy", func(d *events.ComponentDelta) { d.UpdatedPolicies = []events.Policy{p} }, policySize(p) + blockHeader},
		{"removal with version", func(d *events.ComponentDelta) { d.RemovedPolicies = []events.RemovedPolicy{r1} }, removedSize(r1) + blockHeader},
		{"removal without version", func(d *events.ComponentDelta) { d.RemovedPolicies = []events.RemovedPolicy{r2} }, removedSize(r2) + blockHeader},
		{"empty filter match", func(d *events.ComponentDelta) { d.AddedPolicies = []events.FilterMatch{fm} }, filterSize(fm) + blockHeader},
	}
	before := encodedSize(t, base)
	for _, tc := range cases {
		s := *base
		s.Components = []events.ComponentDelta{{ComponentID: "c"}}
		tc.set(&s.Components[0])
		got := encodedSize(t, &s) - before
		if got > tc.est || got < tc.est-blockHeader {
			t.Errorf("%s: encoding adds %d bytes, estimate %d is not a tight upper bound", tc.name, got, tc.est)
		}
	}
}

func TestAssembleRefusesIncompleteOrMixedPieces(t *testing.T) {
	segs, err := Split(bigMatch(4, 4<<20, 64<<10), smallMax)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 3 {
		t.Fatalf("got %d pieces, want at least 3", len(segs))
	}
	if _, err := Assemble(segs[:len(segs)-1]); err == nil {
		t.Fatal("assembled an update with its last piece missing")
	}
	mixed := append([]events.PolicySegment(nil), segs...)
	mixed[1].UpdateID = "u-other"
	if _, err := Assemble(mixed); err == nil {
		t.Fatal("assembled pieces of two updates")
	}
	reversed := make([]events.PolicySegment, len(segs))
	for i := range segs {
		reversed[len(segs)-1-i] = segs[i]
	}
	if _, err := Assemble(reversed); err != nil {
		t.Fatalf("pieces out of order: %v", err)
	}
	if _, err := Assemble(nil); err == nil {
		t.Fatal("assembled nothing")
	}
}

// Pieces survive the codec: what the executor decodes reassembles to the
// original.
func TestPiecesRoundTripThroughTheCodec(t *testing.T) {
	m := bigMatch(6, 5<<20, 80<<10)
	segs, encoded, err := split(events.Default(), m, smallMax)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []events.PolicySegment
	for _, b := range encoded {
		ev, err := events.Default().Decode(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		decoded = append(decoded, *ev.(*events.PolicySegment))
	}
	if len(decoded) != len(segs) {
		t.Fatalf("decoded %d pieces, want %d", len(decoded), len(segs))
	}
	back, err := Assemble(decoded)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(byComponent(back), byComponent(m)) {
		t.Fatal("decoded pieces do not reassemble to the original deltas")
	}
}

func BenchmarkSplit10MB(b *testing.B) {
	m := bigMatch(8, 10<<20, 64<<10)
	total := 0
	for _, d := range m.Components {
		for _, p := range d.UpdatedPolicies {
			total += len(p.Body)
		}
		for _, fm := range d.AddedPolicies {
			for _, p := range fm.Policies {
				total += len(p.Body)
			}
		}
	}
	codec := events.Default()
	b.SetBytes(int64(total))
	b.ReportAllocs()
	b.ResetTimer()
	var pieces int
	for i := 0; i < b.N; i++ {
		_, encoded, err := split(codec, m, smallMax)
		if err != nil {
			b.Fatal(err)
		}
		pieces = len(encoded)
	}
	b.ReportMetric(float64(pieces), "pieces")
}
