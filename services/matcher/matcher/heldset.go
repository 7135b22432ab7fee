package matcher

import (
	"slices"
	"strings"
)

// heldSet is what one component has, by policy id: a slice sorted by id
// rather than a map. A component holds a few policies, and a Go map of
// even one entry costs a group of eight slots (~450 bytes here) where a
// slice entry costs 48: at a million components the difference is about
// 400 MB of the matcher's memory. Lookups are binary searches, so a
// component holding thousands of policies stays cheap too.
type heldSet []heldEntry

type heldEntry struct {
	id string
	held
}

func (s heldSet) find(id string) (int, bool) {
	return slices.BinarySearchFunc(s, id, func(e heldEntry, id string) int { return strings.Compare(e.id, id) })
}

// get is what the component has of policy id.
func (s heldSet) get(id string) (held, bool) {
	if i, ok := s.find(id); ok {
		return s[i].held, true
	}
	return held{}, false
}

// set records that the component has v of policy id.
func (s *heldSet) set(id string, v held) {
	i, ok := s.find(id)
	if ok {
		(*s)[i].held = v
		return
	}
	if n := len(*s); n == cap(*s) && n >= 4 {
		// From four policies on, grow by a quarter rather than double:
		// a component's set grows one policy at a time and then stays,
		// so doubling would leave up to half of every set unused (a
		// third of the matcher's holdings at 100,000 components of five
		// policies). Smaller sets double (1, 2, 4) as append does.
		grown := make(heldSet, n, n+max(1, n/4))
		copy(grown, *s)
		*s = grown
	}
	*s = slices.Insert(*s, i, heldEntry{id: id, held: v})
}

// del forgets policy id.
func (s *heldSet) del(id string) {
	if i, ok := s.find(id); ok {
		*s = slices.Delete(*s, i, i+1)
	}
}

// ids are the policy ids, sorted.
func (s heldSet) ids() []string {
	out := make([]string, len(s))
	for i, e := range s {
		out[i] = e.id
	}
	return out
}
