package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// The seed's concrete syntax (Proposal A) is read as written, beside the
// flat syntax: the resources section of a Heat template (an object keyed
// by resource name, each with its type and properties), the groups
// section (one root group whose members are groups or
// {"get_resource": name}), policies inside resources and groups and their
// relationships ({"related": {"get_resource"|"get_group": name},
// "policies": [...]}), hardConstraint, the OS:: policy types, and volume
// attachment resources carrying policies about the server and the volume
// they attach. Both syntaxes decode to the same structs; lower turns the
// nested parts into the flat form that Validate, Check and Propose work
// on.

// Resources are the template's resources: a list (the flat syntax) or,
// as in a Heat template, an object keyed by resource name.
type Resources []Resource

// Groups are the template's groups: a list of groups naming their
// members (the flat syntax) or, as in Proposal A, one root group whose
// members are nested groups and {"get_resource": name}.
type Groups []Group

// Reference names the other end of a relationship: a resource of the
// template ({"get_resource": name}), a group ({"get_group": name}), or, as
// a bare string, a resource outside the template (which is refused: its
// place is not known).
type Reference struct {
	Resource string
	Group    string
	External string
}

// Resource types of the seed's templates.
const (
	TypeServer         = "OS::Nova::Server"
	TypeAWSInstance    = "AWS::EC2::Instance"
	TypeVolume         = "OS::Cinder::Volume"
	TypeAWSVolume      = "AWS::EC2::Volume"
	TypeAttachment     = "OS::Cinder::VolumeAttachment"
	TypeAWSAttachment  = "AWS::EC2::VolumeAttachment"
	kindVM, kindVolume = "vm", "volume"
)

// kindOfType is the kind of a placed resource of a Heat type.
var kindOfType = map[string]string{TypeServer: kindVM, TypeAWSInstance: kindVM, TypeVolume: kindVolume, TypeAWSVolume: kindVolume}

// attachmentEnds names the properties of a volume attachment that
// reference the server and the volume.
var attachmentEnds = map[string][2]string{TypeAWSAttachment: {"InstanceID", "VolumeID"}, TypeAttachment: {"instance_uuid", "volume_id"}}

// policyAliases are the seed's policy type names.
var policyAliases = map[string]string{
	"OS::CoLocation":         Collocation,
	"OS::Collocation":        Collocation,
	"OS::AntiCoLocation":     AntiCollocation,
	"OS::AntiCollocation":    AntiCollocation,
	"OS::LLMNAntiCoLocation": LLMNAntiCollocation,
	"OS::NetMaxHops":         HopCountLimit,
	"OS::NetBandwidth":       Bandwidth,
	"OS::LicensedProduct":    LicensedProduct,
	"OS::NetReachability":    Reachability,
	"OS::NetEndpointAccess":  EndpointAccessibility,
	"OS::VolExclusive":       VolumeExclusive,
	"OS::VolNotMoved":        VolumeNotMoved,
}

// strictDecode decodes one JSON value refusing unknown fields, keeping
// numbers as written.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("holds more than one JSON value")
	}
	return nil
}

func isObject(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '{'
}

// UnmarshalJSON reads a list of resources or a Heat resources section.
func (rs *Resources) UnmarshalJSON(data []byte) error {
	if !isObject(data) {
		var list []Resource
		if err := strictDecode(data, &list); err != nil {
			return fmt.Errorf("resources: %w", err)
		}
		*rs = list
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("resources: %w", err)
	}
	var list []Resource
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("resources: %w", err)
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("resources[%q]: %w", name, err)
		}
		if seen[name] {
			return fmt.Errorf("resources: %q is given twice; names are unique", name)
		}
		seen[name] = true
		if len(list) >= MaxResources {
			return fmt.Errorf("resources: more than %d resources; at most %d are allowed", MaxResources, MaxResources)
		}
		var r Resource
		if err := strictDecode(raw, &r); err != nil {
			return fmt.Errorf("resources[%q]: %w", name, err)
		}
		if r.ID != "" && r.ID != name {
			return fmt.Errorf("resources[%q].id: is %q; in a resources object the name is the id: leave id out", name, r.ID)
		}
		r.ID = name
		list = append(list, r)
	}
	*rs = list
	return nil
}

// seedGroup is a group of Proposal A: members are groups or resource
// references.
type seedGroup struct {
	ID            string         `json:"id"`
	Members       []seedMember   `json:"members"`
	Metadata      map[string]any `json:"metadata,omitempty"`
	Policies      []Policy       `json:"policies,omitempty"`
	Relationships []Relationship `json:"relationships,omitempty"`
}

type seedMember struct {
	resource string
	group    *seedGroup
}

func (m *seedMember) UnmarshalJSON(data []byte) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return fmt.Errorf("a member is a group or {\"get_resource\": name}: %w", err)
	}
	if raw, ok := keys["get_resource"]; ok {
		if len(keys) != 1 {
			return errors.New(`a resource member is {"get_resource": name} alone`)
		}
		if err := json.Unmarshal(raw, &m.resource); err != nil || m.resource == "" {
			return fmt.Errorf(`member {"get_resource": %s}: give the name of a resource of the template`, raw)
		}
		return nil
	}
	m.group = &seedGroup{}
	if err := strictDecode(data, m.group); err != nil {
		var probe struct {
			ID any `json:"id"`
		}
		_ = json.Unmarshal(data, &probe)
		return fmt.Errorf("group %v: %w", probe.ID, err)
	}
	return nil
}

// UnmarshalJSON reads a list of groups or Proposal A's root group.
func (gs *Groups) UnmarshalJSON(data []byte) error {
	if !isObject(data) {
		var list []Group
		if err := strictDecode(data, &list); err != nil {
			return fmt.Errorf("groups: %w", err)
		}
		*gs = list
		return nil
	}
	var root seedGroup
	if err := strictDecode(data, &root); err != nil {
		return fmt.Errorf("groups: %w", err)
	}
	var list []Group
	var walk func(g *seedGroup, depth int) error
	walk = func(g *seedGroup, depth int) error {
		if depth > MaxGroupDepth {
			return fmt.Errorf("groups: group %q is nested more than %d deep", g.ID, MaxGroupDepth)
		}
		if len(list) >= MaxGroups {
			return fmt.Errorf("groups: more than %d groups; at most %d are allowed", MaxGroups, MaxGroups)
		}
		fg := Group{ID: g.ID, Members: []string{}, Metadata: g.Metadata, Policies: g.Policies, Relationships: g.Relationships}
		for _, m := range g.Members {
			if m.group != nil {
				fg.Members = append(fg.Members, m.group.ID)
			} else {
				fg.Members = append(fg.Members, m.resource)
			}
		}
		list = append(list, fg)
		for _, m := range g.Members {
			if m.group != nil {
				if err := walk(m.group, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(&root, 0); err != nil {
		return err
	}
	*gs = list
	return nil
}

// UnmarshalJSON reads {"get_resource": name}, {"get_group": name} or a
// bare string.
func (r *Reference) UnmarshalJSON(data []byte) error {
	if !isObject(data) {
		if err := json.Unmarshal(data, &r.External); err != nil || r.External == "" {
			return errors.New(`related: give {"get_resource": name}, {"get_group": name} or a resource id`)
		}
		return nil
	}
	var v struct {
		Resource string `json:"get_resource"`
		Group    string `json:"get_group"`
	}
	if err := strictDecode(data, &v); err != nil {
		return fmt.Errorf("related: %w", err)
	}
	if (v.Resource == "") == (v.Group == "") {
		return errors.New(`related: give one of {"get_resource": name} and {"get_group": name}`)
	}
	r.Resource, r.Group = v.Resource, v.Group
	return nil
}

// MarshalJSON writes the reference as it was given.
func (r Reference) MarshalJSON() ([]byte, error) {
	switch {
	case r.Resource != "":
		return json.Marshal(map[string]string{"get_resource": r.Resource})
	case r.Group != "":
		return json.Marshal(map[string]string{"get_group": r.Group})
	}
	return json.Marshal(r.External)
}

func (r *Reference) id() string {
	if r.Resource != "" {
		return r.Resource
	}
	return r.Group
}

// lowered is a template in the flat form with where each part came from.
type lowered struct {
	*Template
	// paths: the JSON path of each flat policy as given; relPaths: of
	// each flat relationship given inside a resource or group (its
	// related field), "" for the others.
	paths, relPaths []string
	// attachments are the volume attachments, not placed.
	attachments map[string]bool
}

// policyPath is the path of the flat policy i, for messages.
func (l *lowered) policyPath(i int) string {
	if i < len(l.paths) && l.paths[i] != "" {
		return l.paths[i]
	}
	return fmt.Sprintf("placement_policies[%d]", i)
}

// lower turns the seed's syntax into the flat form: the policies of
// resources, groups, relationships and volume attachments become
// placement policies (with an id made of where they are, unless they have
// one, applied to their owner or to the pair they relate), hardConstraint
// becomes the mode (a nested policy with neither is hard), the OS:: types
// their names, and volume attachments relationships between their server
// and volume (they are not placed). The template itself is not changed;
// the problems met are returned.
func (t *Template) lower() (*lowered, []Problem) {
	if t.isFlat() {
		return &lowered{Template: t}, nil
	}
	var ps problems
	ft := *t
	out := &lowered{Template: &ft, attachments: map[string]bool{}}
	ft.Resources = make([]Resource, 0, len(t.Resources))
	ft.Relationships = make([]Relationship, 0, len(t.Relationships))
	for _, rel := range t.Relationships {
		ft.Relationships = append(ft.Relationships, Relationship{From: rel.From, To: rel.To, Type: rel.Type, Description: rel.Description})
		out.relPaths = append(out.relPaths, "")
	}
	ft.Policies = nil
	add := func(p Policy, path, id string, appliesTo []string) {
		p.Type = canonicalType(p.Type)
		if appliesTo != nil {
			if len(p.AppliesTo) > 0 {
				ps.add(path+".applies_to", "a policy given inside a resource, group or relationship applies to it; leave applies_to out")
			}
			p.AppliesTo = appliesTo
		}
		if h := p.Properties.HardConstraint; h != nil {
			mode := Soft
			if *h {
				mode = Hard
			}
			if p.Mode != "" && p.Mode != mode {
				ps.add(path+".mode", "is %q and properties.hardConstraint is %v; give one of them", p.Mode, *h)
			}
			p.Mode = mode
		} else if p.Mode == "" && appliesTo != nil {
			p.Mode = Hard
		}
		if p.ID == "" {
			p.ID = id
		}
		ft.Policies = append(ft.Policies, p)
		out.paths = append(out.paths, path)
	}
	for i := range t.Policies {
		add(t.Policies[i], fmt.Sprintf("placement_policies[%d]", i), "", nil)
	}
	byID := map[string]*Resource{}
	for i := range t.Resources {
		byID[t.Resources[i].ID] = &t.Resources[i]
	}
	relate := func(owner, ownerPath string, rels []Relationship) {
		for k := range rels {
			rel := &rels[k]
			f := fmt.Sprintf("%s.relationships[%d]", ownerPath, k)
			switch {
			case rel.Related == nil:
				ps.add(f+".related", `is missing: name the other end, {"get_resource": name} or {"get_group": name}`)
				continue
			case rel.From != "" || rel.To != "":
				ps.add(f, "a relationship inside %q starts there; give related, not from and to", owner)
				continue
			case rel.Related.External != "":
				ps.add(f+".related", "%q is a resource outside the template; policies with resources outside it are not supported (their place is not known): put the resource in the template", rel.Related.External)
				continue
			}
			to := rel.Related.id()
			ft.Relationships = append(ft.Relationships, Relationship{From: owner, To: to, Type: rel.Type, Description: rel.Description})
			out.relPaths = append(out.relPaths, f+".related")
			for j := range rel.Policies {
				add(rel.Policies[j], fmt.Sprintf("%s.policies[%d]", f, j), fmt.Sprintf("%s.relationships[%d].policies[%d]", owner, k, j), []string{owner, to})
			}
		}
	}
	for i := range t.Resources {
		r := t.Resources[i]
		f := fmt.Sprintf("resources[%d]", i)
		if ends, ok := attachmentEnds[r.Type]; ok {
			out.attachments[r.ID] = true
			var refs [2]string
			for e, prop := range ends {
				ref, _ := r.Properties[prop].(map[string]any)
				name, _ := ref["get_resource"].(string)
				target := byID[name]
				want := [2]string{kindVM, kindVolume}[e]
				switch {
				case len(ref) != 1 || name == "":
					ps.add(f+".properties."+prop, `volume attachment %q: give the %s it attaches as {"get_resource": name}`, r.ID, want)
				case target == nil:
					ps.add(f+".properties."+prop, "volume attachment %q: unknown resource %q", r.ID, name)
				case target.kind() != want:
					ps.add(f+".properties."+prop, "volume attachment %q: %q is a %s, not a %s", r.ID, name, target.kind(), want)
				}
				refs[e] = name
			}
			if r.Demand != nil || r.Kind != "" {
				ps.add(f, "%q is a volume attachment, a relationship, not placed: it has no kind or demand", r.ID)
			}
			ft.Relationships = append(ft.Relationships, Relationship{From: refs[0], To: refs[1], Type: "volume-attachment", Description: r.ID})
			out.relPaths = append(out.relPaths, f+".properties")
			for j, p := range r.Policies {
				pf := fmt.Sprintf("%s.policies[%d]", f, j)
				if spec, ok := policyTypes[canonicalType(p.Type)]; ok && spec.kind == monadic {
					ps.add(pf+".type", "a %s policy is about one resource; on the volume attachment %q give policies relating the server and the volume (put this one in the server or the volume)", p.Type, r.ID)
					continue
				}
				add(p, pf, fmt.Sprintf("%s.policies[%d]", r.ID, j), []string{refs[0], refs[1]})
			}
			if len(r.Relationships) > 0 {
				ps.add(f+".relationships", "a volume attachment is itself a relationship; give policies, not relationships")
			}
			continue
		}
		if r.Kind == "" {
			if k, ok := kindOfType[r.Type]; ok {
				r.Kind = k
			} else if r.Type != "" {
				ps.add(f+".type", "resource %q: %q is not placed on a host; give servers (%s, %s), volumes (%s, %s) and volume attachments (%s, %s), or a kind", r.ID, r.Type, TypeServer, TypeAWSInstance, TypeVolume, TypeAWSVolume, TypeAttachment, TypeAWSAttachment)
			}
		}
		flat := r
		flat.Policies, flat.Relationships = nil, nil
		ft.Resources = append(ft.Resources, flat)
		for j := range r.Policies {
			add(r.Policies[j], fmt.Sprintf("%s.policies[%d]", f, j), fmt.Sprintf("%s.policies[%d]", r.ID, j), []string{r.ID})
		}
		relate(r.ID, f, r.Relationships)
	}
	ft.Groups = make([]Group, len(t.Groups))
	for i, g := range t.Groups {
		if len(out.attachments) > 0 {
			g.Members = slices.DeleteFunc(slices.Clone(g.Members), func(m string) bool { return out.attachments[m] })
		}
		g.Policies, g.Relationships = nil, nil
		ft.Groups[i] = g
	}
	for i := range t.Groups {
		g := &t.Groups[i]
		f := fmt.Sprintf("groups[%d]", i)
		for j := range g.Policies {
			add(g.Policies[j], fmt.Sprintf("%s.policies[%d]", f, j), fmt.Sprintf("%s.policies[%d]", g.ID, j), []string{g.ID})
		}
		relate(g.ID, f, g.Relationships)
	}
	for i := range t.Relationships {
		rel := &t.Relationships[i]
		f := fmt.Sprintf("relationships[%d]", i)
		if rel.Related != nil {
			ps.add(f+".related", "a relationship of the relationships list is between from and to; related is for relationships inside a resource or group")
		}
		for j := range rel.Policies {
			add(rel.Policies[j], fmt.Sprintf("%s.policies[%d]", f, j), fmt.Sprintf("relationships[%d].policies[%d]", i, j), []string{rel.From, rel.To})
		}
	}
	for _, field := range []string{"placement", "current_placement"} {
		m := t.Placement
		if field == "current_placement" {
			m = t.CurrentPlacement
		}
		for _, id := range sortedKeys(m) {
			if out.attachments[id] {
				ps.add(field+"."+id, "%q is a volume attachment; it is not placed", id)
			}
		}
	}
	return out, ps.list
}

// isFlat reports whether the template uses none of the seed's syntax,
// so that lowering would change nothing.
func (t *Template) isFlat() bool {
	for i := range t.Resources {
		r := &t.Resources[i]
		if (r.Type != "" && r.Kind == "") || len(r.Policies) > 0 || len(r.Relationships) > 0 || attachmentEnds[r.Type] != [2]string{} {
			return false
		}
	}
	for i := range t.Groups {
		if len(t.Groups[i].Policies) > 0 || len(t.Groups[i].Relationships) > 0 {
			return false
		}
	}
	for i := range t.Relationships {
		if t.Relationships[i].Related != nil || len(t.Relationships[i].Policies) > 0 {
			return false
		}
	}
	for i := range t.Policies {
		p := &t.Policies[i]
		if p.Properties.HardConstraint != nil || policyAliases[p.Type] != "" {
			return false
		}
	}
	return true
}

// kind is the resource's kind, from its type when not given.
func (r *Resource) kind() string {
	if r.Kind != "" {
		return r.Kind
	}
	return kindOfType[r.Type]
}

// canonicalType is a policy type's name, for the seed's OS:: names too.
func canonicalType(t string) string {
	if canon, ok := policyAliases[t]; ok {
		return canon
	}
	return t
}
