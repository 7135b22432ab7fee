package nmp

import (
	"encoding/base64"
	"errors"
	"sort"

	"github.com/policyflow/policyflow/events"
)

// NodeFilter selects an org's nodes; an empty field selects every node.
type NodeFilter struct {
	// SoftwareVersion is the agent version the node registered.
	SoftwareVersion string
	// Status is the state of the node's last report (StateWaiting for a
	// node that reported none).
	Status string
	// Pattern is org/name (see Qualify).
	Pattern string
	// Properties are name and value pairs the node's properties must all
	// hold (name == value, as a constraint compares).
	Properties [][2]string
}

// Qualify writes the filter's pattern as nodes keep theirs: org/name, a
// bare name being org's.
func (f *NodeFilter) Qualify(org string) error {
	if f.Pattern == "" {
		return nil
	}
	q, err := qualifyPattern(org, f.Pattern)
	if err != nil {
		return err
	}
	f.Pattern = q
	return nil
}

// Matches says whether node n, whose last report is st (nil for none),
// is selected.
func (f NodeFilter) Matches(n *Node, st *events.AgentStatus) bool {
	if f.SoftwareVersion != "" && n.Ev.SoftwareVersion != f.SoftwareVersion {
		return false
	}
	if f.Status != "" && ReportedState(st) != f.Status {
		return false
	}
	if f.Pattern != "" && n.Ev.Pattern != f.Pattern {
		return false
	}
	for _, p := range f.Properties {
		if !n.HasProperty(p[0], p[1]) {
			return false
		}
	}
	return true
}

// ReportedState is the state of a node's last report: waiting when it
// reported none.
func ReportedState(st *events.AgentStatus) string {
	if st == nil || st.Status == "" {
		return StateWaiting
	}
	return st.Status
}

// ListedNode is a node of NodePage with its last report (nil for none).
type ListedNode struct {
	Node   *Node
	Status *events.AgentStatus
}

// ErrPageToken is a page token that is not one NodePage answered.
var ErrPageToken = errors.New("the page token is not one this list answered (pass the nextPageToken of the previous page)")

// PageToken is the token of the page after node id last.
func PageToken(last string) string { return base64.RawURLEncoding.EncodeToString([]byte(last)) }

// NodePage lists, ordered by node id, up to limit of org's nodes that f
// selects after the page token's node (from the first with ""), and the
// token of the next page ("" when this one is the last). The order is
// stable: nodes registered or removed between pages move no other node
// to another page.
func (w *World) NodePage(org string, f NodeFilter, token string, limit int) ([]ListedNode, string, error) {
	after := ""
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil || len(b) == 0 {
			return nil, "", ErrPageToken
		}
		after = string(b)
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	nodes := w.orgNodes[org]
	ids := make([]string, 0, len(nodes))
	byID := make(map[string]string, len(nodes)) // node id -> key
	for k, n := range nodes {
		if n.Ev.Node > after {
			ids = append(ids, n.Ev.Node)
			byID[n.Ev.Node] = k
		}
	}
	sort.Strings(ids)
	out := []ListedNode{}
	for _, id := range ids {
		k := byID[id]
		n, st := nodes[k], w.status[k]
		if !f.Matches(n, st) {
			continue
		}
		if len(out) == limit {
			return out, PageToken(out[len(out)-1].Node.Ev.Node), nil
		}
		out = append(out, ListedNode{Node: n, Status: st})
	}
	return out, "", nil
}
