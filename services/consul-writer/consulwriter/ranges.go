package consulwriter

import (
	"slices"
	"strings"
)

// rangeKeys bounds the keys one listing of a catch-up is expected to
// return: about 0.7 MB of key names (some 45 bytes each in the JSON
// answer), a fifth of what one read transaction may answer
// (consulkv.ReadTxnBytes), however many components the catch-up covers.
// A range over it is cut by the byte after its prefix, so a range holds
// between about rangeKeys/b and rangeKeys keys, b the symbols that byte
// takes among the names (10 for names numbered in decimal).
const rangeKeys = 16384

// keysPerComponent is what a component puts under its name besides its
// items: its config (<scn>), its event and its claim (notified).
const keysPerComponent = 3

// keyRange is one keys listing of a catch-up: every key under prefix,
// which holds the items prefixes of the components of its members.
type keyRange struct {
	prefix  string
	members []rangeMember
}

// rangeMember is one items prefix a listing covers, with the weight of
// its components (the keys they are expected to put under the prefix) and
// the caller's references to them.
type rangeMember struct {
	itemsPrefix string
	weight      int
	refs        []int
}

// keyRanges cuts the items prefixes of members into listings of shared
// prefixes, each expected to hold at most limit keys: starting from all
// members under their longest common prefix, a range over limit is cut by
// the byte that follows that prefix, and each part listed under its own
// longest common prefix. The prefixes are thus disjoint (no key is listed
// twice) and as long as their members allow (little else under them). A
// member over limit on its own is listed alone, under its items prefix. A
// range whose prefix is a member's items prefix holds every member under
// it (a name that holds another's items prefix) and is not cut further.
func keyRanges(members []rangeMember, limit int) []keyRange {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b rangeMember) int { return strings.Compare(a.itemsPrefix, b.itemsPrefix) })
	// One member per items prefix (two components of one name).
	merged := ms[:0]
	for _, m := range ms {
		if n := len(merged); n > 0 && merged[n-1].itemsPrefix == m.itemsPrefix {
			merged[n-1].weight += m.weight
			merged[n-1].refs = append(slices.Clip(merged[n-1].refs), m.refs...)
			continue
		}
		merged = append(merged, m)
	}
	var out []keyRange
	var cut func(ms []rangeMember)
	cut = func(ms []rangeMember) {
		prefix := commonPrefix(ms[0].itemsPrefix, ms[len(ms)-1].itemsPrefix)
		weight := 0
		for _, m := range ms {
			weight += m.weight
		}
		if len(ms) == 1 || weight <= limit || ms[0].itemsPrefix == prefix {
			out = append(out, keyRange{prefix: prefix, members: ms})
			return
		}
		// Sorted, the members that share the next byte are in a row;
		// none ends at prefix (the first would be it).
		at := len(prefix)
		for lo := 0; lo < len(ms); {
			hi := lo + 1
			for hi < len(ms) && ms[hi].itemsPrefix[at] == ms[lo].itemsPrefix[at] {
				hi++
			}
			cut(ms[lo:hi])
			lo = hi
		}
	}
	if len(merged) > 0 {
		cut(merged)
	}
	return out
}

// commonPrefix is the longest prefix a and b share; of sorted strings,
// that of the first and the last is that of them all.
func commonPrefix(a, b string) string {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return a[:i]
}
