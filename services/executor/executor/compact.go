package executor

import (
	"encoding/binary"
	"hash/maphash"
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
// when none is known). Its policies are the shared copies of each version
// (see compactPolicies), so the components that hold the same version of
// a policy share one copy of its body: at 100,000 components that hold
// the same few policies the executor keeps each body once instead of
// 100,000 times. Its deployment, service_component_name and notify
// target are the registration's when they are the same, as they are for
// every collection the executor writes; others are copies (its
// deployment and notify kind and script interned, as the registration's
// are). A body no collection holds any more is freed by the garbage
// collector.
func compact(id string, cp *events.ComponentPolicies, reg *registered) *kept {
	return compactAfter(nil, id, cp, reg)
}

// lastList is the policy list compacted last in a run of collections
// (the writes of one update), and the policies it was compacted from.
type lastList struct{ from, list []events.Policy }

// compactAfter is compact of a collection of a run: one that holds the
// same policies as the collection compacted before it (last, unless nil)
// takes its list without looking each policy up again, as the components
// of a deployment mostly do. last holds the policies it was given: it
// must not outlive them.
func compactAfter(last *lastList, id string, cp *events.ComponentPolicies, reg *registered) *kept {
	if cp == nil {
		return nil
	}
	k := &kept{
		generation:  cp.Generation,
		uninstalled: cp.Uninstalled,
	}
	if last != nil && last.list != nil && slices.Equal(cp.Policies, last.from) {
		k.policies = last.list
	} else {
		k.policies = compactPolicies(cp.Policies)
		if last != nil {
			last.from, last.list = cp.Policies, k.policies
		}
	}
	if reg != nil && reg.deploymentID == cp.DeploymentID {
		k.deploymentID = reg.deploymentID
	} else {
		k.deploymentID = intern(cp.DeploymentID)
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

// shared holds the copies of policies and policy lists that compacted
// collections share, each held weakly: a copy goes once no collection
// holds it.
//
// A version of a policy is named by all but its body, for which its
// body_hash stands (Apply compares bodies by it too): looking a policy up
// hashes its ids and hash, not its body. The body found is compared with
// the policy's before it is shared: one whose body is not the one its
// body_hash names here is named by a hash of its body too, so it is never
// given another body. Canonicalising every string of every policy of
// every collection written instead (package unique) cost more of the
// executor's CPU than its Avro: it hashes every body, and since the
// collections held the strings but not unique's handles, its copies were
// dropped at every garbage collection and made again.
//
// A list is named by the addresses of its policies' shared strings: the
// components that hold the same policies (a deployment's, those of one
// blueprint) share one list while any of them holds it. At 100,000
// components of five policies, a list each was 45 MiB of the executor's
// heap. Lists are read only: Next builds a new one for every change.
var shared = struct {
	sync.Mutex
	policies map[policyKey]policyEntry
	// lists are held by their first element.
	lists map[string]weak.Pointer[events.Policy]
}{policies: map[policyKey]policyEntry{}, lists: map[string]weak.Pointer[events.Policy]{}}

// policyKey names a version of a policy in shared.policies.
type policyKey struct {
	id, name, version, hash string // hash is the body_hash
	revision                int64
	// byBody names the body by a hash of it too (sum): for a policy
	// without a body_hash (a collection written before body hashes), or
	// whose body is not the one its body_hash names in shared.
	byBody bool
	sum    uint64
}

// policyEntry is the shared copy of a version of a policy: its strings,
// and its body held weakly (the lists that hold the policy keep it).
type policyEntry struct {
	id, name, version, hash string
	body                    weak.Pointer[byte]
	size                    int
}

// bodySeed seeds the hashes that name bodies (policyKey.sum).
var bodySeed = maphash.MakeSeed()

// compactPolicies is the shared list of ps's policies, each the shared
// copy of its version (see shared): the list in shared.lists when another
// collection holds the same, else a new one, entered there.
func compactPolicies(ps []events.Policy) []events.Policy {
	if len(ps) == 0 {
		return []events.Policy{}
	}
	// Put together in a list on the stack and named by a key on the stack
	// for the look-up: a collection whose list is shared allocates
	// nothing more.
	var small [8]events.Policy
	var keyBuf [8 * policyKeyBytes]byte
	in := small[:0]
	if len(ps) > len(small) {
		in = make([]events.Policy, 0, len(ps))
	}
	shared.Lock()
	defer shared.Unlock()
	for _, p := range ps {
		in = append(in, sharedPolicy(p))
	}
	key := appendPolicySetKey(keyBuf[:0], in)
	if first := shared.lists[string(key)].Value(); first != nil {
		// The list was made with exactly len(ps) elements (the key
		// holds the length).
		return unsafe.Slice(first, len(ps))
	}
	out := slices.Clone(in)
	k := string(key)
	shared.lists[k] = weak.Make(&out[0])
	goruntime.AddCleanup(&out[0], func(key string) {
		shared.Lock()
		defer shared.Unlock()
		if wp, ok := shared.lists[key]; ok && wp.Value() == nil {
			delete(shared.lists, key)
		}
	}, k)
	return out
}

// sharedPolicy is the shared copy of p's version: the one in
// shared.policies when a collection holds it, else a copy of p, entered
// there. Callers hold shared's lock.
func sharedPolicy(p events.Policy) events.Policy {
	if p.Body == "" {
		// No body to hold an entry by: such a policy (none comes from
		// a delta, whose policies have bodies) is interned.
		return events.Policy{PolicyID: intern(p.PolicyID), PolicyName: intern(p.PolicyName),
			PolicyVersion: intern(p.PolicyVersion), BodyHash: intern(p.BodyHash), Revision: p.Revision}
	}
	key := policyKey{id: p.PolicyID, name: p.PolicyName, version: p.PolicyVersion, hash: p.BodyHash, revision: p.Revision}
	if key.hash == "" {
		key.byBody, key.sum = true, maphash.String(bodySeed, p.Body)
	}
	for {
		e, found := shared.policies[key]
		if !found {
			return enterPolicy(key, policyEntry{id: strings.Clone(p.PolicyID), name: strings.Clone(p.PolicyName),
				version: strings.Clone(p.PolicyVersion), hash: strings.Clone(p.BodyHash)}, p.Body)
		}
		ptr := e.body.Value()
		switch {
		case ptr == nil:
			// Its body is gone, and the entry with it once its cleanup
			// runs: p's body takes its place.
			return enterPolicy(key, e, p.Body)
		case unsafe.String(ptr, e.size) == p.Body:
			return e.policy(unsafe.String(ptr, e.size), key)
		case !key.byBody:
			// Its body_hash names another body here: named by its
			// body too.
			key.byBody, key.sum = true, maphash.String(bodySeed, p.Body)
		default:
			// Another body of the same hash: p keeps one of its own.
			return e.policy(strings.Clone(p.Body), key)
		}
	}
}

// enterPolicy enters e, with a copy of body, as the shared copy of the
// version key names, and returns its policy. Callers hold shared's lock.
func enterPolicy(key policyKey, e policyEntry, body string) events.Policy {
	// The map keeps the key it is given: the shared strings, not the
	// decoded record's.
	key.id, key.name, key.version, key.hash = e.id, e.name, e.version, e.hash
	body = strings.Clone(body)
	ptr := unsafe.StringData(body)
	e.body, e.size = weak.Make(ptr), len(body)
	shared.policies[key] = e
	goruntime.AddCleanup(ptr, func(key policyKey) {
		shared.Lock()
		defer shared.Unlock()
		if e, ok := shared.policies[key]; ok && e.body.Value() == nil {
			delete(shared.policies, key)
		}
	}, key)
	return e.policy(body, key)
}

// policy is the policy of the shared copy e, named key, with body.
func (e policyEntry) policy(body string, key policyKey) events.Policy {
	return events.Policy{PolicyID: e.id, PolicyName: e.name, PolicyVersion: e.version, Body: body, BodyHash: e.hash, Revision: key.revision}
}

// policyKeyBytes is the size of one policy's part of a policy list's key.
const policyKeyBytes = 5*16 + 8

// appendPolicySetKey appends the name of a list of shared policies: the
// address and length of every string, and every revision. Two lists have
// the same key only when their strings are the same shared copies, so the
// bodies too are the same (not merely their hashes); and a shared list
// keeps its strings, so their addresses are not reused while the key is
// in use.
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
