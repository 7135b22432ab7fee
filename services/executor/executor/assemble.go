package executor

import (
	"fmt"
	"sort"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/segmenter/segmenter"
)

// Update is one whole per-deployment update: every piece of an update_id
// put back together.
type Update = events.PolicyMatch

// Assembler collects the pieces i/n of each update_id and hands out the
// whole update once every piece is in. It tolerates a piece delivered
// again. It does no I/O and is not safe for concurrent use.
//
// A complete update stays in the assembler until Done is called for it, so
// that a caller that failed to apply it can add its last piece again and
// get the update again.
type Assembler struct {
	pending map[string]*partial
	// latest is, per partition and deployment, the update_id whose pieces
	// arrive now: pieces of one update are contiguous in a partition, so
	// an older incomplete update of the same deployment is abandoned.
	latest map[deploymentKey]string
}

type deploymentKey struct {
	partition  int32
	deployment string
}

type partial struct {
	partition  int32
	deployment string
	count      int32
	pieces     map[int32]*events.PolicySegment
}

// NewAssembler returns an empty assembler.
func NewAssembler() *Assembler {
	return &Assembler{pending: map[string]*partial{}, latest: map[deploymentKey]string{}}
}

// Add adds one piece read from a partition. It returns the whole update
// when the piece completes it (also when the piece is a repeat of a piece
// of an update complete but not yet Done), and nil while pieces are
// missing. abandoned lists the update_ids of the same deployment and
// partition that were still incomplete when this update began: their
// missing pieces can no longer come. A piece that contradicts itself or
// the earlier pieces of its update is an error.
func (a *Assembler) Add(partition int32, seg *events.PolicySegment) (upd *Update, abandoned []string, err error) {
	if seg == nil {
		return nil, nil, fmt.Errorf("assemble: nil policy segment")
	}
	if seg.UpdateID == "" {
		return nil, nil, fmt.Errorf("assemble: policy segment %d/%d of deployment %s has no update_id", seg.Index, seg.Count, seg.DeploymentID)
	}
	if seg.Count < 1 || seg.Index < 1 || seg.Index > seg.Count {
		return nil, nil, fmt.Errorf("assemble update %s of deployment %s: piece %d/%d is out of range", seg.UpdateID, seg.DeploymentID, seg.Index, seg.Count)
	}
	dk := deploymentKey{partition, seg.DeploymentID}
	if prev, ok := a.latest[dk]; ok && prev != seg.UpdateID {
		if p, ok := a.pending[prev]; ok && p.partition == partition {
			delete(a.pending, prev)
			abandoned = append(abandoned, prev)
		}
	}
	if seg.Count == 1 {
		delete(a.latest, dk)
		u, err := segmenter.Assemble([]events.PolicySegment{*seg})
		return u, abandoned, err
	}
	a.latest[dk] = seg.UpdateID
	p, ok := a.pending[seg.UpdateID]
	if !ok {
		p = &partial{partition: partition, deployment: seg.DeploymentID, count: seg.Count, pieces: map[int32]*events.PolicySegment{}}
		a.pending[seg.UpdateID] = p
	}
	switch {
	case p.count != seg.Count:
		return nil, abandoned, fmt.Errorf("assemble update %s of deployment %s: piece %d says %d pieces, earlier pieces said %d",
			seg.UpdateID, seg.DeploymentID, seg.Index, seg.Count, p.count)
	case p.deployment != seg.DeploymentID:
		return nil, abandoned, fmt.Errorf("assemble update %s: piece %d/%d is for deployment %s, earlier pieces for %s",
			seg.UpdateID, seg.Index, seg.Count, seg.DeploymentID, p.deployment)
	}
	if _, dup := p.pieces[seg.Index]; !dup {
		p.pieces[seg.Index] = seg
	}
	if int32(len(p.pieces)) < p.count {
		return nil, abandoned, nil
	}
	segs := make([]events.PolicySegment, 0, p.count)
	for i := int32(1); i <= p.count; i++ {
		segs = append(segs, *p.pieces[i])
	}
	// The segmenter's own inverse of Split puts the pieces together.
	u, err := segmenter.Assemble(segs)
	return u, abandoned, err
}

// Done forgets a complete update once it was applied.
func (a *Assembler) Done(updateID string) {
	if p, ok := a.pending[updateID]; ok {
		delete(a.pending, updateID)
		dk := deploymentKey{p.partition, p.deployment}
		if a.latest[dk] == updateID {
			delete(a.latest, dk)
		}
	}
}

// Drop forgets every piece read from a partition (it was revoked, or is
// about to be read again).
func (a *Assembler) Drop(partition int32) {
	for id, p := range a.pending {
		if p.partition == partition {
			delete(a.pending, id)
		}
	}
	for dk := range a.latest {
		if dk.partition == partition {
			delete(a.latest, dk)
		}
	}
}

// PendingInfo describes an update with pieces in the assembler.
type PendingInfo struct {
	UpdateID   string
	Partition  int32
	Deployment string
	Count      int32
	// Have lists the piece indexes present, ascending.
	Have []int32
}

// Complete reports whether every piece is present.
func (p PendingInfo) Complete() bool { return int32(len(p.Have)) == p.Count }

// Pending lists the updates with pieces in the assembler, by update_id.
func (a *Assembler) Pending() []PendingInfo {
	out := make([]PendingInfo, 0, len(a.pending))
	for id, p := range a.pending {
		info := PendingInfo{UpdateID: id, Partition: p.partition, Deployment: p.deployment, Count: p.count}
		for i := range p.pieces {
			info.Have = append(info.Have, i)
		}
		sort.Slice(info.Have, func(i, j int) bool { return info.Have[i] < info.Have[j] })
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UpdateID < out[j].UpdateID })
	return out
}
