package executor

import (
	"encoding/binary"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"unique"
	"unsafe"
	"weak"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
)

// kept is what the executor keeps of a component's committed collection:
// what Next reads of it (its deployment, service_component_name, notify
// target, generation, policies and whether it is uninstalled). The
// updated and removed policies, which only the consul-writer and the
// notifier read, and the update id, catch-up mark and time of the
// update, which Next does not read, are left out; the component id is
// the store's key. At 100,000 components this is 80 bytes where the
// events.ComponentPolicies of copies was 240 and its strings.
type kept struct {
	deploymentID string
	// scn is the service_component_name; "" when it is the component
	// id (scnIsID).
	scn string
	// policies are shared with the other components that hold the same
	// (see compactPolicies); read only.
	policies []events.Policy
	// notify is the registration's when it is the same (see
	// registered), else a copy of its own; read only.
	notify      *events.NotifyTarget
	generation  int64
	uninstalled bool
	scnIsID     bool
}

// compact is what the executor keeps of component id's committed
// collection cp (see kept), given its registration, if any (reg; nil
// when none is known). Every string of the policies and of the
// collection is canonicalised with package unique, or shared with the
// registration, so the components that hold the same version of a policy
// share one copy of its body: at 100,000 components that hold the same
// few policies the executor keeps each body once instead of 100,000
// times. A body no collection holds any more is freed by the garbage
// collector.
func compact(id string, cp *events.ComponentPolicies, reg *registered) *kept {
	if cp == nil {
		return nil
	}
	k := &kept{
		deploymentID: intern(cp.DeploymentID),
		policies:     compactPolicies(cp.Policies),
		generation:   cp.Generation,
		uninstalled:  cp.Uninstalled,
	}
	switch scn := cp.ServiceComponentName; {
	case scn != "" && scn == id:
		k.scnIsID = true
	case reg != nil && !reg.scnIsID && reg.scn == scn:
		k.scn = reg.scn
	default:
		k.scn = strings.Clone(scn)
	}
	if reg != nil && reg.notify == cp.Notify {
		k.notify = &reg.notify
	} else {
		k.notify = &events.NotifyTarget{Kind: intern(cp.Notify.Kind), ScriptPath: intern(cp.Notify.ScriptPath),
			WebhookURL: strings.Clone(cp.Notify.WebhookURL), TimeoutMs: cp.Notify.TimeoutMs}
	}
	return k
}

// collection is the kept collection of component id as Next reads it;
// nil when k is. The caller must not change its policies.
func (k *kept) collection(id string) *events.ComponentPolicies {
	if k == nil {
		return nil
	}
	scn := k.scn
	if k.scnIsID {
		scn = id
	}
	return &events.ComponentPolicies{ComponentID: id, DeploymentID: k.deploymentID, ServiceComponentName: scn,
		Generation: k.generation, Policies: k.policies, Notify: *k.notify, Uninstalled: k.uninstalled}
}

// policySets are the policy lists of compacted collections, keyed by
// their contents and each held weakly by its first element: the
// components that hold the same policies (a deployment's, those of one
// blueprint) share one list while any of them holds it. At 100,000
// components of five policies, a list each was 45 MiB of the executor's
// heap. Lists are read only: Next builds a new one for every change.
var policySets = struct {
	sync.Mutex
	m map[string]weak.Pointer[events.Policy]
}{m: map[string]weak.Pointer[events.Policy]{}}

// compactPolicies is the shared list of ps's policies with every string
// interned: the one in policySets when another collection holds the same,
// else a new one, entered there.
func compactPolicies(ps []events.Policy) []events.Policy {
	if len(ps) == 0 {
		return []events.Policy{}
	}
	// Interned into a list on the stack and named by a key on the stack
	// for the look-up: a collection whose list is shared allocates
	// nothing more.
	var small [8]events.Policy
	var keyBuf [8 * policyKeyBytes]byte
	in := small[:0]
	if len(ps) > len(small) {
		in = make([]events.Policy, 0, len(ps))
	}
	for _, p := range ps {
		in = append(in, events.Policy{PolicyID: intern(p.PolicyID), PolicyName: intern(p.PolicyName),
			PolicyVersion: intern(p.PolicyVersion), Body: intern(p.Body), BodyHash: intern(p.BodyHash), Revision: p.Revision})
	}
	key := appendPolicySetKey(keyBuf[:0], in)
	policySets.Lock()
	defer policySets.Unlock()
	if first := policySets.m[string(key)].Value(); first != nil {
		// The list was made with exactly len(ps) elements (the key
		// holds the length).
		return unsafe.Slice(first, len(ps))
	}
	out := slices.Clone(in)
	k := string(key)
	policySets.m[k] = weak.Make(&out[0])
	goruntime.AddCleanup(&out[0], func(key string) {
		policySets.Lock()
		defer policySets.Unlock()
		if wp, ok := policySets.m[key]; ok && wp.Value() == nil {
			delete(policySets.m, key)
		}
	}, k)
	return out
}

// policyKeyBytes is the size of one policy's part of a policy set's key.
const policyKeyBytes = 5*16 + 8

// appendPolicySetKey appends the name of a list of policies whose
// strings are interned: the address and length of every string, and every
// revision. Two lists have the same key only when their strings are the
// same canonical copies, so the bodies too are the same (not merely their
// hashes); and a shared list keeps its strings, so their addresses are not
// reused while the key is in use.
func appendPolicySetKey(b []byte, ps []events.Policy) []byte {
	str := func(s string) {
		b = binary.LittleEndian.AppendUint64(b, uint64(uintptr(unsafe.Pointer(unsafe.StringData(s)))))
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	}
	for _, p := range ps {
		str(p.PolicyID)
		str(p.PolicyName)
		str(p.PolicyVersion)
		str(p.Body)
		str(p.BodyHash)
		b = binary.LittleEndian.AppendUint64(b, uint64(p.Revision))
	}
	return b
}

// registered is what the executor keeps of a component's record of
// deploy.components: the fields Next and the collection store read (its
// deployment, service_component_name and notify target), copied out of
// the decoded record. Keeping the decoded record itself would keep its
// filters, policy ids and config, and the decoder's shared string slabs
// with them: about 3 KiB per component, 300 MiB of the executor's heap at
// 100,000 components; keeping an events.Component of the copies, 224
// bytes where this is 96, was 13 MiB more at 100,000. The component id
// is the table's key, not kept again.
type registered struct {
	deploymentID string
	// scn is the service_component_name; "" when it is the component
	// id (scnIsID), as it often is, so that it is not kept twice.
	scn     string
	notify  events.NotifyTarget
	scnIsID bool
}

// registration is the Build of the executor's view of deploy.components.
func registration(m runtime.Msg[*events.Component], _ *registered, _ bool) (*registered, error) {
	c := m.Value
	r := &registered{
		deploymentID: intern(c.DeploymentID),
		notify: events.NotifyTarget{Kind: intern(c.Notify.Kind), ScriptPath: intern(c.Notify.ScriptPath),
			WebhookURL: strings.Clone(c.Notify.WebhookURL), TimeoutMs: c.Notify.TimeoutMs},
	}
	if c.ServiceComponentName == string(m.Key) && c.ServiceComponentName != "" {
		r.scnIsID = true
	} else {
		r.scn = strings.Clone(c.ServiceComponentName)
	}
	return r, nil
}

// component is the registration as Next reads it: the component id's
// record with what the executor keeps of it (see registered).
func (r *registered) component(id string) *events.Component {
	scn := r.scn
	if r.scnIsID {
		scn = id
	}
	return &events.Component{ComponentID: id, DeploymentID: r.deploymentID, ServiceComponentName: scn, Notify: r.notify}
}

// intern is s's canonical copy.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}
