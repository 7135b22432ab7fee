package northapi

import ()

// owned is a kind of thing a tenant owns, named by a path parameter.
type owned string

// The things a tenant owns.
const (
	ownedComponent  owned = "component"          // a component id: its registration's tenant
	ownedDeployment owned = "deployment"         // a deployment id: its verdict's tenant
	ownedFolder     owned = "folder"             // a service_component_name: its component's tenant
	ownedAppPolicy  owned = "application policy" // a policy_id of /policies: the tenants it is assigned to
	ownedOrg        owned = "org"                // an org of node management: the tenant of that name
	ownedPolicy     owned = "policy"             // a policy_id of the policy catalog: its tenant ("" global, every tenant's)
)

// ownerCheck is how a route decides whose data a request reads or writes,
// declared for every route in routeOwners, beside the route table (keyed
// by the route's pattern, so routes.go keeps its one-line routes): a
// tenant reaches only its own, and a test acts as another tenant on each
// route from this declaration.
type ownerCheck struct {
	// param is the path parameter naming a thing of kind, owned by one
	// tenant.
	param string
	kind  owned
	// body: the request body names the owner (its tenant and the names it
	// writes); why says what is checked.
	body bool
	// global: tenants may call the route, but what it answers or does is
	// no tenant's (or is filtered to the caller's tenant); why says why.
	global bool
	// notTenants: the route's access refuses the tenant role.
	notTenants bool
	// public: no token (the route's access is anyone).
	public bool
	why    string
}

func byPath(param string, kind owned) ownerCheck { return ownerCheck{param: param, kind: kind} }
func byBody(why string) ownerCheck               { return ownerCheck{body: true, why: why} }
func global(why string) ownerCheck               { return ownerCheck{global: true, why: why} }

var (
	notTenants = ownerCheck{notTenants: true}
	public     = ownerCheck{public: true}
)

// declared reports whether the route declares its owner check.
func (o ownerCheck) declared() bool {
	return o.param != "" || o.body || o.global || o.notTenants || o.public
}

// routeOwners is the owner check of every route, by "METHOD path"; a
// route missing here fails the API's tests.
var routeOwners = map[string]ownerCheck{
	"PUT /v1/components/{component_id}":                   byPath("component_id", ownedComponent),
	"DELETE /v1/components/{component_id}":                byPath("component_id", ownedComponent),
	"GET /v1/components/{component_id}/status":            byPath("component_id", ownedComponent),
	"POST /v1/components/{component_id}/renotify":         notTenants,
	"POST /v1/pdp/notifications":                          notTenants,
	"POST /v1/policies":                                   notTenants,
	"GET /v1/policies/{policy_id}/rollout":                byPath("policy_id", ownedPolicy),
	"POST /v1/catchup":                                    notTenants,
	"GET /v1/catchup/{request_id}":                        notTenants,
	"GET /catch_up":                                       notTenants,
	"GET /policy_latest/{policy_id}":                      byPath("policy_id", ownedPolicy),
	"POST /policies_latest":                               global("lists only the global policies and the caller's tenant's"),
	"GET /service_component_all/{service_component_name}": byPath("service_component_name", ownedFolder),
	"GET /healthcheck":                                    public,
	"GET /openapi.json":                                   global("the API's description, the same for every caller"),
	"GET /v1/status":                                      notTenants,
	"GET /ui/":                                            public,

	"GET /v2/participants":                                                notTenants,
	"GET /v2/participants/{participant_id}":                               notTenants,
	"PUT /v2/participants/{participant_id}":                               notTenants,
	"PUT /v2/participants/{participant_id}/sync":                          notTenants,
	"POST /v2/participants/{participant_id}/operations":                   notTenants,
	"GET /v2/participants/{participant_id}/compositions/{composition_id}": notTenants,
	"GET /v2/participants/{participant_id}/instances/{instance_id}":       notTenants,

	"GET /v1/orgs/{org}/nmps":                   byPath("org", ownedOrg),
	"GET /v1/orgs/{org}/nmps/{name}":            byPath("org", ownedOrg),
	"PUT /v1/orgs/{org}/nmps/{name}":            byPath("org", ownedOrg),
	"DELETE /v1/orgs/{org}/nmps/{name}":         byPath("org", ownedOrg),
	"GET /v1/orgs/{org}/nmps/{name}/nodes":      byPath("org", ownedOrg),
	"GET /v1/orgs/{org}/nmps/{name}/status":     byPath("org", ownedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/enable":    byPath("org", ownedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/disable":   byPath("org", ownedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/resume":    byPath("org", ownedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/rollback":  byPath("org", ownedOrg),
	"PUT /v1/orgs/{org}/nodes/{node}":           notTenants,
	"DELETE /v1/orgs/{org}/nodes/{node}":        notTenants,
	"GET /v1/orgs/{org}/nodes/{node}/directive": notTenants,
	"PUT /v1/orgs/{org}/nodes/{node}/status":    notTenants,
	"GET /v1/orgs/{org}/nodes/{node}/status":    byPath("org", ownedOrg),
	"POST /v1/orgs/{org}/nodes/{node}/token":    notTenants,
	"DELETE /v1/orgs/{org}/nodes/{node}/token":  notTenants,
	"GET /v1/agentpackages":                     notTenants,
	"POST /v1/agentpackages":                    notTenants,
	"GET /v1/agentpackages/{version}":           notTenants,
	"GET /v1/agentpackages/{version}/file":      notTenants,

	"POST /v1/deployments":                 byBody("the body's tenant is the caller's, and its deployment, component ids and Consul folders are no other tenant's (admit.CheckClaim)"),
	"GET /v1/deployments/{deployment_id}":  byPath("deployment_id", ownedDeployment),
	"GET /policies":                        global("lists only the application policies of the caller's tenant and the global ones"),
	"POST /policies":                       notTenants,
	"GET /policies/{policy_id}":            byPath("policy_id", ownedAppPolicy),
	"PUT /policies/{policy_id}":            notTenants,
	"DELETE /policies/{policy_id}":         notTenants,
	"GET /policies/{policy_id}/violations": byPath("policy_id", ownedAppPolicy),

	"GET /v1/datacenters":                    global("datacenter models are the operator's, read by every tenant to place on"),
	"GET /v1/datacenters/{datacenter_id}":    global("datacenter models are the operator's, read by every tenant to place on"),
	"PUT /v1/datacenters/{datacenter_id}":    notTenants,
	"DELETE /v1/datacenters/{datacenter_id}": notTenants,
	"POST /v1/placements":                    global("checks a template against a datacenter model and writes nothing"),
}

// owner is the route's owner check, from routeOwners; the zero
// ownerCheck (not declared) for a route missing there.
func (rt route) owner() ownerCheck { return routeOwners[rt.method+" "+rt.path] }
