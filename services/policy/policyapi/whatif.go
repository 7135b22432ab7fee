package policyapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/matcher/matcher"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/pdp-ingest/pdpingest"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/topology"
)

// WhatIf is the answer of POST /v1/policies?dry_run=true and POST
// /v1/pdp/notifications?dry_run=true: what publishing the request would do
// to the registered components the caller may see, written nowhere.
type WhatIf struct {
	PolicyID string `json:"policy_id"`
	// Version is the greatest version the request names (for a removal,
	// the version removed); LoadedVersion the catalog's, null when none.
	Version       string  `json:"version"`
	LoadedVersion *string `json:"loaded_version"`
	// Components would change: added, updated or removed, each with the
	// version it holds now (null when it holds none), by component_id.
	Components []WhatIfComponent `json:"components"`
	// Count is len(Components); Unchanged counts the components that hold
	// the policy and would keep it as they hold it.
	Count     int `json:"count"`
	Unchanged int `json:"unchanged"`
	// Diff is the JSON Patch (RFC 6902) from the loaded body to the one
	// the request publishes ([] when equal or when nothing is loaded; a
	// PDP notification's covers the header only: the PDP's body is read
	// when the notification is published).
	Diff []policy.PatchOp `json:"diff"`
	// Refused is what the publish would be refused for, given what is
	// loaded (a body that is not a valid policy_body is answered 400, as
	// the publish answers it); when it is not empty, publishing would
	// change nothing, and Components is empty.
	Refused []WhatIfRefusal `json:"refused"`
	// Notes say what would be left as it is, and why.
	Notes []string `json:"notes"`
	// AbortedVersion is the loaded version when its staged rollout was
	// aborted: no component has it; InForceVersion is the one they have
	// instead (null when the abort removed the policy), and Diff is from
	// its body. Absent otherwise.
	AbortedVersion string  `json:"aborted_version,omitempty"`
	InForceVersion *string `json:"in_force_version,omitempty"`
	// FirstCohort, for a dry run with a staged rollout plan, is which of
	// the components that would get the version are in the first step.
	FirstCohort *WhatIfCohort `json:"first_cohort,omitempty"`
	// inForceBody is the body of InForceVersion.
	inForceBody []byte
}

// MaxCohortIDs bounds WhatIfCohort.ComponentIDs.
const MaxCohortIDs = 100

// WhatIfCohort is the first step's cohort of a planned rollout: Count
// components, the first MaxCohortIDs of them by component_id.
type WhatIfCohort struct {
	Count        int      `json:"count"`
	ComponentIDs []string `json:"component_ids"`
	// Truncated says ComponentIDs lists only the first MaxCohortIDs.
	Truncated bool `json:"truncated"`
}

// WhatIfComponent is one component a publish would change.
type WhatIfComponent struct {
	ComponentID          string  `json:"component_id"`
	ServiceComponentName string  `json:"service_component_name"`
	DeploymentID         string  `json:"deployment_id"`
	Change               string  `json:"change"`
	FromVersion          *string `json:"from_version"`
}

// Changes of a WhatIfComponent.
const (
	ChangeAdded   = "added"
	ChangeUpdated = "updated"
	ChangeRemoved = "removed"
)

// WhatIfRefusal is why a publish would be refused: by the North API
// (Status is the answer it would give) or by pdp-ingest (Status 0: the
// request is accepted, the notification dead-lettered).
type WhatIfRefusal struct {
	// Index is the refused body's position in a push, when one is.
	Index  *int   `json:"index,omitempty"`
	By     string `json:"by"`
	Status int    `json:"status,omitempty"`
	Reason string `json:"reason"`
}

// Who refuses (WhatIfRefusal.By).
const (
	ByNorthAPI  = "north-api"
	ByPDPIngest = "pdp-ingest"
)

// whatIfViews are the views a what-if answers from.
var whatIfViews = []string{topology.PolicyCatalog, topology.DeployComponents, topology.ComponentApplied, topology.PolicyRollouts}

// whatIfOf is the answer to a dry run of POST /v1/policies: each body is checked
// as the publish checks it (checkPushed: a body policy.Check refuses is
// answered 400, as the publish answers it; one older than the loaded
// version is listed as refused), the catalog entry is decided
// as pdp-ingest decides it (pdpingest.Decide), and the change is matched
// as the matcher matches it (matcher.Preview).
func (s *API) whatIfOf(r *http.Request, bodies []json.RawMessage) (WhatIf, *web.Error) {
	if e := s.Views.Need(whatIfViews...); e != nil {
		return WhatIf{}, e
	}
	out := newWhatIf()
	var checked []policy.Checked
	var latest policy.Checked
	ids := map[string]bool{}
	for i, b := range bodies {
		c, e := s.checkPushed(i, b)
		if c.PolicyID == "" {
			return WhatIf{}, e // a body policy.Check refuses is a bad request, dry or not
		}
		ids[c.PolicyID] = true
		if latest.PolicyID == "" || c.Version > latest.Version {
			latest = c
		}
		if e != nil && !s.mayReadLoaded(r, c.PolicyID) {
			e = nil // a tenant is told nothing of another tenant's policy
		}
		if e != nil {
			out.Refused = append(out.Refused, WhatIfRefusal{Index: &i, By: ByNorthAPI, Status: e.Status, Reason: e.Msg})
			continue
		}
		checked = append(checked, c)
	}
	if e := onePolicy(ids); e != nil {
		return WhatIf{}, e
	}
	out.PolicyID, out.Version = latest.PolicyID, latest.PolicyVersion
	loaded := s.loaded(r, out.PolicyID, &out)
	if loaded != nil && latest.PolicyID != "" {
		out.diff(loaded.Body, latest.JSON, false)
	}
	s.decideAndMatch(r, &out, loaded, pdpingest.Request{Route: pdpingest.Route{PolicyID: out.PolicyID, Pushed: checked}})
	return out, nil
}

// whatIfPlanned answers a dry run of a push with a staged rollout plan
// ({"policy", "rollout"}): the plan is checked as the push checks it (400
// with every reason), the body's what-if is computed as for a push
// without a plan, and a note says how many of the components that would
// change are in the first step's cohort (rollout.InCohort): the others
// keep the version they have until their step.
func (s *API) whatIfPlanned(w http.ResponseWriter, r *http.Request, raw []byte) *web.Error {
	var req planned
	if e := web.DecodeBytes(raw, &req, true, plannedExample); e != nil {
		return e
	}
	if req.Rollout == nil {
		return web.Errorf(http.StatusBadRequest, "rollout is missing: send the policy with a plan, e.g. %s, or the policy_body alone", plannedExample)
	}
	if reasons := req.Rollout.Check(); len(reasons) > 0 {
		return web.Errorf(http.StatusBadRequest, "the rollout plan is refused: %s", joinReasons(reasons))
	}
	out, e := s.whatIfOf(r, []json.RawMessage{req.Policy})
	if e != nil {
		return e
	}
	first, changing := firstCohort(out.Components, req.Rollout.Steps)
	out.FirstCohort = first
	out.Notes = append(out.Notes, fmt.Sprintf("staged rollout: step 1 of %d (%g of the components) would give version %s to %d of the %d components it would reach (first_cohort names them); the others keep the version they have until their step", len(req.Rollout.Steps), req.Rollout.Steps[0], out.Version, first.Count, changing))
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// firstCohort is the first step's cohort (rollout.InCohort) of the
// components that would get the version (comps sorted by component_id;
// those it removes the policy from are not given a version), and how many
// would get it in all.
func firstCohort(comps []WhatIfComponent, steps []float64) (*WhatIfCohort, int) {
	changing := 0
	first := &WhatIfCohort{ComponentIDs: []string{}}
	for _, c := range comps {
		if c.Change == ChangeRemoved {
			continue
		}
		changing++
		if rollout.InCohort(c.ComponentID, steps, 0) {
			if first.Count++; len(first.ComponentIDs) < MaxCohortIDs {
				first.ComponentIDs = append(first.ComponentIDs, c.ComponentID)
			}
		}
	}
	first.Truncated = first.Count > len(first.ComponentIDs)
	return first, changing
}

// whatIfNotification answers a dry run of POST /v1/pdp/notifications. The
// PDP is not asked: what it would answer is taken to be the catalog's
// version (unless the notification removes it) and the versions the
// notification loads, with the matches it gives as their
// matchingConditions and the loaded body's config (the PDP's own is read
// when the notification is published).
func (s *API) whatIfNotification(w http.ResponseWriter, r *http.Request, n policy.Notification) *web.Error {
	ids := map[string]bool{}
	for _, id := range n.PolicyIDs() {
		ids[id] = true
	}
	if e := onePolicy(ids); e != nil {
		return e
	}
	if e := s.Views.Need(whatIfViews...); e != nil {
		return e
	}
	out := newWhatIf()
	out.PolicyID = n.PolicyIDs()[0]
	loaded := s.loaded(r, out.PolicyID, &out)
	removed := map[string]bool{}
	for _, rp := range n.RemovedPolicies {
		removed[rp.VersionNo] = true
		out.Version = rp.VersionNo
	}
	var pdp []json.RawMessage
	if loaded != nil && !removed[loaded.PolicyVersion] {
		pdp = append(pdp, loaded.Body)
	}
	var newest []byte
	var newestVer int64 = -1
	for _, l := range n.LoadedPolicies {
		if loaded != nil && l.VersionNo == loaded.PolicyVersion {
			continue // the PDP answers the body the catalog holds
		}
		b, err := pdpBody(l, loaded)
		if err != nil {
			return web.Errorf(http.StatusBadRequest, "loadedPolicies %s: %v", l.PolicyName, err)
		}
		pdp = append(pdp, b)
		if v, ok := policy.ParseVersion(l.VersionNo); ok && v > newestVer {
			newest, newestVer, out.Version = b, v, l.VersionNo
		}
	}
	if loaded != nil && newest != nil {
		out.diff(loaded.Body, newest, true)
	}
	s.decideAndMatch(r, &out, loaded, pdpingest.Request{Route: pdpingest.Route{PolicyID: out.PolicyID, AskPDP: true}, PDPBodies: pdp})
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// pdpBody is the body the PDP is taken to answer for l: the loaded body
// (or a placeholder config) under l's name, version and matches.
func pdpBody(l policy.LoadedPolicy, loaded *catalogEntry) (json.RawMessage, error) {
	b := map[string]any{"config": map[string]any{"config": "read from the PDP when published"}}
	if loaded != nil {
		if err := json.Unmarshal(loaded.Body, &b); err != nil {
			return nil, err
		}
	}
	mc := map[string]any{}
	for k, v := range l.Matches {
		mc[k] = v
	}
	b["policyName"], b["policyVersion"], b["matchingConditions"] = l.PolicyName, l.VersionNo, mc
	b["policyConfigStatus"] = "CONFIG_RETRIEVED"
	return json.Marshal(b)
}

func newWhatIf() WhatIf {
	return WhatIf{Components: []WhatIfComponent{}, Diff: []policy.PatchOp{}, Refused: []WhatIfRefusal{}, Notes: []string{}}
}

// onePolicy refuses a dry run of several policy_ids: its answer is about
// one policy.
func onePolicy(ids map[string]bool) *web.Error {
	if len(ids) <= 1 {
		return nil
	}
	names := make([]string, 0, len(ids))
	for id := range ids {
		names = append(names, id)
	}
	sort.Strings(names)
	return web.Errorf(http.StatusBadRequest, "a dry run shows one policy at a time and this request names %d: %s; send each policy_id's bodies in a request of its own (policyctl policy push --dry-run does)",
		len(names), strings.Join(names, ", "))
}

// loaded is the catalog entry of id, noted in out; nil when the catalog
// has none, or when it is another tenant's and r's caller a tenant, who
// sees such a policy as one that does not exist (mayReadPolicy; none of
// its components may hold it either).
func (s *API) loaded(r *http.Request, id string, out *WhatIf) *catalogEntry {
	e, ok := s.catalog.get(id)
	if !ok || !mayReadPolicy(web.PrincipalOf(r.Context()), e) {
		return nil
	}
	v := e.PolicyVersion
	out.LoadedVersion = &v
	if ro, _ := s.staged.Value(id); ro != nil {
		if in, decided := rollout.InForce(ro, e.PolicyVersion, e.bodyHash()); decided {
			out.AbortedVersion = e.PolicyVersion
			note := fmt.Sprintf("the rollout of the loaded version %s was aborted: no component has it", e.PolicyVersion)
			if in != nil {
				iv := in.PolicyVersion
				out.InForceVersion, out.inForceBody = &iv, []byte(in.Body)
				note += fmt.Sprintf("; they have version %s, which the diff is from", iv)
			} else {
				note += "; the abort removed the policy from them"
			}
			out.Notes = append(out.Notes, note)
		}
	}
	return e
}

// mayReadLoaded reports whether r's caller may read the catalog entry of
// id, true when there is none (mayReadPolicy).
func (s *API) mayReadLoaded(r *http.Request, id string) bool {
	e, ok := s.catalog.get(id)
	return !ok || mayReadPolicy(web.PrincipalOf(r.Context()), e)
}

// diff sets the patch from the loaded body (the one in force, when the
// loaded version's rollout was aborted) to the body published, bodies
// compared as the PDP serves them (policy.DiffBodies); headerOnly leaves out the config, which a PDP notification does not
// carry.
func (out *WhatIf) diff(from, to []byte, headerOnly bool) {
	if out.AbortedVersion != "" {
		if out.inForceBody == nil {
			return // the components have nothing to diff from
		}
		from = out.inForceBody
	}
	ops, err := policy.DiffBodies(from, to)
	if err != nil {
		out.Notes = append(out.Notes, fmt.Sprintf("no diff: %v", err))
		return
	}
	for _, op := range ops {
		if headerOnly && (op.Path == "/config" || strings.HasPrefix(op.Path, "/config/")) {
			continue
		}
		out.Diff = append(out.Diff, op)
	}
}

// decideAndMatch decides the catalog entry as pdp-ingest would and, when
// it changes, which of the components the caller may see would change, as
// the matcher would (whatIfOf); out is filled in.
func (s *API) decideAndMatch(r *http.Request, out *WhatIf, loaded *catalogEntry, req pdpingest.Request) {
	comps := visibleComponents(web.PrincipalOf(r.Context()), s.components.all())
	req.Now, req.ChangeID = time.Now().UTC(), "dry-run"
	whatIfOf(out, loaded, req, comps, s.applied.get)
}

// visibleComponents are the components of all p may read
// (mayReadComponent): a tenant's own, every one for other roles.
func visibleComponents(p auth.Principal, all []*events.Component) []*events.Component {
	var out []*events.Component
	for _, c := range all {
		if mayReadComponent(p, c.ComponentID, c, true) == nil {
			out = append(out, c)
		}
	}
	return out
}

// whatIfOf fills out in with what req would do: the catalog entry decided
// as pdp-ingest decides it (pdpingest.Decide), then, when it changes, the
// components of comps that would change, as the matcher decides it
// (matcher.Preview), against what applied says each holds in Consul.
func whatIfOf(out *WhatIf, loaded *catalogEntry, req pdpingest.Request, comps []*events.Component, applied func(string) (*appliedState, bool)) {
	if loaded != nil {
		req.Current = loaded.record()
	}
	// A request the North API refuses changes nothing: only who holds
	// the policy is counted.
	var d pdpingest.Decision
	if len(out.Refused) == 0 {
		var err error
		if d, err = pdpingest.Decide(req); err != nil {
			out.Refused = append(out.Refused, WhatIfRefusal{By: ByPDPIngest, Reason: err.Error()})
		}
		out.Notes = append(out.Notes, d.Notes...)
	}
	has := map[string]*events.ComponentPolicies{}
	held := map[string]appliedPolicy{}
	for _, c := range comps {
		a, ok := applied(c.ComponentID)
		if !ok || a.Uninstalled {
			continue
		}
		if ap, ok := a.Policies[out.PolicyID]; ok {
			held[c.ComponentID] = ap
			has[c.ComponentID] = &events.ComponentPolicies{ComponentID: c.ComponentID, DeploymentID: c.DeploymentID,
				Policies: []events.Policy{{PolicyID: out.PolicyID, PolicyVersion: ap.Version, BodyHash: ap.BodyHash}}}
		}
	}
	changed := map[string]bool{}
	if d.Change != nil {
		deltas, err := matcher.Preview(req.Current, d.Change, comps, has)
		if err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("the matcher would refuse the change: %v", err))
		}
		byID := map[string]*events.Component{}
		for _, c := range comps {
			byID[c.ComponentID] = c
		}
		for _, dl := range deltas {
			c := byID[dl.ComponentID]
			var change string
			switch {
			case c == nil:
				continue
			case len(dl.AddedPolicies) > 0:
				change = ChangeAdded
			case len(dl.UpdatedPolicies) > 0:
				change = ChangeUpdated
			case len(dl.RemovedPolicies) > 0:
				change = ChangeRemoved
			default:
				continue
			}
			wc := WhatIfComponent{ComponentID: c.ComponentID, ServiceComponentName: c.ServiceComponentName, DeploymentID: c.DeploymentID, Change: change}
			if ap, ok := held[c.ComponentID]; ok {
				v := ap.Version
				wc.FromVersion = &v
			}
			changed[c.ComponentID] = true
			out.Components = append(out.Components, wc)
		}
	}
	sort.Slice(out.Components, func(i, j int) bool { return out.Components[i].ComponentID < out.Components[j].ComponentID })
	out.Count = len(out.Components)
	for id := range held {
		if !changed[id] {
			out.Unchanged++
		}
	}
}
