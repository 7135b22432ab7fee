package consulwriter

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/consulkv"
)

func members(weight int, scns ...string) []rangeMember {
	out := make([]rangeMember, len(scns))
	for i, scn := range scns {
		out[i] = rangeMember{itemsPrefix: consulkv.ItemsPrefix(scn), weight: weight, refs: []int{i}}
	}
	return out
}

func prefixes(rs []keyRange) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.prefix
	}
	return out
}

// checkRanges fails the test unless rs lists every member once, under a
// prefix of its items prefix, with prefixes none of which holds another,
// and no range over limit but one that cannot be cut.
func checkRanges(t *testing.T, ms []rangeMember, rs []keyRange, limit int) {
	t.Helper()
	refs := []int{}
	for i, r := range rs {
		weight := 0
		for _, m := range r.members {
			if !strings.HasPrefix(m.itemsPrefix, r.prefix) {
				t.Errorf("range %q holds %q", r.prefix, m.itemsPrefix)
			}
			weight += m.weight
			refs = append(refs, m.refs...)
		}
		if weight > limit && len(r.members) > 1 && r.members[0].itemsPrefix != r.prefix {
			t.Errorf("range %q of %d members weighs %d, over %d", r.prefix, len(r.members), weight, limit)
		}
		for k, o := range rs {
			if k != i && strings.HasPrefix(o.prefix, r.prefix) {
				t.Errorf("range %q holds range %q: keys listed twice", r.prefix, o.prefix)
			}
		}
	}
	slices.Sort(refs)
	want := []int{}
	for _, m := range ms {
		want = append(want, m.refs...)
	}
	slices.Sort(want)
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("ranges list members %v, want each of %v once", refs, want)
	}
}

func TestKeyRanges(t *testing.T) {
	var cost []string
	for i := range 512 {
		cost = append(cost, fmt.Sprintf("cost-%03d", i))
	}
	cases := []struct {
		name   string
		ms     []rangeMember
		limit  int
		ranges []string
	}{
		{"under the limit: one range, the longest prefix shared", members(15, cost[:200]...), 4096, []string{"cost-"}},
		{"over the limit: cut by the byte after the shared prefix", members(15, cost...), 4096,
			[]string{"cost-0", "cost-1", "cost-2", "cost-3", "cost-4", "cost-5"}},
		{"a part still over the limit is cut again", members(50, cost[:100]...), 1000,
			[]string{"cost-00", "cost-01", "cost-02", "cost-03", "cost-04", "cost-05", "cost-06", "cost-07", "cost-08", "cost-09"}},
		{"one component over the limit: its own items", members(5000, "big", "bigger"), 4096,
			[]string{consulkv.ItemsPrefix("big"), consulkv.ItemsPrefix("bigger")}},
		{"a name that extends another's", members(3000, "dcae-a", "dcae-ab"), 4096,
			[]string{consulkv.ItemsPrefix("dcae-a"), consulkv.ItemsPrefix("dcae-ab")}},
		{"a name that holds another's items prefix: one range", members(5000, "a", consulkv.ItemKey("a", "b")), 4096,
			[]string{consulkv.ItemsPrefix("a")}},
		{"one component", members(5, "dcae-vm"), rangeKeys, []string{consulkv.ItemsPrefix("dcae-vm")}},
		{"none", nil, rangeKeys, []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := keyRanges(tc.ms, tc.limit)
			if got := prefixes(rs); !reflect.DeepEqual(got, tc.ranges) {
				t.Fatalf("ranges %q, want %q", got, tc.ranges)
			}
			checkRanges(t, tc.ms, rs, tc.limit)
		})
	}
	// Two components of one name are one member.
	ms := append(members(5, "dup"), members(5, "dup")...)
	ms[1].refs = []int{1}
	rs := keyRanges(ms, rangeKeys)
	if len(rs) != 1 || len(rs[0].members) != 1 || !reflect.DeepEqual(rs[0].members[0].refs, []int{0, 1}) || rs[0].members[0].weight != 10 {
		t.Fatalf("ranges of two components of one name: %+v", rs)
	}
}
