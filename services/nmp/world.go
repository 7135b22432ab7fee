package nmp

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
)

// World is what the hub knows: every NMP, node, package and last status,
// indexed for recomputing directives. Each Set method returns the keys of
// the nodes whose directive may have changed. It is safe for concurrent
// use.
type World struct {
	mu       sync.RWMutex
	policies map[string]*Policy             // by org/name
	byOrg    map[string]map[string]*Policy  // org -> key -> policy
	nodes    map[string]*Node               // by org/node
	orgNodes map[string]map[string]*Node    // org -> key -> node
	status   map[string]*events.AgentStatus // the node's last report, by org/node
	// history is the last report about each NMP, by org/node then NMP
	// key: a report about one NMP does not erase the node's state for
	// another.
	history  map[string]map[string]*events.AgentStatus
	packages Packages
	latest   *events.AgentPackage
	tallies  map[string]*Tally // by policy key
	rollouts map[string]Rollout
}

// NewWorld is an empty world.
func NewWorld() *World {
	return &World{
		policies: map[string]*Policy{}, byOrg: map[string]map[string]*Policy{},
		nodes: map[string]*Node{}, orgNodes: map[string]map[string]*Node{},
		status: map[string]*events.AgentStatus{}, history: map[string]map[string]*events.AgentStatus{}, packages: Packages{},
		tallies: map[string]*Tally{}, rollouts: map[string]Rollout{},
	}
}

// SetPolicy puts (p non-nil) or removes the NMP key.
func (w *World) SetPolicy(key string, p *Policy) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.policies[key]
	if old != nil {
		delete(w.byOrg[old.Ev.Org], key)
	}
	var orgs []string
	if old != nil {
		orgs = append(orgs, old.Ev.Org)
	}
	if p == nil {
		delete(w.policies, key)
		delete(w.tallies, key)
		delete(w.rollouts, key)
	} else {
		w.policies[key] = p
		if w.byOrg[p.Ev.Org] == nil {
			w.byOrg[p.Ev.Org] = map[string]*Policy{}
		}
		w.byOrg[p.Ev.Org][key] = p
		if old == nil || old.Ev.Org != p.Ev.Org {
			orgs = append(orgs, p.Ev.Org)
		}
		w.retallyLocked(p)
	}
	var out []string
	for _, o := range orgs {
		for k := range w.orgNodes[o] {
			out = append(out, k)
		}
	}
	return out
}

// retallyLocked counts the NMP's reports anew (its resume time or
// threshold may have changed).
func (w *World) retallyLocked(p *Policy) {
	t := &Tally{}
	for _, h := range w.history {
		if st := h[p.Key]; st != nil {
			t.Add(p.Ev, st)
		}
	}
	w.tallies[p.Key] = t
	w.rollouts[p.Key] = Evaluate(p.Ev, *t)
}

// SetNode puts (n non-nil) or removes a node.
func (w *World) SetNode(key string, n *Node) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.nodes[key]; old != nil {
		delete(w.orgNodes[old.Ev.Org], key)
	}
	if n == nil {
		delete(w.nodes, key)
		return nil // a removed node gets no directive (its own is tombstoned)
	}
	w.nodes[key] = n
	if w.orgNodes[n.Ev.Org] == nil {
		w.orgNodes[n.Ev.Org] = map[string]*Node{}
	}
	w.orgNodes[n.Ev.Org][key] = n
	return []string{key}
}

// SetStatus puts (st non-nil) or removes a node's last report. The report
// replaces the node's last report about the same NMP only; removing
// forgets every report of the node. When the report moves an NMP across
// its failure threshold, every node of the NMP's org is returned.
func (w *World) SetStatus(key string, st *events.AgentStatus) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	touched := map[string]bool{}
	uncount := func(old *events.AgentStatus) {
		if p := w.policies[old.Policy]; p != nil {
			w.tallies[p.Key].Remove(p.Ev, old)
			touched[p.Key] = true
		}
	}
	if st == nil {
		for _, old := range w.history[key] {
			uncount(old)
		}
		delete(w.status, key)
		delete(w.history, key)
	} else {
		w.status[key] = st
		if w.history[key] == nil {
			w.history[key] = map[string]*events.AgentStatus{}
		}
		if old := w.history[key][st.Policy]; old != nil {
			uncount(old)
		}
		w.history[key][st.Policy] = st
		if p := w.policies[st.Policy]; p != nil {
			w.tallies[p.Key].Add(p.Ev, st)
			touched[p.Key] = true
		}
	}
	out := []string{key}
	for pk := range touched {
		p := w.policies[pk]
		r := Evaluate(p.Ev, *w.tallies[pk])
		was := w.rollouts[pk]
		w.rollouts[pk] = r
		if r.Paused != was.Paused {
			for k := range w.orgNodes[p.Ev.Org] {
				if k != key {
					out = append(out, k)
				}
			}
		}
	}
	return out
}

// SetPackage puts (p non-nil) or removes a package version; every node
// may be concerned.
func (w *World) SetPackage(version string, p *events.AgentPackage) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p == nil {
		delete(w.packages, version)
	} else {
		w.packages[version] = p
	}
	w.latest = w.packages.Latest()
	out := make([]string, 0, len(w.nodes))
	for k := range w.nodes {
		out = append(out, k)
	}
	return out
}

// Directive computes the directive of a node; nil when the node is not
// registered.
func (w *World) Directive(key string, issued time.Time) *events.AgentDirective {
	w.mu.RLock()
	defer w.mu.RUnlock()
	n := w.nodes[key]
	if n == nil {
		return nil
	}
	return Compute(Input{Node: n, Policies: slices.Collect(maps.Values(w.byOrg[n.Ev.Org])), Packages: w.packages, Latest: w.latest, Status: w.status[key], Rollouts: w.rollouts}, issued)
}

// NodesOf lists the keys of the nodes an NMP applies to (enabled or not),
// sorted.
func (w *World) NodesOf(p *Policy) []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	var out []string
	for k, n := range w.orgNodes[p.Ev.Org] {
		if p.Applies(n) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// Conflicts lists, for an NMP about to be published, the nodes it applies
// to on which another enabled NMP with a different intent is already
// enacted (named by the node's last report): there it would be ignored.
func (w *World) Conflicts(p *Policy) map[string]string {
	out := map[string]string{}
	if p.Ev.AgentUpgrade == nil || !p.Ev.Enabled {
		return out
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	for k, n := range w.orgNodes[p.Ev.Org] {
		st := w.status[k]
		if st == nil || st.Policy == "" || st.Policy == p.Key || st.Status == StateWaiting || !p.Applies(n) {
			continue
		}
		other := w.policies[st.Policy]
		if other == nil || !other.Ev.Enabled || other.Ev.AgentUpgrade == nil || !other.Applies(n) || other.intent() == p.intent() {
			continue
		}
		out[k] = other.Key
	}
	return out
}

// Rollout is the safe-rollout state of an NMP.
func (w *World) Rollout(key string) Rollout {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.rollouts[key]
}

// Status is a node's last report.
func (w *World) Status(key string) *events.AgentStatus {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.status[key]
}

// NodeState is one node's state in an NMP's status, as the API answers
// it.
type NodeState = api.NodeState

// NodeStates is the state of every node the NMP applies to, sorted by
// node: its last report about this NMP (whatever it reported about
// others since); where it has none, "ignored (conflict with X)" when X,
// with a different intent, is in force on the node, X's state when X asks
// the same, else waiting.
func (w *World) NodeStates(p *Policy) []NodeState {
	w.mu.RLock()
	defer w.mu.RUnlock()
	pols := slices.Collect(maps.Values(w.byOrg[p.Ev.Org]))
	out := []NodeState{}
	for k, n := range w.orgNodes[p.Ev.Org] {
		if !p.Applies(n) {
			continue
		}
		ns := NodeState{Node: n.Ev.Node, Status: StateWaiting}
		st := w.history[k][p.Key]
		if st == nil || st.Status == "" || st.Status == StateWaiting {
			st = nil
			// A disabled NMP is in force nowhere: nothing to compare.
			inForce := p.Ev.Enabled && p.Ev.AgentUpgrade != nil
			if _, win, _ := choose(Input{Node: n, Policies: pols, Status: w.status[k]}); inForce && win != nil && win != p {
				if conflicting(p, win) {
					ns.Status = StateIgnored(win.Key)
				} else {
					st = w.history[k][win.Key]
				}
			}
		}
		if st != nil && st.Status != "" {
			ns.Status, ns.Version, ns.FailedVersion, ns.Error = st.Status, st.SoftwareVersion, st.FailedVersion, st.ErrorMessage
		}
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// Node is a registered node.
func (w *World) Node(key string) *Node {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.nodes[key]
}

// Policy is a stored NMP.
func (w *World) Policy(key string) *Policy {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.policies[key]
}

// Policies lists an org's NMPs sorted by name.
func (w *World) Policies(org string) []*Policy {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]*Policy, 0, len(w.byOrg[org]))
	for _, p := range w.byOrg[org] {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Package is a stored package version, or nil.
func (w *World) Package(version string) *events.AgentPackage {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.packages[version]
}

// PackageList lists every package, oldest version first.
func (w *World) PackageList() []*events.AgentPackage {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]*events.AgentPackage, 0, len(w.packages))
	for _, p := range w.packages {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := ParseSemver(out[i].Version)
		b, _ := ParseSemver(out[j].Version)
		return a.Compare(b) < 0
	})
	return out
}

// OrgNodes lists the keys of an org's nodes.
func (w *World) OrgNodes(org string) []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]string, 0, len(w.orgNodes[org]))
	for k := range w.orgNodes[org] {
		out = append(out, k)
	}
	return out
}

// AllNodes lists the keys of every node.
func (w *World) AllNodes() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]string, 0, len(w.nodes))
	for k := range w.nodes {
		out = append(out, k)
	}
	return out
}

// NodesIn lists the keys of the nodes of org ("" for every org) whose
// record is in an agent.nodes partition.
func (w *World) NodesIn(org string, partition int32) []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	var out []string
	add := func(m map[string]*Node) {
		for k, n := range m {
			if n.Partition == partition {
				out = append(out, k)
			}
		}
	}
	if org == "" {
		add(w.nodes)
	} else {
		add(w.orgNodes[org])
	}
	return out
}
