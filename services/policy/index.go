package policy

import (
	"regexp/syntax"
	"slices"
	"sort"
	"sync"
	"unicode"
)

// Prefix elements: a rune (>= 0) stands for itself; the two negative values
// stand for "any rune" and "any rune but newline".
const (
	elemAny      int32 = -1
	elemAnyNotNL int32 = -2
)

// prefixElems computes a sequence of single-rune matchers that every name
// matched by the anchored expression must start with. The sequence is
// always a necessary condition; exact reports that it is also sufficient,
// i.e. the expression is nothing but that fixed sequence.
func prefixElems(re *syntax.Regexp) ([]int32, bool) {
	var out []int32
	cont, exact := walkPrefix(re, &out)
	return out, cont && exact
}

// walkPrefix appends what re must consume first. cont reports that re is
// a fixed sequence of single runes and zero-width assertions, so whatever
// follows re in a concatenation may be appended too; exact that the
// appended elements describe re without approximation.
func walkPrefix(re *syntax.Regexp, out *[]int32) (cont, exact bool) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return true, true
	case syntax.OpLiteral:
		exact = true
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 && unicode.SimpleFold(r) != r {
				*out = append(*out, elemAny)
				exact = false
				continue
			}
			*out = append(*out, r)
		}
		return true, exact
	case syntax.OpAnyChar:
		*out = append(*out, elemAny)
		return true, true
	case syntax.OpAnyCharNotNL:
		*out = append(*out, elemAnyNotNL)
		return true, true
	case syntax.OpCharClass:
		*out = append(*out, elemAny)
		return true, false
	case syntax.OpBeginText, syntax.OpBeginLine:
		// Always true at the start of the name, where matching begins.
		return true, len(*out) == 0
	case syntax.OpEndText, syntax.OpEndLine, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true, false
	case syntax.OpCapture:
		return walkPrefix(re.Sub[0], out)
	case syntax.OpConcat:
		exact = true
		for _, sub := range re.Sub {
			c, e := walkPrefix(sub, out)
			exact = exact && e
			if !c {
				return false, false
			}
		}
		return true, exact
	case syntax.OpPlus:
		walkPrefix(re.Sub[0], out)
		return false, false
	case syntax.OpRepeat:
		if re.Min >= 1 {
			walkPrefix(re.Sub[0], out)
		}
		return false, false
	}
	// OpStar, OpQuest, OpAlternate, OpNoMatch: nothing more is certain.
	return false, false
}

// Index finds the filters matching a policy among many registered ones
// without checking each of them. It gives exactly the result of calling
// Match on every filter. It is safe for concurrent use.
//
// Filters live in a radix tree keyed by the single-rune matchers their
// policyName must start with (literal runes and "any rune" wildcards), and
// within a tree node in buckets by onapName, configName and one scalar
// configAttributes entry. A lookup walks the tree along the policy name,
// visits only the buckets the body's matchingConditions allow, and adds the
// filters whose policyName equals the policy_id or the full name. Every
// candidate is then checked; the regular expression is skipped when the
// tree path alone proves it.
type Index struct {
	mu      sync.RWMutex
	root    *rnode
	entries map[string]*ientry
	exact   map[string][]*ientry // by the filter's policyName
}

// bucketKey says what a body's matchingConditions must hold for the
// filters of a bucket to have a chance: ONAPName, ConfigName and one
// configAttributes entry when hasAttr (the filter has one whose value is
// a scalar). The empty string is a key like any other, so whether there
// is an entry is said apart from which.
type bucketKey struct {
	onap, config string
	hasAttr      bool
	attrKey      string
	attrVal      string // scalarKey of the value
}

// scalarKey renders a JSON scalar so that two scalars are jsonEqual exactly
// when their keys are equal; false for objects and arrays.
func scalarKey(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case nil:
		return "\x00null", true
	case bool:
		if t {
			return "\x00true", true
		}
		return "\x00false", true
	}
	if jsonKind(v) != kindNumber {
		return "", false
	}
	k, ok := numberKey(v)
	if !ok {
		return "", false
	}
	return "\x00number " + k, true
}

// filterBucket picks the bucket of a filter: its first configAttributes
// key (in sorted order) with a scalar value, if any.
func filterBucket(f *CompiledFilter) bucketKey {
	k := bucketKey{onap: f.filter.OnapName, config: f.filter.ConfigName}
	for _, a := range f.attrKeys {
		if sk, ok := scalarKey(f.attrs[a]); ok {
			k.hasAttr, k.attrKey, k.attrVal = true, a, sk
			break
		}
	}
	return k
}

type rnode struct {
	label    []int32 // elements on the edge from the parent
	parent   *rnode
	children []*rnode // sorted by label[0]
	buckets  map[bucketKey][]*ientry
	attrKeys map[string]int // attrKey of the buckets with hasAttr -> filters using it
	size     int            // entries in buckets
}

type ientry struct {
	key      string
	f        *CompiledFilter
	node     *rnode // nil when the filter has no policyName
	bkey     bucketKey
	pos      int // index in node.buckets[bkey]
	exactPos int // index in Index.exact[f.filter.PolicyName]
}

// NewIndex returns an empty Index.
func NewIndex() *Index {
	return &Index{
		root:    &rnode{},
		entries: make(map[string]*ientry),
		exact:   make(map[string][]*ientry),
	}
}

// Len is the number of registered filters.
func (ix *Index) Len() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.entries)
}

// Add registers f under key (for example component_id + "/" + filter_id),
// replacing what was registered under key before. A nil f removes key.
// Filters without policyName are kept (and counted) but never match.
func (ix *Index) Add(key string, f *CompiledFilter) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.remove(key)
	if f == nil {
		return
	}
	e := &ientry{key: key, f: f}
	ix.entries[key] = e
	if f.re == nil {
		return
	}
	p := f.filter.PolicyName
	e.exactPos = len(ix.exact[p])
	ix.exact[p] = append(ix.exact[p], e)

	n := ix.root.insert(f.prefix)
	e.node = n
	e.bkey = filterBucket(f)
	if n.buckets == nil {
		n.buckets = make(map[bucketKey][]*ientry)
	}
	if e.bkey.hasAttr {
		if n.attrKeys == nil {
			n.attrKeys = make(map[string]int)
		}
		n.attrKeys[e.bkey.attrKey]++
	}
	e.pos = len(n.buckets[e.bkey])
	n.buckets[e.bkey] = append(n.buckets[e.bkey], e)
	n.size++
}

// Remove unregisters key; removing an unknown key does nothing.
func (ix *Index) Remove(key string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.remove(key)
}

func (ix *Index) remove(key string) {
	e, ok := ix.entries[key]
	if !ok {
		return
	}
	delete(ix.entries, key)
	if e.node == nil {
		return
	}
	p := e.f.filter.PolicyName
	list := ix.exact[p]
	last := len(list) - 1
	list[e.exactPos] = list[last]
	list[e.exactPos].exactPos = e.exactPos
	list[last] = nil
	if last == 0 {
		delete(ix.exact, p)
	} else {
		ix.exact[p] = list[:last]
	}

	n := e.node
	b := n.buckets[e.bkey]
	last = len(b) - 1
	b[e.pos] = b[last]
	b[e.pos].pos = e.pos
	b[last] = nil
	if last == 0 {
		delete(n.buckets, e.bkey)
	} else {
		n.buckets[e.bkey] = b[:last]
	}
	if e.bkey.hasAttr {
		if n.attrKeys[e.bkey.attrKey]--; n.attrKeys[e.bkey.attrKey] == 0 {
			delete(n.attrKeys, e.bkey.attrKey)
		}
	}
	n.size--
	n.prune()
}

// insert returns the node for the element sequence p, creating and
// splitting nodes as needed.
func (n *rnode) insert(p []int32) *rnode {
	for len(p) > 0 {
		i, found := n.childIndex(p[0])
		if !found {
			c := &rnode{label: slices.Clone(p), parent: n}
			n.children = slices.Insert(n.children, i, c)
			return c
		}
		c := n.children[i]
		k := 0
		for k < len(c.label) && k < len(p) && c.label[k] == p[k] {
			k++
		}
		if k < len(c.label) {
			mid := &rnode{label: slices.Clone(c.label[:k]), parent: n, children: []*rnode{c}}
			c.label = slices.Clone(c.label[k:])
			c.parent = mid
			n.children[i] = mid
			c = mid
		}
		n = c
		p = p[k:]
	}
	return n
}

func (n *rnode) childIndex(first int32) (int, bool) {
	return sort.Find(len(n.children), func(i int) int {
		f := n.children[i].label[0]
		switch {
		case first < f:
			return -1
		case first > f:
			return 1
		}
		return 0
	})
}

func (n *rnode) child(first int32) *rnode {
	// Linear scan is faster than binary search for the few children most
	// nodes have.
	if len(n.children) <= 8 {
		for _, c := range n.children {
			if c.label[0] == first {
				return c
			}
		}
		return nil
	}
	if i, ok := n.childIndex(first); ok {
		return n.children[i]
	}
	return nil
}

// prune removes nodes left without entries, and merges a node left with a
// single child into that child, up towards the root.
func (n *rnode) prune() {
	for n.parent != nil && n.size == 0 {
		parent := n.parent
		i, _ := parent.childIndex(n.label[0])
		switch len(n.children) {
		case 0:
			parent.children = slices.Delete(parent.children, i, i+1)
		case 1:
			c := n.children[0]
			label := make([]int32, 0, len(n.label)+len(c.label))
			label = append(label, n.label...)
			label = append(label, c.label...)
			c.label = label
			c.parent = parent
			parent.children[i] = c
			return
		default:
			return
		}
		n = parent
	}
}

// Matches returns the keys of the registered filters that match b, sorted:
// exactly the keys k for which Match(b) of the filter under k is true.
func (ix *Index) Matches(b Body) []string {
	v := newView(b)
	if !v.ok {
		return nil
	}
	runes := []rune(v.name)

	var onaps, configs [2]string
	no, nc := 1, 1
	if s, ok := v.mc[MatchingONAPName].(string); ok && s != "" {
		onaps[1], no = s, 2
	}
	if s, ok := v.mc[MatchingConfigName].(string); ok && s != "" {
		configs[1], nc = s, 2
	}

	ix.mu.RLock()
	defer ix.mu.RUnlock()

	var out []string
	type attr struct {
		has      bool
		key, val string
	}
	attrs := make([]attr, 0, 8)
	visit := func(n *rnode) {
		if n.size == 0 {
			return
		}
		attrs = append(attrs[:0], attr{}) // the filters without a scalar entry
		for k := range n.attrKeys {
			if have, ok := v.mc[k]; ok {
				if sk, ok := scalarKey(have); ok {
					attrs = append(attrs, attr{true, k, sk})
				}
			}
		}
		for i := 0; i < no; i++ {
			for j := 0; j < nc; j++ {
				for _, a := range attrs {
					key := bucketKey{onap: onaps[i], config: configs[j], hasAttr: a.has, attrKey: a.key, attrVal: a.val}
					for _, e := range n.buckets[key] {
						if (e.f.exact || e.f.nameMatches(&v)) && e.f.restMatches(&v) {
							out = append(out, e.key)
						}
					}
				}
			}
		}
	}
	ix.walk(ix.root, runes, 0, visit)

	for _, p := range [2]string{v.name, v.id} {
		for _, e := range ix.exact[p] {
			if e.f.restMatches(&v) {
				out = append(out, e.key)
			}
		}
		if v.id == v.name {
			break
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// walk visits n and every node below it whose path matches runes from pos.
func (ix *Index) walk(n *rnode, runes []rune, pos int, visit func(*rnode)) {
	visit(n)
	if pos >= len(runes) || len(n.children) == 0 {
		return
	}
	r := runes[pos]
	firsts := [3]int32{r, elemAny, elemAnyNotNL}
	nf := 3
	if r == '\n' {
		nf = 2
	}
	for _, first := range firsts[:nf] {
		c := n.child(first)
		if c == nil || !labelMatches(c.label, runes[pos:]) {
			continue
		}
		ix.walk(c, runes, pos+len(c.label), visit)
	}
}

func labelMatches(label []int32, runes []rune) bool {
	if len(label) > len(runes) {
		return false
	}
	for i, e := range label {
		r := runes[i]
		switch {
		case e >= 0:
			if r != e {
				return false
			}
		case e == elemAnyNotNL:
			if r == '\n' {
				return false
			}
		}
	}
	return true
}
