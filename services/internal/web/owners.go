package web

// Owned is a kind of thing a tenant owns, named by a path parameter.
type Owned string

// The things a tenant owns.
const (
	OwnedComponent  Owned = "component"          // a component id: its registration's tenant
	OwnedDeployment Owned = "deployment"         // a deployment id: its verdict's tenant
	OwnedFolder     Owned = "folder"             // a service_component_name: its component's tenant
	OwnedAppPolicy  Owned = "application policy" // a policy_id of /policies: the tenants it is assigned to
	OwnedOrg        Owned = "org"                // an org of node management: the tenant of that name
	OwnedPolicy     Owned = "policy"             // a policy_id of the policy catalog: its tenant ("" global, every tenant's)
)

// Owner is how a route decides whose data a request reads or writes,
// declared for every route beside the route table (the North API's
// routeOwners): a tenant reaches only its own, and a test acts as another
// tenant on each route from this declaration.
type Owner struct {
	// Param is the path parameter naming a thing of kind, owned by one
	// tenant.
	Param string
	Kind  Owned
	// Body: the request body names the owner (its tenant and the names it
	// writes); why says what is checked.
	Body bool
	// Global: tenants may call the route, but what it answers or does is
	// no tenant's (or is filtered to the caller's tenant); why says why.
	Global bool
	// NotTenants: the route's access refuses the tenant role.
	NotTenants bool
	// Public: no token (the route's access is anyone).
	Public bool
	Why    string
}

// ByPath: the path parameter param names a thing of kind.
func ByPath(param string, kind Owned) Owner { return Owner{Param: param, Kind: kind} }

// ByBody: the body names the owner; why says what is checked.
func ByBody(why string) Owner { return Owner{Body: true, Why: why} }

// Global: what the route answers or does is no tenant's; why says why.
func Global(why string) Owner { return Owner{Global: true, Why: why} }

// The routes no tenant owns data of.
var (
	// NotTenants: the route's access refuses the tenant role.
	NotTenants = Owner{NotTenants: true}
	// Public: the route needs no token.
	Public = Owner{Public: true}
)

// Declared reports whether the route declares its owner check.
func (o Owner) Declared() bool {
	return o.Param != "" || o.Body || o.Global || o.NotTenants || o.Public
}
