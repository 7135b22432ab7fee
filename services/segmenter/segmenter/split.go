// Package segmenter is the segmenter: it builds and cuts what the executor
// applies. The matcher names the policies of a deployment's delta
// (PolicyMatch) by reference; Fill puts their bodies in place from
// policy.catalog, Split cuts the delta into ordered PolicySegment pieces
// that share its update_id, each encoding to at most the limit (by
// default the one record limit, topology.MaxRecordBytes, less room for the
// record's framing), and Assemble puts pieces back together. The stage
// built on them follows policy.catalog as a runtime table.
package segmenter

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/topology"
)

// RecordOverhead is the room a piece leaves under the record limit for
// what a record adds to its value: batch and record framing, the key (the
// deployment_id) and headers.
const RecordOverhead = 64 << 10

// DefaultMaxBytes is the default limit of one encoded PolicySegment: the
// one record limit, topology.MaxRecordBytes, less RecordOverhead.
const DefaultMaxBytes = topology.MaxRecordBytes - RecordOverhead

// MinMaxBytes is the smallest limit Split accepts: a piece must at least
// hold its own envelope and one removal.
const MinMaxBytes = 1024

// ErrTooLarge is wrapped by Split errors for a delta that cannot be cut
// under the limit: one policy is bigger than a whole segment may be.
var ErrTooLarge = errors.New("does not fit one segment")

// Split returns match as one PolicySegment (index 1, count 1) when that
// segment encodes to at most maxBytes; otherwise it cuts the delta into
// ordered pieces, each encoding to at most maxBytes: every removal first
// (and components whose delta carries no policy, such as an uninstall),
// then updated policies, then policies added by filters, each in the
// match's component order. Pieces share update_id, deployment_id,
// catch_up and created_at; Assemble puts them back together. A single
// policy is never cut: one that cannot fit a segment is an error wrapping
// ErrTooLarge.
func Split(match *events.PolicyMatch, maxBytes int) ([]events.PolicySegment, error) {
	segs, _, err := split(events.Default(), match, maxBytes)
	return segs, err
}

// split is Split that also returns each piece encoded with codec, so the
// stage does not encode the pieces a second time.
func split(codec *events.Codec, match *events.PolicyMatch, maxBytes int) ([]events.PolicySegment, [][]byte, error) {
	if match == nil {
		return nil, nil, errors.New("split policy match: match is nil")
	}
	if maxBytes < MinMaxBytes {
		return nil, nil, fmt.Errorf("split policy match %s: limit of %d bytes is below the minimum of %d", match.UpdateID, maxBytes, MinMaxBytes)
	}
	whole := envelope(match, 1, 1)
	whole.Components = match.Components
	b, err := codec.Encode(&whole)
	if err != nil {
		return nil, nil, fmt.Errorf("split policy match %s of deployment %s: encode: %w", match.UpdateID, match.DeploymentID, err)
	}
	if len(b) <= maxBytes {
		return []events.PolicySegment{whole}, [][]byte{b}, nil
	}

	sz, err := newSizer(codec, match)
	if err != nil {
		return nil, nil, err
	}
	pieces, err := pack(match, sz, maxBytes)
	if err != nil {
		return nil, nil, err
	}
	segs := make([]events.PolicySegment, len(pieces))
	encoded := make([][]byte, len(pieces))
	for i, comps := range pieces {
		segs[i] = envelope(match, int32(i+1), int32(len(pieces)))
		segs[i].Components = comps
		b, err := codec.Encode(&segs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("split policy match %s of deployment %s: encode piece %d/%d: %w",
				match.UpdateID, match.DeploymentID, i+1, len(pieces), err)
		}
		if len(b) > maxBytes {
			// The size estimate is an upper bound for the schema it was
			// written for; a schema that grew without it lands here.
			return nil, nil, fmt.Errorf("split policy match %s of deployment %s: piece %d/%d encodes to %d bytes, over the limit of %d: the segment size estimate does not cover the current schema",
				match.UpdateID, match.DeploymentID, i+1, len(pieces), len(b), maxBytes)
		}
		encoded[i] = b
	}
	return segs, encoded, nil
}

// envelope is a segment of match with no component yet.
func envelope(m *events.PolicyMatch, index, count int32) events.PolicySegment {
	return events.PolicySegment{
		UpdateID:     m.UpdateID,
		DeploymentID: m.DeploymentID,
		Index:        index,
		Count:        count,
		CatchUp:      m.CatchUp,
		CreatedAt:    m.CreatedAt,
	}
}

// bare is a component's delta without any policy: its id and whatever
// other fields the delta carries.
func bare(d events.ComponentDelta) events.ComponentDelta {
	d.UpdatedPolicies, d.AddedPolicies, d.RemovedPolicies = nil, nil, nil
	return d
}

// Kinds of unit, in the order pieces carry them.
const (
	kindBare    = iota // a component delta with no policy at all
	kindRemoved        // one removed policy
	kindUpdated        // one updated policy
	kindAdded          // one policy added by a filter
	kindFilter         // a filter match with no policy
)

// unit is the smallest part of a delta a piece carries: one policy, one
// removal, or a component (or filter match) that has nothing else.
type unit struct {
	kind   int
	comp   int // index in match.Components
	filter int // index in AddedPolicies (kindAdded, kindFilter)
	item   int // index in the list the kind names
}

// units lists match's units in piece order: removals (and bare
// components) first, then updated, then added policies.
func units(m *events.PolicyMatch) []unit {
	var out []unit
	for c, d := range m.Components {
		if len(d.RemovedPolicies) == 0 && len(d.UpdatedPolicies) == 0 && len(d.AddedPolicies) == 0 {
			out = append(out, unit{kind: kindBare, comp: c})
		}
		for i := range d.RemovedPolicies {
			out = append(out, unit{kind: kindRemoved, comp: c, item: i})
		}
	}
	for c, d := range m.Components {
		for i := range d.UpdatedPolicies {
			out = append(out, unit{kind: kindUpdated, comp: c, item: i})
		}
	}
	for c, d := range m.Components {
		for f, fm := range d.AddedPolicies {
			if len(fm.Policies) == 0 {
				out = append(out, unit{kind: kindFilter, comp: c, filter: f})
			}
			for i := range fm.Policies {
				out = append(out, unit{kind: kindAdded, comp: c, filter: f, item: i})
			}
		}
	}
	return out
}

// blockHeader bounds the header of one Avro array block: the item count
// and the block's byte size, each a varint of at most 10 bytes. The
// encoder starts a block every blockItems items.
const (
	blockHeader = 20
	blockItems  = 100
)

// sizer gives upper bounds of the encoded size of a piece's parts, in
// Avro binary encoding.
type sizer struct {
	envelope int   // a segment with no component, largest index/count
	comp     []int // per component: its bare delta in the components array
}

func newSizer(codec *events.Codec, m *events.PolicyMatch) (*sizer, error) {
	env := envelope(m, math.MaxInt32, math.MaxInt32)
	b, err := codec.Encode(&env)
	if err != nil {
		return nil, fmt.Errorf("split policy match %s: encode envelope: %w", m.UpdateID, err)
	}
	s := &sizer{envelope: len(b), comp: make([]int, len(m.Components))}
	for i, d := range m.Components {
		one := env
		one.Components = []events.ComponentDelta{bare(d)}
		b, err := codec.Encode(&one)
		if err != nil {
			return nil, fmt.Errorf("split policy match %s: encode delta of component %s: %w", m.UpdateID, d.ComponentID, err)
		}
		// The difference holds the delta and one block header of the
		// components array; charge a whole header so any block split is
		// covered.
		s.comp[i] = len(b) - s.envelope + blockHeader
	}
	return s, nil
}

// varintLen is the size of n as an Avro long (zig-zag varint).
func varintLen(n int64) int {
	u := uint64((n << 1) ^ (n >> 63))
	l := 1
	for u >= 0x80 {
		u >>= 7
		l++
	}
	return l
}

func stringSize(s string) int { return varintLen(int64(len(s))) + len(s) }

// policySize is the encoded size of a Policy record.
func policySize(p events.Policy) int {
	return stringSize(p.PolicyID) + stringSize(p.PolicyName) + stringSize(p.PolicyVersion) + stringSize(p.Body) + stringSize(p.BodyHash) + varintLen(p.Revision)
}

// removedSize is the encoded size of a RemovedPolicy record.
func removedSize(r events.RemovedPolicy) int {
	n := stringSize(r.PolicyID) + 1 + varintLen(r.Revision) // union branch index, revision
	if r.PolicyVersion != nil {
		n += stringSize(*r.PolicyVersion)
	}
	return n
}

// filterSize is the encoded size of a FilterMatch with no policy.
func filterSize(fm events.FilterMatch) int { return stringSize(fm.FilterID) + 1 }

// blockCost is what appending one item to an array already holding n
// items adds for block framing.
func blockCost(n int) int {
	if n%blockItems == 0 {
		return blockHeader
	}
	return 0
}

// piece is a segment under construction.
type piece struct {
	size    int
	comps   []events.ComponentDelta
	pos     map[int]int    // component index -> position in comps
	filters map[[2]int]int // (component, filter) index -> position in AddedPolicies
}

func newPiece(sz *sizer) *piece {
	return &piece{size: sz.envelope, pos: map[int]int{}, filters: map[[2]int]int{}}
}

// cost is what adding u to the piece would add to its encoded size.
func (p *piece) cost(m *events.PolicyMatch, sz *sizer, u unit) int {
	n := 0
	at, present := p.pos[u.comp]
	var d *events.ComponentDelta
	if present {
		d = &p.comps[at]
	} else {
		n += sz.comp[u.comp]
	}
	src := m.Components[u.comp]
	length := func(f func(*events.ComponentDelta) int) int {
		if d == nil {
			return 0
		}
		return f(d)
	}
	switch u.kind {
	case kindRemoved:
		n += removedSize(src.RemovedPolicies[u.item]) + blockCost(length(func(d *events.ComponentDelta) int { return len(d.RemovedPolicies) }))
	case kindUpdated:
		n += policySize(src.UpdatedPolicies[u.item]) + blockCost(length(func(d *events.ComponentDelta) int { return len(d.UpdatedPolicies) }))
	case kindAdded, kindFilter:
		fm := src.AddedPolicies[u.filter]
		fat, fpresent := p.filters[[2]int{u.comp, u.filter}]
		held := 0
		if fpresent {
			held = len(d.AddedPolicies[fat].Policies)
		} else {
			n += filterSize(fm) + blockCost(length(func(d *events.ComponentDelta) int { return len(d.AddedPolicies) }))
		}
		if u.kind == kindAdded {
			n += policySize(fm.Policies[u.item]) + blockCost(held)
		}
	}
	return n
}

// add puts u in the piece; n is its cost.
func (p *piece) add(m *events.PolicyMatch, u unit, n int) {
	p.size += n
	at, present := p.pos[u.comp]
	if !present {
		at = len(p.comps)
		p.pos[u.comp] = at
		p.comps = append(p.comps, bare(m.Components[u.comp]))
	}
	d := &p.comps[at]
	src := m.Components[u.comp]
	switch u.kind {
	case kindRemoved:
		d.RemovedPolicies = append(d.RemovedPolicies, src.RemovedPolicies[u.item])
	case kindUpdated:
		d.UpdatedPolicies = append(d.UpdatedPolicies, src.UpdatedPolicies[u.item])
	case kindAdded, kindFilter:
		key := [2]int{u.comp, u.filter}
		fat, ok := p.filters[key]
		if !ok {
			fat = len(d.AddedPolicies)
			p.filters[key] = fat
			d.AddedPolicies = append(d.AddedPolicies, events.FilterMatch{FilterID: src.AddedPolicies[u.filter].FilterID})
		}
		if u.kind == kindAdded {
			fm := &d.AddedPolicies[fat]
			fm.Policies = append(fm.Policies, src.AddedPolicies[u.filter].Policies[u.item])
		}
	}
}

// pack fills pieces greedily, in unit order.
func pack(m *events.PolicyMatch, sz *sizer, maxBytes int) ([][]events.ComponentDelta, error) {
	var out [][]events.ComponentDelta
	cur := newPiece(sz)
	for _, u := range units(m) {
		n := cur.cost(m, sz, u)
		if cur.size+n > maxBytes && len(cur.comps) > 0 {
			out = append(out, cur.comps)
			cur = newPiece(sz)
			n = cur.cost(m, sz, u)
		}
		if cur.size+n > maxBytes {
			return nil, fmt.Errorf("split policy match %s of deployment %s: %s of component %s needs about %d bytes, more than a segment of at most %d bytes holds: %w",
				m.UpdateID, m.DeploymentID, describe(m, u), m.Components[u.comp].ComponentID, cur.size+n, maxBytes, ErrTooLarge)
		}
		cur.add(m, u, n)
	}
	if len(cur.comps) > 0 {
		out = append(out, cur.comps)
	}
	return out, nil
}

// describe names a unit for error messages.
func describe(m *events.PolicyMatch, u unit) string {
	d := m.Components[u.comp]
	switch u.kind {
	case kindRemoved:
		return fmt.Sprintf("removed policy %s", d.RemovedPolicies[u.item].PolicyID)
	case kindUpdated:
		p := d.UpdatedPolicies[u.item]
		return fmt.Sprintf("updated policy %s version %s", p.PolicyID, p.PolicyVersion)
	case kindAdded:
		p := d.AddedPolicies[u.filter].Policies[u.item]
		return fmt.Sprintf("policy %s version %s added by filter %s", p.PolicyID, p.PolicyVersion, d.AddedPolicies[u.filter].FilterID)
	case kindFilter:
		return fmt.Sprintf("filter match %s", d.AddedPolicies[u.filter].FilterID)
	}
	return "the delta"
}

// Assemble puts the pieces of one update back into the PolicyMatch they
// were cut from: pieces may come in any order but must all be there and
// agree on update_id, deployment_id and count. Each component's removed,
// updated and added policies come back in their original order (the added
// policies of one filter id are merged into one filter match); components
// come in the order they first appear in the pieces.
func Assemble(segs []events.PolicySegment) (*events.PolicyMatch, error) {
	if len(segs) == 0 {
		return nil, errors.New("assemble policy segments: no segment")
	}
	sorted := append([]events.PolicySegment(nil), segs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	first := sorted[0]
	for i, s := range sorted {
		if s.UpdateID != first.UpdateID || s.DeploymentID != first.DeploymentID {
			return nil, fmt.Errorf("assemble policy segments of update %s: segment %d/%d belongs to update %s of deployment %s, not deployment %s",
				first.UpdateID, s.Index, s.Count, s.UpdateID, s.DeploymentID, first.DeploymentID)
		}
		if int(s.Count) != len(sorted) || int(s.Index) != i+1 {
			return nil, fmt.Errorf("assemble policy segments of update %s: got segment %d/%d at position %d of %d segments",
				first.UpdateID, s.Index, s.Count, i+1, len(sorted))
		}
	}
	m := &events.PolicyMatch{
		UpdateID:     first.UpdateID,
		DeploymentID: first.DeploymentID,
		CatchUp:      first.CatchUp,
		CreatedAt:    first.CreatedAt,
	}
	pos := map[string]int{}
	for _, s := range sorted {
		for _, d := range s.Components {
			at, ok := pos[d.ComponentID]
			if !ok {
				at = len(m.Components)
				pos[d.ComponentID] = at
				m.Components = append(m.Components, bare(d))
			}
			out := &m.Components[at]
			out.RemovedPolicies = append(out.RemovedPolicies, d.RemovedPolicies...)
			out.UpdatedPolicies = append(out.UpdatedPolicies, d.UpdatedPolicies...)
			for _, fm := range d.AddedPolicies {
				merged := false
				for i := range out.AddedPolicies {
					if out.AddedPolicies[i].FilterID == fm.FilterID {
						out.AddedPolicies[i].Policies = append(out.AddedPolicies[i].Policies, fm.Policies...)
						merged = true
						break
					}
				}
				if !merged {
					out.AddedPolicies = append(out.AddedPolicies, events.FilterMatch{
						FilterID: fm.FilterID,
						Policies: append([]events.Policy(nil), fm.Policies...),
					})
				}
			}
		}
	}
	return m, nil
}
