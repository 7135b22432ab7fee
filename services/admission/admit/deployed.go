package admit

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/placement"
)

// KindVM is the resource kind whose resources are VMs: the instance
// counts include them.
const KindVM = "vm"

// Deployed is what is already deployed, as the decision of one request
// counts it. The admission stage builds it from deploy.deployments; it is
// an input of the pure decision like the policies.
type Deployed struct {
	// Tenant are the request's tenant's deployments other than the
	// request's own (which the request replaces), by deployment id.
	Tenant []*events.Deployment
	// Usage is what every deployment on the request's datacenter other
	// than the request's own uses of it (nil: nothing).
	Usage *placement.Usage
}

// DeployedSet is every admitted deployment, by id: what Deployed is cut
// from.
type DeployedSet map[string]*events.Deployment

// For is what the decision of req counts: the tenant's other deployments
// and what the other deployments on its datacenter use. A deployment
// whose placement does not fit the datacenter's model as it is now
// (the model was replaced around the API) counts what still fits.
func (s DeployedSet) For(req *Request, dcs Datacenters) *Deployed {
	d := &Deployed{}
	for id, e := range s {
		if id == req.DeploymentID {
			continue
		}
		if e.Tenant == req.Tenant {
			d.Tenant = append(d.Tenant, e)
		}
		if req.Datacenter != "" && e.Datacenter == req.Datacenter {
			if d.Usage == nil {
				d.Usage = &placement.Usage{}
			}
			d.Usage.Own(id, e.Tenant)
			for _, r := range e.Resources {
				if len(r.Demand) > 0 {
					d.Usage.Take(id, r.Leaf, r.Demand)
				}
			}
			for _, l := range e.Links {
				d.Usage.TakeLink(id, l.Vertex, l.BytesPerSecond)
			}
		}
	}
	slices.SortFunc(d.Tenant, func(a, b *events.Deployment) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	return d
}

// Others are the deployments of dep's tenant other than dep, by id: what
// the deletion of dep is decided against (EvaluateDeletion).
func (s DeployedSet) Others(dep *events.Deployment) []*events.Deployment {
	var out []*events.Deployment
	for id, e := range s {
		if id != dep.DeploymentID && e.Tenant == dep.Tenant {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *events.Deployment) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	return out
}

// UseOf is what a deployment record says it uses of its datacenter.
func UseOf(e *events.Deployment) placement.Use {
	u := placement.Use{Leaves: map[string][]float64{}, Links: map[string]float64{}}
	for _, r := range e.Resources {
		if len(r.Demand) == 0 {
			continue
		}
		d := u.Leaves[r.Leaf]
		if len(d) < len(r.Demand) {
			d = append(d, make([]float64, len(r.Demand)-len(d))...)
		}
		for k, v := range r.Demand {
			d[k] += v
		}
		u.Leaves[r.Leaf] = d
	}
	for _, l := range e.Links {
		u.Links[l.Vertex] += l.BytesPerSecond
	}
	return u
}

// VMs is how many resources of kind vm the request's placement carries.
func (r *Request) VMs() int {
	n := 0
	for _, res := range r.Resources {
		if res.Kind == KindVM {
			n++
		}
	}
	return n
}

// Instances is how many instances the request spawns: its applications'
// instances added up, or the VMs its placement carries when they are
// more.
func (r *Request) Instances() int {
	n := 0
	for _, a := range r.Applications {
		n += a.Instances
	}
	return max(n, r.VMs())
}

// unattributed is how many of the placement's VMs no application's
// instance count accounts for.
func unattributed(apps, vms int) int { return max(0, vms-apps) }

// instancesOf is the instances one application of the request counts
// for a quota: its own, and the placement's VMs no application accounts
// for (they could be any application's: each is held to them).
func (r *Request) instancesOf(a *Application) int {
	n := 0
	for _, b := range r.Applications {
		n += b.Instances
	}
	return a.Instances + unattributed(n, r.VMs())
}

// selectedInstances is the instances of the request's applications among
// names (all, when names is empty), with the unattributed VMs when any is.
func (r *Request) selectedInstances(names []string) int {
	n, all, some := 0, 0, false
	for i := range r.Applications {
		a := &r.Applications[i]
		all += a.Instances
		if selects(names, a) {
			n += a.Instances
			some = true
		}
	}
	if !some {
		return 0
	}
	return n + unattributed(all, r.VMs())
}

// deployedApp is a deployed application as an Application, for the
// selection rules.
func deployedApp(a *events.DeployedApplication) *Application {
	return &Application{Name: a.Name, Class: a.Class, Package: a.Package, Inherits: a.Inherits, Instances: int(a.Instances), Flavor: a.Flavor}
}

// deployedInstances is what selectedInstances is for a deployment record.
func deployedInstances(e *events.Deployment, names []string) int {
	n, all, some := 0, 0, false
	for i := range e.Applications {
		a := deployedApp(&e.Applications[i])
		all += a.Instances
		if selects(names, a) {
			n += a.Instances
			some = true
		}
	}
	if !some {
		return 0
	}
	return n + unattributed(all, int(e.VMs))
}

// inEnvironment are the deployments of d in the environment.
func (d *Deployed) inEnvironment(env string) []*events.Deployment {
	if d == nil {
		return nil
	}
	var out []*events.Deployment
	for _, e := range d.Tenant {
		if e.Environment == env {
			out = append(out, e)
		}
	}
	return out
}

// all are the tenant's other deployments.
func (d *Deployed) all() []*events.Deployment {
	if d == nil {
		return nil
	}
	return d.Tenant
}

// counted adds up the selected instances of deployments, and names those
// that hold some.
func counted(es []*events.Deployment, names []string) (int, []string) {
	n := 0
	var ids []string
	for _, e := range es {
		if k := deployedInstances(e, names); k > 0 {
			n += k
			ids = append(ids, e.DeploymentID)
		}
	}
	return n, ids
}

// already says what earlier deployments hold, for a message.
func already(n int, ids []string) string {
	if n == 0 {
		return ""
	}
	const most = 5
	more := ""
	if len(ids) > most {
		ids, more = ids[:most], fmt.Sprintf(" and %d more", len(ids)-most)
	}
	return fmt.Sprintf("%d already deployed by %s%s, ", n, strings.Join(ids, ", "), more)
}

// Record is what an admitted request holds, as deploy.deployments keeps
// it: its environment, applications as admitted (mutated), VMs and, when
// it names a datacenter, its resources on their leaves with their demands
// and the bandwidth it takes on each network edge (use, from
// placement.Model.Use on the datacenter's model), and the request itself
// as JSON, which the audit reports check.
func Record(requestID string, r *Request, use placement.Use, components []string, at time.Time) *events.Deployment {
	e := &events.Deployment{
		DeploymentID: r.DeploymentID, Tenant: r.Tenant, Environment: r.Environment, RequestID: requestID,
		Applications: make([]events.DeployedApplication, 0, len(r.Applications)), VMs: int32(r.VMs()), Datacenter: r.Datacenter,
		Resources: []events.PlacedResource{}, Links: []events.LinkUse{}, Components: slices.Clone(components), AdmittedAt: at.UTC(),
	}
	if e.Components == nil {
		e.Components = []string{}
	}
	if b, err := r.JSON(); err == nil {
		e.Request = string(b)
	}
	for _, a := range r.Applications {
		inh := slices.Clone(a.Inherits)
		if inh == nil {
			inh = []string{}
		}
		e.Applications = append(e.Applications, events.DeployedApplication{Name: a.Name, Class: a.Class, Package: a.Package, Inherits: inh, Instances: int32(a.Instances), Flavor: a.Flavor})
	}
	if r.Datacenter != "" {
		for _, res := range r.Resources {
			d := slices.Clone(res.Demand)
			if d == nil {
				d = []float64{}
			}
			e.Resources = append(e.Resources, events.PlacedResource{ResourceID: res.ID, Kind: res.Kind, Leaf: r.Placement[res.ID], Demand: d})
		}
		vs := make([]string, 0, len(use.Links))
		for v := range use.Links {
			vs = append(vs, v)
		}
		slices.Sort(vs)
		for _, v := range vs {
			e.Links = append(e.Links, events.LinkUse{Vertex: v, BytesPerSecond: use.Links[v]})
		}
	}
	return e
}

// Billing is the billing event of an admitted deployment (kind
// events.BillingAdmitted) or of a deleted one (events.BillingDeleted):
// what the deployment runs, or ran.
func Billing(kind, requestID string, e *events.Deployment, at time.Time) *events.BillingEvent {
	b := &events.BillingEvent{
		EventID: requestID + "/" + kind, Kind: kind, DeploymentID: e.DeploymentID, Tenant: e.Tenant, Environment: e.Environment,
		Datacenter: e.Datacenter, Applications: make([]events.BilledApplication, 0, len(e.Applications)), VMs: e.VMs, RequestID: requestID, At: at.UTC(),
	}
	for _, a := range e.Applications {
		b.Applications = append(b.Applications, events.BilledApplication{Name: a.Name, Class: a.Class, Instances: a.Instances, Flavor: a.Flavor})
	}
	return b
}
