package participant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/address"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/runtime"
)

// task is one element (or one element definition) of an operation.
type task struct {
	key  string // acm.sync key of the element or composition
	el   events.OperationElement
	cb   Callbacks
	prev *events.ReplicaState // what the replicas hold of it
	// defs are the element definitions of a PRIME or DEPRIME.
	defs []events.OperationElement
}

// handle decides what to do with one operation and starts it. An
// operation that cannot be run fails permanently (the runtime
// dead-letters it), after the runtime is told that its elements failed,
// so that it does not wait for the operation's timeout.
func (p *Participant) handle(ctx context.Context, m runtime.Msg[*events.ParticipantOperation]) ([]runtime.Output, error) {
	op := m.Value
	where := fmt.Sprintf("participant %s replica %s: operation at %s[%d]@%d", p.cfg.ParticipantID, p.cfg.ReplicaID, p.cfg.Kafka.Topic(m.Topic), m.Partition, m.Offset)
	tasks, answer, err := p.plan(ctx, op, where)
	if err != nil {
		if answer {
			for _, el := range op.Elements {
				p.report(ctx, op, &task{key: "", el: el}, acm.Failed, acm.Failure, "{}", err.Error(), 0)
			}
		}
		return nil, runtime.Permanent(err)
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	// Stale: a replica whose state is newer answers and applies nothing
	// of the operation.
	var newest *events.ReplicaState
	for _, t := range tasks {
		if t.prev != nil && op.Revision < t.prev.Revision && (newest == nil || t.prev.Revision > newest.Revision) {
			newest = t.prev
		}
	}
	if newest != nil {
		detail := fmt.Sprintf("operation %s has revision %d, older than the state's %d (operation %s); nothing of it was applied", op.MessageID, op.Revision, newest.Revision, newest.OperationID)
		for _, t := range tasks {
			state, props := "", "{}"
			if t.prev != nil {
				state, props = t.prev.State, t.prev.Properties
			}
			p.report(ctx, op, t, state, acm.Stale, props, detail, 0)
		}
		return nil, nil
	}
	for _, t := range tasks {
		p.start(ctx, m.Hold(), op, t)
	}
	return nil, nil
}

// plan applies the addressing rule to an operation and checks it. It
// returns no task for an operation not meant for this replica (or one
// already ended), and an error (the reason to dead-letter it) for one
// that cannot be run; answer then says whether the runtime is to be told
// (the operation is for this replica).
func (p *Participant) plan(ctx context.Context, op *events.ParticipantOperation, where string) (_ []*task, answer bool, _ error) {
	replica := ""
	if op.ReplicaID != nil {
		replica = *op.ReplicaID
	}
	applies, err := address.Applies(address.ClassParticipant,
		address.Message{ParticipantID: op.ParticipantID, ReplicaID: replica, ParticipantIDList: op.ParticipantIDList},
		address.Receiver{ParticipantID: p.cfg.ParticipantID, ReplicaID: p.cfg.ReplicaID})
	if err != nil || !applies {
		return nil, false, err
	}
	if op.Kind == acm.OpStatus {
		p.answerStatus(ctx, op)
		return nil, false, nil
	}
	where = fmt.Sprintf("%s (%s %s)", where, op.Kind, op.MessageID)
	if !check.Object([]byte(op.Properties)) && op.Properties != "" {
		return nil, true, fmt.Errorf("%s: properties are not a JSON object", where)
	}
	comp, inst := deref(op.CompositionID), deref(op.InstanceID)
	instanceOp := false
	switch op.Kind {
	case acm.OpPrime, acm.OpDeprime:
		if err := check.ID("composition_id", comp); err != nil {
			return nil, true, fmt.Errorf("%s: %w", where, err)
		}
	case acm.OpDeploy, acm.OpUpdate, acm.OpUndeploy, acm.OpDelete:
		if err := check.ID("instance_id", inst); err != nil {
			return nil, true, fmt.Errorf("%s: %w", where, err)
		}
		instanceOp = true
	default:
		return nil, true, fmt.Errorf("%s: kind %q is not an operation a participant runs (PRIME, DEPRIME, DEPLOY, UPDATE, UNDEPLOY, DELETE)", where, op.Kind)
	}
	if len(op.Elements) == 0 {
		return nil, true, fmt.Errorf("%s: names no element", where)
	}
	tasks := make([]*task, 0, len(op.Elements))
	var errs []error
	for _, el := range op.Elements {
		cb, known := p.cfg.Types[el.ElementType]
		if err := check.ID("element_id", el.ElementID); err != nil {
			errs = append(errs, err)
			continue
		}
		if !known {
			errs = append(errs, fmt.Errorf("element %s has type %q, which participant %s does not support (it supports %v)", el.ElementID, el.ElementType, p.cfg.ParticipantID, p.types()))
			continue
		}
		if el.Properties != "" && !check.Object([]byte(el.Properties)) {
			errs = append(errs, fmt.Errorf("element %s: properties are not a JSON object", el.ElementID))
			continue
		}
		tasks = append(tasks, &task{key: acm.ElementKey(p.cfg.ParticipantID, inst, el.ElementID), el: el, cb: cb})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, true, fmt.Errorf("%s: %w", where, err)
	}
	if !instanceOp {
		// A composition definition is one task: its element definitions
		// are primed one after the other, and replicated as one record.
		def, err := definition(op.Elements)
		if err != nil {
			return nil, true, fmt.Errorf("%s: %w", where, err)
		}
		tasks = []*task{{key: acm.CompositionKey(p.cfg.ParticipantID, comp), el: events.OperationElement{ElementID: comp, Properties: def}, defs: op.Elements}}
	}
	run := tasks[:0]
	for _, t := range tasks {
		p.mu.Lock()
		if st, ok := p.state[t.key]; ok {
			t.prev = &st
		}
		p.mu.Unlock()
		if ended(t.prev, op.MessageID) {
			p.log.Info().Str("operation", op.MessageID).Str("key", t.key).Str("state", t.prev.State).
				Msg("operation already ended for this element (a replica that died ran it, or replica-sync timed it out); not run again")
			continue
		}
		run = append(run, t)
	}
	return run, true, nil
}

// statusMemory is how many status requests a replica remembers having
// answered.
const statusMemory = 64

// answerStatus answers a status request with a HEARTBEAT naming it, once:
// the request is written to every partition of acm.participant, so a
// replica owning several of them is handed it several times. A request
// older than the heartbeat interval is not answered: a heartbeat since
// has told what it asked (a new participant's group reads
// acm.participant from its start, old requests included).
func (p *Participant) answerStatus(ctx context.Context, op *events.ParticipantOperation) {
	if time.Since(op.SentAt) > p.cfg.Heartbeat {
		return
	}
	p.mu.Lock()
	seen := slices.Contains(p.statusAnswered, op.MessageID)
	if !seen {
		p.statusAnswered = append(p.statusAnswered, op.MessageID)
		if len(p.statusAnswered) > statusMemory {
			p.statusAnswered = p.statusAnswered[1:]
		}
	}
	p.mu.Unlock()
	if seen {
		return
	}
	m := p.message(acm.MsgHeartbeat)
	id := op.MessageID
	m.ResponseTo, m.Detail = &id, "status report"
	if err := p.send(context.WithoutCancel(ctx), m); err != nil {
		p.log.Warn().Err(err).Str("request", op.MessageID).Msg("status report not sent")
	}
}

// ended reports whether the replicas' state of an element says operation
// opID already ended there: a replica ran it to a result, or replica-sync
// marked it TIMEOUT (its replica died). A replica that takes the
// operation's partition over from a dead one (its offset not yet
// committed) then leaves it: a TIMEOUT is final until an operator or the
// runtime asks again, with a new operation. An operation still in a
// transitional state is run again (its replica died mid-way).
func ended(prev *events.ReplicaState, opID string) bool {
	return prev != nil && opID != "" && prev.OperationID == opID && !acm.InTransition(prev.State)
}

// definition is the properties of a primed composition: its element
// definitions by id, each with its type and properties.
func definition(els []events.OperationElement) (string, error) {
	type def struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
	}
	m := map[string]def{}
	for _, el := range els {
		props := el.Properties
		if props == "" {
			props = "{}"
		}
		m[el.ElementID] = def{Type: el.ElementType, Properties: json.RawMessage(props)}
	}
	b, err := json.Marshal(map[string]any{"elements": m})
	return string(b), err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// start runs one element operation, first cancelling and waiting for the
// one still running for the same element.
// release ends the hold of the operation's offset once it is answered;
// it is not called for an operation the replica's stop cancelled, so the
// next owner of its partition runs it again.
func (p *Participant) start(ctx context.Context, release func(), op *events.ParticipantOperation, t *task) {
	p.mu.Lock()
	prev := p.running[t.key]
	p.mu.Unlock()
	if prev != nil {
		prev.cancel(errSuperseded)
		<-prev.done
	}
	timeout := p.cfg.OperationTimeout
	if op.TimeoutMs > 0 {
		timeout = time.Duration(op.TimeoutMs) * time.Millisecond
	}
	// Only the next operation or the replica's shutdown cancels it, each
	// with its cause.
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r := &run{cancel: cancel, done: make(chan struct{})}
	p.mu.Lock()
	p.running[t.key] = r
	p.mu.Unlock()
	during, _, _ := acm.Transition(op.Kind)
	deadline := time.Now().Add(timeout)
	p.report(ctx, op, t, during, "", p.inProps(op, t), "", deadline.UnixMilli())
	go func() {
		defer func() {
			p.mu.Lock()
			if p.running[t.key] == r {
				delete(p.running, t.key)
			}
			p.mu.Unlock()
			stopped := context.Cause(rctx) == errStopping
			cancel(nil)
			if !stopped {
				release()
			}
			close(r.done)
		}()
		p.execute(rctx, op, t, timeout)
	}()
}

// inProps is the element's properties as the operation starts.
func (p *Participant) inProps(op *events.ParticipantOperation, t *task) string {
	switch op.Kind {
	case acm.OpDeploy, acm.OpUpdate, acm.OpPrime:
		if t.el.Properties == "" {
			return "{}"
		}
		return t.el.Properties
	}
	if t.prev != nil {
		return t.prev.Properties
	}
	return "{}"
}

// execute runs the callback with the operation's timeout and reports how
// it ended.
func (p *Participant) execute(ctx context.Context, op *events.ParticipantOperation, t *task, timeout time.Duration) {
	in := p.inProps(op, t)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		out json.RawMessage
		err error
	}
	ans := make(chan answer, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				ans <- answer{err: fmt.Errorf("the %s callback panicked: %v", op.Kind, v)}
			}
		}()
		out, err := p.call(tctx, op, t, json.RawMessage(in))
		ans <- answer{out, err}
	}()
	_, after, _ := acm.Transition(op.Kind)
	var a answer
	select {
	case a = <-ans:
	case <-tctx.Done():
	}
	switch {
	case a.err == nil && tctx.Err() == nil:
		props, err := merge(json.RawMessage(in), a.out)
		if err != nil {
			p.report(ctx, op, t, acm.Failed, acm.Failure, in, err.Error(), 0)
			return
		}
		state := after
		if op.Kind == acm.OpDelete {
			state = acm.Deleted
		}
		p.report(ctx, op, t, state, acm.Success, string(props), "", 0)
	case context.Cause(ctx) == errStopping:
		// Not answered: the offset is not committed, so another replica
		// runs the operation again.
	case context.Cause(ctx) == errSuperseded:
		p.report(ctx, op, t, "", acm.Cancelled, in, fmt.Sprintf("%s of %s cancelled: %v", op.Kind, t.el.ElementID, errSuperseded), 0)
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		p.report(ctx, op, t, acm.Timeout, acm.TimedOut, in, fmt.Sprintf("%s of %s did not end within %s", op.Kind, t.el.ElementID, timeout), 0)
	default:
		err := a.err
		if err == nil {
			err = tctx.Err()
		}
		p.report(ctx, op, t, acm.Failed, acm.Failure, in, err.Error(), 0)
	}
}

// call runs the element type's callback for the operation.
func (p *Participant) call(ctx context.Context, op *events.ParticipantOperation, t *task, in json.RawMessage) (json.RawMessage, error) {
	comp, inst := deref(op.CompositionID), deref(op.InstanceID)
	e := Element{ParticipantID: p.cfg.ParticipantID, CompositionID: comp, InstanceID: inst, ElementID: t.el.ElementID,
		ElementType: t.el.ElementType, Properties: in, Revision: op.Revision, OperationID: op.MessageID}
	c := Composition{ParticipantID: p.cfg.ParticipantID, CompositionID: comp, ElementID: t.el.ElementID,
		ElementType: t.el.ElementType, Properties: in, Revision: op.Revision, OperationID: op.MessageID}
	noOut := func(err error) (json.RawMessage, error) { return nil, err }
	switch op.Kind {
	case acm.OpPrime, acm.OpDeprime:
		for _, d := range t.defs {
			cb := p.cfg.Types[d.ElementType]
			c.ElementID, c.ElementType, c.Properties = d.ElementID, d.ElementType, json.RawMessage(orEmpty(d.Properties))
			f := cb.Prime
			if op.Kind == acm.OpDeprime {
				f = cb.Deprime
			}
			if f == nil {
				continue
			}
			if err := f(ctx, c); err != nil {
				return nil, fmt.Errorf("%s of element definition %s: %w", op.Kind, d.ElementID, err)
			}
		}
	case acm.OpDeploy:
		if t.cb.Deploy != nil {
			return t.cb.Deploy(ctx, e)
		}
	case acm.OpUpdate:
		if t.cb.Update != nil {
			return t.cb.Update(ctx, e)
		}
	case acm.OpUndeploy:
		if t.cb.Undeploy != nil {
			return noOut(t.cb.Undeploy(ctx, e))
		}
	case acm.OpDelete:
		if t.cb.Delete != nil {
			return noOut(t.cb.Delete(ctx, e))
		}
	}
	return nil, nil
}

func orEmpty(s string) string {
	if s == "" {
		return "{}"
	}
	return s
}

// report sends a STATE (outcome empty) or RESULT for one element of op.
func (p *Participant) report(ctx context.Context, op *events.ParticipantOperation, t *task, state, outcome, props, detail string, deadlineMs int64) {
	kind := acm.MsgResult
	if outcome == "" {
		kind = acm.MsgState
	}
	m := p.message(kind)
	opID, comp := op.MessageID, deref(op.CompositionID)
	m.ResponseTo, m.CompositionID = &opID, &comp
	if inst := deref(op.InstanceID); inst != "" {
		el := t.el.ElementID
		m.InstanceID, m.ElementID = &inst, &el
	}
	if state != "" {
		m.State = &state
	}
	m.ElementType, m.Revision, m.Outcome, m.Detail, m.DeadlineMs = t.el.ElementType, op.Revision, outcome, detail, deadlineMs
	if props != "" {
		m.Properties = props
	}
	if err := p.send(context.WithoutCancel(ctx), m); err != nil {
		p.log.Error().Err(err).Str("operation", op.MessageID).Str("element", t.el.ElementID).Msg("result not sent")
	}
}

// Partitions returns the partitions of acm.participant this replica
// takes operations from now.
func (p *Participant) Partitions() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int32, 0, len(p.parts))
	for part := range p.parts {
		out = append(out, part)
	}
	slices.Sort(out)
	return out
}
