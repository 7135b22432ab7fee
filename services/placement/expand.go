package placement

import "slices"

// expansion applies policies given on groups and pairs to resources, as
// the seed says: a monadic policy on a group applies to every relevant
// resource the group covers; a symmetric dyadic policy on a group applies
// to every unordered pair of its direct members, and a pair (A, B) of
// groups or resources to every (X, Y) with X covered by A and Y by B.
type expansion struct {
	t       *Template
	res     map[string]int
	members map[string][]string
	cache   map[string][]int
}

func newExpansion(t *Template) *expansion {
	x := &expansion{t: t, res: make(map[string]int, len(t.Resources)), members: make(map[string][]string, len(t.Groups)), cache: map[string][]int{}}
	for i, r := range t.Resources {
		x.res[r.ID] = i
	}
	for _, g := range t.Groups {
		x.members[g.ID] = g.Members
	}
	return x
}

// under lists the resources a resource or group covers (a resource covers
// itself), in template order of the group's members.
func (x *expansion) under(id string) []int {
	if i, ok := x.res[id]; ok {
		return []int{i}
	}
	if c, ok := x.cache[id]; ok {
		return c
	}
	x.cache[id] = nil // a cycle (refused by Validate) covers nothing
	var out []int
	for _, m := range x.members[id] {
		out = append(out, x.under(m)...)
	}
	x.cache[id] = out
	return out
}

// relevant lists the resources id covers that the policy is relevant to.
func (x *expansion) relevant(p *Policy, id string) []int {
	all := x.under(id)
	kinds := p.Kinds
	if len(kinds) == 0 {
		kinds = policyTypes[p.Type].kinds
	}
	if len(kinds) == 0 {
		return all
	}
	var out []int
	for _, r := range all {
		if slices.Contains(kinds, x.t.Resources[r].kind()) {
			out = append(out, r)
		}
	}
	return out
}

// isGroup reports whether id is a group of the template.
func (x *expansion) isGroup(id string) bool {
	_, ok := x.members[id]
	return ok
}

// pairCount is how many pairs a dyadic policy expands to (0 for a
// monadic one).
func (x *expansion) pairCount(p *Policy) int64 {
	spec := policyTypes[p.Type]
	if spec.kind == monadic {
		return 0
	}
	if len(p.AppliesTo) == 2 {
		return int64(len(x.relevant(p, p.AppliesTo[0]))) * int64(len(x.relevant(p, p.AppliesTo[1])))
	}
	var sum, sq int64
	for _, m := range x.members[p.AppliesTo[0]] {
		n := int64(len(x.relevant(p, m)))
		sum += n
		sq += n * n
	}
	return (sum*sum - sq) / 2
}

// pairs calls fn for every pair of resources a dyadic policy expands to,
// until fn returns false. A resource paired with itself (a pair whose
// one side covers the other) is skipped.
func (x *expansion) pairs(p *Policy, fn func(a, b int) bool) {
	cross := func(as, bs []int) bool {
		for _, a := range as {
			for _, b := range bs {
				if a != b && !fn(a, b) {
					return false
				}
			}
		}
		return true
	}
	if len(p.AppliesTo) == 2 {
		cross(x.relevant(p, p.AppliesTo[0]), x.relevant(p, p.AppliesTo[1]))
		return
	}
	ms := x.members[p.AppliesTo[0]]
	sets := make([][]int, len(ms))
	for i, m := range ms {
		sets[i] = x.relevant(p, m)
	}
	for i := range sets {
		for j := i + 1; j < len(sets); j++ {
			if !cross(sets[i], sets[j]) {
				return
			}
		}
	}
}

// targets lists the resources a monadic policy applies to.
func (x *expansion) targets(p *Policy) []int {
	return x.relevant(p, p.AppliesTo[0])
}
