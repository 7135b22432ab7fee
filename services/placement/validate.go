package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/policyflow/policyflow/services/check"
)

// Validate checks the template on its own (without a datacenter) and
// returns every problem in an *Invalid: ids, a group cycle, a resource
// or group in two groups, a resource in no group, unknown members,
// policies of unknown type, mode or arity, parameters missing or of
// another type, N <= 0, hops < 0, the placement of an unknown resource,
// and the limits.
//
// The checks run in the order of the template's fields, each one a
// method of templateCheck; the problems come out in that order.
//
// The seed's syntax is lowered first (heat.go); its policies are named
// by where they are given (groups[1].policies[0]).
func (t *Template) Validate() error {
	l, lps := t.lower()
	c := templateCheck{t: l.Template, l: l}
	if c.limits(t); len(c.ps.list) > 0 {
		return c.ps.err("template")
	}
	for _, p := range lps {
		c.ps.add(p.Field, "%s", p.Msg)
	}
	c.resources()
	c.groupIDs()
	c.membership()
	c.groupTree()
	c.relationships()
	c.pids = map[string]int{}
	for i := range c.t.Policies {
		c.policy(i)
	}
	c.placement()
	if len(c.ps.list) > 0 {
		return c.ps.err("template")
	}
	// Only a well-formed tree can be expanded.
	c.pairBudget()
	return c.ps.err("template")
}

// templateCheck is one run of Validate: the problems found so far and
// the indexes the later checks look names up in.
type templateCheck struct {
	t  *Template
	l  *lowered
	ps problems
	// res and groups map an id to the index of its first resource or
	// group; in maps a resource or group to the group it is a member of;
	// pids maps a policy id to the index of its first policy.
	res    map[string]int
	groups map[string]int
	in     map[string]string
	pids   map[string]int
}

// known reports whether id names a resource or a group of the template.
func (c *templateCheck) known(id string) bool {
	_, r := c.res[id]
	_, g := c.groups[id]
	return r || g
}

// limits checks the datacenter id and the sizes of the template as
// given; a template over a limit is not looked into further.
func (c *templateCheck) limits(t *Template) {
	if t.Datacenter != "" {
		if err := check.ID("", t.Datacenter); err != nil {
			c.ps.add("datacenter", "%v", err)
		}
	}
	switch {
	case len(t.Resources) > MaxResources:
		c.ps.add("resources", "has %d resources; at most %d are allowed", len(t.Resources), MaxResources)
	case len(t.Groups) > MaxGroups:
		c.ps.add("groups", "has %d groups; at most %d are allowed", len(t.Groups), MaxGroups)
	case len(c.t.Policies) > MaxPolicies:
		c.ps.add("placement_policies", "has %d policies, with those inside resources, groups and relationships; at most %d are allowed", len(c.t.Policies), MaxPolicies)
	case len(t.Relationships) > MaxPolicies:
		c.ps.add("relationships", "has %d relationships; at most %d are allowed", len(t.Relationships), MaxPolicies)
	}
}

// resources checks the resources' ids and demands and indexes them.
func (c *templateCheck) resources() {
	t := c.t
	if len(t.Resources) == 0 && (len(t.Policies) > 0 || len(t.Placement) > 0 || len(t.Groups) > 0) {
		c.ps.add("resources", "is empty: list the resources the groups, policies and placement name")
	}
	c.res = map[string]int{}
	for i, r := range t.Resources {
		f := fmt.Sprintf("resources[%d]", i)
		if err := checkName(r.ID); err != nil {
			c.ps.add(f+".id", "%v", err)
			continue
		}
		if j, dup := c.res[r.ID]; dup {
			c.ps.add(f+".id", "%q is also the id of resources[%d]; ids are unique", r.ID, j)
			continue
		}
		c.res[r.ID] = i
		if len(r.Demand) > MaxDimensions {
			c.ps.add(f+".demand", "has %d numbers; at most %d are allowed", len(r.Demand), MaxDimensions)
		}
		for k, d := range r.Demand {
			if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
				c.ps.add(fmt.Sprintf("%s.demand[%d]", f, k), "is %v; give a number >= 0", d)
			}
		}
	}
}

// groupIDs checks the groups' ids and indexes them.
func (c *templateCheck) groupIDs() {
	c.groups = map[string]int{}
	for i, g := range c.t.Groups {
		f := fmt.Sprintf("groups[%d]", i)
		if err := checkName(g.ID); err != nil {
			c.ps.add(f+".id", "%v", err)
			continue
		}
		if j, dup := c.groups[g.ID]; dup {
			c.ps.add(f+".id", "%q is also the id of groups[%d]; ids are unique", g.ID, j)
			continue
		}
		if j, dup := c.res[g.ID]; dup {
			c.ps.add(f+".id", "%q is also the id of resources[%d]; a group and a resource cannot share an id", g.ID, j)
			continue
		}
		c.groups[g.ID] = i
	}
}

// membership checks that each resource and group is a member of at most
// one group and, with groups, each resource of exactly one; it indexes
// the membership.
func (c *templateCheck) membership() {
	c.in = map[string]string{}
	for i, g := range c.t.Groups {
		f := fmt.Sprintf("groups[%d].members", i)
		if len(g.Members) == 0 {
			c.ps.add(f, "group %q is empty; a group has at least one member", g.ID)
		}
		for j, mem := range g.Members {
			_, isRes := c.res[mem]
			_, isGroup := c.groups[mem]
			switch {
			case !isRes && !isGroup:
				c.ps.add(fmt.Sprintf("%s[%d]", f, j), "unknown member %q of group %q; name a resource or a group of the template", mem, g.ID)
			case mem == g.ID:
				c.ps.add(fmt.Sprintf("%s[%d]", f, j), "group %q contains itself; groups form a tree", g.ID)
			case c.in[mem] != "":
				what := "resource"
				if isGroup {
					what = "group"
				}
				c.ps.add(fmt.Sprintf("%s[%d]", f, j), "%s %q is in group %q and in group %q; each is in exactly one group", what, mem, c.in[mem], g.ID)
			default:
				c.in[mem] = g.ID
			}
		}
	}
	if len(c.t.Groups) == 0 {
		return
	}
	for i, r := range c.t.Resources {
		if _, ok := c.res[r.ID]; ok && c.in[r.ID] == "" && c.res[r.ID] == i {
			c.ps.add(fmt.Sprintf("resources[%d]", i), "resource %q is in no group; with groups, each resource is in exactly one", r.ID)
		}
	}
}

// groupTree finds group cycles and groups nested too deep, walking up
// the membership from every group.
func (c *templateCheck) groupTree() {
	for i, g := range c.t.Groups {
		if c.groups[g.ID] != i {
			continue
		}
		seen := map[string]bool{g.ID: true}
		for up, d := c.in[g.ID], 1; up != ""; up, d = c.in[up], d+1 {
			if seen[up] {
				c.ps.add(fmt.Sprintf("groups[%d]", i), "group %q is on a cycle of groups: it contains, through its members, group %q, which contains it; groups form a tree", g.ID, c.in[g.ID])
				break
			}
			if d > MaxGroupDepth {
				c.ps.add(fmt.Sprintf("groups[%d]", i), "group %q is nested more than %d deep", g.ID, MaxGroupDepth)
				break
			}
			seen[up] = true
		}
	}
}

// relationships checks that each relationship names known ends.
func (c *templateCheck) relationships() {
	for i, rel := range c.t.Relationships {
		if i < len(c.l.relPaths) && c.l.relPaths[i] != "" {
			// Inside a resource or group: from is its owner; a volume
			// attachment's ends are checked when it is lowered.
			if !c.known(rel.To) && !strings.HasSuffix(c.l.relPaths[i], ".properties") {
				c.ps.add(c.l.relPaths[i], "unknown resource or group %q", rel.To)
			}
			continue
		}
		f := fmt.Sprintf("relationships[%d]", i)
		if !c.known(rel.From) {
			c.ps.add(f+".from", "unknown resource or group %q", rel.From)
		}
		if !c.known(rel.To) {
			c.ps.add(f+".to", "unknown resource or group %q", rel.To)
		}
	}
}

// policy checks placement_policies[i]: its id, type and mode, what it
// applies to, and its properties.
func (c *templateCheck) policy(i int) {
	p := &c.t.Policies[i]
	f := c.l.policyPath(i)
	if err := checkName(p.ID); err != nil {
		c.ps.add(f+".id", "%v", err)
	} else if j, dup := c.pids[p.ID]; dup {
		c.ps.add(f+".id", "%q is also the id of %s; ids are unique", p.ID, c.l.policyPath(j))
	} else {
		c.pids[p.ID] = i
	}
	if p.ID == NonOverload {
		c.ps.add(f+".id", "%q names the rule every placement follows; choose another id", p.ID)
	}
	spec, ok := policyTypes[p.Type]
	if !ok {
		c.ps.add(f+".type", "unknown type %q; use one of %v (or the seed's names: %v)", p.Type, typeNames, aliasNames())
		return
	}
	if spec.unchecked != "" {
		c.ps.add(f+".type", "a %s policy cannot be checked: %s", p.Type, spec.unchecked)
		return
	}
	if p.Mode != Hard && p.Mode != Soft {
		c.ps.add(f+".mode", "is %q; give \"hard\" (a violation denies) or \"soft\" (a warning), or properties.hardConstraint true or false", p.Mode)
	}
	c.appliesTo(f, p, spec.kind, spec.group)
	c.properties(f, p, spec.params)
	if len(spec.kinds) > 0 && len(p.AppliesTo) == 1 && !isGroup(c.groups, p.AppliesTo[0]) {
		if j, ok := c.res[p.AppliesTo[0]]; ok {
			if k := c.t.Resources[j].kind(); !slices.Contains(spec.kinds, k) {
				c.ps.add(f+".applies_to", "a %s policy is about %v resources; %q is a %q", p.Type, spec.kinds, p.AppliesTo[0], k)
			}
		}
	}
}

// aliasNames lists the seed's policy type names, sorted.
func aliasNames() []string {
	out := make([]string, 0, len(policyAliases))
	for a := range policyAliases {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// checkName says what is wrong with the name of a resource, group or
// policy of a template: 1 to 255 bytes of UTF-8 without control
// characters. Templates name things freely (the seed's "Storage volume
// used by datanode server_3", "$vtid_15"); the names are not keys.
func checkName(id string) error {
	switch {
	case id == "":
		return errors.New("is missing")
	case len(id) > check.MaxIDBytes:
		return fmt.Errorf("is %d bytes long; the limit is %d", len(id), check.MaxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%q is not UTF-8", id)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q holds the control character %U", id, r)
		}
	}
	return nil
}

// appliesTo checks a policy's applies_to: known ids, and as many as its
// kind takes.
func (c *templateCheck) appliesTo(f string, p *Policy, kind policyKind, groupOnly bool) {
	for j, a := range p.AppliesTo {
		if !c.known(a) {
			c.ps.add(fmt.Sprintf("%s.applies_to[%d]", f, j), "unknown resource or group %q", a)
		}
	}
	// aResource: the one id given is a known resource, not a group.
	aResource := func() bool {
		return !isGroup(c.groups, p.AppliesTo[0]) && c.known(p.AppliesTo[0])
	}
	switch n := len(p.AppliesTo); {
	case n == 0 || n > 2:
		c.ps.add(f+".applies_to", "has %d ids; give a resource or a group, or a pair [A, B]", n)
	case n == 2 && kind == monadic:
		c.ps.add(f+".applies_to", "a %s policy is about one resource; apply it to a resource or a group, not a pair", p.Type)
	case n == 2 && p.AppliesTo[0] == p.AppliesTo[1]:
		c.ps.add(f+".applies_to", "names %q twice; a pair relates two different things", p.AppliesTo[0])
	case n == 1 && kind == asymmetric:
		c.ps.add(f+".applies_to", "a %s policy has a direction; apply it to a pair [from, to]", p.Type)
	case n == 1 && kind == symmetric && aResource():
		c.ps.add(f+".applies_to", "a %s policy relates two resources; apply it to a group or a pair, not to the resource %q", p.Type, p.AppliesTo[0])
	case n == 1 && groupOnly && aResource():
		c.ps.add(f+".applies_to", "a %s policy spreads the members of a group; apply it to a group, not to the resource %q", p.Type, p.AppliesTo[0])
	}
}

// properties checks that a policy sets the properties its type takes,
// no others, and each within its range.
func (c *templateCheck) properties(f string, p *Policy, params []string) {
	for _, g := range p.Properties.given() {
		if !slices.Contains(params, g) {
			c.ps.add(f+".properties."+g, "a %s policy does not take %s; it takes %v", p.Type, g, params)
		}
	}
	pr := &p.Properties
	need := func(name string, set bool) {
		if !set {
			c.ps.add(f+".properties."+name, "is missing: a %s policy takes %v", p.Type, params)
		}
	}
	switch p.Type {
	case Collocation, AntiCollocation:
		need("level", pr.Level != "")
	case LLMNAntiCollocation:
		need("l1", pr.L1 != "")
		need("l2", pr.L2 != "")
		need("n", pr.N != nil)
		if pr.N != nil && *pr.N <= 0 {
			c.ps.add(f+".properties.n", "is %d; N is the least number of level-%s vertices to spread over: give a positive integer", *pr.N, pr.L1)
		}
	case HopCountLimit:
		need("hops", pr.Hops != nil)
		if pr.Hops != nil && *pr.Hops < 0 {
			c.ps.add(f+".properties.hops", "is %d; give a number of network edges >= 0 (0: the same host, e.g. direct attached storage)", *pr.Hops)
		}
	case Bandwidth:
		if !(pr.BytesPerSecond > 0) || math.IsInf(pr.BytesPerSecond, 0) {
			c.ps.add(f+".properties.bytes_per_second", "is %v; give the bandwidth needed in each direction in bytes per second (> 0)", pr.BytesPerSecond)
		}
	case LicensedProduct:
		need("catalog", pr.Catalog != "")
		need("product", pr.Product != "")
	case EndpointAccessibility:
		need("protocols or endpoints", len(pr.Protocols)+len(pr.Endpoints) > 0)
		for j, e := range pr.Endpoints {
			if e.Protocol == "" || e.Port < 0 || e.Port > 65535 {
				c.ps.add(fmt.Sprintf("%s.properties.endpoints[%d]", f, j), "give a protocol and a port 0 to 65535")
			}
		}
	}
}

// placement checks that the proposed placement places known resources
// on well-formed leaf ids.
func (c *templateCheck) placement() {
	for _, field := range []string{"placement", "current_placement"} {
		m := c.t.Placement
		if field == "current_placement" {
			m = c.t.CurrentPlacement
		}
		for _, id := range sortedKeys(m) {
			if _, ok := c.res[id]; !ok && !c.l.attachments[id] {
				c.ps.add(field+"."+id, "unknown resource %q; place the template's resources", id)
			}
			if err := check.ID("", m[id]); err != nil {
				c.ps.add(field+"."+id, "leaf id %v", err)
			}
		}
	}
}

// pairBudget bounds the pairs of resources the dyadic policies expand
// to; it expands the groups, so it runs on a well-formed template only.
func (c *templateCheck) pairBudget() {
	x := newExpansion(c.t)
	var pairs int64
	for i := range c.t.Policies {
		pairs += x.pairCount(&c.t.Policies[i])
		if pairs > MaxPairs {
			c.ps.add(c.l.policyPath(i), "the dyadic policies up to this one relate more than %d pairs of resources; apply them to smaller groups", MaxPairs)
			return
		}
	}
}
