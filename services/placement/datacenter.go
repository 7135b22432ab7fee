package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/policyflow/policyflow/services/check"
)

// Limits of a datacenter model.
const (
	// MaxVertices bounds the vertices of each tree.
	MaxVertices = 100000
	// MaxDepth bounds the depth of each tree (edges from the root).
	MaxDepth = 64
	// MaxLevels bounds the levels a datacenter names.
	MaxLevels = 64
	// MaxDimensions bounds the length of capacity and demand vectors.
	MaxDimensions = 32
	// MaxDatacenterBytes bounds a datacenter model as JSON.
	MaxDatacenterBytes = 32 << 20
)

// Datacenter is a datacenter model (seed 002): a location tree whose
// every vertex has a level, and a network tree sharing the same leaves.
// The leaves host resources; each has a capacity vector (one number per
// dimension). Each network vertex but the root has the bandwidth of the
// edge to its parent. Both trees are flat lists of vertices naming their
// parents; exactly one vertex of each names none (the root).
type Datacenter struct {
	ID string `json:"id"`
	// Levels are the location levels and their partial order: a level
	// lists the levels it lies directly within (coarser ones).
	Levels []Level `json:"levels"`
	// Dimensions name the positions of capacity and demand vectors,
	// e.g. ["vcpu", "ram_gb", "disk_gb"].
	Dimensions []string    `json:"dimensions"`
	Location   []Location  `json:"location"`
	Network    []NetVertex `json:"network"`
	// Types are the host types (machine configurations) a leaf may name:
	// what a license charge depends on, and the licensed products a host
	// of the type may run.
	Types []HostType `json:"types,omitempty"`
}

// HostType is a type of host (e.g. a PM model and configuration): the
// seed's "type/configuration of the machine in enough detail to allow
// correct calculation of license charges".
type HostType struct {
	ID string `json:"id"`
	// Description says what the machine is (cores, sockets, model), for
	// the license terms that depend on it.
	Description string `json:"description,omitempty"`
	// LicensedProducts are the products licensed for hosts of this type;
	// a licensed-product policy holds on a leaf whose type lists the
	// product.
	LicensedProducts []Product `json:"licensed_products,omitempty"`
}

// Product is a licensed product: a catalog and a product of it.
type Product struct {
	Catalog string `json:"catalog"`
	Product string `json:"product"`
}

// Level is one location level, e.g. {"name": "pm", "within": ["rack"]}.
type Level struct {
	Name string `json:"name"`
	// Within lists the levels directly coarser than this one; the order is
	// their transitive closure. Levels that are not ordered either way
	// are incommensurate (a pm and a storage box).
	Within []string `json:"within,omitempty"`
}

// Location is a vertex of the location tree.
type Location struct {
	ID     string `json:"id"`
	Level  string `json:"level"`
	Parent string `json:"parent,omitempty"`
	// Capacity is given on leaves only, one number per dimension.
	Capacity []float64 `json:"capacity,omitempty"`
	// Type names a host type of the datacenter's types; leaves only,
	// optional.
	Type string `json:"type,omitempty"`
}

// NetVertex is a vertex of the network tree.
type NetVertex struct {
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	// Bandwidth is the capacity of the edge to the parent in bytes per
	// second; absent on the root.
	Bandwidth float64 `json:"bandwidth,omitempty"`
}

// Model is a validated datacenter indexed for checks and search. It is
// read-only and safe to share.
type Model struct {
	dc *Datacenter

	levelIdx map[string]int
	// coarser[a][b]: level b is strictly coarser than level a.
	coarser [][]bool
	// levelBad: the level's within list has a problem (reported), so its
	// vertices are not compared with their parents'.
	levelBad []bool

	locID     []string
	locLevel  []int
	locParent []int32
	locIdx    map[string]int32
	// locLo, locHi: the leaves below a location vertex are
	// byLoc[locLo[v]:locHi[v]].
	locLo, locHi []int32
	// perLevel counts the location vertices of each level.
	perLevel []int

	// leaf numbers index leafID, leafLoc, leafNet, capacity.
	leafID   []string
	leafNo   map[string]int
	leafLoc  []int32
	leafNet  []int32
	capacity [][]float64
	// byLoc: leaf numbers in location-tree depth-first order.
	byLoc []int32
	// leafClass numbers the leaves alike for the soft policies away from
	// other resources: the same levels on the path to the root and the
	// same type (see Propose).
	leafClass []int32
	nClasses  int
	// classMask: the classes of the leaves below each location vertex, a
	// bit each; nil when there are more than 64 classes.
	classMask []uint64
	// leafType: each leaf's index in dc.Types, -1 for none; licensed: the
	// products each type licenses.
	leafType []int32
	licensed []map[Product]bool

	netID     []string
	netParent []int32
	netDepth  []int32
	netBW     []float64
	// netLo, netHi: the leaves below a network vertex are
	// byNet[netLo[v]:netHi[v]].
	netLo, netHi []int32
	byNet        []int32

	// used is what Remaining took off the capacities (nil on a model as
	// compiled).
	used *inUse
}

// Datacenter is the model's datacenter as given.
func (m *Model) Datacenter() *Datacenter { return m.dc }

// ID is the datacenter's id.
func (m *Model) ID() string { return m.dc.ID }

// Leaves is how many leaves the datacenter has.
func (m *Model) Leaves() int { return len(m.leafID) }

// ParseDatacenter decodes a datacenter's JSON strictly (unknown fields
// are refused, naming them), validates it and indexes it. Every problem is
// listed in an *Invalid.
func ParseDatacenter(data []byte) (*Model, error) {
	if len(data) > MaxDatacenterBytes {
		return nil, &Invalid{What: "datacenter", Problems: []Problem{{Field: "datacenter", Msg: fmt.Sprintf("is %d bytes; at most %d are allowed", len(data), MaxDatacenterBytes)}}}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var dc Datacenter
	if err := dec.Decode(&dc); err != nil {
		return nil, &Invalid{What: "datacenter", Problems: []Problem{{Field: "datacenter", Msg: fmt.Sprintf("not a datacenter model: %v", err)}}}
	}
	if dec.More() {
		return nil, &Invalid{What: "datacenter", Problems: []Problem{{Field: "datacenter", Msg: "holds more than one JSON value"}}}
	}
	return Compile(&dc)
}

// JSON is the datacenter as compact JSON: the canonical form it is
// stored in.
func (dc *Datacenter) JSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(dc); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Compile validates a datacenter and indexes it. The rules: a valid id;
// 1 to 64 uniquely named levels whose within relation has no cycle; 1 to
// 32 dimensions; in each tree 1 to 100,000 vertices with unique ids,
// known parents, exactly one root and depth at most 64 (no cycle); every
// location vertex at a known level strictly finer than its parent's; the
// network tree's leaves are the location tree's leaves; every leaf has a
// capacity of one non-negative number per dimension and no other vertex
// has one; every network edge has a positive bandwidth.
func Compile(dc *Datacenter) (*Model, error) {
	var ps problems
	if err := check.ID("", dc.ID); err != nil {
		ps.add("id", "%v", err)
	}
	m := &Model{dc: dc, levelIdx: map[string]int{}}
	levelsOK := m.compileLevels(&ps)
	dimsOK := true
	switch n := len(dc.Dimensions); {
	case n == 0:
		ps.add("dimensions", "is empty: name the positions of capacity and demand vectors, e.g. [\"vcpu\", \"ram_gb\"]")
		dimsOK = false
	case n > MaxDimensions:
		ps.add("dimensions", "has %d names; at most %d are allowed", n, MaxDimensions)
		dimsOK = false
	}
	seenDim := map[string]bool{}
	for i, d := range dc.Dimensions {
		if d == "" || seenDim[d] {
			ps.add(fmt.Sprintf("dimensions[%d]", i), "%q is empty or named twice; name each position once", d)
		}
		seenDim[d] = true
	}
	types := m.compileTypes(&ps)
	// Each part is checked even when an earlier one has problems, so one
	// refusal lists them all; a check that would only repeat an earlier
	// problem (every vertex's level when the levels are missing, every
	// capacity's length when the dimensions are) is left out.
	m.compileLocation(&ps, levelsOK, dimsOK, types)
	m.compileNetwork(&ps)
	if err := ps.err("datacenter"); err != nil {
		return nil, err
	}
	m.classify()
	m.licensed = make([]map[Product]bool, len(dc.Types))
	for i, t := range dc.Types {
		m.licensed[i] = map[Product]bool{}
		for _, p := range t.LicensedProducts {
			m.licensed[i][p] = true
		}
	}
	m.leafType = make([]int32, len(m.leafID))
	for n := range m.leafID {
		m.leafType[n] = -1
		if t := dc.Location[m.leafLoc[n]].Type; t != "" {
			m.leafType[n] = int32(types[t])
		}
	}
	return m, nil
}

// licenses reports whether the type of a leaf licenses a product, and
// names the type ("" when the leaf has none).
func (m *Model) licenses(leaf int, p Product) (typ string, ok bool) {
	if m.leafType == nil {
		// A model not made by Compile: read the datacenter as given.
		typ = m.dc.Location[m.leafLoc[leaf]].Type
		for _, t := range m.dc.Types {
			if t.ID == typ && typ != "" {
				return typ, slices.Contains(t.LicensedProducts, p)
			}
		}
		return typ, false
	}
	t := m.leafType[leaf]
	if t < 0 {
		return "", false
	}
	return m.dc.Types[t].ID, m.licensed[t][p]
}

// compileTypes checks the host types and indexes them by id.
func (m *Model) compileTypes(ps *problems) map[string]int {
	idx := map[string]int{}
	for i, t := range m.dc.Types {
		f := fmt.Sprintf("types[%d]", i)
		if err := check.ID("", t.ID); err != nil {
			ps.add(f+".id", "%v", err)
		} else if j, dup := idx[t.ID]; dup {
			ps.add(f+".id", "%q is also the id of types[%d]; ids are unique", t.ID, j)
		} else {
			idx[t.ID] = i
		}
		for j, p := range t.LicensedProducts {
			if p.Catalog == "" || p.Product == "" {
				ps.add(fmt.Sprintf("%s.licensed_products[%d]", f, j), "give both the catalog and the product, e.g. {\"catalog\": \"ibm\", \"product\": \"websphere\"}")
			}
		}
	}
	return idx
}

func (m *Model) compileLevels(ps *problems) bool {
	ls := m.dc.Levels
	switch {
	case len(ls) == 0:
		ps.add("levels", "is empty: name the location levels, coarse to fine, e.g. [{\"name\":\"room\"},{\"name\":\"rack\",\"within\":[\"room\"]},{\"name\":\"pm\",\"within\":[\"rack\"]}]")
		return false
	case len(ls) > MaxLevels:
		ps.add("levels", "has %d levels; at most %d are allowed", len(ls), MaxLevels)
		return false
	}
	for i, l := range ls {
		if err := check.ID("", l.Name); err != nil {
			ps.add(fmt.Sprintf("levels[%d].name", i), "%v", err)
			// Indexed all the same: the vertices at this level are not
			// reported again.
			if _, dup := m.levelIdx[l.Name]; !dup {
				m.levelIdx[l.Name] = i
			}
			continue
		}
		if _, dup := m.levelIdx[l.Name]; dup {
			ps.add(fmt.Sprintf("levels[%d].name", i), "level %q is named twice", l.Name)
			continue
		}
		m.levelIdx[l.Name] = i
	}
	n := len(ls)
	m.levelBad = make([]bool, n)
	m.coarser = make([][]bool, n)
	for i := range m.coarser {
		m.coarser[i] = make([]bool, n)
	}
	for i, l := range ls {
		for j, w := range l.Within {
			k, ok := m.levelIdx[w]
			if !ok {
				ps.add(fmt.Sprintf("levels[%d].within[%d]", i, j), "unknown level %q; name a level of this list", w)
				m.levelBad[i] = true
				continue
			}
			m.coarser[i][k] = true
		}
	}
	// Transitive closure (Floyd–Warshall on at most 64 levels).
	for k := range n {
		for i := range n {
			if !m.coarser[i][k] {
				continue
			}
			for j := range n {
				if m.coarser[k][j] {
					m.coarser[i][j] = true
				}
			}
		}
	}
	for i, l := range ls {
		if m.coarser[i][i] {
			ps.add(fmt.Sprintf("levels[%d].within", i), "level %q lies within itself through a cycle; the levels must form a partial order", l.Name)
			m.levelBad[i] = true
		}
	}
	m.perLevel = make([]int, n)
	return true
}

// parentIndex resolves the parent of every vertex, checking ids, and
// finds the root; depth -1 marks vertices on a cycle or too deep.
func parentIndex(ps *problems, tree string, ids []string, parents []string) (idx map[string]int32, parent []int32, depth []int32, root int32) {
	n := len(ids)
	idx = make(map[string]int32, n)
	parent = make([]int32, n)
	depth = make([]int32, n)
	root = -1
	for i, id := range ids {
		if err := check.ID("", id); err != nil {
			ps.add(fmt.Sprintf("%s[%d].id", tree, i), "%v", err)
			continue
		}
		if j, dup := idx[id]; dup {
			ps.add(fmt.Sprintf("%s[%d].id", tree, i), "%q is also the id of %s[%d]; ids are unique within a tree", id, tree, j)
			continue
		}
		idx[id] = int32(i)
	}
	for i, p := range parents {
		parent[i] = -1
		if p == "" {
			if root >= 0 {
				ps.add(fmt.Sprintf("%s[%d].parent", tree, i), "is missing, and %s[%d] (%q) is already the root; a tree has one root: name this vertex's parent", tree, root, ids[root])
				continue
			}
			root = int32(i)
			continue
		}
		j, ok := idx[p]
		if !ok {
			ps.add(fmt.Sprintf("%s[%d].parent", tree, i), "unknown vertex %q; name a vertex of the %s tree", p, tree)
			continue
		}
		parent[i] = j
	}
	if root < 0 && n > 0 {
		ps.add(tree, "has no root: exactly one vertex names no parent")
	}
	// Depths, walking up; a walk that meets itself is a cycle, one that
	// ends at a vertex with no parent other than the root is detached (its
	// missing or unknown parent is reported above).
	const unknown, onWalk, bad = -2, -3, -1
	for i := range depth {
		depth[i] = unknown
	}
	var path []int32
	for i := range n {
		if depth[i] != unknown {
			continue
		}
		path = path[:0]
		v := int32(i)
		base := int32(-1)
		ok := true
		for {
			if depth[v] >= 0 {
				base = depth[v]
				break
			}
			if depth[v] == bad {
				ok = false
				break
			}
			if depth[v] == onWalk {
				ps.add(fmt.Sprintf("%s[%d].parent", tree, v), "vertex %q is on a cycle of parents; a tree has none", ids[v])
				ok = false
				break
			}
			path = append(path, v)
			depth[v] = onWalk
			if parent[v] < 0 {
				ok = v == root
				break
			}
			v = parent[v]
		}
		if ok && int(base)+len(path) > MaxDepth {
			ps.add(fmt.Sprintf("%s[%d]", tree, i), "vertex %q is %d edges below the root; trees are at most %d deep", ids[i], int(base)+len(path), MaxDepth)
			ok = false
		}
		for k := len(path) - 1; k >= 0; k-- {
			if ok {
				base++
				depth[path[k]] = base
			} else {
				depth[path[k]] = bad
			}
		}
	}
	return idx, parent, depth, root
}

func (m *Model) compileLocation(ps *problems, levelsOK, dimsOK bool, types map[string]int) {
	loc := m.dc.Location
	if len(loc) == 0 || len(loc) > MaxVertices {
		ps.add("location", "has %d vertices; give 1 to %d", len(loc), MaxVertices)
		return
	}
	before := ps.n()
	ids := make([]string, len(loc))
	parents := make([]string, len(loc))
	for i, v := range loc {
		ids[i], parents[i] = v.ID, v.Parent
	}
	idx, parent, depth, root := parentIndex(ps, "location", ids, parents)
	m.locID, m.locParent, m.locIdx = ids, parent, idx
	m.locLevel = make([]int, len(loc))
	children := make([]int32, len(loc))
	for i, v := range loc {
		if parent[i] >= 0 {
			children[parent[i]]++
		}
		l, ok := m.levelIdx[v.Level]
		if !ok {
			if levelsOK {
				ps.add(fmt.Sprintf("location[%d].level", i), "unknown level %q of vertex %q; use one of the datacenter's levels", v.Level, v.ID)
			}
			m.locLevel[i] = -1
			continue
		}
		m.locLevel[i] = l
		m.perLevel[l]++
	}
	for i, v := range loc {
		p := parent[i]
		if p < 0 || m.locLevel[i] < 0 || m.locLevel[p] < 0 || depth[i] < 0 || m.levelBad[m.locLevel[i]] {
			continue
		}
		if !m.coarser[m.locLevel[i]][m.locLevel[p]] {
			ps.add(fmt.Sprintf("location[%d].level", i), "vertex %q at level %s is inside %q at level %s, which is not coarser; along every path each level lies within its parent's (declare it in levels[].within)", v.ID, v.Level, loc[p].ID, loc[p].Level)
		}
	}
	m.leafNo = map[string]int{}
	for i, v := range loc {
		leaf := children[i] == 0
		f := fmt.Sprintf("location[%d].capacity", i)
		switch {
		case !leaf && v.Capacity != nil:
			ps.add(f, "vertex %q has children; only leaves host resources and have a capacity", v.ID)
		case leaf && dimsOK && len(v.Capacity) != len(m.dc.Dimensions):
			ps.add(f, "leaf %q has %d numbers; give one per dimension (%d: %v)", v.ID, len(v.Capacity), len(m.dc.Dimensions), m.dc.Dimensions)
		case leaf:
			for k, c := range v.Capacity {
				if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
					ps.add(fmt.Sprintf("%s[%d]", f, k), "leaf %q has capacity %v for %s; give a number >= 0", v.ID, c, m.dc.Dimensions[min(k, len(m.dc.Dimensions)-1)])
				}
			}
		}
		switch _, known := types[v.Type]; {
		case v.Type == "":
		case !leaf:
			ps.add(fmt.Sprintf("location[%d].type", i), "vertex %q has children; only leaves (hosts) have a type", v.ID)
		case !known:
			ps.add(fmt.Sprintf("location[%d].type", i), "unknown type %q of leaf %q; name one of the datacenter's types (types[].id)", v.Type, v.ID)
		}
		if leaf && idx[v.ID] == int32(i) {
			m.leafNo[v.ID] = len(m.leafID)
			m.leafID = append(m.leafID, v.ID)
			m.leafLoc = append(m.leafLoc, int32(i))
			m.capacity = append(m.capacity, v.Capacity)
		}
	}
	if ps.n() > before || root < 0 {
		return
	}
	// Depth-first order of the leaves, and each vertex's range of leaves.
	kids := childLists(parent)
	m.locLo = make([]int32, len(loc))
	m.locHi = make([]int32, len(loc))
	m.byLoc = make([]int32, 0, len(m.leafID))
	dfs(root, kids, func(v int32) { m.locLo[v] = int32(len(m.byLoc)) }, func(v int32) {
		if len(kids[v]) == 0 {
			m.byLoc = append(m.byLoc, int32(m.leafNo[ids[v]]))
		}
		m.locHi[v] = int32(len(m.byLoc))
	})
}

// childLists turns parent pointers into child lists.
func childLists(parent []int32) [][]int32 {
	kids := make([][]int32, len(parent))
	for i, p := range parent {
		if p >= 0 {
			kids[p] = append(kids[p], int32(i))
		}
	}
	return kids
}

// dfs walks a validated tree without recursion, calling pre before a
// vertex's children and post after them.
func dfs(root int32, kids [][]int32, pre, post func(int32)) {
	type frame struct {
		v int32
		i int
	}
	stack := []frame{{root, 0}}
	pre(root)
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.i < len(kids[top.v]) {
			c := kids[top.v][top.i]
			top.i++
			pre(c)
			stack = append(stack, frame{c, 0})
			continue
		}
		post(top.v)
		stack = stack[:len(stack)-1]
	}
}

func (m *Model) compileNetwork(ps *problems) {
	net := m.dc.Network
	if len(net) == 0 || len(net) > MaxVertices {
		ps.add("network", "has %d vertices; give 1 to %d", len(net), MaxVertices)
		return
	}
	ids := make([]string, len(net))
	parents := make([]string, len(net))
	for i, v := range net {
		ids[i], parents[i] = v.ID, v.Parent
	}
	before := ps.n()
	idx, parent, depth, root := parentIndex(ps, "network", ids, parents)
	m.netID, m.netParent, m.netDepth = ids, parent, depth
	m.netBW = make([]float64, len(net))
	kids := childLists(parent)
	for i, v := range net {
		f := fmt.Sprintf("network[%d].bandwidth", i)
		switch {
		case int32(i) == root && v.Bandwidth != 0:
			ps.add(f, "the root %q has no edge to a parent; remove its bandwidth", v.ID)
		case int32(i) != root && (!(v.Bandwidth > 0) || math.IsInf(v.Bandwidth, 0)):
			ps.add(f, "edge %q-%q has bandwidth %v; give the edge's capacity in bytes per second (> 0)", v.ID, v.Parent, v.Bandwidth)
		}
		m.netBW[i] = v.Bandwidth
		if len(kids[i]) == 0 && m.leafNo != nil {
			if _, ok := m.leafNo[v.ID]; !ok {
				ps.add(fmt.Sprintf("network[%d].id", i), "network leaf %q is not a leaf of the location tree; both trees share the same leaves", v.ID)
			}
		}
	}
	m.leafNet = make([]int32, len(m.leafID))
	for n, id := range m.leafID {
		j, ok := idx[id]
		switch {
		case !ok:
			ps.add("network", "location leaf %q is not in the network tree; both trees share the same leaves", id)
		case len(kids[j]) > 0:
			ps.add(fmt.Sprintf("network[%d].id", j), "location leaf %q has children in the network tree; both trees share the same leaves", id)
		default:
			m.leafNet[n] = j
		}
	}
	if ps.n() > before || root < 0 {
		return
	}
	m.netLo = make([]int32, len(net))
	m.netHi = make([]int32, len(net))
	m.byNet = make([]int32, 0, len(m.leafID))
	dfs(root, kids, func(v int32) { m.netLo[v] = int32(len(m.byNet)) }, func(v int32) {
		if len(kids[v]) == 0 {
			m.byNet = append(m.byNet, int32(m.leafNo[ids[v]]))
		}
		m.netHi[v] = int32(len(m.byNet))
	})
}

// ancestorAt is the location vertex at the level above (or at) a leaf,
// or -1 when the leaf's path has no vertex at that level.
func (m *Model) ancestorAt(leaf int, level int) int32 {
	for v := m.leafLoc[leaf]; v >= 0; v = m.locParent[v] {
		if m.locLevel[v] == level {
			return v
		}
	}
	return -1
}

// hops is the length in edges of the network path between two leaves.
func (m *Model) hops(a, b int) int {
	u, v := m.leafNet[a], m.leafNet[b]
	n := 0
	for m.netDepth[u] > m.netDepth[v] {
		u = m.netParent[u]
		n++
	}
	for m.netDepth[v] > m.netDepth[u] {
		v = m.netParent[v]
		n++
	}
	for u != v {
		u, v = m.netParent[u], m.netParent[v]
		n += 2
	}
	return n
}

// path appends the network vertices whose edges to their parents make the
// path between two leaves.
func (m *Model) path(a, b int, out []int32) []int32 {
	u, v := m.leafNet[a], m.leafNet[b]
	for m.netDepth[u] > m.netDepth[v] {
		out = append(out, u)
		u = m.netParent[u]
	}
	for m.netDepth[v] > m.netDepth[u] {
		out = append(out, v)
		v = m.netParent[v]
	}
	for u != v {
		out = append(out, u, v)
		u, v = m.netParent[u], m.netParent[v]
	}
	return out
}

// edgeName names a network edge by its two ends.
func (m *Model) edgeName(v int32) string {
	return m.netID[v] + "-" + m.netID[m.netParent[v]]
}

// level returns a level's index, or -1.
func (m *Model) level(name string) int {
	if i, ok := m.levelIdx[name]; ok {
		return i
	}
	return -1
}

// HasLevel reports whether the datacenter names the level.
func (m *Model) HasLevel(name string) bool { return m.level(name) >= 0 }

// LevelNames are the datacenter's levels, in the order given.
func (m *Model) LevelNames() []string {
	out := make([]string, len(m.dc.Levels))
	for i, l := range m.dc.Levels {
		out[i] = l.Name
	}
	return slices.Clip(out)
}

// classify numbers the leaf classes: leaves with the same levels on their
// path to the root and the same type. Propose scores one leaf of a class
// for the leaves near no related resource.
func (m *Model) classify() {
	type key struct {
		levels uint64
		typ    string
	}
	ids := map[key]int32{}
	m.leafClass = make([]int32, len(m.leafID))
	for n := range m.leafID {
		var mask uint64
		for v := m.leafLoc[n]; v >= 0; v = m.locParent[v] {
			if l := m.locLevel[v]; l >= 0 {
				mask |= 1 << uint(l)
			}
		}
		k := key{levels: mask, typ: m.dc.Location[m.leafLoc[n]].Type}
		c, ok := ids[k]
		if !ok {
			c = int32(len(ids))
			ids[k] = c
		}
		m.leafClass[n] = c
	}
	m.nClasses = len(ids)
	if m.nClasses > 64 {
		return
	}
	m.classMask = make([]uint64, len(m.locID))
	for n := range m.leafID {
		bit := uint64(1) << uint(m.leafClass[n])
		for v := m.leafLoc[n]; v >= 0 && m.classMask[v]&bit == 0; v = m.locParent[v] {
			m.classMask[v] |= bit
		}
	}
}
