package northapi

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/topology"
)

// nodeMgmt is the North API's view of node management: every NMP, node,
// package and status (an nmp.World, as the nmp-hub has it, for dry runs,
// conflicts and status counts) and every directive with its index, for
// agents' long polls.
type nodeMgmt struct {
	codec *events.Codec
	world *nmp.World

	mu      sync.Mutex
	dirs    map[string]*directiveRow
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

func newNodeMgmt(codec *events.Codec) *nodeMgmt {
	return &nodeMgmt{codec: codec, world: nmp.NewWorld(), dirs: map[string]*directiveRow{}, waiters: map[string]chan struct{}{}, creds: newNodeCreds()}
}

// applyFuncs are the views' apply functions by base topic name.
func (m *nodeMgmt) applyFuncs() map[string]applyFunc {
	return map[string]applyFunc{
		topology.NMPPolicies:     m.applyPolicy,
		topology.AgentNodes:      m.applyNode,
		topology.AgentPackages:   m.applyPackage,
		topology.AgentStatus:     m.applyStatus,
		topology.AgentDirectives: m.applyDirective,
	}
}

func (m *nodeMgmt) decode(ctx context.Context, rec *kgo.Record) (events.Event, error) {
	if rec.Value == nil {
		return nil, nil
	}
	return m.codec.Decode(ctx, rec.Value)
}

func (m *nodeMgmt) applyPolicy(ctx context.Context, rec *kgo.Record) error {
	v, err := m.decode(ctx, rec)
	if err != nil {
		return nil // left out, as the hub does
	}
	if v == nil {
		m.world.SetPolicy(string(rec.Key), nil)
		return nil
	}
	if p, ok := v.(*events.NodeManagementPolicy); ok {
		if c, err := nmp.Compile(p); err == nil {
			m.world.SetPolicy(string(rec.Key), c)
		}
	}
	return nil
}

func (m *nodeMgmt) applyNode(ctx context.Context, rec *kgo.Record) error {
	v, err := m.decode(ctx, rec)
	if err != nil {
		return nil
	}
	n, _ := v.(*events.AgentNode)
	m.creds.set(string(rec.Key), n)
	if n == nil || n.Deleted {
		m.world.SetNode(string(rec.Key), nil)
		return nil
	}
	if c, err := nmp.CompileNode(n); err == nil {
		m.world.SetNode(string(rec.Key), c)
	}
	return nil
}

func (m *nodeMgmt) applyPackage(ctx context.Context, rec *kgo.Record) error {
	v, err := m.decode(ctx, rec)
	if err != nil {
		return nil
	}
	p, _ := v.(*events.AgentPackage)
	m.world.SetPackage(string(rec.Key), p)
	return nil
}

func (m *nodeMgmt) applyStatus(ctx context.Context, rec *kgo.Record) error {
	v, err := m.decode(ctx, rec)
	if err != nil {
		return nil
	}
	st, _ := v.(*events.AgentStatus)
	m.world.SetStatus(string(rec.Key), st)
	return nil
}

func (m *nodeMgmt) applyDirective(ctx context.Context, rec *kgo.Record) error {
	v, err := m.decode(ctx, rec)
	if err != nil {
		return nil
	}
	d, _ := v.(*events.AgentDirective)
	key := string(rec.Key)
	m.mu.Lock()
	defer m.mu.Unlock()
	row := m.dirs[key]
	if row != nil && nmp.Same(row.d, d) {
		return nil
	}
	if d == nil {
		delete(m.dirs, key)
	} else {
		m.dirs[key] = &directiveRow{d: d, index: directiveIndex(d)}
	}
	if ch := m.waiters[key]; ch != nil {
		close(ch)
		delete(m.waiters, key)
	}
	return nil
}

// directive is a node's directive and its index; when it is the index
// the caller has (after), it waits up to wait for a change.
func (m *nodeMgmt) directive(ctx context.Context, key string, after uint64, wait time.Duration) (*events.AgentDirective, uint64) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		row := m.dirs[key]
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
