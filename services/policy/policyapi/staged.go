package policyapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Staged rollouts (docs/rollouts.md): a version pushed with a plan
// reaches the components step by step. The North API writes the rollout
// to policy.rollouts (the matcher keeps the components outside the
// current step at the previous version), moves it on from what the
// components' notification claims say (DriveRollouts, with the rule of
// tally that GET /v1/policies/{policy_id}/rollout answers with), and
// takes the operator's promote, pause, resume and abort.

const plannedExample = `{"policy": {"policyName": "DCAE.Config_VM_MEMORY.6.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": {"key": "value"}}, "rollout": {"steps": [0.1, 0.5, 1.0], "auto": true, "pause_s": 60, "max_failed": 2}}`

// DefaultRolloutEvery is how often DriveRollouts looks at the running
// rollouts.
const DefaultRolloutEvery = 2 * time.Second

// Staged is a staged rollout as the API shows it.
type Staged struct {
	RolloutID string `json:"rollout_id"`
	Version   string `json:"version"`
	// PreviousVersion is what components outside the current step keep
	// (and what an abort brings every component back to); "" when none.
	PreviousVersion string       `json:"previous_version"`
	State           string       `json:"state"`
	Reason          string       `json:"reason"`
	Plan            rollout.Plan `json:"plan"`
	// CurrentStep counts from 1.
	CurrentStep   int          `json:"current_step"`
	StepStartedAt time.Time    `json:"step_started_at"`
	StepDoneAt    *time.Time   `json:"step_done_at"`
	Steps         []StagedStep `json:"steps"`
	UpdatedBy     string       `json:"updated_by"`
	UpdatedAt     time.Time    `json:"updated_at"`
}

// StagedStep is one step of a staged rollout: the components that join
// at it (their component_id hashes below Share and not below the step
// before's share) and what they did with the version.
type StagedStep struct {
	Step       int     `json:"step"`
	Share      float64 `json:"share"`
	Components int64   `json:"components"`
	Notified   int64   `json:"notified"`
	Failed     int64   `json:"failed"`
}

// PushAccepted is the answer of POST /v1/policies with a plan.
type PushAccepted struct {
	Notifications []NotificationAccepted `json:"notifications"`
	Rollout       *Staged                `json:"rollout"`
}

func staged(r *events.PolicyRollout) *Staged {
	out := &Staged{RolloutID: r.RolloutID, Version: r.Version, PreviousVersion: r.PreviousVersion, State: r.State, Reason: r.Reason,
		Plan:        rollout.Plan{Steps: r.Steps, Auto: r.Auto, PauseS: r.PauseS, MaxFailed: r.MaxFailed},
		CurrentStep: int(r.Step) + 1, StepStartedAt: r.StepStartedAt.UTC(), Steps: []StagedStep{}, UpdatedBy: r.UpdatedBy, UpdatedAt: r.UpdatedAt.UTC()}
	if r.StepDoneAt != nil {
		t := r.StepDoneAt.UTC()
		out.StepDoneAt = &t
	}
	for k, share := range r.Steps {
		st := StagedStep{Step: k + 1, Share: share}
		if k < len(r.Counts) {
			st.Components, st.Notified, st.Failed = r.Counts[k].Components, r.Counts[k].Notified, r.Counts[k].Failed
		}
		out.Steps = append(out.Steps, st)
	}
	return out
}

// stepCounts sorts the outcomes of a tally of the rollout's version into
// its steps (rollout.StepOf).
func stepCounts(r *events.PolicyRollout, outcomes map[string]string) []events.RolloutStepCount {
	out := make([]events.RolloutStepCount, len(r.Steps))
	for id, o := range outcomes {
		k := rollout.StepOf(id, r.Steps)
		if k >= len(out) {
			continue
		}
		out[k].Components++
		switch o {
		case outcomeNotified:
			out[k].Notified++
		case outcomeFailed:
			out[k].Failed++
		}
	}
	return out
}

// rolloutsView is policy.rollouts.
type rolloutsView struct {
	*runtime.Table[*events.PolicyRollout]
}

func followRollouts(env runtime.Env) (*rolloutsView, error) {
	t, err := runtime.FollowTable[*events.PolicyRollout](env, topology.PolicyRollouts, nil)
	if err != nil {
		return nil, err
	}
	return &rolloutsView{t}, nil
}

// withStaged adds the policy's staged rollout to a rollout answer; its
// steps count the components of the tally when it is of the rollout's
// version, else they are as last recorded.
func (s *API) withStaged(out *Rollout, e *catalogEntry, target string, outcomes map[string]string) {
	r, ok := s.staged.Value(e.PolicyID)
	if !ok || r == nil {
		return
	}
	if r.Version == target && rollout.Active(r) {
		c := *r
		c.Counts = stepCounts(r, outcomes)
		r = &c
	}
	out.Staged = staged(r)
}

// planned is the body of POST /v1/policies with a plan.
type planned struct {
	Policy  json.RawMessage `json:"policy"`
	Rollout *rollout.Plan   `json:"rollout"`
}

// isPlanned says whether a POST /v1/policies body is a policy with a plan
// ({"policy": ..., "rollout": ...}) rather than a policy_body or an array
// of them (a policy_body has no "policy" field).
func isPlanned(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(t, &probe) != nil {
		return false
	}
	_, ok := probe["policy"]
	return ok
}

// pushPlanned publishes one policy version with a rollout plan: the
// rollout is written first (the matcher reads it before it decides the
// version's change), then the body as a push.
func (s *API) pushPlanned(w http.ResponseWriter, r *http.Request, raw []byte) *web.Error {
	var req planned
	if e := web.DecodeBytes(raw, &req, true, plannedExample); e != nil {
		return e
	}
	if req.Rollout == nil {
		return web.Errorf(http.StatusBadRequest, "rollout is missing: send the policy with a plan, e.g. %s, or the policy_body alone to publish it to every component at once", plannedExample)
	}
	if reasons := req.Rollout.Check(); len(reasons) > 0 {
		return web.Errorf(http.StatusBadRequest, "the rollout plan is refused: %s; nothing was published", joinReasons(reasons))
	}
	if t := bytes.TrimSpace(req.Policy); len(t) == 0 || t[0] != '{' {
		return web.Errorf(http.StatusBadRequest, "policy is not a policy_body object: a rollout publishes one version; nothing was published")
	}
	c, err := policy.Check(req.Policy)
	if err != nil {
		return web.Errorf(http.StatusBadRequest, "policy is refused: %v; nothing was published", err)
	}
	if e := s.olderThanLoaded(0, c); e != nil {
		return e
	}
	if e := s.Views.Need(topology.PolicyCatalog, topology.PolicyRollouts); e != nil {
		return e
	}
	defer s.Lock("rollout/" + c.PolicyID)()
	prev, loaded := s.catalog.get(c.PolicyID)
	if loaded && prev.PolicyVersion == c.PolicyVersion {
		return web.Errorf(http.StatusConflict, "version %s of %s is already loaded: a rollout is for a new version; push a greater policyVersion", c.PolicyVersion, c.PolicyID)
	}
	var before *events.PolicyCatalogEntry
	if loaded {
		before = &events.PolicyCatalogEntry{PolicyVersion: prev.PolicyVersion, Body: string(prev.Body), BodyHash: prev.bodyHash(), Revision: prev.Revision, Tenant: prev.Tenant}
	}
	now := time.Now().UTC()
	by := web.PrincipalOf(r.Context()).Name
	if cur, ok := s.staged.Value(c.PolicyID); ok && rollout.Active(cur) && cur.PreviousBody != "" {
		// A version published while a rollout runs supersedes it: the
		// components outside its first step keep what they have, the
		// version before the superseded rollout or its version.
		before = &events.PolicyCatalogEntry{PolicyVersion: cur.PreviousVersion, Body: cur.PreviousBody, BodyHash: cur.PreviousHash,
			Revision: cur.PreviousRevision, Tenant: cur.Tenant}
	} else if ok && before != nil {
		// After an abort the catalog's latest is still the aborted
		// version, but the components went back to the one before it:
		// that is what the new version replaces, or they would be
		// given the aborted version while outside the first step.
		if inForce, decided := rollout.InForce(cur, before.PolicyVersion, before.BodyHash); decided {
			before = inForce
		}
	}
	ro := rollout.Start(c.PolicyID, web.NewID(), c.PolicyVersion, c.Header().BodyHash, before, *req.Rollout, by, now)
	if e := s.writeRollout(r.Context(), ro); e != nil {
		return e
	}
	ev := &events.PdpNotification{NotificationID: web.NewID(), Source: Source, ReceivedAt: now,
		LoadedPolicies: []events.LoadedPolicy{}, RemovedPolicies: []events.UnloadedPolicy{}, PushedBodies: []string{string(c.JSON)}}
	value, err := s.Env.Codec.Encode(ev)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode pushed policy %s: %v", c.PolicyID, err)
	}
	if err := s.Produce(r.Context(), &kgo.Record{Topic: s.Env.Kafka.Topic(topology.PDPNotifications), Key: []byte(c.PolicyID), Value: value}); err != nil {
		return s.ProduceFailed(err)
	}
	s.Log.Info().Str("policy_id", c.PolicyID).Str("version", c.PolicyVersion).Str("rollout_id", ro.RolloutID).
		Floats64("steps", ro.Steps).Msg("policy pushed with a staged rollout")
	web.WriteJSON(w, http.StatusAccepted, PushAccepted{
		Notifications: []NotificationAccepted{{PolicyID: c.PolicyID, NotificationID: ev.NotificationID, Versions: []string{c.PolicyVersion}}},
		Rollout:       staged(ro)})
	return nil
}

func joinReasons(rs []string) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += r
	}
	return out
}

// writeRollout writes a rollout and waits until the view holds it.
func (s *API) writeRollout(ctx context.Context, r *events.PolicyRollout) *web.Error {
	rec, e := s.ProduceRecord(ctx, topology.PolicyRollouts, r.PolicyID, r)
	if e != nil {
		return e
	}
	s.WaitOwnWrite(ctx, s.staged, rec)
	return nil
}

// moveCohorts asks every matcher partition to compare its components
// with what they should have, once a rollout's cohorts changed (a step
// started, an abort): the matcher reads the rollout before it handles the
// request, so the components that join get the version (or the previous
// one back) and no other is told anything.
func (s *API) moveCohorts(ctx context.Context, r *events.PolicyRollout) *web.Error {
	reason := fmt.Sprintf("rollout %s of %s version %s: %s at step %d", r.RolloutID, r.PolicyID, r.Version, r.State, r.Step+1)
	req := &events.CatchupRequest{RequestID: web.NewID(), Scope: events.ScopeAll, Reason: reason, RequestedAt: time.Now().UTC()}
	_, e := s.ProduceEveryPartition(ctx, topology.CatchupRequests, events.ScopeAll, req)
	return e
}

// RolloutAction serves POST /v1/policies/{policy_id}/rollout/{action}:
// promote (the next step now), pause, resume, abort (every component back
// to the previous version, at a new revision).
func (s *API) RolloutAction(action string) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *web.Error {
		id := r.PathValue("policy_id")
		if err := CheckID("policy_id", id); err != nil {
			return web.Errorf(http.StatusBadRequest, "%v", err)
		}
		var body struct {
			Reason string `json:"reason"`
		}
		if e := web.DecodeOptionalJSON(w, r, web.MaxRequestBytes, &body, `{"reason": "the error rate went up"} or no body`); e != nil {
			return e
		}
		if e := s.Views.Need(topology.PolicyCatalog, topology.PolicyRollouts); e != nil {
			return e
		}
		p := web.PrincipalOf(r.Context())
		e, ok := s.catalog.get(id)
		if !ok || !mayReadPolicy(p, e) {
			return web.Errorf(http.StatusNotFound, "policy %s is not in the catalog: no version of it is loaded", id)
		}
		defer s.Lock("rollout/" + id)()
		cur, ok := s.staged.Value(id)
		if !ok || cur == nil {
			return web.Errorf(http.StatusNotFound, "policy %s has no staged rollout: publish a version with a plan (POST /v1/policies {\"policy\": ..., \"rollout\": ...})", id)
		}
		if newerVersion(e.PolicyVersion, cur.Version) {
			return web.Errorf(http.StatusConflict, "the rollout of version %s of %s was superseded by version %s", cur.Version, id, e.PolicyVersion)
		}
		now := time.Now().UTC()
		by := p.Name
		var next *events.PolicyRollout
		var err error
		switch action {
		case "promote":
			next, err = rollout.Promote(cur, by, now)
		case "pause":
			reason := "paused by " + by
			if body.Reason != "" {
				reason += ": " + body.Reason
			}
			next, err = rollout.Pause(cur, reason, by, now)
		case "resume":
			next, err = rollout.Resume(cur, by, now)
		case "abort":
			rev := events.NextRevision(max(e.Revision, cur.PreviousRevision), now)
			next, err = rollout.Abort(cur, rev, by, now)
		default:
			return web.Errorf(http.StatusNotFound, "no rollout action %q: promote, pause, resume or abort", action)
		}
		if err != nil {
			return web.Errorf(http.StatusConflict, "%v", err)
		}
		if body.Reason != "" && action != "pause" {
			next.Reason += ": " + body.Reason
		}
		if e := s.writeRollout(r.Context(), next); e != nil {
			return e
		}
		if next.Step != cur.Step || next.State == rollout.StateAborted {
			if e := s.moveCohorts(r.Context(), next); e != nil {
				return e
			}
		}
		s.Log.Info().Str("policy_id", id).Str("rollout_id", next.RolloutID).Str("action", action).Str("state", next.State).
			Int32("step", next.Step+1).Str("by", by).Msg("rollout changed")
		web.WriteJSON(w, http.StatusOK, staged(next))
		return nil
	}
}

// newerVersion says whether version a is greater than b.
func newerVersion(a, b string) bool {
	va, ok1 := policy.ParseVersion(a)
	vb, ok2 := policy.ParseVersion(b)
	return ok1 && ok2 && va > vb
}

// DriveRollouts moves every running rollout on, every interval, until
// ctx ends: it counts what each step's components did (tally, the rule
// GET /v1/policies/{policy_id}/rollout answers with), and applies
// rollout.Observe: failures above max_failed pause it, a step whose
// components were all notified is done, and with auto the next one starts
// after pause_s. A rollout whose version is no longer the latest is
// superseded. Every decision is taken from what the topics and Consul
// hold, so a restarted North API (or a second one) takes over where the
// last one was.
func (s *API) DriveRollouts(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultRolloutEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.Views.Need(topology.PolicyCatalog, topology.DeployComponents, topology.ComponentApplied, topology.PolicyRollouts) != nil {
			continue
		}
		for _, r := range s.staged.Sorted() {
			if !rollout.Active(r) {
				continue
			}
			if err := s.driveOne(ctx, r.PolicyID); err != nil {
				s.Log.Warn().Str("policy_id", r.PolicyID).Str("error", err.Msg).Msg("rollout not moved on; tried again at the next tick")
			}
		}
	}
}

var driver = auth.Principal{Name: "rollout", Role: auth.RoleAdmin}

func (s *API) driveOne(ctx context.Context, id string) *web.Error {
	defer s.Lock("rollout/" + id)()
	r, ok := s.staged.Value(id)
	if !ok || !rollout.Active(r) {
		return nil
	}
	e, ok := s.catalog.get(id)
	if !ok {
		return nil
	}
	now := time.Now().UTC()
	if e.PolicyVersion != r.Version {
		if newerVersion(e.PolicyVersion, r.Version) {
			return s.writeRollout(ctx, rollout.Supersede(r, e.PolicyVersion, driver.Name, now))
		}
		return nil // pdp-ingest has not loaded the version yet
	}
	_, outcomes, werr := s.tally(ctx, e, r.Version, driver, 0)
	if werr != nil {
		return werr
	}
	next := rollout.Observe(r, stepCounts(r, outcomes), now)
	if next == nil {
		return nil
	}
	if werr := s.writeRollout(ctx, next); werr != nil {
		return werr
	}
	if next.State != r.State || next.Step != r.Step {
		s.Log.Info().Str("policy_id", id).Str("rollout_id", next.RolloutID).Str("state", next.State).Int32("step", next.Step+1).
			Str("reason", next.Reason).Msg("rollout moved on")
	}
	if next.Step != r.Step {
		return s.moveCohorts(ctx, next)
	}
	return nil
}

// stagedSummary is a rollout in a few words, for the status page.
func stagedSummary(r *events.PolicyRollout) string {
	return fmt.Sprintf("%s at step %d of %d", r.State, r.Step+1, len(r.Steps))
}
