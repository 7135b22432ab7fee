// Package consulwriter is the consul-writer stage: it writes each
// component's policy collection into the component's Consul KV folder with
// the fewest writes, in check-and-set transactions, and reports each write
// on component.applied.
package consulwriter

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/consulkv"
)

// ActionUninstalled is the ComponentApplied action of a deleted folder;
// no event key is left to hold it. The other actions are those of the
// event key (consulkv.ActionGathered, consulkv.ActionUpdated).
const ActionUninstalled = "uninstalled"

// Step is one write of a plan.
type Step struct {
	// Ops are item writes and deletes; the step is one transaction.
	Ops api.TxnOps
	// Guard makes the transaction first check that the event key still
	// has the ModifyIndex the writer saw last (check-index), so that two
	// writers never interleave.
	Guard bool
	// Event, when set, is written to the event key as the transaction's
	// last operation, check-and-set on the ModifyIndex seen last (0: the
	// key must not exist).
	Event *consulkv.Event
	// Put is one value too large for a transaction body; it is written
	// alone with check-and-set on its own ModifyIndex (0: new key).
	Put *api.KVPair
}

// WritePlan is what to write for one ComponentPolicies record.
type WritePlan struct {
	// Skip says Consul already holds this generation or a newer one.
	Skip bool
	// Replay says Consul holds exactly this update (a replayed record):
	// nothing is written, and component.applied is emitted again.
	Replay bool
	// Action is gathered, updated or uninstalled.
	Action string
	// Event is the final event written (for a replay: the one in Consul).
	Event consulkv.Event
	// EventIndex is the event key's ModifyIndex as read; 0 when absent.
	EventIndex uint64
	// Steps are the writes in order: one transaction when everything
	// fits; otherwise an "updating" marker, the items in chunks, and the
	// final event.
	Steps []Step
	// KeysChanged counts the item keys set or deleted (for an uninstall,
	// every key of the folder).
	KeysChanged int
	// InSync says a repair (PlanRepair) found the folder holding exactly
	// the record's collection: nothing to write. Skip is set too.
	InSync bool
	// Repaired says a repair found the folder at the record's generation
	// but with items that differ (edited or deleted by hand): the steps
	// rewrite only those.
	Repaired bool
	// HeldIndexes is the ModifyIndex, as read, of each item key that
	// already holds the collection's value: the keys the steps leave as
	// they are (for a replay, every item that agrees).
	HeldIndexes map[string]uint64
}

// Plan computes the writes that bring a component's folder (current: its
// pairs under consulkv.Folder(scn), as a recursive read returns them) to
// the record's collection: only item keys whose value differs are set, items
// no longer in the collection are deleted, and the event key is written
// last with check-and-set. Keys of the folder other than items and the
// event are left alone. A record that Consul already holds (or is older
// than what it holds) is skipped. An error means the record can never be
// written (no folder name, a body over 512 KiB, a body that is not a JSON
// object, a policy_id missing or repeated).
func Plan(current api.KVPairs, rec *events.ComponentPolicies, now time.Time) (WritePlan, error) {
	return planFor(current, rec, now, false)
}

// PlanRepair is Plan for a catch-up's drift repair: when the folder's
// event says it holds the record's generation, its items are compared
// with the record's collection anyway, and only the keys that differ
// (edited, deleted or added by hand) are written back, with the event
// (InSync when none differs). An older or newer folder is planned as Plan
// does.
func PlanRepair(current api.KVPairs, rec *events.ComponentPolicies, now time.Time) (WritePlan, error) {
	return planFor(current, rec, now, true)
}

func planFor(current api.KVPairs, rec *events.ComponentPolicies, now time.Time, repair bool) (WritePlan, error) {
	var plan WritePlan
	if rec == nil {
		return plan, errors.New("plan consul write: nil record")
	}
	scn := rec.ServiceComponentName
	if scn == "" {
		return plan, fmt.Errorf("plan consul write for component %s: no service_component_name, so no Consul folder", rec.ComponentID)
	}
	eventKey := consulkv.EventKey(scn)
	eventPair, prior := findEvent(current, eventKey)
	if eventPair != nil {
		plan.EventIndex = eventPair.ModifyIndex
	}

	if prior != nil && prior.Generation > rec.Generation {
		plan.Skip = true // a newer collection is there, or being written
		return plan, nil
	}
	// A complete write of this generation is there: a replay, or (for a
	// repair) a folder whose items are compared below.
	written := prior != nil && prior.Action != consulkv.ActionUpdating && prior.Generation == rec.Generation
	repairing := written && repair && !rec.Uninstalled
	if written && !repairing {
		plan.Skip = true
		plan.Replay = prior.UpdateID == rec.UpdateID
		plan.Action = prior.Action
		plan.Event = *prior
		if want, err := items(rec); plan.Replay && err == nil {
			have, _, _ := diffItems(current, consulkv.ItemsPrefix(scn), want)
			plan.HeldIndexes = heldIndexes(have, want)
		}
		return plan, nil
	}

	if rec.Uninstalled {
		return planUninstall(plan, current, scn)
	}

	want, err := items(rec)
	if err != nil {
		return plan, err
	}
	have, sets, deletes := diffItems(current, consulkv.ItemsPrefix(scn), want)
	plan.KeysChanged = len(sets) + len(deletes)
	plan.HeldIndexes = heldIndexes(have, want)
	if repairing && plan.KeysChanged == 0 {
		plan.Skip, plan.InSync, plan.Action, plan.Event = true, true, prior.Action, *prior
		return plan, nil
	}

	plan.Action, plan.Repaired = actionFor(rec, eventPair, prior, repairing), repairing
	ts := now.UTC().Format(consulkv.TimestampFormat)
	plan.Event = consulkv.Event{Action: plan.Action, Timestamp: ts, UpdateID: rec.UpdateID, PoliciesCount: len(rec.Policies), Generation: rec.Generation}

	var ops api.TxnOps
	for _, k := range deletes {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k}})
	}
	for _, k := range sets {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k, Value: want[k]}})
	}
	// An update cut short after its marker goes on where it stopped.
	resuming := prior != nil && prior.Action == consulkv.ActionUpdating && prior.UpdateID == rec.UpdateID && prior.Generation == rec.Generation
	plan.Steps = writeSteps(ops, have, eventKey, &plan.Event, resuming)
	return plan, nil
}

// findEvent returns the folder's event pair among current (nil when
// absent) and the event it holds (nil when absent or of unknown form).
func findEvent(current api.KVPairs, eventKey string) (pair *api.KVPair, event *consulkv.Event) {
	for _, p := range current {
		if p != nil && p.Key == eventKey {
			pair = p
			if e, err := consulkv.ParseEvent(p.Value); err == nil {
				event = &e
			}
		}
	}
	return pair, event
}

// diffItems compares the item keys of current (those under prefix) with
// want: have holds the current item pairs by key, sets the keys whose
// value is missing or differs, deletes the keys no longer wanted, both
// sorted.
func diffItems(current api.KVPairs, prefix string, want map[string][]byte) (have map[string]*api.KVPair, sets, deletes []string) {
	have = map[string]*api.KVPair{}
	for _, p := range current {
		if p != nil && strings.HasPrefix(p.Key, prefix) {
			have[p.Key] = p
		}
	}
	for k, v := range want {
		if h, ok := have[k]; !ok || !bytes.Equal(h.Value, v) {
			sets = append(sets, k)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			deletes = append(deletes, k)
		}
	}
	sort.Strings(sets)
	sort.Strings(deletes)
	return have, sets, deletes
}

// heldIndexes is the ModifyIndex of each key of want whose current pair
// (have) holds want's value.
func heldIndexes(have map[string]*api.KVPair, want map[string][]byte) map[string]uint64 {
	out := make(map[string]uint64, len(want))
	for k, v := range want {
		if h, ok := have[k]; ok && bytes.Equal(h.Value, v) {
			out[k] = h.ModifyIndex
		}
	}
	return out
}

// actionFor is the action of the event a write ends with: a repair keeps
// the folder's; a catch-up or a first complete collection is gathered;
// anything else updated.
func actionFor(rec *events.ComponentPolicies, eventPair *api.KVPair, prior *consulkv.Event, repairing bool) string {
	switch {
	case repairing:
		return prior.Action
	case rec.CatchUp || prior == nil && eventPair == nil:
		return consulkv.ActionGathered
	case prior == nil:
		return consulkv.ActionUpdated // an event of unknown form was there
	case prior.Action == consulkv.ActionUpdating && eventPair.CreateIndex == eventPair.ModifyIndex:
		// The marker created the key: no collection was complete before.
		return consulkv.ActionGathered
	default:
		return consulkv.ActionUpdated
	}
}

// writeSteps orders the item operations and the final event into steps:
// one transaction when everything fits; otherwise an "updating" marker
// (unless resuming: this update's marker is there already), the items in
// guarded chunks (a value too large for any transaction alone, as a
// check-and-set put), and the event, joining the last chunk when it fits.
func writeSteps(ops api.TxnOps, have map[string]*api.KVPair, eventKey string, event *consulkv.Event, resuming bool) []Step {
	eventSize := opSize(eventOp(eventKey, *event))
	sizes := make([]int, len(ops))
	total := txnBase + eventSize
	for i, op := range ops {
		sizes[i] = opSize(op)
		total += sizes[i] + 1
	}
	if len(ops)+1 <= consulkv.MaxTxnOps && total <= consulkv.MaxTxnBytes {
		return []Step{{Ops: ops, Event: event}}
	}

	var steps []Step
	if !resuming {
		marker := *event
		marker.Action = consulkv.ActionUpdating
		steps = append(steps, Step{Event: &marker})
	}
	guardSize := opSize(&api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: eventKey, Index: math.MaxUint64}})
	var chunk api.TxnOps
	chunkBytes := txnBase + guardSize
	flush := func() {
		if len(chunk) > 0 {
			steps = append(steps, Step{Ops: chunk, Guard: true})
			chunk, chunkBytes = nil, txnBase+guardSize
		}
	}
	for i, op := range ops {
		if txnBase+guardSize+1+sizes[i] > consulkv.MaxTxnBytes {
			// Too large for any transaction body: a value over
			// about 384 KiB grows past 512 KiB in base64.
			steps = append(steps, Step{Put: &api.KVPair{Key: op.KV.Key, Value: op.KV.Value, ModifyIndex: modifyIndex(have[op.KV.Key])}})
			continue
		}
		if len(chunk)+2 > consulkv.MaxTxnOps || chunkBytes+1+sizes[i] > consulkv.MaxTxnBytes {
			flush()
		}
		chunk = append(chunk, op)
		chunkBytes += 1 + sizes[i]
	}
	// The final event joins the last chunk when it fits; its
	// check-and-set guards that transaction.
	if len(chunk) > 0 && len(chunk)+1 <= consulkv.MaxTxnOps && chunkBytes-guardSize+1+eventSize <= consulkv.MaxTxnBytes {
		return append(steps, Step{Ops: chunk, Event: event})
	}
	flush()
	return append(steps, Step{Event: event})
}

func planUninstall(plan WritePlan, current api.KVPairs, scn string) (WritePlan, error) {
	plan.Action = ActionUninstalled
	n := 0
	for _, p := range current {
		if p != nil {
			n++
		}
	}
	if n == 0 {
		plan.Skip, plan.Replay = true, true // already gone
		return plan, nil
	}
	plan.KeysChanged = n
	step := Step{Ops: api.TxnOps{{KV: &api.KVTxnOp{Verb: api.KVDeleteTree, Key: consulkv.Folder(scn)}}}, Guard: plan.EventIndex > 0}
	plan.Steps = []Step{step}
	return plan, nil
}

// items returns the value of every item key of the record's collection.
func items(rec *events.ComponentPolicies) (map[string][]byte, error) {
	out := make(map[string][]byte, len(rec.Policies))
	for _, p := range rec.Policies {
		if p.PolicyID == "" {
			return nil, fmt.Errorf("plan consul write for component %s: policy %q has no policy_id", rec.ComponentID, p.PolicyName)
		}
		k := consulkv.ItemKey(rec.ServiceComponentName, p.PolicyID)
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("plan consul write for component %s: policy_id %s appears twice in the collection", rec.ComponentID, p.PolicyID)
		}
		v := []byte(p.Body)
		if len(v) > consulkv.MaxValueBytes {
			return nil, fmt.Errorf("plan consul write for component %s: policy %s body is %d bytes, over Consul's limit of %d bytes (512 KiB) for one value",
				rec.ComponentID, p.PolicyID, len(v), consulkv.MaxValueBytes)
		}
		if !objects.valid(p.Body, v) {
			return nil, fmt.Errorf("plan consul write for component %s: policy %s body is not a JSON object: %q",
				rec.ComponentID, p.PolicyID, truncate(v, 100))
		}
		out[k] = v
	}
	return out, nil
}

// objects are the bodies already found to be JSON objects: a body is
// checked once however many components hold it (at 100,000 components
// sharing a few thousand policies, checking every copy was an eighth of
// the stage's CPU). A body that is not an object is never remembered, so
// every record that brings one is refused.
var objects = objectMemo{limit: 32 << 20}

// objectMemo is a set of bodies known to be JSON objects, up to limit
// bytes of them; it starts over when full. Safe for concurrent use.
type objectMemo struct {
	mu    sync.Mutex
	seen  map[string]struct{}
	bytes int
	limit int
}

// valid says whether body (v holds the same bytes) is a JSON object.
func (m *objectMemo) valid(body string, v []byte) bool {
	m.mu.Lock()
	_, ok := m.seen[body]
	m.mu.Unlock()
	if ok {
		return true
	}
	if !check.Object(v) {
		return false
	}
	if len(body) > m.limit {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil || m.bytes+len(body) > m.limit {
		m.seen, m.bytes = map[string]struct{}{}, 0
	}
	// A copy of its own: body may share memory with the decoded record.
	m.seen[strings.Clone(body)] = struct{}{}
	m.bytes += len(body)
	return true
}

// txnBase is the size of an empty transaction body: "[]" and the newline
// the client's JSON encoder ends it with.
const txnBase = 3

// opSize is the size of one operation in a transaction body as the Consul
// client encodes it, counted rather than encoded (encoding each value once
// more only to size it costs about as much as sending it): the fields add
// their lengths to those of an empty operation.
func opSize(op *api.TxnOp) int {
	kv := op.KV
	if kv == nil || op.Node != nil || op.Service != nil || op.Check != nil || kv.Namespace != "" || kv.Partition != "" {
		b, _ := json.Marshal(op)
		return len(b)
	}
	n := emptyOpSize - 3*len(`""`) - len("null") - 2*len("0")
	n += jsonStringLen(string(kv.Verb)) + jsonStringLen(kv.Key) + jsonStringLen(kv.Session)
	if kv.Value == nil {
		n += len("null")
	} else {
		n += len(`""`) + base64.StdEncoding.EncodedLen(len(kv.Value))
	}
	return n + digits(kv.Flags) + digits(kv.Index)
}

// emptyOpSize is the size of a KV operation with every field empty.
var emptyOpSize = func() int {
	b, _ := json.Marshal(&api.TxnOp{KV: &api.KVTxnOp{}})
	return len(b)
}()

// jsonStringLen is the length of s as encoding/json writes it, quotes
// included: <, > and & escaped, invalid UTF-8 replaced.
func jsonStringLen(s string) int {
	n := len(`""`)
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&':
				n++
			case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			default:
				n += len(`\u0000`)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			n += len(`\ufffd`)
		} else {
			n += size
		}
		i += size
	}
	return n
}

// digits is the length of v in decimal.
func digits(v uint64) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

// eventOp is the check-and-set of the event key, sized for the largest
// index.
func eventOp(key string, e consulkv.Event) *api.TxnOp {
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: key, Value: e.JSON(), Index: math.MaxUint64}}
}

func modifyIndex(p *api.KVPair) uint64 {
	if p == nil {
		return 0
	}
	return p.ModifyIndex
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
