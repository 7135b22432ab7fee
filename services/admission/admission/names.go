package admission

import (
	"slices"
	"strings"
	"sync"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
)

// Names is who holds the names admission writes, kept current from
// deploy.components and admission.verdicts (and from the stage's own
// outputs as it makes them): the admit.Owners the stage decides against.
type Names struct {
	mu    sync.RWMutex
	comps map[string]held // component id -> what its registration names
	// byFolder and byDeployment index comps: name -> component id -> tenant.
	byFolder     map[string]map[string]string
	byDeployment map[string]map[string]string
	// byParent indexes the folders under another's prefix: for each of
	// a folder's admit.FolderParents, component id -> tenant.
	byParent map[string]map[string]string
	verdicts map[string]string // deployment id -> tenant of its latest verdict
}

// held is what Names keeps of a component's registration: the names it
// holds and its tenant, copied out of the record (a decoded record's
// strings share its buffer: keeping one would keep all of it).
type held struct{ tenant, folder, deployment string }

// NewNames is an empty set.
func NewNames() *Names {
	return &Names{comps: map[string]held{}, byFolder: map[string]map[string]string{},
		byDeployment: map[string]map[string]string{}, byParent: map[string]map[string]string{}, verdicts: map[string]string{}}
}

// ApplyComponent folds one deploy.components record (a tombstone: nil) in.
func (n *Names) ApplyComponent(id string, c *events.Component) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if old, ok := n.comps[id]; ok {
		unindex(n.byFolder, old.folder, id)
		unindex(n.byDeployment, old.deployment, id)
		for _, p := range admit.FolderParents(old.folder) {
			unindex(n.byParent, p, id)
		}
		delete(n.comps, id)
	}
	if c == nil {
		return
	}
	h := held{tenant: strings.Clone(c.Tenant), folder: strings.Clone(c.ServiceComponentName), deployment: strings.Clone(c.DeploymentID)}
	n.comps[id] = h
	index(n.byFolder, h.folder, id, h.tenant)
	index(n.byDeployment, h.deployment, id, h.tenant)
	for _, p := range admit.FolderParents(h.folder) {
		index(n.byParent, p, id, h.tenant)
	}
}

// ApplyVerdict folds one admission.verdicts record (a tombstone: nil) in.
func (n *Names) ApplyVerdict(deploymentID string, v *events.AdmissionVerdict) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v == nil || v.Tenant == "" {
		// A verdict of no tenant (a request that named none, refused)
		// holds nothing.
		delete(n.verdicts, deploymentID)
		return
	}
	if t, ok := n.verdicts[deploymentID]; ok && t == v.Tenant {
		return
	}
	n.verdicts[strings.Clone(deploymentID)] = strings.Clone(v.Tenant)
}

func index(m map[string]map[string]string, name, id, tenant string) {
	if m[name] == nil {
		m[name] = map[string]string{}
	}
	m[name][id] = tenant
}

func unindex(m map[string]map[string]string, name, id string) {
	delete(m[name], id)
	if len(m[name]) == 0 {
		delete(m, name)
	}
}

// Component implements admit.Owners.
func (n *Names) Component(id string) (string, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	c, ok := n.comps[id]
	if !ok {
		return "", false
	}
	return c.tenant, true
}

// Folder implements admit.Owners.
func (n *Names) Folder(scn string) []admit.Holder {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []admit.Holder
	for id, t := range n.byFolder[scn] {
		out = append(out, admit.Holder{ComponentID: id, Tenant: t})
	}
	slices.SortFunc(out, func(a, b admit.Holder) int { return strings.Compare(a.ComponentID, b.ComponentID) })
	return out
}

// FoldersUnder implements admit.Owners.
func (n *Names) FoldersUnder(scn string) []admit.Holder {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []admit.Holder
	for id, t := range n.byParent[scn] {
		out = append(out, admit.Holder{ComponentID: id, Tenant: t})
	}
	slices.SortFunc(out, func(a, b admit.Holder) int { return strings.Compare(a.ComponentID, b.ComponentID) })
	return out
}

// Deployment implements admit.Owners.
func (n *Names) Deployment(id string) []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []string
	if t, ok := n.verdicts[id]; ok {
		out = append(out, t)
	}
	for _, t := range n.byDeployment[id] {
		out = append(out, t)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ComponentsOf are the components registered for a deployment, with their
// tenants, by id.
func (n *Names) ComponentsOf(deploymentID string) []admit.Holder {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []admit.Holder
	for id, t := range n.byDeployment[deploymentID] {
		out = append(out, admit.Holder{ComponentID: id, Tenant: t})
	}
	slices.SortFunc(out, func(a, b admit.Holder) int { return strings.Compare(a.ComponentID, b.ComponentID) })
	return out
}
