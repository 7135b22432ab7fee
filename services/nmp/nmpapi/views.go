package nmpapi

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// nodeMgmt is the North API's view of node management: every NMP, node,
// package and status (an nmp.World folded by the same rules as the
// nmp-hub's, for dry runs, conflicts and status counts), every node's
// record with the nodes' own tokens, and every directive with its index,
// for agents' long polls.
type nodeMgmt struct {
	world *nmp.FollowedWorld
	nodes *runtime.Table[*events.AgentNode] // indexed by creds
	dirs  *runtime.TableOf[*events.AgentDirective, *directiveRow]

	mu      sync.Mutex
	waiters map[string]chan struct{} // closed when the key's directive changes

	creds *nodeCreds // the nodes' own tokens (nodecreds.go)
}

// directiveRow is a node's latest directive and its index: a hash of what
// the directive asks and reports (not of IssuedAt), so that it is the
// same on every replica and after a restart, and an agent polling another
// replica is not woken by a directive it already has.
type directiveRow struct {
	d     *events.AgentDirective
	index uint64
}

// directiveIndex is the index of a directive; never 0 (no directive).
func directiveIndex(d *events.AgentDirective) uint64 {
	h := fnv.New64a()
	for _, s := range append([]string{d.DirectiveID, d.Reason, d.Manifest, d.RollbackTo}, d.Conflicts...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	// 53 bits: exact as a JSON number in any client.
	return max(h.Sum64()&(1<<53-1), 1)
}

// followNodeMgmt starts following node management's topics. Close it
// when done.
func followNodeMgmt(env runtime.Env, log zerolog.Logger) (_ *nodeMgmt, err error) {
	m := &nodeMgmt{waiters: map[string]chan struct{}{}, creds: newNodeCreds()}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	if m.world, err = nmp.FollowWorld(env, log); err != nil {
		return nil, err
	}
	if m.nodes, err = runtime.FollowTable(env, topology.AgentNodes, func(r runtime.Msg[*events.AgentNode]) {
		m.creds.set(string(r.Key), r.Value)
	}); err != nil {
		return nil, err
	}
	m.dirs, err = runtime.FollowTableOf(env, topology.AgentDirectives, func(r runtime.Msg[*events.AgentDirective], prev *directiveRow, had bool) (*directiveRow, error) {
		if had && nmp.Same(prev.d, r.Value) {
			return prev, nil
		}
		return &directiveRow{d: r.Value, index: directiveIndex(r.Value)}, nil
	}, m.wake)
	return m, err
}

// views are node management's read views, one per topic.
func (m *nodeMgmt) views() []web.View {
	out := []web.View{m.nodes, m.dirs}
	for _, t := range nmp.WorldTopics {
		if t != topology.AgentNodes {
			out = append(out, m.world.Topic(t))
		}
	}
	return out
}

func (m *nodeMgmt) close() {
	if m.world != nil {
		m.world.Close()
	}
	if m.nodes != nil {
		m.nodes.Close()
	}
	if m.dirs != nil {
		m.dirs.Close()
	}
}

// wake wakes the long polls of the directive's node.
func (m *nodeMgmt) wake(r runtime.Msg[*events.AgentDirective]) {
	key := string(r.Key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if ch := m.waiters[key]; ch != nil {
		close(ch)
		delete(m.waiters, key)
	}
}

// directive is a node's directive and its index; when it is the index
// the caller has (after), it waits up to wait for a change.
func (m *nodeMgmt) directive(ctx context.Context, key string, after uint64, wait time.Duration) (*events.AgentDirective, uint64) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		row, _ := m.dirs.Value(key)
		var idx uint64
		if row != nil {
			idx = row.index
		}
		if idx != after || wait <= 0 {
			m.mu.Unlock()
			if row == nil {
				return nil, 0
			}
			return row.d, idx
		}
		ch := m.waiters[key]
		if ch == nil {
			ch = make(chan struct{})
			m.waiters[key] = ch
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			wait = 0
		case <-ctx.Done():
			wait = 0
		}
	}
}

// splitKey is org and name of an org/name key.
func splitKey(k string) (string, string) {
	o, n, _ := strings.Cut(k, "/")
	return o, n
}

// stateCounts counts an NMP's nodes per state of their last report about
// it and lists, apart, the failing ones, those whose precheck failed and
// those the NMP rolled back.
func (m *nodeMgmt) stateCounts(p *nmp.Policy) (counts map[string]int, failing, precheck, rolledBack []nmp.NodeState) {
	counts = map[string]int{}
	failing, precheck, rolledBack = []nmp.NodeState{}, []nmp.NodeState{}, []nmp.NodeState{}
	for _, ns := range m.world.NodeStates(p) {
		counts[ns.Status]++
		switch {
		case nmp.Failed(ns.Status):
			failing = append(failing, ns)
		case ns.Status == nmp.StatePrecheckFailed:
			precheck = append(precheck, ns)
		case ns.Status == nmp.StateRolledBack:
			rolledBack = append(rolledBack, ns)
		}
	}
	return counts, failing, precheck, rolledBack
}

func orgOK(org string) error { return nmp.CheckName("org", org) }

func keyOf(org, name string) string { return fmt.Sprintf("%s/%s", org, name) }
