package participant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/acm"
	"github.com/policyflow/policyflow/services/acm/address"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// commitEvery is how often finished operations' offsets are committed.
const commitEvery = 100 * time.Millisecond

// consume reads acm.participant in the participant's group until ctx ends.
func (p *Participant) consume(ctx context.Context, base []kgo.Opt) error {
	topic := p.cfg.Kafka.Topic(topology.ACMParticipant)
	opts := append(base,
		kgo.WithLogger(runtime.KgoLogger(p.log)),
		kgo.ConsumerGroup(p.cfg.Kafka.Prefix+acm.Group(p.cfg.ParticipantID)),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, part := range a[topic] {
				p.parts[part] = &partTrack{inflight: map[int64]int{}, next: -1, committed: -1}
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			p.commit(ctx, cl)
			p.drop(r[topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) { p.drop(l[topic]) }),
	)
	if p.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(p.cfg.SessionTimeout), kgo.HeartbeatInterval(p.cfg.SessionTimeout/5))
	}
	if p.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(p.cfg.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("participant %s: create the consumer of %s: %w", p.cfg.ParticipantID, topic, err)
	}
	commits := make(chan struct{})
	cctx, stopCommits := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(commits)
		t := time.NewTicker(commitEvery)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				p.commit(cctx, cl)
			}
		}
	}()
	defer func() {
		stopCommits()
		<-commits
		p.commit(context.WithoutCancel(ctx), cl)
		cl.Close() // leaves the group
	}()
	for {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		fetches.EachError(func(t string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn().Err(err).Str("topic", t).Int32("partition", part).Msg("fetch failed; retrying")
			}
		})
		fetches.EachRecord(func(rec *kgo.Record) { p.handle(ctx, rec) })
	}
}

// drop forgets partitions this replica no longer owns.
func (p *Participant) drop(parts []int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, part := range parts {
		delete(p.parts, part)
	}
}

// commit commits, per owned partition, the lowest offset whose operation
// is not finished (or the offset after the last record, when all are).
func (p *Participant) commit(ctx context.Context, cl *kgo.Client) {
	topic := p.cfg.Kafka.Topic(topology.ACMParticipant)
	p.mu.Lock()
	offs := map[int32]kgo.EpochOffset{}
	for part, tr := range p.parts {
		safe := tr.next
		for off := range tr.inflight {
			if off < safe {
				safe = off
			}
		}
		if safe > tr.committed {
			offs[part] = kgo.EpochOffset{Epoch: -1, Offset: safe}
		}
	}
	p.mu.Unlock()
	if len(offs) == 0 {
		return
	}
	cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: offs}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			p.log.Warn().Err(err).Msg("commit operation offsets")
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if perr := kerr.ErrorForCode(rp.ErrorCode); perr != nil {
					p.log.Warn().Err(perr).Int32("partition", rp.Partition).Msg("commit operation offset")
					continue
				}
				if tr, eo := p.parts[rp.Partition], offs[rp.Partition]; tr != nil && eo.Offset > tr.committed {
					tr.committed = eo.Offset
				}
			}
		}
	})
}

// begin records that the operation at rec has n element operations
// running.
func (p *Participant) begin(rec *kgo.Record, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.parts[rec.Partition]
	if tr == nil {
		return
	}
	if n > 0 {
		tr.inflight[rec.Offset] += n
	}
	if rec.Offset+1 > tr.next {
		tr.next = rec.Offset + 1
	}
}

// end records that one element operation of the operation at rec ended.
func (p *Participant) end(rec *kgo.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tr := p.parts[rec.Partition]
	if tr == nil {
		return
	}
	if tr.inflight[rec.Offset]--; tr.inflight[rec.Offset] <= 0 {
		delete(tr.inflight, rec.Offset)
	}
}

// task is one element (or one element definition) of an operation.
type task struct {
	key  string // acm.sync key of the element or composition
	el   events.OperationElement
	cb   Callbacks
	prev *events.ReplicaState // what the replicas hold of it
	// defs are the element definitions of a PRIME or DEPRIME.
	defs []events.OperationElement
}

// handle decides what to do with one operation and starts it.
func (p *Participant) handle(ctx context.Context, rec *kgo.Record) {
	op, tasks, err := p.plan(ctx, rec)
	if err != nil {
		p.deadLetter(ctx, rec, err)
		if op != nil {
			// Tell the runtime too, so the operation does not wait for
			// its timeout.
			for _, el := range op.Elements {
				p.report(ctx, op, &task{key: "", el: el}, acm.Failed, acm.Failure, "{}", err.Error(), 0)
			}
		}
		p.begin(rec, 0)
		return
	}
	if op == nil || len(tasks) == 0 {
		p.begin(rec, 0)
		return
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
		p.begin(rec, 0)
		return
	}
	p.begin(rec, len(tasks))
	for _, t := range tasks {
		p.start(ctx, rec, op, t)
	}
}

// plan decodes an operation, applies the addressing rule and checks it.
// It returns no operation for one not meant for this replica, and an
// error (the reason to dead-letter it) for one that cannot be run; op is
// then set when the operation decoded, so the runtime can be answered.
func (p *Participant) plan(ctx context.Context, rec *kgo.Record) (*events.ParticipantOperation, []*task, error) {
	where := fmt.Sprintf("participant %s replica %s: operation at %s[%d]@%d", p.cfg.ParticipantID, p.cfg.ReplicaID, rec.Topic, rec.Partition, rec.Offset)
	if rec.Value == nil {
		return nil, nil, fmt.Errorf("%s is a tombstone, which acm.participant never carries", where)
	}
	ev, err := p.cfg.Codec.Decode(ctx, rec.Value)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	op, ok := ev.(*events.ParticipantOperation)
	if !ok {
		return nil, nil, fmt.Errorf("%s is %s, want %s", where, ev.SchemaName(), events.SchemaParticipantOperation)
	}
	replica := ""
	if op.ReplicaID != nil {
		replica = *op.ReplicaID
	}
	applies, err := address.Applies(address.ClassParticipant,
		address.Message{ParticipantID: op.ParticipantID, ReplicaID: replica, ParticipantIDList: op.ParticipantIDList},
		address.Receiver{ParticipantID: p.cfg.ParticipantID, ReplicaID: p.cfg.ReplicaID})
	if err != nil || !applies {
		return nil, nil, err
	}
	if op.Kind == acm.OpStatus {
		p.answerStatus(ctx, op)
		return nil, nil, nil
	}
	where = fmt.Sprintf("%s (%s %s)", where, op.Kind, op.MessageID)
	if !acm.ValidObject(op.Properties) && op.Properties != "" {
		return op, nil, fmt.Errorf("%s: properties are not a JSON object", where)
	}
	comp, inst := deref(op.CompositionID), deref(op.InstanceID)
	instanceOp := false
	switch op.Kind {
	case acm.OpPrime, acm.OpDeprime:
		if err := acm.CheckID("composition_id", comp); err != nil {
			return op, nil, fmt.Errorf("%s: %w", where, err)
		}
	case acm.OpDeploy, acm.OpUpdate, acm.OpUndeploy, acm.OpDelete:
		if err := acm.CheckID("instance_id", inst); err != nil {
			return op, nil, fmt.Errorf("%s: %w", where, err)
		}
		instanceOp = true
	default:
		return op, nil, fmt.Errorf("%s: kind %q is not an operation a participant runs (PRIME, DEPRIME, DEPLOY, UPDATE, UNDEPLOY, DELETE)", where, op.Kind)
	}
	if len(op.Elements) == 0 {
		return op, nil, fmt.Errorf("%s: names no element", where)
	}
	tasks := make([]*task, 0, len(op.Elements))
	var errs []error
	for _, el := range op.Elements {
		cb, known := p.cfg.Types[el.ElementType]
		if err := acm.CheckID("element_id", el.ElementID); err != nil {
			errs = append(errs, err)
			continue
		}
		if !known {
			errs = append(errs, fmt.Errorf("element %s has type %q, which participant %s does not support (it supports %v)", el.ElementID, el.ElementType, p.cfg.ParticipantID, p.types()))
			continue
		}
		if el.Properties != "" && !acm.ValidObject(el.Properties) {
			errs = append(errs, fmt.Errorf("element %s: properties are not a JSON object", el.ElementID))
			continue
		}
		tasks = append(tasks, &task{key: acm.ElementKey(p.cfg.ParticipantID, inst, el.ElementID), el: el, cb: cb})
	}
	if err := errors.Join(errs...); err != nil {
		return op, nil, fmt.Errorf("%s: %w", where, err)
	}
	if !instanceOp {
		// A composition definition is one task: its element definitions
		// are primed one after the other, and replicated as one record.
		def, err := definition(op.Elements)
		if err != nil {
			return op, nil, fmt.Errorf("%s: %w", where, err)
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
	return op, run, nil
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
func (p *Participant) start(ctx context.Context, rec *kgo.Record, op *events.ParticipantOperation, t *task) {
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
			cancel(nil)
			p.end(rec)
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
