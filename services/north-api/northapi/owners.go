package northapi

import "github.com/policyflow/policyflow/services/internal/web"

// routeOwners is the owner check of every route, by "METHOD path"; a
// route missing here fails the API's tests.
var routeOwners = map[string]web.Owner{
	"PUT /v1/components/{component_id}":                   web.ByPath("component_id", web.OwnedComponent),
	"DELETE /v1/components/{component_id}":                web.ByPath("component_id", web.OwnedComponent),
	"GET /v1/components/{component_id}/status":            web.ByPath("component_id", web.OwnedComponent),
	"POST /v1/components/{component_id}/renotify":         web.NotTenants,
	"POST /v1/pdp/notifications":                          web.NotTenants,
	"POST /v1/policies":                                   web.NotTenants, // publishing; a tenant's dry run (dryRunners) writes nothing and shows its own components
	"GET /v1/policies/{policy_id}/rollout":                web.ByPath("policy_id", web.OwnedPolicy),
	"POST /v1/policies/{policy_id}/rollout/promote":       web.NotTenants,
	"POST /v1/policies/{policy_id}/rollout/pause":         web.NotTenants,
	"POST /v1/policies/{policy_id}/rollout/resume":        web.NotTenants,
	"POST /v1/policies/{policy_id}/rollout/abort":         web.NotTenants,
	"POST /v1/catchup":                                    web.NotTenants,
	"GET /v1/catchup/{request_id}":                        web.NotTenants,
	"GET /catch_up":                                       web.NotTenants,
	"GET /policy_latest/{policy_id}":                      web.ByPath("policy_id", web.OwnedPolicy),
	"POST /policies_latest":                               web.Global("lists only the global policies and the caller's tenant's"),
	"GET /service_component_all/{service_component_name}": web.ByPath("service_component_name", web.OwnedFolder),
	"GET /healthcheck":                                    web.Public,
	"GET /openapi.json":                                   web.Global("the API's description, the same for every caller"),
	"GET /v1/status":                                      web.NotTenants,
	"GET /ui/":                                            web.Public,

	"GET /v2/participants":                                                web.NotTenants,
	"GET /v2/participants/{participant_id}":                               web.NotTenants,
	"PUT /v2/participants/{participant_id}":                               web.NotTenants,
	"PUT /v2/participants/{participant_id}/sync":                          web.NotTenants,
	"POST /v2/participants/{participant_id}/operations":                   web.NotTenants,
	"GET /v2/participants/{participant_id}/compositions/{composition_id}": web.NotTenants,
	"GET /v2/participants/{participant_id}/instances/{instance_id}":       web.NotTenants,

	"GET /onap/policy/clamp/acm/v2/participants":                      web.NotTenants,
	"PUT /onap/policy/clamp/acm/v2/participants":                      web.NotTenants,
	"GET /onap/policy/clamp/acm/v2/participants/{participantId}":      web.NotTenants,
	"PUT /onap/policy/clamp/acm/v2/participants/{participantId}":      web.NotTenants,
	"PUT /onap/policy/clamp/acm/v2/participants/sync/{participantId}": web.NotTenants,

	"GET /v1/orgs/{org}/nmps":                   web.ByPath("org", web.OwnedOrg),
	"GET /v1/orgs/{org}/nmps/{name}":            web.ByPath("org", web.OwnedOrg),
	"PUT /v1/orgs/{org}/nmps/{name}":            web.ByPath("org", web.OwnedOrg),
	"DELETE /v1/orgs/{org}/nmps/{name}":         web.ByPath("org", web.OwnedOrg),
	"GET /v1/orgs/{org}/nmps/{name}/nodes":      web.ByPath("org", web.OwnedOrg),
	"GET /v1/orgs/{org}/nmps/{name}/status":     web.ByPath("org", web.OwnedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/enable":    web.ByPath("org", web.OwnedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/disable":   web.ByPath("org", web.OwnedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/resume":    web.ByPath("org", web.OwnedOrg),
	"POST /v1/orgs/{org}/nmps/{name}/rollback":  web.ByPath("org", web.OwnedOrg),
	"PUT /v1/orgs/{org}/nodes/{node}":           web.NotTenants,
	"DELETE /v1/orgs/{org}/nodes/{node}":        web.NotTenants,
	"GET /v1/orgs/{org}/nodes/{node}/directive": web.NotTenants,
	"PUT /v1/orgs/{org}/nodes/{node}/status":    web.NotTenants,
	"GET /v1/orgs/{org}/nodes/{node}/status":    web.ByPath("org", web.OwnedOrg),
	"GET /v1/orgs/{org}/nodes":                  web.ByPath("org", web.OwnedOrg),
	"POST /v1/orgs/{org}/nodes/{node}/token":    web.NotTenants,
	"DELETE /v1/orgs/{org}/nodes/{node}/token":  web.NotTenants,
	"GET /v1/agentpackages":                     web.NotTenants,
	"POST /v1/agentpackages":                    web.NotTenants,
	"GET /v1/agentpackages/{version}":           web.NotTenants,
	"GET /v1/agentpackages/{version}/file":      web.NotTenants,

	"POST /v1/deployments":                   web.ByBody("the body's tenant is the caller's, and its deployment, component ids and Consul folders are no other tenant's (admit.CheckClaim)"),
	"GET /v1/deployments/{deployment_id}":    web.ByPath("deployment_id", web.OwnedDeployment),
	"DELETE /v1/deployments/{deployment_id}": web.ByPath("deployment_id", web.OwnedDeployment),
	"GET /policies":                          web.Global("lists only the application policies of the caller's tenant and the global ones"),
	"POST /policies":                         web.NotTenants,
	"GET /policies/{policy_id}":              web.ByPath("policy_id", web.OwnedAppPolicy),
	"PUT /policies/{policy_id}":              web.NotTenants,
	"DELETE /policies/{policy_id}":           web.NotTenants,
	"GET /policies/{policy_id}/violations":   web.ByPath("policy_id", web.OwnedAppPolicy),
	"GET /policies/{policy_id}/report":       web.ByPath("policy_id", web.OwnedAppPolicy),

	"GET /v1/datacenters":                    web.Global("datacenter models are the operator's, read by every tenant to place on"),
	"GET /v1/datacenters/{datacenter_id}":    web.Global("datacenter models are the operator's, read by every tenant to place on"),
	"PUT /v1/datacenters/{datacenter_id}":    web.NotTenants,
	"DELETE /v1/datacenters/{datacenter_id}": web.NotTenants,
	"POST /v1/placements":                    web.Global("checks a template against a datacenter model and writes nothing"),
}

// owner is the route's owner check, from routeOwners; the zero Owner
// (not declared) for a route missing there.
func (rt route) owner() web.Owner { return routeOwners[rt.method+" "+rt.path] }
