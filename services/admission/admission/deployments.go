package admission

import (
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
