package placement

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Limits of Propose.
const (
	// DefaultMaxSteps bounds the leaves Propose tries, in all.
	DefaultMaxSteps = 2000000
	// DefaultLookahead is how many of the best leaves a resource keeps,
	// in the order of the soft policies they break, to fall back on when
	// the search backs up to it.
	DefaultLookahead = 8
)

// Options tune Propose; zero values take the defaults.
type Options struct {
	MaxSteps  int
	Lookahead int
	// Timeout, when set, bounds the search's time too (a leaf tried
	// can cost as much as the dyadic policies binding its resource).
	Timeout time.Duration
}

// Proposal is a placement that meets every hard policy.
type Proposal struct {
	// Placement maps each resource to its leaf.
	Placement map[string]string `json:"placement"`
	// Warnings are the soft policies the placement does not meet, and the
	// recorded policies (notes), as Check reports them.
	Warnings []Finding `json:"warnings"`
	// Steps is how many leaves the search tried.
	Steps int `json:"steps"`
}

// Infeasible says why Propose found no placement: the hard policies
// (and the non-overload rule) that cannot be met together.
type Infeasible struct {
	// Policies are the ids of the hard policies that ruled leaves out,
	// most often first.
	Policies []string `json:"policies"`
	// Resource is the resource no leaf was left for, when there is one.
	Resource string `json:"resource,omitempty"`
	Reason   string `json:"reason"`
}

func (e *Infeasible) Error() string {
	return fmt.Sprintf("no placement meets every hard policy (%s): %s", strings.Join(e.Policies, ", "), e.Reason)
}

// ppol is a policy prepared for the search.
type ppol struct {
	p     *Policy
	hard  bool
	level int
	hops  int
	bw    float64
}

// pc is a dyadic constraint between the resource it is listed for and
// another.
type pc struct {
	pol   int32
	other int32
}

// llmnState follows one LLMN policy through the search.
type llmnState struct {
	pol            int32
	hard           bool
	m, n, bound    int
	l1, l2         int
	perL1          map[int32]int
	usedL2         map[int32]int
	distinct, done int
}

type searcher struct {
	m      *Model
	t      *Template
	x      *expansion
	pols   []ppol
	pairs  [][]pc
	llmns  [][]*llmnState
	assign []int32
	used   [][]float64
	bwUse  map[int32]float64
	steps  int
	max    int
	// deadline, when not zero, ends the search.
	deadline time.Time
	// scratch for bandwidth adds
	addHard, addSoft map[int32]float64
	path             []int32
	// Marks of the vertices near the resources related to the one being
	// placed (locStamp, netStamp) and of the leaf classes already scored
	// away from them (classStamp), valid when equal to stamp.
	locStamp, netStamp, classStamp []int32
	// touched marks the marked vertices and their ancestors.
	touched   []int32
	stamp     int32
	netMarked bool
	// scored holds the equivalence keys of the leaves near a related
	// resource already scored (scanBest).
	scored map[leafKey]struct{}
	// mono are the monadic policies of each resource checked leaf by
	// leaf: licensed product, volume-exclusive, volume-not-moved.
	mono [][]int32
	// isVol: the resource is a volume; volsOn counts the volumes on each
	// leaf and exclOn lists the volume-exclusive policies of the volumes
	// on it; anyExcl: the template has one.
	isVol   []bool
	volsOn  []int32
	exclOn  map[int32][]int32
	anyExcl bool
}

// leafKey says which leaves break the same policies (but bandwidth):
// the same deepest marked vertex in each tree, the same class and, when
// network vertices are marked, the same depth in the network tree.
type leafKey struct {
	loc, net, class, depth int32
}

// Propose searches for a placement of the template's resources that
// meets every hard policy and the non-overload rule, breaking as few soft
// policies as it can; resources the template already places stay where
// they are. It is a depth-first search with chronological backtracking:
// resources are taken most constrained first (those already placed, then
// by the number of hard policies that bind them, each followed by the
// resources it is bound to), and each resource takes, among all its
// candidate leaves, one that meets every hard policy with the resources
// placed before it and breaks the fewest soft policies (scanBest says how
// it avoids scoring leaves that break the same policies), keeping the
// Lookahead best to fall back on, then the others in order. A resource
// collocated with, or within a hop-count limit of, a placed one only tries
// the leaves near it. The search stops after MaxSteps leaves scored, or
// after Timeout. It is greedy per resource, not a global optimum for the
// soft policies, and a template with a placement may still be reported
// infeasible when the step limit runs out first (the error says so).
func Propose(m *Model, t *Template, opt Options) (*Proposal, error) {
	l, _ := t.lower()
	if err := l.validateFor(m, false); err != nil {
		return nil, err
	}
	t = l.Template
	if opt.MaxSteps <= 0 {
		opt.MaxSteps = DefaultMaxSteps
	}
	if opt.Lookahead <= 0 {
		opt.Lookahead = DefaultLookahead
	}
	s, err := newSearcher(m, t, opt)
	if err != nil {
		return nil, err
	}
	m = s.m
	if err := s.search(s.order(), opt.Lookahead); err != nil {
		return nil, err
	}
	n := len(t.Resources)
	out := &Proposal{Placement: make(map[string]string, n), Steps: s.steps}
	for r, l := range s.assign {
		out.Placement[t.Resources[r].ID] = m.leafID[l]
	}
	placed := *t
	placed.Placement = out.Placement
	fs, err := Check(m, &placed)
	if err != nil {
		return nil, fmt.Errorf("placement: check the proposal: %w", err)
	}
	out.Warnings = []Finding{}
	for _, f := range fs {
		if f.Hard {
			return nil, &Infeasible{Policies: []string{f.PolicyID}, Reason: "the search ended with a placement that breaks it: " + f.Message}
		}
		out.Warnings = append(out.Warnings, f)
	}
	return out, nil
}

// newSearcher prepares the search of a lowered, valid template.
func newSearcher(m *Model, t *Template, opt Options) (*searcher, error) {
	s := &searcher{m: m, t: t, x: newExpansion(t), max: opt.MaxSteps, bwUse: map[int32]float64{}, addHard: map[int32]float64{}, addSoft: map[int32]float64{}}
	n := len(t.Resources)
	s.assign = make([]int32, n)
	for i := range s.assign {
		s.assign[i] = -1
	}
	s.used = make([][]float64, len(m.leafID))
	s.locStamp = make([]int32, len(m.locID))
	s.netStamp = make([]int32, len(m.netID))
	if len(m.leafClass) != len(m.leafID) {
		// A model not made by Compile (a copy): one class per leaf, so
		// no leaf stands for another.
		c := *m
		c.leafClass = make([]int32, len(m.leafID))
		for n := range c.leafClass {
			c.leafClass[n] = int32(n)
		}
		c.nClasses, c.classMask = len(m.leafID), nil
		s.m, m = &c, &c
	}
	s.classStamp = make([]int32, m.nClasses)
	s.touched = make([]int32, len(m.locID))
	s.scored = map[leafKey]struct{}{}
	s.mono = make([][]int32, n)
	s.isVol = make([]bool, n)
	s.volsOn = make([]int32, len(m.leafID))
	s.exclOn = map[int32][]int32{}
	for r := range t.Resources {
		s.isVol[r] = t.Resources[r].kind() == kindVolume
	}
	s.pairs = make([][]pc, n)
	s.llmns = make([][]*llmnState, n)
	if opt.Timeout > 0 {
		s.deadline = time.Now().Add(opt.Timeout)
	}
	if err := s.prepare(); err != nil {
		return nil, err
	}
	return s, nil
}

// prepare expands the policies into per-resource constraints and rules
// out what no search can meet.
func (s *searcher) prepare() error {
	m, t := s.m, s.t
	for i := range t.Policies {
		p := &t.Policies[i]
		pp := ppol{p: p, hard: p.Mode == Hard, level: -1}
		switch p.Type {
		case Collocation, AntiCollocation:
			pp.level = m.level(p.Properties.Level)
		case HopCountLimit:
			pp.hops = *p.Properties.Hops
		case Bandwidth:
			pp.bw = p.Properties.BytesPerSecond
		}
		s.pols = append(s.pols, pp)
		pi := int32(len(s.pols) - 1)
		switch p.Type {
		case Collocation, AntiCollocation, HopCountLimit, Bandwidth:
			s.x.pairs(p, func(a, b int) bool {
				s.pairs[a] = append(s.pairs[a], pc{pi, int32(b)})
				s.pairs[b] = append(s.pairs[b], pc{pi, int32(a)})
				return true
			})
		case LicensedProduct, VolumeExclusive, VolumeNotMoved:
			for _, r := range s.x.targets(p) {
				if p.Type == VolumeNotMoved {
					if _, ok := t.CurrentPlacement[t.Resources[r].ID]; !ok {
						continue // a new volume stays where it is made
					}
				}
				s.anyExcl = s.anyExcl || p.Type == VolumeExclusive
				s.mono[r] = append(s.mono[r], pi)
			}
		case LLMNAntiCollocation:
			members := s.x.targets(p)
			if len(members) == 0 {
				continue
			}
			pr := &p.Properties
			st := &llmnState{pol: pi, hard: pp.hard, m: len(members), n: *pr.N, l1: m.level(pr.L1), l2: m.level(pr.L2), perL1: map[int32]int{}, usedL2: map[int32]int{}}
			st.bound = llmnBound(st.m, st.n)
			if st.hard {
				if c := m.perLevel[st.l1]; c < st.n {
					return &Infeasible{Policies: []string{p.ID}, Reason: fmt.Sprintf("policy %s spreads group %s over at least %d %s, and datacenter %s has %d", p.ID, p.AppliesTo[0], st.n, pr.L1, m.ID(), c)}
				}
				if c := m.perLevel[st.l2]; c < st.m {
					return &Infeasible{Policies: []string{p.ID}, Reason: fmt.Sprintf("policy %s puts the %d members of group %s in different %s, and datacenter %s has %d", p.ID, st.m, p.AppliesTo[0], pr.L2, m.ID(), c)}
				}
			}
			for _, r := range members {
				s.llmns[r] = append(s.llmns[r], st)
			}
		}
	}
	// Non-overload: the total demand must fit the total capacity, and each
	// resource one leaf.
	dims := len(m.dc.Dimensions)
	total := make([]float64, dims)
	for _, c := range m.capacity {
		for k := range dims {
			total[k] += c[k]
		}
	}
	need := make([]float64, dims)
	for _, r := range t.Resources {
		for k, d := range r.Demand {
			need[k] += d
		}
	}
	for k := range dims {
		if need[k] > total[k] {
			return &Infeasible{Policies: []string{NonOverload}, Reason: fmt.Sprintf("the resources demand %s %s in all; datacenter %s has %s", num(need[k]), m.dc.Dimensions[k], m.ID(), m.totalText(k, total[k]))}
		}
	}
	return nil
}

// order is the order resources are placed in: placed ones first, then
// the most constrained, each followed breadth-first by the resources hard
// policies bind it to.
func (s *searcher) order() []int {
	n := len(s.t.Resources)
	degree := make([]int, n)
	for r := range n {
		for _, c := range s.pairs[r] {
			if s.pols[c.pol].hard {
				degree[r]++
			}
		}
		for _, st := range s.llmns[r] {
			if st.hard {
				degree[r] += st.m
			}
		}
	}
	byDegree := make([]int, n)
	for i := range byDegree {
		byDegree[i] = i
	}
	pinned := func(r int) bool { _, ok := s.t.Placement[s.t.Resources[r].ID]; return ok }
	slices.SortStableFunc(byDegree, func(a, b int) int {
		if pa, pb := pinned(a), pinned(b); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return degree[b] - degree[a]
	})
	seen := make([]bool, n)
	out := make([]int, 0, n)
	llmnSeen := map[*llmnState]bool{}
	for _, start := range byDegree {
		if seen[start] {
			continue
		}
		queue := []int{start}
		seen[start] = true
		for len(queue) > 0 {
			r := queue[0]
			queue = queue[1:]
			out = append(out, r)
			for _, st := range s.llmns[r] {
				if !st.hard || llmnSeen[st] {
					continue
				}
				llmnSeen[st] = true
				for _, o := range s.x.targets(s.pols[st.pol].p) {
					if !seen[o] {
						seen[o] = true
						queue = append(queue, o)
					}
				}
			}
			for _, c := range s.pairs[r] {
				if o := int(c.other); s.pols[c.pol].hard && !seen[o] {
					seen[o] = true
					queue = append(queue, o)
				}
			}
		}
	}
	return out
}

// candidates are the leaves a resource may try: its own when placed;
// those near a placed resource it is hard-collocated with or within a
// hop-count limit of; otherwise every leaf.
func (s *searcher) candidates(r int) (best []int32, by string) {
	m := s.m
	if leaf, ok := s.t.Placement[s.t.Resources[r].ID]; ok {
		return []int32{int32(m.leafNo[leaf])}, "placement." + s.t.Resources[r].ID
	}
	best = m.byLoc
	for _, pi := range s.mono[r] {
		if pp := &s.pols[pi]; pp.hard && pp.p.Type == VolumeNotMoved {
			return []int32{int32(m.leafNo[s.t.CurrentPlacement[s.t.Resources[r].ID]])}, pp.p.ID
		}
	}
	for _, c := range s.pairs[r] {
		pp := &s.pols[c.pol]
		o := s.assign[c.other]
		if !pp.hard || o < 0 {
			continue
		}
		var near []int32
		switch pp.p.Type {
		case Collocation:
			v := m.ancestorAt(int(o), pp.level)
			if v < 0 {
				return nil, pp.p.ID
			}
			near = m.byLoc[m.locLo[v]:m.locHi[v]]
		case HopCountLimit:
			v := m.leafNet[o]
			for k := 0; k < pp.hops && m.netParent[v] >= 0; k++ {
				v = m.netParent[v]
			}
			near = m.byNet[m.netLo[v]:m.netHi[v]]
		default:
			continue
		}
		if len(near) < len(best) {
			best, by = near, pp.p.ID
		}
	}
	return best, by
}

// feasible says whether leaf l meets every hard policy for resource r
// with the resources placed so far; if not, the policy that rules it out,
// if so, how many soft policies it breaks.
func (s *searcher) feasible(r int, l int32) (ok bool, cost int, rule string) {
	if !s.fits(r, l) {
		return false, 0, NonOverload
	}
	pairCost, hasBW, rule := s.pairPolicies(r, l)
	if rule != "" {
		return false, 0, rule
	}
	llmnCost, rule := s.llmnPolicies(r, l)
	if rule != "" {
		return false, 0, rule
	}
	monoCost, rule := s.monadic(r, l)
	if rule != "" {
		return false, 0, rule
	}
	cost = pairCost + llmnCost + monoCost
	if hasBW {
		bwCost, rule := s.bandwidth(r, l)
		if rule != "" {
			return false, 0, rule
		}
		cost += bwCost
	}
	return true, cost, ""
}

// fits says whether r's demand fits on leaf l beside what is placed there.
func (s *searcher) fits(r int, l int32) bool {
	d := s.t.Resources[r].Demand
	if len(d) == 0 {
		return true
	}
	u, capv := s.used[l], s.m.capacity[l]
	for k, dk := range d {
		have := 0.0
		if u != nil {
			have = u[k]
		}
		if have+dk > capv[k] {
			return false
		}
	}
	return true
}

// pairPolicies checks the collocation, anti-collocation and hop-count
// policies between r on l and the resources placed so far: the hard one
// broken first (rule), or the soft ones broken (cost). hasBW says a
// bandwidth policy relates r to a placed resource.
func (s *searcher) pairPolicies(r int, l int32) (cost int, hasBW bool, rule string) {
	m := s.m
	for _, c := range s.pairs[r] {
		pp := &s.pols[c.pol]
		o := s.assign[c.other]
		bad := false
		switch pp.p.Type {
		case Collocation, AntiCollocation:
			va := m.ancestorAt(int(l), pp.level)
			if va < 0 {
				bad = true
				break
			}
			if o < 0 {
				continue
			}
			vb := m.ancestorAt(int(o), pp.level)
			bad = vb < 0 || (pp.p.Type == Collocation) != (va == vb)
		case HopCountLimit:
			bad = o >= 0 && m.hops(int(l), int(o)) > pp.hops
		case Bandwidth:
			hasBW = hasBW || o >= 0
		}
		if bad {
			if pp.hard {
				return 0, false, pp.p.ID
			}
			cost++
		}
	}
	return cost, hasBW, ""
}

// llmnPolicies checks the LLMN anti-collocation policies of r on l: the
// hard one broken first (rule), or the soft ones broken (cost).
func (s *searcher) llmnPolicies(r int, l int32) (cost int, rule string) {
	m := s.m
	for _, st := range s.llmns[r] {
		v1, v2 := m.ancestorAt(int(l), st.l1), m.ancestorAt(int(l), st.l2)
		bad := v1 < 0 || v2 < 0 || st.perL1[v1]+1 > st.bound || st.usedL2[v2] > 0
		if !bad {
			distinct := st.distinct
			if st.perL1[v1] == 0 {
				distinct++
			}
			bad = distinct+(st.m-st.done-1) < st.n
		}
		if bad {
			if pp := &s.pols[st.pol]; pp.hard {
				return 0, pp.p.ID
			}
			cost++
		}
	}
	return cost, ""
}

// monadic checks the licensed-product, volume-exclusive and
// volume-not-moved policies of r on l, and the volume-exclusive policies
// of the volumes on l when r is a volume: the hard one broken first
// (rule), or the soft ones broken (cost).
func (s *searcher) monadic(r int, l int32) (cost int, rule string) {
	broken := func(pi int32) bool {
		pp := &s.pols[pi]
		if pp.hard {
			rule = pp.p.ID
			return true
		}
		cost++
		return false
	}
	for _, pi := range s.mono[r] {
		pp := &s.pols[pi]
		bad := false
		switch pp.p.Type {
		case LicensedProduct:
			_, ok := s.m.licenses(int(l), Product{Catalog: pp.p.Properties.Catalog, Product: pp.p.Properties.Product})
			bad = !ok
		case VolumeExclusive:
			bad = s.volsOn[l] > 0
		case VolumeNotMoved:
			bad = s.m.leafID[l] != s.t.CurrentPlacement[s.t.Resources[r].ID]
		}
		if bad && broken(pi) {
			return 0, rule
		}
	}
	if s.isVol[r] {
		for _, pi := range s.exclOn[l] {
			if broken(pi) {
				return 0, rule
			}
		}
	}
	return cost, ""
}

// bandwidth checks the bandwidth policies between r on l and the placed
// resources, on every network edge of their paths: a hard policy that
// overloads an edge (rule), or the edges the soft ones overload (cost).
func (s *searcher) bandwidth(r int, l int32) (cost int, rule string) {
	m := s.m
	clear(s.addHard)
	clear(s.addSoft)
	hardID := ""
	for _, c := range s.pairs[r] {
		pp := &s.pols[c.pol]
		o := s.assign[c.other]
		if pp.p.Type != Bandwidth || o < 0 {
			continue
		}
		s.path = m.path(int(l), int(o), s.path[:0])
		for _, e := range s.path {
			if pp.hard {
				s.addHard[e] += pp.bw
				hardID = pp.p.ID
			} else {
				s.addSoft[e] += pp.bw
			}
		}
	}
	for e, a := range s.addHard {
		if s.bwUse[e]+a > m.netBW[e] {
			return 0, hardID
		}
	}
	for e, a := range s.addSoft {
		if s.bwUse[e]+s.addHard[e]+a > m.netBW[e] {
			cost++
		}
	}
	return cost, ""
}

// place puts r on l (sign 1) or takes it off (sign -1); taking off must
// come in the reverse order of putting on.
func (s *searcher) place(r int, l int32, sign int) {
	m := s.m
	if sign > 0 {
		s.assign[r] = l
	}
	if d := s.t.Resources[r].Demand; len(d) > 0 {
		if s.used[l] == nil {
			s.used[l] = make([]float64, len(m.dc.Dimensions))
		}
		for k, dk := range d {
			s.used[l][k] += float64(sign) * dk
		}
	}
	if s.isVol[r] {
		s.volsOn[l] += int32(sign)
		for _, pi := range s.mono[r] {
			if s.pols[pi].p.Type != VolumeExclusive {
				continue
			}
			if sign > 0 {
				s.exclOn[l] = append(s.exclOn[l], pi)
			} else if on := s.exclOn[l]; len(on) > 0 {
				// Taken off in the reverse order of putting on.
				s.exclOn[l] = on[:len(on)-1]
			}
		}
	}
	for _, st := range s.llmns[r] {
		v1, v2 := m.ancestorAt(int(l), st.l1), m.ancestorAt(int(l), st.l2)
		if v1 < 0 || v2 < 0 {
			continue
		}
		if sign > 0 {
			if st.perL1[v1] == 0 {
				st.distinct++
			}
			st.perL1[v1]++
			st.usedL2[v2]++
			st.done++
		} else {
			st.perL1[v1]--
			if st.perL1[v1] == 0 {
				st.distinct--
				delete(st.perL1, v1)
			}
			if st.usedL2[v2]--; st.usedL2[v2] == 0 {
				delete(st.usedL2, v2)
			}
			st.done--
		}
	}
	for _, c := range s.pairs[r] {
		pp := &s.pols[c.pol]
		o := s.assign[c.other]
		if pp.p.Type != Bandwidth || o < 0 || int(c.other) == r {
			continue
		}
		s.path = m.path(int(l), int(o), s.path[:0])
		for _, e := range s.path {
			s.bwUse[e] += float64(sign) * pp.bw
		}
	}
	if sign < 0 {
		s.assign[r] = -1
	}
}

type choice struct {
	leaf int32
	cost int
}

type frame struct {
	r     int
	cands []int32
	// scanned: the best leaves were chosen (choices); then pos is where
	// the chronological fallback is, and scanEnd where the best-leaf scan
	// stopped.
	scanned bool
	scanEnd int
	pos     int
	choices []choice
	ci      int
	// best are the leaves the best-leaf scan chose.
	best    []int32
	placed  int32
	rejects map[string]int
	// narrowedBy is the policy (or given placement) that limited the
	// candidates.
	narrowedBy string
}

func (s *searcher) search(order []int, lookahead int) error {
	frames := make([]frame, len(order))
	for i := range frames {
		frames[i].placed = -1
		frames[i].cands = nil
	}
	fresh := make([]bool, len(order))
	for i := range fresh {
		fresh[i] = true
	}
	deepest, deepRes := -1, -1
	var deepRejects map[string]int
	depth := 0
	for depth < len(order) {
		f := &frames[depth]
		if fresh[depth] {
			fresh[depth] = false
			f.r = order[depth]
			f.cands, f.narrowedBy = s.candidates(f.r)
			f.pos, f.ci, f.scanned, f.scanEnd = 0, 0, false, 0
			f.choices, f.best = f.choices[:0], f.best[:0]
			clear(f.rejects)
		}
		if f.placed >= 0 {
			s.place(f.r, f.placed, -1)
			f.placed = -1
		}
		if f.ci >= len(f.choices) {
			var err error
			if !f.scanned {
				err = s.scanBest(f, lookahead)
			} else if f.pos < len(f.cands) {
				err = s.scanNext(f, lookahead)
			}
			if err != nil {
				if deepRes < 0 {
					deepRes, deepRejects = f.r, f.rejects
				}
				return s.giveUp(deepRes, deepRejects, err.Error())
			}
		}
		if f.ci < len(f.choices) {
			l := f.choices[f.ci].leaf
			f.ci++
			s.place(f.r, l, 1)
			f.placed = l
			depth++
			continue
		}
		// No leaf left for this resource: back up.
		if depth >= deepest {
			deepest, deepRes = depth, f.r
			deepRejects = maps.Clone(f.rejects)
			if f.narrowedBy != "" {
				if deepRejects == nil {
					deepRejects = map[string]int{}
				}
				deepRejects[f.narrowedBy] += 0
			}
		}
		fresh[depth] = true
		depth--
		if depth < 0 {
			return s.giveUp(deepRes, deepRejects, "every combination the search could try fails")
		}
	}
	return nil
}

// stopped is the error when the search has run out of steps or time.
func (s *searcher) stopped() error {
	if s.steps >= s.max || (s.steps%1024 == 0 && !s.deadline.IsZero() && time.Now().After(s.deadline)) {
		limit := "the step limit"
		if s.steps < s.max {
			limit = "the time limit"
		}
		return fmt.Errorf("the search stopped after trying %d leaves (%s)", s.steps, limit)
	}
	return nil
}

func (f *frame) reject(rule string) {
	if f.rejects == nil {
		f.rejects = map[string]int{}
	}
	f.rejects[rule]++
}

// scanBest chooses the best leaves for the frame's resource: those that
// meet every hard policy and break the fewest soft ones, up to lookahead
// of them in that order (the first in the location tree's order on a
// tie), stopping at the first that breaks none.
//
// It does not score every candidate. markNear marks the vertices of the
// placed resources related to this one (their vertex at each collocation,
// anti-collocation and LLMN level, the network path within a hop-count
// limit of them). Two leaves whose deepest marked vertex is the same in
// each tree (or none), with the same levels on their path and the same
// type (their class), and the same network depth when that vertex is a
// network one, have the same marked vertices on their paths and the same
// distance to each related resource within reach, so they break the same
// collocation, anti-collocation, LLMN, hop-count, licensed-product and
// volume policies, soft and hard. Of each such set the scan
// scores leaves in order until one meets the hard policies (capacity
// differs from leaf to leaf) and passes over the rest. Bandwidth is the
// one policy whose cost can differ within a set; it is scored on the leaf
// that stands for the set. So the scan finds the best leaf for those
// policies exactly (an empty rack when one is free, say), at a cost of
// one walk up both trees per candidate (at most their depths, 64) and one
// score per set, at most one per leaf.
func (s *searcher) scanBest(f *frame, lookahead int) error {
	f.scanned = true
	f.choices, f.ci = f.choices[:0], 0
	s.markNear(f.r)
	clear(s.scored)
	cls := s.m.leafClass
	f.scanEnd = len(f.cands)
	whole := len(f.cands) == len(s.m.byLoc) && len(f.cands) > 0 && &f.cands[0] == &s.m.byLoc[0]
	for i := 0; i < len(f.cands); i++ {
		if whole {
			if j := s.skip(i); j > i {
				i = j - 1
				continue
			}
		}
		l := f.cands[i]
		key := s.keyOf(l)
		far := key.loc < 0 && key.net < 0
		if far && s.classStamp[cls[l]] == s.stamp {
			continue
		}
		if !far {
			if _, done := s.scored[key]; done {
				continue
			}
		}
		if err := s.stopped(); err != nil {
			return err
		}
		s.steps++
		ok, cost, rule := s.feasible(f.r, l)
		if !ok {
			f.reject(rule)
			continue
		}
		if far {
			s.classStamp[cls[l]] = s.stamp
		} else {
			s.scored[key] = struct{}{}
		}
		// Keep the lookahead best, in cost order, ties in scan order.
		at := len(f.choices)
		for at > 0 && f.choices[at-1].cost > cost {
			at--
		}
		if at < lookahead {
			f.choices = slices.Insert(f.choices, at, choice{l, cost})
			if len(f.choices) > lookahead {
				f.choices = f.choices[:lookahead]
			}
		}
		if cost == 0 {
			f.scanEnd = i + 1
			break
		}
	}
	for _, c := range f.choices {
		f.best = append(f.best, c.leaf)
	}
	return nil
}

// scanNext is the fallback once the best leaves have failed: the
// candidates in order, lookahead feasible ones at a time, cheapest first,
// passing over the best leaves already tried.
func (s *searcher) scanNext(f *frame, lookahead int) error {
	f.choices, f.ci = f.choices[:0], 0
	for f.pos < len(f.cands) && len(f.choices) < lookahead {
		if err := s.stopped(); err != nil {
			return err
		}
		l := f.cands[f.pos]
		f.pos++
		if slices.Contains(f.best, l) {
			continue
		}
		s.steps++
		ok, cost, rule := s.feasible(f.r, l)
		if !ok {
			if f.pos > f.scanEnd {
				f.reject(rule)
			}
			continue
		}
		f.choices = append(f.choices, choice{l, cost})
		if cost == 0 {
			break
		}
	}
	slices.SortStableFunc(f.choices, func(a, b choice) int { return a.cost - b.cost })
	return nil
}

// markNear marks the vertices near the placed resources related to r:
// their vertex at each collocation, anti-collocation and LLMN level, the
// network vertices on their path up to a hop-count limit, the leaves
// holding volumes when r is a volume and one is exclusive, and r's
// current leaf when it is not to be moved.
func (s *searcher) markNear(r int) {
	m := s.m
	s.stamp++
	s.netMarked = false
	for _, c := range s.pairs[r] {
		o := s.assign[c.other]
		if o < 0 {
			continue
		}
		pp := &s.pols[c.pol]
		switch pp.p.Type {
		case Collocation, AntiCollocation:
			if v := m.ancestorAt(int(o), pp.level); v >= 0 {
				s.mark(v)
			}
		case HopCountLimit:
			// The partner's path up to hops edges: a leaf's distance to it
			// follows from where the leaf's path meets it (its deepest
			// marked vertex) and the leaf's depth.
			v := m.leafNet[o]
			s.netStamp[v] = s.stamp
			for k := 0; k < pp.hops && m.netParent[v] >= 0; k++ {
				v = m.netParent[v]
				s.netStamp[v] = s.stamp
			}
			s.netMarked = true
		}
	}
	// Leaves holding volumes differ for a volume when any volume is
	// exclusive; a volume not to be moved prefers its leaf.
	if s.isVol[r] && s.anyExcl {
		for o, lo := range s.assign {
			if lo >= 0 && s.isVol[o] {
				s.mark(m.leafLoc[lo])
			}
		}
	}
	for _, pi := range s.mono[r] {
		if s.pols[pi].p.Type == VolumeNotMoved {
			s.mark(m.leafLoc[m.leafNo[s.t.CurrentPlacement[s.t.Resources[r].ID]]])
		}
	}
	for _, st := range s.llmns[r] {
		for v := range st.perL1 {
			s.mark(v)
		}
		for v := range st.usedL2 {
			s.mark(v)
		}
	}
}

// mark marks a location vertex near a related resource, and touches it
// and its ancestors.
func (s *searcher) mark(v int32) {
	s.locStamp[v] = s.stamp
	for ; v >= 0 && s.touched[v] != s.stamp; v = s.m.locParent[v] {
		s.touched[v] = s.stamp
	}
}

// skip is where the scan of the candidates (the whole location tree's
// leaves, in its order) may go on from i: past the largest subtree
// starting at leaf i that holds no marked vertex and whose every class is
// already scored with the same deepest marked vertex above it (so every
// leaf of it has a scored twin), or i itself.
func (s *searcher) skip(i int) int {
	m := s.m
	if s.netMarked || m.classMask == nil {
		return i
	}
	top := int32(-1)
	v := m.leafLoc[m.byLoc[i]]
	for v >= 0 && int(m.locLo[v]) == i && s.touched[v] != s.stamp {
		top = v
		v = m.locParent[v]
	}
	if top < 0 {
		return i
	}
	d := int32(-1)
	for ; v >= 0; v = m.locParent[v] {
		if s.locStamp[v] == s.stamp {
			d = v
			break
		}
	}
	for mask := m.classMask[top]; mask != 0; mask &= mask - 1 {
		c := int32(bits.TrailingZeros64(mask))
		if d < 0 {
			if s.classStamp[c] != s.stamp {
				return i
			}
		} else if _, ok := s.scored[leafKey{loc: d, net: -1, class: c}]; !ok {
			return i
		}
	}
	return int(m.locHi[top])
}

// keyOf is the leaf's equivalence key (scanBest): its deepest marked
// vertex in each tree (-1: none), its class, and its network depth when
// it has a marked network vertex.
func (s *searcher) keyOf(l int32) leafKey {
	m := s.m
	k := leafKey{loc: -1, net: -1, class: m.leafClass[l]}
	for v := m.leafLoc[l]; v >= 0; v = m.locParent[v] {
		if s.locStamp[v] == s.stamp {
			k.loc = v
			break
		}
	}
	if s.netMarked {
		for v := m.leafNet[l]; v >= 0; v = m.netParent[v] {
			if s.netStamp[v] == s.stamp {
				k.net = v
				k.depth = m.netDepth[m.leafNet[l]]
				break
			}
		}
	}
	return k
}

// giveUp names the hard policies that ruled out the leaves of the
// resource the search got stuck on.
func (s *searcher) giveUp(r int, rejects map[string]int, why string) error {
	e := &Infeasible{Policies: []string{}}
	ids := slices.Collect(maps.Keys(rejects))
	slices.SortFunc(ids, func(a, b string) int {
		if rejects[a] != rejects[b] {
			return rejects[b] - rejects[a]
		}
		return strings.Compare(a, b)
	})
	e.Policies = ids
	var parts []string
	for _, id := range ids {
		if rejects[id] == 0 {
			parts = append(parts, fmt.Sprintf("%s left it only the leaves near the resources it binds it to", id))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s ruled out %d leaves", id, rejects[id]))
	}
	if r >= 0 {
		e.Resource = s.t.Resources[r].ID
		e.Reason = fmt.Sprintf("no leaf is left for resource %s given the resources placed before it (%s); %s", e.Resource, strings.Join(parts, ", "), why)
		if len(parts) == 0 {
			e.Reason = fmt.Sprintf("no leaf is left for resource %s; %s", e.Resource, why)
		}
	} else {
		e.Reason = why
	}
	return e
}
