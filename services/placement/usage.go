package placement

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Use is what one placed template takes of a datacenter: the demand it
// puts on each leaf and the bandwidth its bandwidth policies need on
// each network edge (named by the vertex whose edge to its parent it
// is).
type Use struct {
	Leaves map[string][]float64
	Links  map[string]float64
}

// Use is what a template, placed on the model, takes of it. The template
// must be valid and place every resource on a leaf of the model
// (ValidateFor, complete; its error is returned): Check's conditions.
func (m *Model) Use(t *Template) (Use, error) {
	if err := t.ValidateFor(m, true); err != nil {
		return Use{}, err
	}
	u := Use{Leaves: map[string][]float64{}, Links: map[string]float64{}}
	dims := len(m.dc.Dimensions)
	for _, r := range t.Resources {
		if len(r.Demand) == 0 {
			continue
		}
		l := t.Placement[r.ID]
		d := u.Leaves[l]
		if d == nil {
			d = make([]float64, dims)
			u.Leaves[l] = d
		}
		for k, v := range r.Demand {
			d[k] += v
		}
	}
	leaf := make([]int, len(t.Resources))
	for i, r := range t.Resources {
		leaf[i] = m.leafNo[t.Placement[r.ID]]
	}
	x := newExpansion(t)
	var path []int32
	for i := range t.Policies {
		p := &t.Policies[i]
		if p.Type != Bandwidth {
			continue
		}
		bw := p.Properties.BytesPerSecond
		x.pairs(p, func(a, b int) bool {
			path = m.path(leaf[a], leaf[b], path[:0])
			for _, e := range path {
				u.Links[m.netID[e]] += bw
			}
			return true
		})
	}
	return u, nil
}

// Usage is what the deployments admitted on a datacenter take of it, and
// which deployment takes what. The zero value is nothing in use.
type Usage struct {
	leaves map[string][]float64
	links  map[string]float64
	// users name the deployments on a leaf or a network edge.
	users map[string][]string
	// owners are the deployments' tenants (Own), so that a tenant's
	// findings name its own deployments only (RemainingFor).
	owners map[string]string
}

// Own records the tenant a deployment belongs to: a model's findings for
// another tenant (RemainingFor) say its use is in use, without its name.
func (u *Usage) Own(deployment, tenant string) {
	u.init()
	u.owners[deployment] = tenant
}

// Add counts what one deployment uses.
func (u *Usage) Add(deployment string, use Use) {
	for l, d := range use.Leaves {
		u.Take(deployment, l, d)
	}
	for e, bw := range use.Links {
		u.TakeLink(deployment, e, bw)
	}
}

// Take counts a demand a deployment puts on a leaf.
func (u *Usage) Take(deployment, leaf string, demand []float64) {
	u.init()
	s := u.leaves[leaf]
	if len(s) < len(demand) {
		s = append(s, make([]float64, len(demand)-len(s))...)
	}
	for k, v := range demand {
		s[k] += v
	}
	u.leaves[leaf] = s
	u.user(leaf, deployment)
}

// TakeLink counts the bandwidth a deployment takes on the network edge
// from vertex to its parent.
func (u *Usage) TakeLink(deployment, vertex string, bytesPerSecond float64) {
	u.init()
	u.links[vertex] += bytesPerSecond
	u.user("network "+vertex, deployment)
}

// Remove takes back what one deployment uses (use, as Add counted it):
// its demands come off the leaves and edges, and it is no longer named
// as their user. A leaf or edge with no user left is not in use at all
// (exactly zero, whatever rounding the additions left). A running total
// kept with Add and Remove equals the sum of what remains.
func (u *Usage) Remove(deployment string, use Use) {
	if u.leaves == nil {
		return
	}
	for l, d := range use.Leaves {
		us := u.drop(l, deployment)
		if len(us) == 0 {
			delete(u.leaves, l)
			continue
		}
		s := slices.Clone(u.leaves[l])
		for k := range min(len(d), len(s)) {
			s[k] = max(0, s[k]-d[k])
		}
		u.leaves[l] = s
	}
	for v, bw := range use.Links {
		if us := u.drop("network "+v, deployment); len(us) == 0 {
			delete(u.links, v)
			continue
		}
		u.links[v] = max(0, u.links[v]-bw)
	}
}

// drop removes a deployment from the users of a leaf or edge and returns
// those left. The list is replaced, not changed in place: a copy made by
// Without may share it.
func (u *Usage) drop(at, deployment string) []string {
	old := u.users[at]
	us := make([]string, 0, len(old))
	for _, d := range old {
		if d != deployment {
			us = append(us, d)
		}
	}
	if len(us) == 0 {
		delete(u.users, at)
	} else {
		u.users[at] = us
	}
	return us
}

// Without is the usage without one deployment's use: u itself when the
// deployment uses nothing, otherwise a copy (its maps copied, their
// values shared), so u is left as it is. The copy is valid until u next
// changes (Take adds to the shared values in place).
func (u *Usage) Without(deployment string, use Use) *Usage {
	if u == nil || len(use.Leaves) == 0 && len(use.Links) == 0 {
		return u
	}
	c := &Usage{leaves: maps.Clone(u.leaves), links: maps.Clone(u.links), users: maps.Clone(u.users), owners: u.owners}
	c.init()
	c.Remove(deployment, use)
	return c
}

func (u *Usage) init() {
	if u.leaves == nil {
		u.leaves, u.links, u.users = map[string][]float64{}, map[string]float64{}, map[string][]string{}
	}
	if u.owners == nil {
		u.owners = map[string]string{}
	}
}

// user records a deployment on a leaf or edge (sorted, and each once,
// when read).
func (u *Usage) user(at, deployment string) {
	if us := u.users[at]; len(us) == 0 || us[len(us)-1] != deployment {
		u.users[at] = append(us, deployment)
	}
}

// Empty reports whether nothing is in use.
func (u *Usage) Empty() bool { return u == nil || (len(u.leaves) == 0 && len(u.links) == 0) }

// Leaves are the leaves in use, sorted.
func (u *Usage) Leaves() []string {
	if u == nil {
		return nil
	}
	out := make([]string, 0, len(u.leaves))
	for l := range u.leaves {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// String is what is in use, sorted: each leaf's demand and users, then
// each network edge's bandwidth and users, numbers to six significant
// digits.
func (u *Usage) String() string {
	if u.Empty() {
		return ""
	}
	var b strings.Builder
	for _, l := range u.Leaves() {
		fmt.Fprintf(&b, "%s %.6g by %s; ", l, u.leaves[l], strings.Join(u.Users(l), ","))
	}
	links := make([]string, 0, len(u.links))
	for v := range u.links {
		links = append(links, v)
	}
	slices.Sort(links)
	for _, v := range links {
		fmt.Fprintf(&b, "network %s %.6g by %s; ", v, u.links[v], strings.Join(sortedUsers(u.users["network "+v]), ","))
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// Users are the deployments on a leaf, sorted.
func (u *Usage) Users(leaf string) []string {
	if u == nil {
		return nil
	}
	return sortedUsers(u.users[leaf])
}

func sortedUsers(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// inUse is what is in use on a model, by leaf number and network vertex,
// and by whom: what Remaining took off the capacities.
type inUse struct {
	base   *Model      // the model as compiled
	leaves [][]float64 // by leaf number; nil for a leaf with nothing in use
	links  []float64   // by network vertex
	users  map[string][]string
	// shown says which deployments the findings may name (nil: all).
	shown func(deployment string) bool
}

// RemainingFor is Remaining as the findings of tenant may say it: they
// name the tenant's own deployments (Usage.Own) and say of every other
// one only that it uses capacity. A tenant's deployment ids and where they
// run are its own: naming them to another tenant maps where it runs.
func (m *Model) RemainingFor(u *Usage, tenant string) *Model {
	c := m.Remaining(u)
	if c.used != nil {
		owners := u.owners
		c.used.shown = func(d string) bool { return owners[d] == tenant }
	}
	return c
}

// Remaining is a copy of the model with each leaf's capacity and each
// network edge's bandwidth reduced by what u says is in use (never below
// zero): Check and Propose on it count what earlier deployments take. A
// leaf or edge u names that the model does not have is left out. The
// findings on the copy say, beside a capacity, how much of it is in use
// and by which deployments.
func (m *Model) Remaining(u *Usage) *Model {
	if u.Empty() {
		return m
	}
	c := *m
	c.capacity = slices.Clone(m.capacity)
	c.netBW = slices.Clone(m.netBW)
	iu := &inUse{base: m, leaves: make([][]float64, len(m.leafID)), links: make([]float64, len(m.netID)), users: u.users}
	for id, d := range u.leaves {
		l, ok := m.leafNo[id]
		if !ok {
			continue
		}
		capl := slices.Clone(m.capacity[l])
		used := make([]float64, len(capl))
		for k := range capl {
			if k < len(d) {
				used[k] = d[k]
				capl[k] = max(0, capl[k]-d[k])
			}
		}
		c.capacity[l], iu.leaves[l] = capl, used
	}
	netNo := make(map[string]int, len(m.netID))
	for i, id := range m.netID {
		netNo[id] = i
	}
	for id, bw := range u.links {
		e, ok := netNo[id]
		if !ok || m.netParent[e] < 0 {
			continue
		}
		iu.links[e] = bw
		c.netBW[e] = max(0, m.netBW[e]-bw)
	}
	c.used = iu
	return &c
}

// capacityText is a leaf's capacity in one dimension as a finding states
// it: the whole capacity and, when earlier deployments use some, how
// much and which.
func (m *Model) capacityText(l, k int) string {
	if m.used == nil || m.used.leaves[l] == nil || m.used.leaves[l][k] == 0 {
		return num(m.capacity[l][k])
	}
	return fmt.Sprintf("%s, of which %s is in use by %s", num(m.used.base.capacity[l][k]), num(m.used.leaves[l][k]), m.used.deployments(m.used.users[m.leafID[l]]))
}

// totalText is the datacenter's capacity in dimension k, free being what
// its leaves have left, as the non-overload finding on a whole request
// states it: when earlier deployments use some, what is free, the whole,
// how much is in use and by which.
func (m *Model) totalText(k int, free float64) string {
	if m.used == nil {
		return num(free)
	}
	var all float64
	var users []string
	for l, c := range m.used.base.capacity {
		all += c[k]
		if c[k] > m.capacity[l][k] {
			users = append(users, m.used.users[m.leafID[l]]...)
		}
	}
	if all <= free {
		return num(free)
	}
	return fmt.Sprintf("%s free (%s, of which %s is in use by %s)", num(free), num(all), num(all-free), m.used.deployments(users))
}

// bandwidthText is a network edge's bandwidth as a finding states it.
func (m *Model) bandwidthText(e int32) string {
	if m.used == nil || m.used.links[e] == 0 {
		return num(m.netBW[e])
	}
	return fmt.Sprintf("%s, of which %s is in use by %s", num(m.used.base.netBW[e]), num(m.used.links[e]), m.used.deployments(m.used.users["network "+m.netID[e]]))
}

// deployments names at most five of the deployments ids that the
// findings may name (shown); the others are said to be other tenants'.
func (iu *inUse) deployments(ids []string) string {
	if iu == nil || iu.shown == nil {
		return deployments(ids)
	}
	var own []string
	others := false
	for _, d := range ids {
		if iu.shown(d) {
			own = append(own, d)
		} else {
			others = true
		}
	}
	switch {
	case !others:
		return deployments(own)
	case len(own) == 0:
		return "deployments of other tenants"
	}
	return deployments(own) + " and deployments of other tenants"
}

// deployments names at most five deployments.
func deployments(ids []string) string {
	const most = 5
	ids = sortedUsers(ids)
	if len(ids) == 0 {
		return "earlier deployments"
	}
	s := "deployment"
	if len(ids) > 1 {
		s += "s"
	}
	if len(ids) > most {
		return fmt.Sprintf("%s %s and %d more", s, strings.Join(ids[:most], ", "), len(ids)-most)
	}
	return s + " " + strings.Join(ids, ", ")
}

// Holds lists what of u the model cannot hold, naming the deployments: a
// leaf or network edge in use that the model does not have, a demand in
// a dimension it does not name, more in use than a leaf's capacity or an
// edge's bandwidth. A model that replaces one deployments use must hold
// what they use.
func (m *Model) Holds(u *Usage) []string {
	if u.Empty() {
		return nil
	}
	var out []string
	for _, id := range u.Leaves() {
		d, by := u.leaves[id], deployments(u.users[id])
		l, ok := m.leafNo[id]
		if !ok {
			out = append(out, fmt.Sprintf("leaf %s, used by %s, is not in the model", id, by))
			continue
		}
		for k, v := range d {
			switch {
			case k >= len(m.capacity[l]):
				if v != 0 {
					out = append(out, fmt.Sprintf("leaf %s: %s in dimension %d in use by %s, a dimension the model does not name", id, num(v), k, by))
				}
			case v > m.capacity[l][k]:
				out = append(out, fmt.Sprintf("leaf %s: %s %s in use by %s, its capacity would be %s", id, num(v), m.dc.Dimensions[k], by, num(m.capacity[l][k])))
			}
		}
	}
	netNo := make(map[string]int, len(m.netID))
	for i, id := range m.netID {
		netNo[id] = i
	}
	links := make([]string, 0, len(u.links))
	for id := range u.links {
		links = append(links, id)
	}
	slices.Sort(links)
	for _, id := range links {
		bw, by := u.links[id], deployments(u.users["network "+id])
		e, ok := netNo[id]
		switch {
		case !ok || m.netParent[e] < 0:
			out = append(out, fmt.Sprintf("network edge of %s, used by %s, is not in the model", id, by))
		case bw > m.netBW[e]:
			out = append(out, fmt.Sprintf("network edge %s: %s bytes/s in use by %s, its bandwidth would be %s", m.edgeName(int32(e)), num(bw), by, num(m.netBW[e])))
		}
	}
	return out
}
