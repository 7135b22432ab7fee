package nmp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/nmp/constraint"
)

// Directive actions.
const (
	ActionUpgrade  = "upgrade"  // reach TargetVersion from StartAt on
	ActionRollback = "rollback" // go back to TargetVersion (the previous one)
	ActionPaused   = "paused"   // the rollout is paused: do not start
	ActionWaiting  = "waiting"  // the target has no package on the hub yet
	ActionNone     = "none"     // no enabled NMP applies
)

// Policy is an NMP compiled for selection.
type Policy struct {
	Ev          *events.NodeManagementPolicy
	Key         string
	constraints constraint.List
	props       constraint.Properties
	patterns    map[string]bool
	anyPattern  bool
	start       time.Time
}

// Compile checks a stored NMP and prepares it for selection; a record
// that does not pass (written by something else than the North API) is
// refused with the reason.
func Compile(p *events.NodeManagementPolicy) (*Policy, error) {
	if err := CheckName("org", p.Org); err != nil {
		return nil, err
	}
	if err := CheckName("NMP name", p.Name); err != nil {
		return nil, err
	}
	c := &Policy{Ev: p, Key: Key(p.Org, p.Name), patterns: map[string]bool{}}
	var err error
	if c.constraints, err = constraint.ParseList(p.Constraints); err != nil {
		return nil, fmt.Errorf("NMP %s: %w", c.Key, err)
	}
	if c.props, err = constraint.ParseProperties([]byte(p.Properties)); err != nil {
		return nil, fmt.Errorf("NMP %s: %w", c.Key, err)
	}
	for _, pat := range p.Patterns {
		if pat == "*" {
			c.anyPattern = true
			continue
		}
		q, err := qualifyPattern(p.Org, pat)
		if err != nil {
			return nil, fmt.Errorf("NMP %s: %w", c.Key, err)
		}
		c.patterns[q] = true
	}
	c.start = p.LastUpdated.UTC()
	if u := p.AgentUpgrade; u != nil {
		if u.AtLeastVersion != Current {
			if _, err := ParseSemver(u.AtLeastVersion); err != nil {
				return nil, fmt.Errorf("NMP %s: atLeastVersion: %w", c.Key, err)
			}
		}
		if u.Start != Now && u.Start != "" {
			t, err := time.Parse(time.RFC3339, u.Start)
			if err != nil {
				return nil, fmt.Errorf("NMP %s: start %q is not RFC3339 or \"now\"", c.Key, u.Start)
			}
			c.start = t.UTC()
		}
		if _, err := ParseFromVersions(u.FromVersions); err != nil {
			return nil, fmt.Errorf("NMP %s: %w", c.Key, err)
		}
		if u.DurationS < 0 || u.DurationS > MaxDuration {
			return nil, fmt.Errorf("NMP %s: duration %d out of 0 to %d", c.Key, u.DurationS, MaxDuration)
		}
	}
	return c, nil
}

// Node is a node compiled for selection.
type Node struct {
	Ev  *events.AgentNode
	Key string
	// Partition is the agent.nodes partition the node's record is in
	// (the hub recomputes a partition's nodes on its owner).
	Partition   int32
	props       constraint.Properties
	constraints constraint.List
}

// HasProperty says whether the node's property name equals value, as a
// constraint name == value compares it (a version as a version, a list
// holding the value, a number as a number).
func (n *Node) HasProperty(name, value string) bool {
	return constraint.Compare{Prop: name, Op: constraint.Eq, Value: constraint.Value{Raw: value}}.Eval(n.props)
}

// CompileNode checks a node record and prepares it for selection.
func CompileNode(n *events.AgentNode) (*Node, error) {
	if err := CheckName("org", n.Org); err != nil {
		return nil, err
	}
	if err := CheckName("node id", n.Node); err != nil {
		return nil, err
	}
	c := &Node{Ev: n, Key: Key(n.Org, n.Node)}
	var err error
	if c.props, err = constraint.ParseProperties([]byte(n.Properties)); err != nil {
		return nil, fmt.Errorf("node %s: %w", c.Key, err)
	}
	if c.constraints, err = constraint.ParseList(n.Constraints); err != nil {
		return nil, fmt.Errorf("node %s: %w", c.Key, err)
	}
	if n.Pattern != "" {
		q, err := qualifyPattern(n.Org, n.Pattern)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", c.Key, err)
		}
		n.Pattern = q
	}
	if n.SoftwareVersion != "" {
		if _, err := ParseSemver(n.SoftwareVersion); err != nil {
			return nil, fmt.Errorf("node %s: agent version: %w", c.Key, err)
		}
	}
	return c, nil
}

// Applies says whether the NMP selects the node, enabled or not: a node
// using a pattern by one of the NMP's patterns ("*": any), a node using a
// policy by two-way compatibility (the NMP's constraints hold for the
// node's properties and the node's constraints for the NMP's properties).
// An NMP applies only to nodes of its own org.
func (p *Policy) Applies(n *Node) bool {
	if p.Ev.Org != n.Ev.Org {
		return false
	}
	if n.Ev.Pattern != "" {
		return p.anyPattern || p.patterns[n.Ev.Pattern]
	}
	return Compatible(p.constraints, p.props, n.constraints, n.props)
}

// Compatible is two-way policy compatibility: each side's constraints hold
// for the other side's properties.
func Compatible(aCons constraint.List, aProps constraint.Properties, bCons constraint.List, bProps constraint.Properties) bool {
	return aCons.Eval(bProps) && bCons.Eval(aProps)
}

// StartFor is the node's start time for the NMP: uniform in [start,
// start+duration], drawn from a hash of the node and the NMP so that it is
// the same every time it is computed.
func (p *Policy) StartFor(nodeKey string) time.Time {
	var d int64
	if p.Ev.AgentUpgrade != nil {
		d = p.Ev.AgentUpgrade.DurationS
	}
	if d <= 0 {
		return p.start
	}
	h := fnv.New64a()
	h.Write([]byte(nodeKey))
	h.Write([]byte{0})
	h.Write([]byte(p.Key))
	// Uniform over the window's milliseconds (both ends included).
	span := uint64(d)*1000 + 1
	off := mix(h.Sum64()) % span
	return p.start.Add(time.Duration(off) * time.Millisecond)
}

// mix spreads FNV's output (splitmix64's finalizer), so that node names
// that differ in their last byte do not land in neighbouring slots.
func mix(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intent is what the NMP asks the agent to reach, for conflicts.
func (p *Policy) intent() string {
	u := p.Ev.AgentUpgrade
	return fmt.Sprintf("%s downgrade=%v", u.AtLeastVersion, u.AllowDowngrade)
}

// Packages are the versions of the agent packages on the hub.
type Packages map[string]*events.AgentPackage

// Latest is the newest package, or nil.
func (ps Packages) Latest() *events.AgentPackage {
	var best *events.AgentPackage
	var bv constraint.Version
	for _, p := range ps {
		v, err := ParseSemver(p.Version)
		if err != nil {
			continue
		}
		if best == nil || v.Compare(bv) > 0 {
			best, bv = p, v
		}
	}
	return best
}

// Input is what the hub knows when it computes one node's directive.
type Input struct {
	Node *Node
	// Policies are the org's NMPs (enabled or not).
	Policies []*Policy
	Packages Packages
	// Latest is Packages.Latest(), computed once for many nodes.
	Latest *events.AgentPackage
	// Status is the node's last report, or nil.
	Status *events.AgentStatus
	// Rollouts says which NMPs are paused, by key.
	Rollouts map[string]Rollout
}

// Compute is the node's directive. The NMPs that apply to the node, are
// enabled and carry an upgrade policy compete: the one enacted on the node
// (named by its last status) stays in force and every other with a
// different intent is ignored and reported in Conflicts; when none is
// enacted yet, the newest (lastUpdated, then name) wins, the others with
// a different intent are reported. issued is IssuedAt.
func Compute(in Input, issued time.Time) *events.AgentDirective {
	n := in.Node
	d := &events.AgentDirective{Org: n.Ev.Org, Node: n.Ev.Node, IssuedAt: issued.UTC().Truncate(time.Millisecond), Conflicts: []string{}}
	apply, win, enacted := choose(in)
	if win == nil {
		d.Action, d.Reason = ActionNone, "no enabled node management policy applies to the node"
		d.DirectiveID = directiveID(d)
		return d
	}
	for _, p := range apply {
		if !conflicting(p, win) {
			continue
		}
		why := "newer"
		if enacted {
			why = "already enacted on the node"
		} else if p.Ev.LastUpdated.After(win.Ev.LastUpdated) {
			why = "preferred"
		}
		d.Conflicts = append(d.Conflicts, fmt.Sprintf("%s: ignored, its agentUpgradePolicy (%s) conflicts with %s (%s), %s", p.Key, p.intent(), win.Key, win.intent(), why))
	}
	sort.Strings(d.Conflicts)
	d.Policy = win.Key
	u := win.Ev.AgentUpgrade
	d.AllowDowngrade = u.AllowDowngrade
	d.FromVersions = u.FromVersions
	d.Manifest = u.Manifest
	d.StartAt = win.StartFor(n.Key)
	target := u.AtLeastVersion
	var pkg *events.AgentPackage
	if target == Current {
		pkg = in.Latest
		if pkg == nil {
			pkg = in.Packages.Latest()
		}
		if pkg != nil {
			target = pkg.Version
		}
	} else {
		pkg = in.Packages[target]
	}
	d.TargetVersion = target
	ro := in.Rollouts[win.Key]
	switch {
	case win.Ev.Rollback:
		st := in.Status
		if st != nil && st.Policy == win.Key && st.PreviousVersion != "" && upgraded(st.Status) {
			d.Action = ActionRollback
			d.TargetVersion = st.PreviousVersion
			d.Reason = "the policy orders a rollback of the nodes it upgraded"
			if p := in.Packages[st.PreviousVersion]; p != nil {
				d.PackageSHA256 = p.SHA256
			} else {
				d.Action, d.Reason = ActionWaiting, fmt.Sprintf("rollback to %s: the hub has no package of that version", st.PreviousVersion)
			}
		} else {
			d.Action, d.Reason = ActionPaused, "the policy orders a rollback; nodes it did not upgrade do not start"
		}
	case pkg == nil && target == Current:
		d.Action, d.Reason = ActionWaiting, "the hub has no agent package yet"
	case pkg == nil:
		d.Action, d.Reason = ActionWaiting, fmt.Sprintf("the hub has no agent package %s yet", target)
	case ro.Paused && !started(in.Status, win.Key):
		d.Action, d.Reason = ActionPaused, ro.Reason
		d.PackageSHA256 = pkg.SHA256
	default:
		d.Action = ActionUpgrade
		d.PackageSHA256 = pkg.SHA256
	}
	d.DirectiveID = directiveID(d)
	return d
}

// choose lists the NMPs that apply to the node, are enabled and carry an
// upgrade policy (newest first) and picks the one in force: the one
// enacted on the node (named by its last status, past waiting), else the
// newest. win is nil when none applies.
func choose(in Input) (apply []*Policy, win *Policy, enacted bool) {
	for _, p := range in.Policies {
		if p.Ev.Enabled && p.Ev.AgentUpgrade != nil && p.Applies(in.Node) {
			apply = append(apply, p)
		}
	}
	if len(apply) == 0 {
		return nil, nil, false
	}
	sort.Slice(apply, func(i, j int) bool { // newest first
		a, b := apply[i].Ev.LastUpdated, apply[j].Ev.LastUpdated
		if !a.Equal(b) {
			return a.After(b)
		}
		return apply[i].Key > apply[j].Key
	})
	win = apply[0]
	if st := in.Status; st != nil && st.Policy != "" {
		for _, p := range apply {
			if p.Key == st.Policy && st.Status != "" && st.Status != StateWaiting {
				win, enacted = p, true
			}
		}
	}
	return apply, win, enacted
}

// conflicting says whether p, applying to a node where win is in force,
// is ignored there for asking something else.
func conflicting(p, win *Policy) bool { return p != win && p.intent() != win.intent() }

// directiveID names what the agent is asked to do, so it changes exactly
// when that does (never with IssuedAt).
func directiveID(d *events.AgentDirective) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(d.StartAt.UnixMilli()))
	for _, s := range []string{d.Policy, d.Action, d.TargetVersion, d.PackageSHA256, fmt.Sprint(d.AllowDowngrade), string(b[:])} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if d.FromVersions != "" { // so directives without a guard keep their ids
		h.Write([]byte(d.FromVersions))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Same says whether two directives ask the same of the agent and report
// the same (everything but IssuedAt).
func Same(a, b *events.AgentDirective) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.DirectiveID == b.DirectiveID && a.Reason == b.Reason && strings.Join(a.Conflicts, "\n") == strings.Join(b.Conflicts, "\n") &&
		a.Manifest == b.Manifest && a.RollbackTo == b.RollbackTo
}
