package placement

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
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
	// VolumeExclusive (the seed's OS::VolExclusive): the volume is the
	// only volume on its host's storage.
	VolumeExclusive = "volume-exclusive"
	// VolumeNotMoved (the seed's OS::VolNotMoved, which allows a backend
	// such as Cinder's BlockDeviceDriver that cannot move a volume): the
	// volume stays on the host it is on now (current_placement).
	VolumeNotMoved = "volume-not-moved"
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
	// HeatTemplateVersion and Description are a Heat template's own
	// fields, accepted so that the seed's templates are read as written.
	HeatTemplateVersion string `json:"heat_template_version,omitempty"`
	Description         string `json:"description,omitempty"`
	// ParameterGroups, Parameters and Outputs are a Heat template's other
	// sections, carried as given (placement does not read them).
	ParameterGroups any `json:"parameter_groups,omitempty"`
	Parameters      any `json:"parameters,omitempty"`
	Outputs         any `json:"outputs,omitempty"`
	// Datacenter names the datacenter model the placement is checked
	// against; a request without one has no placement to check.
	Datacenter string `json:"datacenter,omitempty"`
	// Resources and Groups are lists, or the seed's objects (see
	// heat.go).
	Resources     Resources      `json:"resources,omitempty"`
	Groups        Groups         `json:"groups,omitempty"`
	Relationships []Relationship `json:"relationships,omitempty"`
	Policies      []Policy       `json:"placement_policies,omitempty"`
	// Placement maps a resource id to the id of the leaf that hosts it.
	Placement map[string]string `json:"placement,omitempty"`
	// CurrentPlacement maps a resource that exists already to the leaf
	// it is on now: a volume-not-moved policy keeps it there.
	CurrentPlacement map[string]string `json:"current_placement,omitempty"`
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
	// Type, Properties and Metadata are a Heat resource's (e.g.
	// OS::Nova::Server and its flavor); the kind follows from the type
	// when not given. A volume attachment (AWS::EC2::VolumeAttachment,
	// OS::Cinder::VolumeAttachment) is a relationship between its server
	// and volume, not placed.
	Type       string         `json:"type,omitempty"`
	Properties map[string]any `json:"properties,omitempty"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	// DependsOn, UpdatePolicy and DeletionPolicy are a Heat resource's,
	// carried as given.
	DependsOn      any    `json:"depends_on,omitempty"`
	UpdatePolicy   any    `json:"update_policy,omitempty"`
	DeletionPolicy string `json:"deletion_policy,omitempty"`
	// Policies apply to this resource (on a volume attachment: to its
	// server and volume); Relationships relate it to another resource or
	// group.
	Policies      []Policy       `json:"policies,omitempty"`
	Relationships []Relationship `json:"relationships,omitempty"`
}

// Group groups resources and other groups. The groups form a tree (a
// forest) whose leaves are resources; every resource is in exactly one
// group when any group is given.
type Group struct {
	ID      string   `json:"id"`
	Members []string `json:"members"`
	// Metadata, Policies (applied to the group) and Relationships, as in
	// the seed's Proposal A.
	Metadata      map[string]any `json:"metadata,omitempty"`
	Policies      []Policy       `json:"policies,omitempty"`
	Relationships []Relationship `json:"relationships,omitempty"`
}

// Relationship records a relationship between two resources or groups
// (e.g. a volume attachment): in the relationships list from one to the
// other, inside a resource or group (the seed's Proposal A) from it to
// the related one. Its policies apply to the pair.
type Relationship struct {
	From        string     `json:"from,omitempty"`
	To          string     `json:"to,omitempty"`
	Related     *Reference `json:"related,omitempty"`
	Type        string     `json:"type,omitempty"`
	Description string     `json:"description,omitempty"`
	Policies    []Policy   `json:"policies,omitempty"`
}

// Policy is a placement policy applied to a resource or a group
// (applies_to [X]) or to a pair (applies_to [A, B]).
type Policy struct {
	// ID names the policy; inside a resource, group or relationship it
	// is optional (made of where it is, e.g. G1.policies[0]).
	ID   string `json:"id,omitempty"`
	Type string `json:"type"`
	// Mode is "hard" (a violation denies) or "soft" (a warning); or
	// properties.hardConstraint says it. Inside a resource, group or
	// relationship a policy with neither is hard.
	Mode string `json:"mode,omitempty"`
	// AppliesTo is absent inside a resource, group or relationship.
	AppliesTo []string `json:"applies_to,omitempty"`
	// Kinds restricts the resources the policy is relevant to; absent:
	// every resource.
	Kinds      []string       `json:"kinds,omitempty"`
	Properties Properties     `json:"properties,omitzero"`
	Metadata   map[string]any `json:"metadata,omitempty"`
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
	// HardConstraint (the seed's): true is mode hard, false soft.
	HardConstraint *bool `json:"hardConstraint,omitempty"`
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
	// kinds: the resources the type is relevant to when the policy names
	// none; nil is every resource.
	kinds []string
	// unchecked: why the type is refused (the model cannot express what
	// it needs).
	unchecked string
}{
	Collocation:         {kind: symmetric, params: []string{"level"}},
	AntiCollocation:     {kind: symmetric, params: []string{"level"}},
	LLMNAntiCollocation: {kind: monadic, params: []string{"l1", "l2", "n"}, group: true},
	HopCountLimit:       {kind: symmetric, params: []string{"hops"}},
	Bandwidth:           {kind: symmetric, params: []string{"bytes_per_second"}},
	LicensedProduct:     {kind: monadic, params: []string{"catalog", "product"}},
	VolumeExclusive:     {kind: monadic, kinds: []string{kindVolume}},
	VolumeNotMoved:      {kind: monadic, kinds: []string{kindVolume}},
	Reachability: {kind: symmetric, unchecked: "the datacenter model describes no connectivity (routes, " +
		"security groups, firewalls), so whether two resources reach each other cannot be checked; policyflow refuses the policy rather than record it unchecked"},
	EndpointAccessibility: {kind: asymmetric, params: []string{"protocols", "endpoints"}, unchecked: "the datacenter model describes no " +
		"firewalls or security groups, so whether an endpoint is open cannot be checked; policyflow refuses the policy rather than record it unchecked"},
}

// typeNames lists the policy types that can be checked, for messages.
var typeNames = []string{Collocation, AntiCollocation, LLMNAntiCollocation, HopCountLimit, Bandwidth, LicensedProduct, VolumeExclusive, VolumeNotMoved}

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
	return t.Datacenter == "" && len(t.Resources) == 0 && len(t.Groups) == 0 && len(t.Relationships) == 0 && len(t.Policies) == 0 &&
		len(t.Placement) == 0 && len(t.CurrentPlacement) == 0 && t.HeatTemplateVersion == "" && t.Description == "" &&
		t.ParameterGroups == nil && t.Parameters == nil && t.Outputs == nil
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
// a leaf, and so is every current placement; with complete, every
// resource is placed.
func (t *Template) ValidateFor(m *Model, complete bool) error {
	l, _ := t.lower()
	return l.validateFor(m, complete)
}

func (l *lowered) validateFor(m *Model, complete bool) error {
	t := l.Template
	var ps problems
	if t.Datacenter != "" && t.Datacenter != m.ID() {
		ps.add("datacenter", "names %q, not %q", t.Datacenter, m.ID())
	}
	leaf := func(field, id string) {
		if _, ok := m.leafNo[id]; ok {
			return
		}
		if _, inner := m.locIdx[id]; inner {
			ps.add(field, "%q is not a leaf of datacenter %q; place resources on leaves (hosts)", id, m.ID())
		} else {
			ps.add(field, "unknown leaf %q; datacenter %q has no such host", id, m.ID())
		}
	}
	for i, r := range t.Resources {
		if r.Demand != nil && len(r.Demand) != len(m.dc.Dimensions) {
			ps.add(fmt.Sprintf("resources[%d].demand", i), "resource %q has %d numbers; datacenter %q has %d dimensions %v", r.ID, len(r.Demand), m.ID(), len(m.dc.Dimensions), m.dc.Dimensions)
		}
		id, placed := t.Placement[r.ID]
		switch {
		case placed:
			leaf("placement."+r.ID, id)
		case complete:
			ps.add("placement."+r.ID, "resource %q is not placed; place every resource on a leaf of datacenter %q", r.ID, m.ID())
		}
	}
	for _, id := range sortedKeys(t.CurrentPlacement) {
		leaf("current_placement."+id, t.CurrentPlacement[id])
	}
	for i, p := range t.Policies {
		f := l.policyPath(i) + ".properties."
		for name, lv := range map[string]string{"level": p.Properties.Level, "l1": p.Properties.L1, "l2": p.Properties.L2} {
			if lv != "" && !m.HasLevel(lv) {
				ps.add(f+name, "unknown level %q; datacenter %q has levels %v", lv, m.ID(), m.LevelNames())
			}
		}
	}
	slices.SortFunc(ps.list, func(a, b Problem) int { return cmpStr(a.Field, b.Field) })
	return ps.err("template")
}

// Flat is the template in the flat syntax: the seed's nested policies,
// relationships and volume attachments lowered (see heat.go); volume
// attachments are not among its resources, as they are not placed. The
// template must be valid; a template in the flat syntax is returned
// itself, not copied.
func (t *Template) Flat() *Template {
	l, _ := t.lower()
	return l.Template
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
		r := &c.Resources[i]
		r.Demand = slices.Clone(r.Demand)
		r.Properties = cloneMap(r.Properties)
		r.Metadata = cloneMap(r.Metadata)
		r.DependsOn = cloneAny(r.DependsOn)
		r.UpdatePolicy = cloneAny(r.UpdatePolicy)
		r.Policies = clonePolicies(r.Policies)
		r.Relationships = cloneRelationships(r.Relationships)
	}
	c.Groups = slices.Clone(t.Groups)
	for i := range c.Groups {
		g := &c.Groups[i]
		g.Members = slices.Clone(g.Members)
		g.Metadata = cloneMap(g.Metadata)
		g.Policies = clonePolicies(g.Policies)
		g.Relationships = cloneRelationships(g.Relationships)
	}
	c.Relationships = cloneRelationships(t.Relationships)
	c.Policies = clonePolicies(t.Policies)
	c.ParameterGroups, c.Parameters, c.Outputs = cloneAny(t.ParameterGroups), cloneAny(t.Parameters), cloneAny(t.Outputs)
	c.Placement = maps.Clone(t.Placement)
	c.CurrentPlacement = maps.Clone(t.CurrentPlacement)
	return c
}

func clonePolicies(ps []Policy) []Policy {
	out := slices.Clone(ps)
	for i := range out {
		p := &out[i]
		p.AppliesTo = slices.Clone(p.AppliesTo)
		p.Kinds = slices.Clone(p.Kinds)
		p.Metadata = cloneMap(p.Metadata)
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
		if p.Properties.HardConstraint != nil {
			h := *p.Properties.HardConstraint
			p.Properties.HardConstraint = &h
		}
	}
	return out
}

func cloneRelationships(rs []Relationship) []Relationship {
	out := slices.Clone(rs)
	for i := range out {
		if out[i].Related != nil {
			ref := *out[i].Related
			out[i].Related = &ref
		}
		out[i].Policies = clonePolicies(out[i].Policies)
	}
	return out
}

// cloneMap deep-copies a JSON object.
func cloneMap(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return cloneAny(m).(map[string]any)
}

func cloneAny(v any) any {
	switch x := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(x))
		for k, e := range x {
			c[k] = cloneAny(e)
		}
		return c
	case []any:
		c := make([]any, len(x))
		for i, e := range x {
			c[i] = cloneAny(e)
		}
		return c
	}
	return v
}
