package placement

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxFindingsPerPolicy bounds the findings one policy reports; the rest
// are counted in one more finding.
const maxFindingsPerPolicy = 20

// Finding is one thing a policy found in a placement.
type Finding struct {
	// PolicyID is the policy's id, or "non-overload".
	PolicyID string `json:"policy_id"`
	// Type is the policy's type.
	Type string `json:"type"`
	// Hard: the policy is hard and the finding denies; otherwise it is a
	// warning.
	Hard bool `json:"hard"`
	// Note: the policy is recorded and reported, not checked; never
	// hard. No policy type is recorded unchecked now (those that cannot
	// be checked are refused); the field stays for the verdict's shape.
	Note bool `json:"note,omitempty"`
	// Resources are the resources found at fault.
	Resources []string `json:"resources"`
	Message   string   `json:"message"`
}

// Check checks a template's placement against the datacenter: every
// policy of the template, and the non-overload rule on every leaf. The
// template must be valid (Validate) and place every resource on a leaf
// (ValidateFor, complete; its error is returned). Findings come in the
// order of the policies, then the non-overload rule, then the bandwidth
// of network edges.
func Check(m *Model, t *Template) ([]Finding, error) {
	l, _ := t.lower()
	if err := l.validateFor(m, true); err != nil {
		return nil, err
	}
	t = l.Template
	c := newChecker(m, t)
	for i := range t.Policies {
		c.policy(&t.Policies[i])
	}
	c.nonOverload()
	c.bandwidth()
	return c.out, nil
}

type checker struct {
	m    *Model
	t    *Template
	x    *expansion
	leaf []int // leaf number of each resource
	out  []Finding
	// volumesOn lists the volumes on each leaf, once a policy needs it.
	volumesOn map[int][]int
}

func newChecker(m *Model, t *Template) *checker {
	c := &checker{m: m, t: t, x: newExpansion(t), leaf: make([]int, len(t.Resources))}
	for i, r := range t.Resources {
		c.leaf[i] = m.leafNo[t.Placement[r.ID]]
	}
	return c
}

// reporter bounds the findings of one policy.
type reporter struct {
	c     *checker
	p     *Policy
	n     int
	extra int
}

func (r *reporter) add(note bool, res []string, format string, args ...any) {
	r.n++
	if r.n > maxFindingsPerPolicy {
		r.extra++
		return
	}
	r.c.out = append(r.c.out, Finding{PolicyID: r.p.ID, Type: r.p.Type, Hard: r.p.Mode == Hard && !note, Note: note, Resources: res, Message: fmt.Sprintf(format, args...)})
}

func (r *reporter) done() {
	if r.extra > 0 {
		r.c.out = append(r.c.out, Finding{PolicyID: r.p.ID, Type: r.p.Type, Hard: r.p.Mode == Hard, Resources: []string{}, Message: fmt.Sprintf("and %d more findings of this policy", r.extra)})
	}
}

func (c *checker) id(r int) string { return c.t.Resources[r].ID }

func (c *checker) leafID(r int) string { return c.m.leafID[c.leaf[r]] }

func (c *checker) policy(p *Policy) {
	rep := &reporter{c: c, p: p}
	defer rep.done()
	m := c.m
	switch p.Type {
	case Collocation, AntiCollocation:
		l := m.level(p.Properties.Level)
		lname := p.Properties.Level
		missing := map[int]bool{}
		c.x.pairs(p, func(a, b int) bool {
			va, vb := m.ancestorAt(c.leaf[a], l), m.ancestorAt(c.leaf[b], l)
			for _, r := range []int{a, b} {
				if m.ancestorAt(c.leaf[r], l) < 0 && !missing[r] {
					missing[r] = true
					rep.add(false, []string{c.id(r)}, "%s is on %s, which is not under any %s; %s at %s cannot hold", c.id(r), c.leafID(r), lname, p.Type, lname)
				}
			}
			if va < 0 || vb < 0 {
				return true
			}
			if p.Type == AntiCollocation && va == vb {
				rep.add(false, []string{c.id(a), c.id(b)}, "%s and %s share %s %s; anti-collocation at %s", c.id(a), c.id(b), lname, m.locID[va], lname)
			}
			if p.Type == Collocation && va != vb {
				rep.add(false, []string{c.id(a), c.id(b)}, "%s is in %s %s and %s in %s %s; collocation at %s", c.id(a), lname, m.locID[va], c.id(b), lname, m.locID[vb], lname)
			}
			return true
		})
	case LLMNAntiCollocation:
		c.llmn(p, rep)
	case HopCountLimit:
		limit := *p.Properties.Hops
		c.x.pairs(p, func(a, b int) bool {
			if h := m.hops(c.leaf[a], c.leaf[b]); h > limit {
				rep.add(false, []string{c.id(a), c.id(b)}, "%s and %s are %d network hops apart (%s to %s); %s", c.id(a), c.id(b), h, c.leafID(a), c.leafID(b), hopLimitText(limit))
			}
			return true
		})
	case Bandwidth:
		// Checked for all bandwidth policies together (c.bandwidth).
	case LicensedProduct:
		prod := Product{Catalog: p.Properties.Catalog, Product: p.Properties.Product}
		for _, r := range c.x.targets(p) {
			switch typ, ok := m.licenses(c.leaf[r], prod); {
			case typ == "":
				rep.add(false, []string{c.id(r)}, "%s is on %s, which has no host type; licensed product %s of catalog %s needs a host whose type licenses it (types[].licensed_products)", c.id(r), c.leafID(r), prod.Product, prod.Catalog)
			case !ok:
				rep.add(false, []string{c.id(r)}, "%s is on %s, of type %s, which does not license product %s of catalog %s", c.id(r), c.leafID(r), typ, prod.Product, prod.Catalog)
			}
		}
	case VolumeExclusive:
		if c.volumesOn == nil {
			c.volumesOn = map[int][]int{}
			for o, res := range c.t.Resources {
				if res.kind() == kindVolume {
					c.volumesOn[c.leaf[o]] = append(c.volumesOn[c.leaf[o]], o)
				}
			}
		}
		for _, r := range c.x.targets(p) {
			var others []int
			for _, o := range c.volumesOn[c.leaf[r]] {
				if o != r {
					others = append(others, o)
				}
			}
			if len(others) > 0 {
				rep.add(false, append([]string{c.id(r)}, c.ids(others, 10)...), "%s shares host %s with volume %s; volume-exclusive keeps it the only volume on its host's storage", c.id(r), c.leafID(r), c.names(others, 10))
			}
		}
	case VolumeNotMoved:
		for _, r := range c.x.targets(p) {
			if cur, ok := c.t.CurrentPlacement[c.id(r)]; ok && cur != c.leafID(r) {
				rep.add(false, []string{c.id(r)}, "%s is on %s now and placed on %s; volume-not-moved keeps it where it is (its storage backend cannot move it)", c.id(r), cur, c.leafID(r))
			}
		}
	}
}

func hopLimitText(limit int) string {
	if limit == 0 {
		return "hop-count limit 0 (the same host: direct attached)"
	}
	return fmt.Sprintf("hop-count limit %d", limit)
}

// ids names up to max resources.
func (c *checker) ids(rs []int, max int) []string {
	out := make([]string, 0, min(len(rs), max))
	for i, r := range rs {
		if i == max {
			break
		}
		out = append(out, c.id(r))
	}
	return out
}

// names is a list of resources for a message, bounded.
func (c *checker) names(rs []int, max int) string {
	s := strings.Join(c.ids(rs, max), ", ")
	if len(rs) > max {
		s += fmt.Sprintf(" and %d more", len(rs)-max)
	}
	return s
}

// llmnBound is ceiling(M/N), the most members one L1 vertex may cover.
func llmnBound(m, n int) int { return (m + n - 1) / n }

func (c *checker) llmn(p *Policy, rep *reporter) {
	m := c.m
	pr := &p.Properties
	l1, l2, n := m.level(pr.L1), m.level(pr.L2), *pr.N
	group := p.AppliesTo[0]
	members := c.x.targets(p)
	M := len(members)
	if M == 0 {
		return
	}
	bound := llmnBound(M, n)
	desc := fmt.Sprintf("LLMN anti-collocation (L1=%s, L2=%s, N=%d) of group %s", pr.L1, pr.L2, n, group)
	byL1 := map[int32][]int{}
	var l1Order []int32
	byL2 := map[int32]int{}
	for _, r := range members {
		v1, v2 := m.ancestorAt(c.leaf[r], l1), m.ancestorAt(c.leaf[r], l2)
		if v1 < 0 || v2 < 0 {
			lvl := pr.L1
			if v1 >= 0 {
				lvl = pr.L2
			}
			rep.add(false, []string{c.id(r)}, "%s is on %s, which is not under any %s; %s", c.id(r), c.leafID(r), lvl, desc)
			continue
		}
		if _, ok := byL1[v1]; !ok {
			l1Order = append(l1Order, v1)
		}
		byL1[v1] = append(byL1[v1], r)
		if o, ok := byL2[v2]; ok {
			rep.add(false, []string{c.id(o), c.id(r)}, "%s and %s share %s %s; %s allows no two members in one %s", c.id(o), c.id(r), pr.L2, m.locID[v2], desc, pr.L2)
		} else {
			byL2[v2] = r
		}
	}
	for _, v := range l1Order {
		if rs := byL1[v]; len(rs) > bound {
			rep.add(false, c.ids(rs, 10), "%s %s holds %d members (%s); %s allows at most ceil(%d/%d)=%d per %s", pr.L1, m.locID[v], len(rs), c.names(rs, 10), desc, M, n, bound, pr.L1)
		}
	}
	if len(l1Order) < n {
		vs := make([]string, len(l1Order))
		for i, v := range l1Order {
			vs[i] = m.locID[v]
		}
		rep.add(false, c.ids(members, 10), "the %d members span %d %s (%s); %s needs at least %d", M, len(l1Order), pr.L1, strings.Join(vs, ", "), desc, n)
	}
}

func (c *checker) nonOverload() {
	dims := c.m.dc.Dimensions
	used := map[int][]float64{}
	on := map[int][]int{}
	var order []int
	for r, res := range c.t.Resources {
		if len(res.Demand) == 0 {
			continue
		}
		l := c.leaf[r]
		u, ok := used[l]
		if !ok {
			u = make([]float64, len(dims))
			used[l] = u
			order = append(order, l)
		}
		for k, d := range res.Demand {
			u[k] += d
		}
		on[l] = append(on[l], r)
	}
	rep := &reporter{c: c, p: &Policy{ID: NonOverload, Type: NonOverload, Mode: Hard}}
	defer rep.done()
	for _, l := range order {
		for k, u := range used[l] {
			if capk := c.m.capacity[l][k]; u > capk {
				rep.add(false, c.ids(on[l], 10), "leaf %s is overloaded in %s: %s demand %s, its capacity is %s; non-overload", c.m.leafID[l], dims[k], c.names(on[l], 10), num(u), c.m.capacityText(l, k))
			}
		}
	}
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// bandwidth adds up, on each network edge, what every bandwidth policy
// needs between the pairs whose path crosses it, and reports the edges
// whose bandwidth is smaller: as a violation when a hard policy is among
// those crossing it.
func (c *checker) bandwidth() {
	type use struct {
		need     float64
		hard     bool
		policies []string
		pairs    []string
		n        int
	}
	uses := map[int32]*use{}
	var order []int32
	var path []int32
	for i := range c.t.Policies {
		p := &c.t.Policies[i]
		if p.Type != Bandwidth {
			continue
		}
		bw := p.Properties.BytesPerSecond
		c.x.pairs(p, func(a, b int) bool {
			path = c.m.path(c.leaf[a], c.leaf[b], path[:0])
			for _, e := range path {
				u, ok := uses[e]
				if !ok {
					u = &use{}
					uses[e] = u
					order = append(order, e)
				}
				u.need += bw
				u.hard = u.hard || p.Mode == Hard
				if !slices.Contains(u.policies, p.ID) {
					u.policies = append(u.policies, p.ID)
				}
				u.n++
				if len(u.pairs) < 10 {
					u.pairs = append(u.pairs, c.id(a)+"-"+c.id(b))
				}
			}
			return true
		})
	}
	n, extraHard := 0, false
	for _, e := range order {
		u := uses[e]
		if u.need <= c.m.netBW[e] {
			continue
		}
		n++
		if n > maxFindingsPerPolicy {
			extraHard = extraHard || u.hard
			continue
		}
		more := ""
		if u.n > len(u.pairs) {
			more = fmt.Sprintf(" and %d more pairs", u.n-len(u.pairs))
		}
		c.out = append(c.out, Finding{PolicyID: strings.Join(u.policies, ","), Type: Bandwidth, Hard: u.hard, Resources: slices.Clone(u.pairs),
			Message: fmt.Sprintf("network edge %s needs %s bytes/s for %s%s; its bandwidth is %s", c.m.edgeName(e), num(u.need), strings.Join(u.pairs, ", "), more, c.m.bandwidthText(e))})
	}
	if n > maxFindingsPerPolicy {
		c.out = append(c.out, Finding{PolicyID: Bandwidth, Type: Bandwidth, Hard: extraHard, Resources: []string{}, Message: fmt.Sprintf("and %d more network edges short of bandwidth", n-maxFindingsPerPolicy)})
	}
}
