package admit

import (
	"slices"
	"strings"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/placement"
)

// DeployedState is what a decision cuts its Deployed from: a DeployedSet,
// which sums what each datacenter holds for every request, or a Ledger,
// which keeps the sums as records come and go.
type DeployedState interface {
	// For is what the decision of req counts (see DeployedSet.For).
	For(req *Request, dcs Datacenters) *Deployed
	// Others are the deployments of dep's tenant other than dep, by id.
	Others(dep *events.Deployment) []*events.Deployment
	// Lookup is one deployment.
	Lookup(id string) (*events.Deployment, bool)
}

// Lookup is one deployment of the set.
func (s DeployedSet) Lookup(id string) (*events.Deployment, bool) {
	e, ok := s[id]
	return e, ok
}

// Ledger is every admitted deployment with running totals: each
// tenant's deployments and what the deployments on each datacenter use,
// updated as records are applied, so that a decision costs what its
// tenant holds and what its datacenter has in use, not a pass over every
// deployment. It is not safe for concurrent use: the caller holds a lock
// across Apply and across a decision (the Usage a decision reads is the
// ledger's own).
type Ledger struct {
	byID     DeployedSet
	byTenant map[string]map[string]*events.Deployment
	usage    map[string]*placement.Usage
}

// NewLedger is an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{byID: DeployedSet{}, byTenant: map[string]map[string]*events.Deployment{}, usage: map[string]*placement.Usage{}}
}

// Apply folds one deploy.deployments record (a tombstone: nil) in: the
// deployment's earlier record, if any, is taken back first.
func (l *Ledger) Apply(id string, e *events.Deployment) {
	if old := l.byID[id]; old != nil {
		if e != nil && old.RequestID == e.RequestID && old.Tenant == e.Tenant && old.AdmittedAt.UnixMilli() == e.AdmittedAt.UnixMilli() {
			// The same record read back (the topic keeps times to the
			// millisecond): nothing changes.
			l.byID[id] = e
			l.byTenant[e.Tenant][id] = e
			return
		}
		delete(l.byID, id)
		if m := l.byTenant[old.Tenant]; m != nil {
			delete(m, id)
			if len(m) == 0 {
				delete(l.byTenant, old.Tenant)
			}
		}
		if u := l.usage[old.Datacenter]; u != nil && old.Datacenter != "" {
			u.Remove(id, UseOf(old))
			if u.Empty() {
				delete(l.usage, old.Datacenter)
			}
		}
	}
	if e == nil {
		return
	}
	l.byID[id] = e
	m := l.byTenant[e.Tenant]
	if m == nil {
		m = map[string]*events.Deployment{}
		l.byTenant[e.Tenant] = m
	}
	m[id] = e
	if e.Datacenter != "" {
		u := l.usage[e.Datacenter]
		if u == nil {
			u = &placement.Usage{}
			l.usage[e.Datacenter] = u
		}
		u.Add(id, UseOf(e))
		u.Own(id, e.Tenant)
	}
}

// For is what the decision of req counts, as DeployedSet.For has it: the
// tenant's other deployments, and the running total of its datacenter
// without the request's own deployment (a copy only when that deployment
// is on it).
func (l *Ledger) For(req *Request, _ Datacenters) *Deployed {
	d := &Deployed{}
	for id, e := range l.byTenant[req.Tenant] {
		if id != req.DeploymentID {
			d.Tenant = append(d.Tenant, e)
		}
	}
	slices.SortFunc(d.Tenant, func(a, b *events.Deployment) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	if req.Datacenter == "" {
		return d
	}
	u := l.usage[req.Datacenter]
	if own := l.byID[req.DeploymentID]; own != nil && own.Datacenter == req.Datacenter {
		u = u.Without(own.DeploymentID, UseOf(own))
	}
	if !u.Empty() {
		d.Usage = u
	}
	return d
}

// Others are the deployments of dep's tenant other than dep, by id.
func (l *Ledger) Others(dep *events.Deployment) []*events.Deployment {
	var out []*events.Deployment
	for id, e := range l.byTenant[dep.Tenant] {
		if id != dep.DeploymentID {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *events.Deployment) int { return strings.Compare(a.DeploymentID, b.DeploymentID) })
	return out
}

// Lookup is one deployment.
func (l *Ledger) Lookup(id string) (*events.Deployment, bool) {
	e, ok := l.byID[id]
	return e, ok
}

// Len is how many deployments there are.
func (l *Ledger) Len() int { return len(l.byID) }
