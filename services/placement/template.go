package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// Limits of a template.
const (
	// MaxResources bounds the resources of one template.
	MaxResources = 10000
	// MaxGroups bounds its groups.
	MaxGroups = 10000
	// MaxPolicies bounds its placement policies and its relationships.
	MaxPolicies = 1000
	// MaxPairs bounds the pairs of resources the dyadic policies of one
	// template expand to.
	MaxPairs = 1000000
	// MaxGroupDepth bounds the nesting of groups.
	MaxGroupDepth = 64
)

// Policy types.
const (
	Collocation           = "collocation"
	AntiCollocation       = "anti-collocation"
	LLMNAntiCollocation   = "llmn-anti-collocation"
	HopCountLimit         = "hop-count-limit"
	Bandwidth             = "bandwidth"
	LicensedProduct       = "licensed-product"
	Reachability          = "reachability"
	EndpointAccessibility = "endpoint-accessibility"
	// NonOverload is the rule applied to every placement: on each leaf,
	// the sum of the demand vectors is at most the capacity, position by
	// position. It is hard and needs no policy; findings name it as
	// their policy.
	NonOverload = "non-overload"
)

// Modes of a policy.
const (
	Hard = "hard"
	Soft = "soft"
)

// Template is the placement part of a deployment request (seed 002): the
// resources to place, the groups they form, relationships, the placement
// policies and, to check, the proposed placement. The fields are those of
// the request's JSON.
type Template struct {
	// Datacenter names the datacenter model the placement is checked
	// against; a request without one has no placement to check.
	Datacenter    string         `json:"datacenter,omitempty"`
	Resources     []Resource     `json:"resources,omitempty"`
	Groups        []Group        `json:"groups,omitempty"`
	Relationships []Relationship `json:"relationships,omitempty"`
	Policies      []Policy       `json:"placement_policies,omitempty"`
	// Placement maps a resource id to the id of the leaf that hosts it.
	Placement map[string]string `json:"placement,omitempty"`
}

// Resource is a virtual resource to place: a VM, a volume.
type Resource struct {
	ID string `json:"id"`
	// Kind is what it is, e.g. "vm" or "volume"; a policy may name the
	// kinds it is relevant to.
	Kind string `json:"kind,omitempty"`
	// Demand is the capacity it takes on its leaf, one number per
	// dimension of the datacenter; absent is nothing.
	Demand []float64 `json:"demand,omitempty"`
}

// Group groups resources and other groups. The groups form a tree (a
// forest) whose leaves are resources; every resource is in exactly one
// group when any group is given.
type Group struct {
	ID      string   `json:"id"`
	Members []string `json:"members"`
}

// Relationship records a relationship between two resources or groups
// (e.g. a volume attachment). It is validated and reported, not checked;
// policies between the two are given with applies_to [from, to].
type Relationship struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Type        string `json:"type,omitempty"`
	Description string `json:"description,omitempty"`
}

// Policy is a placement policy applied to a resource or a group
// (applies_to [X]) or to a pair (applies_to [A, B]).
type Policy struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Mode is "hard" (a violation denies) or "soft" (a warning).
	Mode      string   `json:"mode"`
	AppliesTo []string `json:"applies_to"`
	// Kinds restricts the resources the policy is relevant to; absent:
	// every resource.
	Kinds      []string   `json:"kinds,omitempty"`
	Properties Properties `json:"properties,omitzero"`
}

// Properties are a policy's parameters; each type takes its own.
type Properties struct {
	// Level: collocation and anti-collocation.
	Level string `json:"level,omitempty"`
	// L1, L2, N: LLMN anti-collocation.
	L1 string `json:"l1,omitempty"`
	L2 string `json:"l2,omitempty"`
	N  *int   `json:"n,omitempty"`
	// Hops: hop-count limit.
	Hops *int `json:"hops,omitempty"`
	// BytesPerSecond: bandwidth needed in each direction.
	BytesPerSecond float64 `json:"bytes_per_second,omitempty"`
	// Catalog, Product: licensed product presence.
	Catalog string `json:"catalog,omitempty"`
	Product string `json:"product,omitempty"`
	// Protocols, Endpoints: endpoint accessibility.
	Protocols []string   `json:"protocols,omitempty"`
	Endpoints []Endpoint `json:"endpoints,omitempty"`
}

// Endpoint is a (protocol, port) pair.
type Endpoint struct {
	Protocol string `json:"protocol"`
	Port     int    `json:"port"`
}

// policyKind says how a type applies: monadic types to a resource or a
// group, symmetric dyadic ones to a group or a pair, asymmetric ones to a
// pair only.
type policyKind int

const (
	monadic policyKind = iota
	symmetric
	asymmetric
)

var policyTypes = map[string]struct {
	kind   policyKind
	params []string
	// group: applies only to a group (LLMN).
	group bool
}{
	Collocation:           {symmetric, []string{"level"}, false},
	AntiCollocation:       {symmetric, []string{"level"}, false},
	LLMNAntiCollocation:   {monadic, []string{"l1", "l2", "n"}, true},
	HopCountLimit:         {symmetric, []string{"hops"}, false},
	Bandwidth:             {symmetric, []string{"bytes_per_second"}, false},
	LicensedProduct:       {monadic, []string{"catalog", "product"}, false},
	Reachability:          {symmetric, nil, false},
	EndpointAccessibility: {asymmetric, []string{"protocols", "endpoints"}, false},
}

// typeNames lists the policy types for messages.
var typeNames = []string{Collocation, AntiCollocation, LLMNAntiCollocation, HopCountLimit, Bandwidth, LicensedProduct, Reachability, EndpointAccessibility}

// given lists the properties a policy sets.
func (p *Properties) given() []string {
	var out []string
	add := func(name string, set bool) {
		if set {
			out = append(out, name)
		}
	}
	add("level", p.Level != "")
	add("l1", p.L1 != "")
	add("l2", p.L2 != "")
	add("n", p.N != nil)
	add("hops", p.Hops != nil)
	add("bytes_per_second", p.BytesPerSecond != 0)
	add("catalog", p.Catalog != "")
	add("product", p.Product != "")
	add("protocols", len(p.Protocols) > 0)
	add("endpoints", len(p.Endpoints) > 0)
	return out
}

// ParseTemplate decodes a template's JSON strictly (unknown fields are
// refused, naming them) and validates it (Validate).
func ParseTemplate(data []byte) (*Template, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Template
	if err := dec.Decode(&t); err != nil {
		return nil, &Invalid{What: "template", Problems: []Problem{{Field: "template", Msg: fmt.Sprintf("not a placement template: %v", err)}}}
	}
	if dec.More() {
		return nil, &Invalid{What: "template", Problems: []Problem{{Field: "template", Msg: "holds more than one JSON value"}}}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Empty reports whether the template holds nothing to place or check.
func (t *Template) Empty() bool {
	return t.Datacenter == "" && len(t.Resources) == 0 && len(t.Groups) == 0 && len(t.Relationships) == 0 && len(t.Policies) == 0 && len(t.Placement) == 0
}

func isGroup(groups map[string]int, id string) bool {
	_, ok := groups[id]
	return ok
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ValidateFor checks a valid template against a datacenter: it names
// this datacenter (or none), every level it names is the datacenter's,
// every demand has one number per dimension, every placed resource is on
// a leaf; with complete, every resource is placed.
func (t *Template) ValidateFor(m *Model, complete bool) error {
	var ps problems
	if t.Datacenter != "" && t.Datacenter != m.ID() {
		ps.add("datacenter", "names %q, not %q", t.Datacenter, m.ID())
	}
	for i, r := range t.Resources {
		if r.Demand != nil && len(r.Demand) != len(m.dc.Dimensions) {
			ps.add(fmt.Sprintf("resources[%d].demand", i), "resource %q has %d numbers; datacenter %q has %d dimensions %v", r.ID, len(r.Demand), m.ID(), len(m.dc.Dimensions), m.dc.Dimensions)
		}
		leaf, placed := t.Placement[r.ID]
		switch {
		case placed:
			if _, ok := m.leafNo[leaf]; !ok {
				if _, inner := m.locIdx[leaf]; inner {
					ps.add("placement."+r.ID, "%q is not a leaf of datacenter %q; place resources on leaves (hosts)", leaf, m.ID())
				} else {
					ps.add("placement."+r.ID, "unknown leaf %q; datacenter %q has no such host", leaf, m.ID())
				}
			}
		case complete:
			ps.add("placement."+r.ID, "resource %q is not placed; place every resource on a leaf of datacenter %q", r.ID, m.ID())
		}
	}
	for i, p := range t.Policies {
		f := fmt.Sprintf("placement_policies[%d].properties.", i)
		for name, l := range map[string]string{"level": p.Properties.Level, "l1": p.Properties.L1, "l2": p.Properties.L2} {
			if l != "" && !m.HasLevel(l) {
				ps.add(f+name, "unknown level %q; datacenter %q has levels %v", l, m.ID(), m.LevelNames())
			}
		}
	}
	slices.SortFunc(ps.list, func(a, b Problem) int { return cmpStr(a.Field, b.Field) })
	return ps.err("template")
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Clone returns a deep copy of the template.
func (t Template) Clone() Template {
	c := t
	c.Resources = slices.Clone(t.Resources)
	for i := range c.Resources {
		c.Resources[i].Demand = slices.Clone(c.Resources[i].Demand)
	}
	c.Groups = slices.Clone(t.Groups)
	for i := range c.Groups {
		c.Groups[i].Members = slices.Clone(c.Groups[i].Members)
	}
	c.Relationships = slices.Clone(t.Relationships)
	c.Policies = slices.Clone(t.Policies)
	for i := range c.Policies {
		p := &c.Policies[i]
		p.AppliesTo = slices.Clone(p.AppliesTo)
		p.Kinds = slices.Clone(p.Kinds)
		p.Properties.Protocols = slices.Clone(p.Properties.Protocols)
		p.Properties.Endpoints = slices.Clone(p.Properties.Endpoints)
		if p.Properties.N != nil {
			n := *p.Properties.N
			p.Properties.N = &n
		}
		if p.Properties.Hops != nil {
			h := *p.Properties.Hops
			p.Properties.Hops = &h
		}
	}
	if t.Placement != nil {
		c.Placement = make(map[string]string, len(t.Placement))
		for k, v := range t.Placement {
			c.Placement[k] = v
		}
	}
	return c
}
