package admission

import (
	"slices"
	"strings"
	"sync"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
)

// Deployments is what every admitted deployment holds, kept current from
// deploy.deployments (and from the stage's own outputs as it makes them):
// the deployed state later requests are decided against. It keeps running
// totals (admit.Ledger): each tenant's deployments and each datacenter's
// usage change as records are applied, so a decision does not sum every
// deployment again.
type Deployments struct {
	mu sync.RWMutex
	l  *admit.Ledger
}

// NewDeployments is an empty set.
func NewDeployments() *Deployments { return &Deployments{l: admit.NewLedger()} }

// Apply folds one deploy.deployments record (a tombstone: nil) in.
func (d *Deployments) Apply(id string, v *events.Deployment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.l.Apply(id, v)
}

// Get returns one deployment.
func (d *Deployments) Get(id string) (*events.Deployment, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.l.Lookup(id)
}

// With runs f on the deployed state; no record is applied until f
// returns (what f reads of it, a datacenter's usage, is shared). f must
// not call the other methods of d.
func (d *Deployments) With(f func(admit.DeployedState)) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	f(d.l)
}

// Len is how many deployments there are.
func (d *Deployments) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.l.Len()
}

// ownCopy is a deployment record decoded from deploy.deployments, copied
// out of the buffer it was decoded from: hamba/avro carves a record's
// short strings out of shared buffers, and keeping one of them (a tenant,
// a leaf) would keep every record decoded with it on the heap.
func ownCopy(d *events.Deployment) *events.Deployment {
	if d == nil {
		return nil
	}
	c := &events.Deployment{
		DeploymentID: strings.Clone(d.DeploymentID), Tenant: strings.Clone(d.Tenant), Environment: strings.Clone(d.Environment),
		RequestID: strings.Clone(d.RequestID), VMs: d.VMs, Datacenter: strings.Clone(d.Datacenter),
		Components: cloneStrings(d.Components), AdmittedAt: d.AdmittedAt, Request: strings.Clone(d.Request),
	}
	if d.Applications != nil {
		c.Applications = make([]events.DeployedApplication, len(d.Applications))
		for i, a := range d.Applications {
			c.Applications[i] = events.DeployedApplication{Name: strings.Clone(a.Name), Class: strings.Clone(a.Class), Package: strings.Clone(a.Package),
				Inherits: cloneStrings(a.Inherits), Instances: a.Instances, Flavor: strings.Clone(a.Flavor)}
		}
	}
	if d.Resources != nil {
		c.Resources = make([]events.PlacedResource, len(d.Resources))
		for i, r := range d.Resources {
			c.Resources[i] = events.PlacedResource{ResourceID: strings.Clone(r.ResourceID), Kind: strings.Clone(r.Kind), Leaf: strings.Clone(r.Leaf), Demand: slices.Clone(r.Demand)}
		}
	}
	if d.Links != nil {
		c.Links = make([]events.LinkUse, len(d.Links))
		for i, l := range d.Links {
			c.Links[i] = events.LinkUse{Vertex: strings.Clone(l.Vertex), BytesPerSecond: l.BytesPerSecond}
		}
	}
	return c
}

// cloneStrings copies a slice of strings and each string (nil stays nil).
func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strings.Clone(v)
	}
	return out
}
