package agentnotifier

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
)

// ReconfigureType is the first argument of the script: the notification
// carries the whole collection of policies.
const ReconfigureType = "policies"

// ShouldNotify decides whether a component.applied record is notified: not
// when the component was uninstalled or has no notify target, and not
// when the claim shows this generation (or a newer one) was already
// claimed (ClaimAction says when a claimed one runs again), so a replay
// notifies nobody. reason says why not.
func ShouldNotify(claim *consulkv.Claim, a *events.ComponentApplied) (ok bool, reason string) {
	switch {
	case a.Uninstalled:
		return false, "the component is uninstalled"
	case a.Notify.Kind == events.NotifyNone || a.Notify.Kind == "":
		return false, "the component has no notify target"
	case claim != nil && claim.Generation >= a.Generation:
		return false, fmt.Sprintf("generation %d (update %s) was already claimed", claim.Generation, claim.UpdateID)
	}
	return true, ""
}

// Action is what to do with a component.applied record, its claim read.
type Action int

const (
	// Skip: nothing to do (see the reason).
	Skip Action = iota
	// Notify: claim it and notify the component.
	Notify
	// Wait: another notifier holds an unfinished claim of this update;
	// the record is tried again later.
	Wait
)

// Again says why a notification that finished may be run again.
type Again int

const (
	// AgainNever: a finished notification is not run again (unless the
	// consul-writer repaired the folder since: the record says catch_up,
	// at a greater consul_index than the claim's).
	AgainNever Again = iota
	// AgainFailed: a catch-up runs a notification that failed again.
	AgainFailed
	// AgainAlways: an operator asked (a catch-up request naming the
	// component): run again once per request, however it ended.
	AgainAlways
)

// Seen is what the notifier knows, beside the claim, when it decides.
type Seen struct {
	// Self is this notifier's owner name, "<instance>/<run>".
	Self string
	Now  time.Time
	// OwnerGone says the notifier process named in the claim is seen
	// to be gone (it ran on this machine), and nothing it left runs.
	OwnerGone bool
	// Instance is this notifier's instance id (--instance-id), empty
	// when it has none.
	Instance string
	// Again, and the catch-up request that asks (AgainAlways).
	Again   Again
	Request string
}

// ClaimAction decides, from the component's claim, what to do with a
// component.applied record, so that every update is notified at least
// once, two runs for a component never overlap (of one generation or of
// two) and, once a run of it finished, it is not run again unless asked:
//   - ShouldNotify's rules first (uninstalled, no target, an update already
//     claimed with a greater generation: skipped);
//   - no claim, or a finished claim of an older generation: notify;
//   - a claim of the same generation that is finished (ok, or failed after
//     its attempts): skipped, unless the record is the consul-writer's
//     repair of the folder after the notification (catch_up, a greater
//     consul_index), a catch-up asks again for a failed one, or an
//     operator asked for this component (once per request);
//   - an unfinished claim, of this generation or an older one: notify when
//     it is this run's own (its outcome was not recorded), when its
//     notifier is seen to be gone (the caller stopped what it left
//     running), when it names this notifier's instance id (this is that
//     notifier restarted: static membership lets one live member hold an
//     id, and its previous run's scripts died with it), or once its lease
//     expired; otherwise wait for its owner.
//     A newer generation never starts while another notifier may still
//     run an older one: the component would be told the newer and then,
//     by the run still under way, the older.
func ClaimAction(claim *consulkv.Claim, a *events.ComponentApplied, s Seen) (Action, string) {
	if ok, why := ShouldNotify(nil, a); !ok {
		return Skip, why
	}
	switch {
	case claim == nil:
		return Notify, ""
	case claim.Generation > a.Generation:
		return Skip, fmt.Sprintf("generation %d (update %s) was already claimed", claim.Generation, claim.UpdateID)
	}
	done, ok := claim.Finished()
	switch {
	case done && claim.Generation < a.Generation:
		return Notify, ""
	case done:
		switch {
		case s.Again == AgainAlways && claim.Renotify != s.Request:
			return Notify, fmt.Sprintf("catch-up request %s asks for the component to be notified again", s.Request)
		case s.Again == AgainFailed && !ok:
			return Notify, "a catch-up runs the failed notification again"
		case a.CatchUp && claim.ConsulIndex > 0 && a.ConsulIndex > claim.ConsulIndex:
			return Notify, fmt.Sprintf("the consul-writer repaired the folder (Consul index %d) after the component was notified (index %d)", a.ConsulIndex, claim.ConsulIndex)
		}
		outcome := "notified"
		if !ok {
			outcome = fmt.Sprintf("failed after %d attempt(s)", max(claim.Attempts, 1))
		}
		return Skip, fmt.Sprintf("generation %d (update %s) was already %s", claim.Generation, claim.UpdateID, outcome)
	}
	owner := cmp.Or(claim.Owner, "an older notifier")
	switch {
	case claim.Owner == s.Self:
		return Notify, fmt.Sprintf("this notifier's own run of generation %d left no outcome", claim.Generation)
	case s.OwnerGone:
		return Notify, fmt.Sprintf("its notifier %s is gone, and what it left running was stopped", owner)
	case s.Instance != "" && claim.Instance == s.Instance:
		return Notify, fmt.Sprintf("its notifier %s was this notifier's previous run under instance id %s, which one live member holds at a time: it is gone", owner, s.Instance)
	}
	until, ok := leaseEnd(claim)
	if !ok || s.Now.After(until) {
		return Notify, fmt.Sprintf("the lease of the unfinished claim of %s ended at %s: its notifier is gone", owner, until.Format(time.RFC3339Nano))
	}
	return Wait, fmt.Sprintf("generation %d is being notified by %s since %s, its lease ends at %s", claim.Generation, owner, claim.At, until.Format(time.RFC3339Nano))
}

// leaseEnd is when an unfinished claim's lease ends, its LeaseUntil; ok is
// false when the claim does not say it readably (every claim the notifier
// writes does).
func leaseEnd(c *consulkv.Claim) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, c.LeaseUntil)
	return t, err == nil
}

// payload is the notification JSON. Field order is the documented one.
type payload struct {
	Policies        []json.RawMessage `json:"policies"`
	UpdatedPolicies []json.RawMessage `json:"updated_policies"`
	RemovedPolicies []json.RawMessage `json:"removed_policies"`
}

// Payload builds the notification a component receives,
// {"policies": [...], "updated_policies": [...], "removed_policies": [...]},
// each a list of policy_body objects (the parsed bodies, not strings), from
// items, the pairs under the component's consulkv.ItemsPrefix as Consul
// holds them now: policies are their bodies, in Consul's key order (by
// policy_id); updated_policies the bodies among them of the policies the
// record updated, in the record's order, left out when Consul no longer
// holds the policy; removed_policies the last bodies the record carries.
// A body that is not a JSON object is an error.
func Payload(a *events.ComponentApplied, items api.KVPairs) ([]byte, error) {
	b, _, err := PayloadSince(a, items, nil)
	return b, err
}

// PayloadSince is Payload computed against what the component was last
// told with success (told, from its claim), so that no change is lost when
// generations were skipped (compaction, a lagging stage, a failed
// notification): updated_policies are the bodies in Consul that are new or
// differ from what it was told, removed_policies what it was told of and
// Consul no longer holds, with the last bodies the update carries, or
// {"policyName", "policyVersion"} when the policy left in an earlier
// update. With told empty (a component never notified: no claim) every
// policy it holds is updated and the update's removals are removed. With
// told nil (a claim over consulkv.MaxTold policies) the
// update's own updated and removed policies are used. It also
// returns what the component is told now, for the claim (nil over
// consulkv.MaxTold policies).
func PayloadSince(a *events.ComponentApplied, items api.KVPairs, told map[string]consulkv.Told) ([]byte, map[string]consulkv.Told, error) {
	p := payload{Policies: []json.RawMessage{}, UpdatedPolicies: []json.RawMessage{}}
	held := make(map[string]json.RawMessage, len(items))
	now := make(map[string]consulkv.Told, len(items))
	var order []string
	for _, it := range items {
		id, ok := consulkv.ItemPolicyID(a.ServiceComponentName, it.Key)
		if !ok {
			continue
		}
		b, err := object(it.Value, "policies", id)
		if err != nil {
			return nil, nil, fmt.Errorf("%w (Consul key %s)", err, it.Key)
		}
		held[id] = b
		order = append(order, id)
		p.Policies = append(p.Policies, b)
		var head struct {
			Name    string `json:"policyName"`
			Version any    `json:"policyVersion"`
		}
		_ = json.Unmarshal(b, &head) // a body without them is still told
		version := ""
		if v, ok := head.Version.(string); ok {
			version = v
		} else if n, ok := head.Version.(float64); ok {
			version = strconv.FormatFloat(n, 'f', -1, 64)
		}
		now[id] = consulkv.Told{Name: head.Name, Version: version, Hash: policy.BodyHash(string(b))}
	}
	removedBodies := make(map[string][]byte, len(a.RemovedPolicies))
	for _, r := range a.RemovedPolicies {
		b, err := object([]byte(r.Body), "removed_policies", r.PolicyID)
		if err != nil {
			return nil, nil, err
		}
		removedBodies[r.PolicyID] = b
	}
	p.RemovedPolicies = make([]json.RawMessage, 0, len(a.RemovedPolicies))
	if told == nil {
		for _, u := range a.UpdatedRefs {
			if b, ok := held[u.PolicyID]; ok {
				p.UpdatedPolicies = append(p.UpdatedPolicies, b)
			}
		}
		for _, r := range a.RemovedPolicies {
			p.RemovedPolicies = append(p.RemovedPolicies, removedBodies[r.PolicyID])
		}
	} else {
		for _, id := range order {
			if t, ok := told[id]; !ok || t.Hash != now[id].Hash {
				p.UpdatedPolicies = append(p.UpdatedPolicies, held[id])
			}
		}
		gone := make([]string, 0)
		for id := range told {
			if _, ok := held[id]; !ok {
				gone = append(gone, id)
			}
		}
		if len(told) == 0 {
			// Told nothing yet: the update's own removals are still news.
			for _, r := range a.RemovedPolicies {
				if _, ok := held[r.PolicyID]; !ok && !slices.Contains(gone, r.PolicyID) {
					gone = append(gone, r.PolicyID)
				}
			}
		}
		slices.Sort(gone)
		for _, id := range gone {
			if b, ok := removedBodies[id]; ok {
				p.RemovedPolicies = append(p.RemovedPolicies, b)
				continue
			}
			stub, _ := json.Marshal(map[string]string{"policyName": told[id].Name, "policyVersion": told[id].Version})
			p.RemovedPolicies = append(p.RemovedPolicies, stub)
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, nil, fmt.Errorf("build notification of update %s for component %s: %w", a.UpdateID, a.ComponentID, err)
	}
	if len(now) > consulkv.MaxTold {
		now = nil
	}
	return b, now, nil
}

// object is body as the notification carries it, when it is a JSON object.
func object(body []byte, list, policyID string) (json.RawMessage, error) {
	if !check.Object(body) {
		return nil, fmt.Errorf("build notification: %s: policy %s body is not a JSON object", list, policyID)
	}
	return json.RawMessage(bytes.TrimSpace(body)), nil
}

// ErrClaimTaken is wrapped by the (transient) error of a record whose
// claim lost a check-and-set race; on the retry the claim shows whether
// the update was already claimed.
var ErrClaimTaken = errors.New("the notification claim changed while it was taken")

// job is one component.applied record of a batch on its way through
// claim, notification and record.
type job struct {
	i    int // the record's place in the batch
	a    *events.ComponentApplied
	key  string // the component's claim key
	body []byte // the notification, built once its folder is read
	log  zerolog.Logger
	// index is the claim key's ModifyIndex: as read, then as claimed.
	index uint64
	claim consulkv.Claim
	// attempts is how many runs earlier claims of this update counted
	// (a run taken over after its notifier stopped).
	attempts int
	// unrecorded says the outcome could not be written to the claim, or
	// the claim could not be proved this run's before a run (fence).
	unrecorded bool
	// leased is when, by the notifier's clock (its monotonic reading),
	// the last write of the claim's lease that Consul confirmed was sent:
	// the lease ends n.lease() after it, as this notifier counts (covers,
	// guardAt).
	leased time.Time
	// ambiguous says a write of the claim was sent whose answer was lost:
	// it may have gone through, so a claim found changed since is read
	// back before it is taken for another's (readBack).
	ambiguous bool
	// lost says the claim was found to be another's before a run: no
	// run starts any more and no outcome is recorded.
	lost bool
	// base is what the component was last told with success (its claim's
	// Told); told what this notification tells it.
	base, told map[string]consulkv.Told
	// origin is where and when the change entered the pipeline, for
	// the end-to-end latency.
	origin    runtime.OriginInfo
	hasOrigin bool
	// trace is the record's trace context (nil when not tracing).
	trace context.Context
	// again says why a finished notification may run again, and
	// request is the catch-up request that asks.
	again   Again
	request string
	// renotified is the claim's Renotify to write: the request, or the
	// one the claim named before.
	renotified string
	// partition is the record's partition of component.applied (-1: the
	// job is no record's, a notification run again).
	partition int32
	// release lets the record's offset be committed (runtime's
	// Input.Hold): once its notification ended, or when it was not
	// claimed (it is handed in again). A job run again later (resume)
	// carries it on.
	release func()
	// claimed says the job was claimed: its chain releases it once its
	// notification ended.
	claimed bool
}

// prepare checks a component.applied record. It returns no job when the
// record needs no notification whatever the claim says, and a Permanent
// error when it can never be notified.
func (n *notifier) prepare(a *events.ComponentApplied) (*job, error) {
	log := n.log.With().Str("component_id", a.ComponentID).Str("update_id", a.UpdateID).Int64("generation", a.Generation).Logger()
	if ok, why := ShouldNotify(nil, a); !ok {
		log.Debug().Str("reason", why).Msg("not notified")
		return nil, nil
	}
	if a.ServiceComponentName == "" {
		return nil, runtime.Permanentf("agent-notifier: component %s update %s has no service_component_name, so no place for its claim", a.ComponentID, a.UpdateID)
	}
	switch {
	case a.Notify.Kind == events.NotifyScript && a.Notify.ScriptPath == "":
		return nil, runtime.Permanentf("agent-notifier: component %s is notified by script but names no script_path", a.ComponentID)
	case a.Notify.Kind == events.NotifyWebhook && a.Notify.WebhookURL == "":
		return nil, runtime.Permanentf("agent-notifier: component %s is notified by webhook but names no webhook_url", a.ComponentID)
	case a.Notify.Kind != events.NotifyScript && a.Notify.Kind != events.NotifyWebhook:
		return nil, runtime.Permanentf("agent-notifier: component %s has notify kind %q", a.ComponentID, a.Notify.Kind)
	}
	return &job{a: a, key: consulkv.ClaimKey(a.ServiceComponentName), log: log, partition: -1, release: func() {}}, nil
}
