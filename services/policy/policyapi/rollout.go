package policyapi

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"

	capi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/topology"
)

// rolloutListLimit is how many component ids each list of a rollout holds
// unless ?limit= says otherwise (at most maxRolloutListLimit).
const (
	rolloutListLimit    = 100
	maxRolloutListLimit = 10000
)

// Rollout is the answer of GET /v1/policies/{policy_id}/rollout: where
// the latest version of a policy is, across the registered components
// that should hold it (by policy_id or by a filter that matches it).
type Rollout struct {
	PolicyID string `json:"policy_id"`
	// Version is the version asked for with ?version= (by default the
	// catalog's latest); PolicyName is the latest's; Status is VALID or
	// ERRORED (the latest version the PDP has is invalid and the last
	// valid one stays in force).
	Version    string `json:"version"`
	PolicyName string `json:"policy_name"`
	Status     string `json:"status"`
	// Components should hold the version; InConsul have it in their
	// Consul folder; Notified were told of it (exit 0, or a 2xx answer);
	// Failed were told and the script or webhook failed; Pending do not
	// have it in Consul yet or were not told yet; NoNotification have it
	// in Consul and have no notify target. Components = InConsul +
	// Pending, InConsul = Notified + Failed + NoNotification + the
	// notifications still running (counted in Pending too).
	Components     int `json:"components"`
	InConsul       int `json:"in_consul"`
	Notified       int `json:"notified"`
	Failed         int `json:"failed"`
	Pending        int `json:"pending"`
	NoNotification int `json:"no_notification"`
	// OtherVersions counts, per version, the components that should hold
	// the policy but hold another version than Version in Consul.
	OtherVersions map[string]int `json:"other_versions"`
	// FailedComponents and PendingComponents name the components, by
	// component_id, at most ?limit= of each (Truncated says more exist).
	FailedComponents  []RolloutFailure `json:"failed_components"`
	PendingComponents []RolloutPending `json:"pending_components"`
	Truncated         bool             `json:"truncated"`
	// Staged is the staged rollout of the policy (docs/rollouts.md), when
	// it was published with a plan.
	Staged *Staged `json:"staged,omitempty"`
}

// RolloutFailure is a component whose notification of the version failed.
type RolloutFailure struct {
	ComponentID string `json:"component_id"`
	ExitCode    *int   `json:"exit_code"`
	HTTPStatus  int    `json:"http_status,omitempty"`
	At          string `json:"at"`
}

// RolloutPending is a component that has not got the version, or was not
// told yet, and why.
type RolloutPending struct {
	ComponentID string `json:"component_id"`
	Reason      string `json:"reason"`
}

// rolloutTarget is one component that should hold the version.
type rolloutTarget struct {
	c *events.Component
	a *appliedState
	// gen is the generation of the collection that brought the version.
	gen int64
}

func (s *API) PolicyRollout(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("policy_id")
	if err := CheckID("policy_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	limit := rolloutListLimit
	if q := r.URL.Query().Get("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 0 || n > maxRolloutListLimit {
			return web.Errorf(http.StatusBadRequest, "limit %q is not a number of component ids from 0 to %d", q, maxRolloutListLimit)
		}
		limit = n
	}
	if e := s.Views.Need(topology.PolicyCatalog, topology.DeployComponents, topology.ComponentApplied); e != nil {
		return e
	}
	p := web.PrincipalOf(r.Context())
	e, ok := s.catalog.get(id)
	if !ok || !mayReadPolicy(p, e) {
		// Another tenant's policy answers as one that does not exist.
		return web.Errorf(http.StatusNotFound, "policy %s is not in the catalog: no version of it is loaded (GET /policy_latest/%s says the same)", id, id)
	}
	// ?version= asks for the rollout of another loaded version than the
	// latest (e.g. the one before it, while components still hold it).
	target := e.PolicyVersion
	if q := r.URL.Query().Get("version"); q != "" {
		v, ok := policy.ParseVersion(q)
		latest, _ := policy.ParseVersion(e.PolicyVersion)
		switch {
		case !ok:
			return web.Errorf(http.StatusBadRequest, "version %q is not a policyVersion (all digits, e.g. 5)", q)
		case v > latest:
			return web.Errorf(http.StatusNotFound, "version %s of %s is not loaded: the latest is %s", q, id, e.PolicyVersion)
		}
		target = strconv.FormatInt(v, 10)
	}
	out, outcomes, werr := s.tally(r.Context(), e, target, p, limit)
	if werr != nil {
		return werr
	}
	s.withStaged(&out, e, target, outcomes)
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// The outcomes of one component in a tally.
const (
	outcomeNotified = "notified"
	outcomeFailed   = "failed"
	outcomePending  = "pending"
	outcomeOther    = "other version"
)

// tally counts where version target of the catalog entry e is across the
// components that should hold it and p may read, and says per
// component_id its outcome (outcome*): the one rule of notified and
// failed, for the answer of GET /v1/policies/{policy_id}/rollout and for
// a staged rollout's progress.
func (s *API) tally(ctx context.Context, e *catalogEntry, target string, p auth.Principal, limit int) (Rollout, map[string]string, *web.Error) {
	id := e.PolicyID
	outcomes := map[string]string{}
	out := Rollout{PolicyID: id, Version: target, PolicyName: e.PolicyName, Status: e.Status,
		OtherVersions: map[string]int{}, FailedComponents: []RolloutFailure{}, PendingComponents: []RolloutPending{}}
	var told []rolloutTarget // in Consul, with a notify target: the claim says the rest
	for _, c := range s.components.wanting(e) {
		if p.Role == auth.RoleTenant && c.Tenant != p.Tenant {
			continue
		}
		out.Components++
		a, _ := s.applied.get(c.ComponentID)
		var ap appliedPolicy
		has := false
		if a != nil && !a.Uninstalled {
			ap, has = a.Policies[id]
		}
		switch {
		case !has:
			outcomes[c.ComponentID] = outcomePending
			out.pending(limit, c.ComponentID, "not in its Consul folder yet")
		case ap.Version != target:
			outcomes[c.ComponentID] = outcomeOther
			out.OtherVersions[ap.Version]++
			out.pending(limit, c.ComponentID, "its Consul folder holds version "+ap.Version)
		default:
			out.InConsul++
			if notifiesNothing(a.Notify) {
				outcomes[c.ComponentID] = outcomeNotified
				out.NoNotification++
				continue
			}
			told = append(told, rolloutTarget{c: c, a: a, gen: ap.Generation})
		}
	}
	claims, err := s.claims(ctx, told)
	if err != nil {
		return out, nil, err
	}
	for k, t := range told {
		cl := claims[k]
		var finished, ok bool
		if cl != nil {
			finished, ok = cl.Finished()
		}
		switch {
		case cl == nil || cl.Generation < t.gen:
			outcomes[t.c.ComponentID] = outcomePending
			out.pending(limit, t.c.ComponentID, "not notified yet")
		case !finished:
			outcomes[t.c.ComponentID] = outcomePending
			out.pending(limit, t.c.ComponentID, "notification running")
		case ok:
			outcomes[t.c.ComponentID] = outcomeNotified
			out.Notified++
		default:
			outcomes[t.c.ComponentID] = outcomeFailed
			out.Failed++
			if len(out.FailedComponents) < limit {
				out.FailedComponents = append(out.FailedComponents, RolloutFailure{ComponentID: t.c.ComponentID, ExitCode: cl.ExitCode, HTTPStatus: cl.HTTPStatus, At: cl.At})
			} else {
				out.Truncated = true
			}
		}
	}
	return out, outcomes, nil
}

func (r *Rollout) pending(limit int, id, why string) {
	r.Pending++
	if len(r.PendingComponents) < limit {
		r.PendingComponents = append(r.PendingComponents, RolloutPending{ComponentID: id, Reason: why})
	} else {
		r.Truncated = true
	}
}

// claims reads the notification claims of targets, in read-only
// transactions of up to consulkv.MaxTxnOps get-tree operations (a get of
// a key that does not exist would fail the whole transaction); nil where
// a component has no claim.
func (s *API) claims(ctx context.Context, targets []rolloutTarget) ([]*consulkv.Claim, *web.Error) {
	out := make([]*consulkv.Claim, len(targets))
	for start := 0; start < len(targets); start += consulkv.MaxTxnOps {
		batch := targets[start:min(start+consulkv.MaxTxnOps, len(targets))]
		ops := make(capi.TxnOps, len(batch))
		keys := make(map[string]int, len(batch))
		for k, t := range batch {
			key := consulkv.ClaimKey(t.a.ServiceComponentName)
			ops[k] = &capi.TxnOp{KV: &capi.KVTxnOp{Verb: capi.KVGetTree, Key: key}}
			keys[key] = start + k
		}
		ok, resp, _, err := s.consul.Txn().Txn(ops, (&capi.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return nil, s.consulFailed(ops[0].KV.Key, err)
		}
		if !ok {
			return nil, web.Errorf(http.StatusBadGateway, "read %d notification claims from Consul at %s: %s; the North API's token needs key_prefix \"\" { policy = \"read\" } on the components' folders",
				len(ops), s.opts.Consul.Addr, consulkv.TxnReasons(resp))
		}
		for _, res := range resp.Results {
			if res == nil || res.KV == nil {
				continue
			}
			i, mine := keys[res.KV.Key]
			if !mine {
				continue // a key under the claim key's name, not the claim
			}
			cl, err := consulkv.ParseClaim(res.KV.Value)
			if err != nil {
				continue // unreadable: the notifier replaces it; pending here
			}
			out[i] = &cl
		}
	}
	return out, nil
}

// wanting returns the registered components that should hold the
// catalog entry e: those naming its policy_id, and those with a filter
// that matches its latest body, that may hold it (policy.MayHold), sorted
// by component_id.
func (v *componentsView) wanting(e *catalogEntry) []*events.Component {
	var out []*events.Component
	for _, c := range v.Sorted() {
		if !policy.MayHold(c.Tenant, e.Tenant) {
			continue
		}
		if slices.Contains(c.PolicyIDs, e.PolicyID) || filtersMatch(c.PolicyFilters, e.decoded) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ComponentID < out[j].ComponentID })
	return out
}

// filtersMatch reports whether one of a component's filters matches body,
// as the matcher decides it. A filter that does not compile (the North
// API refuses those at registration) matches nothing.
func filtersMatch(fs []events.PolicyFilter, body policy.Body) bool {
	for _, f := range fs {
		attrs, err := policy.DecodeConfigAttributes(f.ConfigAttributes)
		if err != nil {
			continue
		}
		cf, err := policy.CompileFilter(policy.Filter{PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName, ConfigAttributes: attrs})
		if err != nil {
			continue
		}
		if ok, _ := cf.Match(body); ok {
			return true
		}
	}
	return false
}
