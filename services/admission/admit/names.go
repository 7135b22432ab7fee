package admit

import (
	"fmt"
	"strings"
)

// NamesPolicyID names, in findings, the ownership check of the names a
// request writes (no policy of the tenant's).
const NamesPolicyID = "names"

// Holder is a registered component holding a name, and its tenant.
type Holder struct {
	ComponentID string
	Tenant      string
}

// Owners tells who holds the names a write would create or change: the
// registered components (deploy.components) and the deployments
// (admission.verdicts). The admission stage and the North API each answer
// it from their view of those topics.
type Owners interface {
	// Component is the tenant of the registered component id.
	Component(id string) (tenant string, registered bool)
	// Folder lists the registered components whose
	// service_component_name (Consul folder) is scn.
	Folder(scn string) []Holder
	// FoldersUnder lists the registered components whose folder lies
	// under scn's: it starts with scn and ':' (FolderParents).
	FoldersUnder(scn string) []Holder
	// Deployment lists the tenants holding the deployment id: the tenant
	// of its latest verdict (unless it names none: a refused request that
	// gave no tenant holds nothing) and of every registered component
	// naming it, each once.
	Deployment(id string) []string
}

// Claim is the names one write creates or changes: a deployment and, when
// the write registers a component, the component and its Consul folder,
// for a tenant.
type Claim struct {
	Tenant       string
	DeploymentID string
	// ComponentID is "" when the write registers no component.
	ComponentID string
	// Folder is the component's service_component_name.
	Folder string
	// Operator is set for an operator's write of a component (PUT
	// /v1/components/{id} with an operator's token): it may give a name
	// no tenant holds (registered without a tenant) to a tenant.
	Operator bool
}

// Conflict is a name of a claim that someone else holds.
type Conflict struct {
	// Owner is the tenant holding the name.
	Owner string
	// OtherTenant is true when Owner is not the claiming tenant; false
	// when the name is the tenant's own but held by another of its
	// components (a Consul folder).
	OtherTenant bool
	msg         string
}

func (c *Conflict) Error() string { return c.msg }

// DeploymentOf is the deployment whose application a component id names
// (<deployment_id>.<name>, the name holding no '.'), "" for an id with no
// '.'.
func DeploymentOf(componentID string) string {
	i := strings.LastIndexByte(componentID, '.')
	if i <= 0 {
		return ""
	}
	return componentID[:i]
}

// CheckClaim is the ownership rule of names: every deployment id,
// component id and Consul folder has one owner, the tenant that wrote it
// first, and a write of another tenant may neither create nor change it.
// The claim conflicts when
//
//   - the deployment is held by another tenant (its verdict or one of its
//     components);
//   - the component is registered to another tenant;
//   - the component id is <P>.<name> of a deployment P held by another
//     tenant (the id admission derives for P's application name);
//   - the folder is another component's: of another tenant, or of the same
//     tenant (a folder is written by one component and wiped by its
//     uninstall).
//
// A name registered without a tenant is the operators': a tenant's claim
// of it conflicts, an operator's (Claim.Operator) may give it to a
// tenant.
//
// It returns the first conflict, naming the holder, or nil.
func CheckClaim(c Claim, o Owners) *Conflict {
	other := func(owner, format string, args ...any) *Conflict {
		return &Conflict{Owner: owner, OtherTenant: true, msg: fmt.Sprintf(format, args...)}
	}
	// held reports whether owner holds a name against the claim.
	held := func(owner string) bool { return owner != c.Tenant && !(c.Operator && owner == "") }
	for _, t := range o.Deployment(c.DeploymentID) {
		if held(t) {
			return other(t, "deployment %s belongs to tenant %q, not to tenant %q", c.DeploymentID, t, c.Tenant)
		}
	}
	if c.ComponentID == "" {
		return nil
	}
	if t, ok := o.Component(c.ComponentID); ok && held(t) {
		return other(t, "component %s belongs to tenant %q, not to tenant %q", c.ComponentID, t, c.Tenant)
	}
	if p := DeploymentOf(c.ComponentID); p != "" && p != c.DeploymentID {
		for _, t := range o.Deployment(p) {
			if held(t) {
				return other(t, "component id %s is the name of an application of deployment %s, which belongs to tenant %q, not to tenant %q", c.ComponentID, p, t, c.Tenant)
			}
		}
	}
	// Consul keys of folder F are F:policies/..., so an ACL rule on a
	// folder's prefix F: covers every folder named F:...: one held by
	// another tenant under (or over) the claimed one would fall under
	// the same rule.
	for _, parent := range FolderParents(c.Folder) {
		for _, h := range o.Folder(parent) {
			if held(h.Tenant) {
				return other(h.Tenant, "service_component_name %s lies under %s:, the Consul folder of component %s of tenant %q: a Consul ACL on that prefix covers both; choose a name that does not start with %s:",
					c.Folder, parent, h.ComponentID, h.Tenant, parent)
			}
		}
	}
	for _, h := range o.FoldersUnder(c.Folder) {
		if held(h.Tenant) {
			return other(h.Tenant, "service_component_name %s holds under %s: the Consul folder of component %s of tenant %q: a Consul ACL on that prefix would cover both; choose another name",
				c.Folder, c.Folder, h.ComponentID, h.Tenant)
		}
	}
	for _, h := range o.Folder(c.Folder) {
		switch {
		case h.ComponentID == c.ComponentID:
		case held(h.Tenant):
			return other(h.Tenant, "service_component_name %s is the Consul folder of component %s of tenant %q, not of tenant %q", c.Folder, h.ComponentID, h.Tenant, c.Tenant)
		default:
			return &Conflict{Owner: h.Tenant, msg: fmt.Sprintf("service_component_name %s is the Consul folder of component %s; a folder belongs to one component: choose another name, or delete %s first",
				c.Folder, h.ComponentID, h.ComponentID)}
		}
	}
	return nil
}

// FolderParents are the folders whose Consul prefix covers folder's keys:
// each part of folder before one of its ':' ("a:b:c" -> "a", "a:b").
func FolderParents(folder string) []string {
	var out []string
	for i := range len(folder) {
		if folder[i] == ':' && i > 0 {
			out = append(out, folder[:i])
		}
	}
	return out
}

// Claims are the names a request writes when admitted: its deployment
// and, per application, its component and Consul folder.
func (r *Request) Claims() []Claim {
	out := make([]Claim, len(r.Applications))
	for i := range r.Applications {
		a := &r.Applications[i]
		out[i] = Claim{Tenant: r.Tenant, DeploymentID: r.DeploymentID, ComponentID: r.ComponentID(a.Name), Folder: r.ServiceComponentName(a)}
	}
	return out
}

// CheckNames adds to the verdict a violation (rule "names", policy
// NamesPolicyID) for every name of the request another holds
// (CheckClaim), and for a Consul folder two of its applications name.
func CheckNames(v *Verdict, o Owners) {
	r := v.Request
	if r == nil {
		return
	}
	defer func() { v.Admitted = len(v.Violations) == 0 }()
	seen := map[string]bool{}
	folders := map[string]string{}
	for i, c := range r.Claims() {
		a := &r.Applications[i]
		object := fmt.Sprintf("application %q", a.Name)
		if prev, dup := folders[c.Folder]; dup {
			v.Violations = append(v.Violations, Finding{PolicyID: NamesPolicyID, Rule: "names", Object: object,
				Message: fmt.Sprintf("service_component_name %s is also the Consul folder of application %q; a folder belongs to one component", c.Folder, prev)})
			continue
		}
		folders[c.Folder] = a.Name
		if e := CheckClaim(c, o); e != nil && !seen[e.msg] {
			seen[e.msg] = true
			v.Violations = append(v.Violations, Finding{PolicyID: NamesPolicyID, Rule: "names", Object: object, Message: e.msg})
		}
	}
}
