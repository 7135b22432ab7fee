package executor

import (
	"fmt"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// Model is the executor's decision and the state it reads, without Kafka:
// every registration of deploy.components, kept as the stage keeps it
// (registered), and the committed collections of the components whose
// updates it makes, compacted as the stage compacts them (compact), in
// maps keyed by copies of the records' keys as the stage's are. Apply is
// the stage's Next over them. It is there to measure the executor at a
// size no test broker holds (tools/capsim, the capacity model in
// docs/capacity.md): the memory its state takes per component and the
// time its decisions take apart from Kafka. It leaves out what is in
// flight (the overlay of writes not yet read back, the assembler's
// pieces). Not safe for concurrent use.
type Model struct {
	regs      map[string]*registered
	committed map[string]*kept
}

// NewModel returns a model that knows no component.
func NewModel() *Model {
	return &Model{regs: map[string]*registered{}, committed: map[string]*kept{}}
}

// Register applies a record of deploy.components: c is component id's
// registration, nil its tombstone.
func (m *Model) Register(id string, c *events.Component) error {
	if c == nil {
		delete(m.regs, id)
		return nil
	}
	r, err := registration(runtime.Msg[*events.Component]{Input: runtime.Input{Key: []byte(id)}, Value: c}, nil, false)
	if err != nil {
		return err
	}
	m.regs[strings.Clone(id)] = r
	return nil
}

// Commit keeps a collection as the executor keeps one read from
// component.policies (its own write read back, or another member's).
func (m *Model) Commit(cp *events.ComponentPolicies) {
	m.committed[strings.Clone(cp.ComponentID)] = compact(cp.ComponentID, cp, m.regs[cp.ComponentID])
}

// Wrote keeps the collections one update produced as the executor keeps
// its own writes (store.wrote: those that hold the same policies as the
// one before share one look-up of their list), and as they stay once
// read back.
func (m *Model) Wrote(cps []*events.ComponentPolicies) {
	var last lastList
	for _, cp := range cps {
		m.committed[strings.Clone(cp.ComponentID)] = compactAfter(&last, cp.ComponentID, cp, m.regs[cp.ComponentID])
	}
}

// Apply is the executor's decision on one assembled update applied at
// at: the collection each of its components gets (Next, from the kept
// collection and registration), in the update's order, leaving out the
// components it changes nothing for. It keeps nothing: Wrote keeps what
// it produced, Commit what is read from others.
func (m *Model) Apply(upd *Update, at time.Time) ([]*events.ComponentPolicies, error) {
	out := make([]*events.ComponentPolicies, 0, len(upd.Components))
	for _, cd := range upd.Components {
		d := Delta{ComponentDelta: cd, UpdateID: upd.UpdateID, DeploymentID: upd.DeploymentID, CatchUp: upd.CatchUp, At: at}
		var comp *events.Component
		if !d.Uninstall {
			r := m.regs[d.ComponentID]
			if r == nil {
				return nil, fmt.Errorf("apply update %s to component %s: %w", upd.UpdateID, d.ComponentID, errUnknownComponent)
			}
			comp = r.component(d.ComponentID)
		}
		next, err := Next(m.committed[d.ComponentID].collection(d.ComponentID), comp, d)
		if err != nil {
			return nil, err
		}
		if next != nil {
			out = append(out, next)
		}
	}
	return out, nil
}

// Kept is component id's collection as kept (nil when none is): what
// Next reads of it; the update id and time of the update are not kept.
func (m *Model) Kept(id string) *events.ComponentPolicies { return m.committed[id].collection(id) }

// Registrations is the number of components registered.
func (m *Model) Registrations() int { return len(m.regs) }

// Collections is the number of collections kept.
func (m *Model) Collections() int { return len(m.committed) }
