package admission

import (
	"maps"
	"sync"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
)

// Deployments is what every admitted deployment holds, kept current from
// deploy.deployments (and from the stage's own outputs as it makes them):
// the deployed state later requests are decided against.
type Deployments struct {
	mu   sync.RWMutex
	byID admit.DeployedSet
}

// NewDeployments is an empty set.
func NewDeployments() *Deployments { return &Deployments{byID: admit.DeployedSet{}} }

// Apply folds one deploy.deployments record (a tombstone: nil) in.
func (d *Deployments) Apply(id string, v *events.Deployment) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v == nil {
		delete(d.byID, id)
		return
	}
	d.byID[id] = v
}

// Get returns one deployment.
func (d *Deployments) Get(id string) (*events.Deployment, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	v, ok := d.byID[id]
	return v, ok
}

// Snapshot is every deployment now; the records are shared, not copied
// (a record is never changed once read).
func (d *Deployments) Snapshot() admit.DeployedSet {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return maps.Clone(d.byID)
}

// Len is how many deployments there are.
func (d *Deployments) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.byID)
}
