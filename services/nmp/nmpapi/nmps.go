package nmpapi

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/topology"
)

// inOrg checks the org name, that the org is one the API serves (when
// Options.Orgs names them) and that the caller may act in it.
func (s *API) inOrg(r *http.Request) (string, *web.Error) {
	org := r.PathValue("org")
	if err := orgOK(org); err != nil {
		return "", web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if len(s.opts.Orgs) > 0 && !slices.Contains(s.opts.Orgs, org) {
		return "", web.Errorf(http.StatusNotFound, "unknown org %s: this hub serves the orgs %s (--orgs)", org, strings.Join(s.opts.Orgs, ", "))
	}
	p := web.PrincipalOf(r.Context())
	if (p.Role == auth.RoleTenant || p.Role == auth.RoleAgent) && p.Tenant != "" && p.Tenant != org {
		return "", web.Errorf(http.StatusForbidden, "token %s acts for org %s, not %s", p.Name, p.Tenant, org)
	}
	if p.Role == auth.RoleTenant && p.Tenant == "" {
		return "", web.Errorf(http.StatusForbidden, "token %s has role tenant without a tenant; it may act in no org", p.Name)
	}
	return org, nil
}

func (s *API) nmpViews() *web.Error {
	return s.Views.Need(topology.NMPPolicies, topology.AgentNodes, topology.AgentStatus, topology.AgentPackages)
}

// NMPAnswer is an NMP with its name, and what publishing it does.
type NMPAnswer struct {
	Org  string        `json:"org"`
	Name string        `json:"name"`
	NMP  *nmp.Document `json:"nmp"`
	// Nodes are the nodes it applies to (enabled or not).
	Nodes []string `json:"nodes,omitempty"`
	// Conflicts are the nodes where another NMP with a different
	// intent is already enacted, so this one is ignored there: node ->
	// that NMP.
	Conflicts map[string]string  `json:"conflicts,omitempty"`
	DryRun    bool               `json:"dryRun,omitempty"`
	Rollout   *api.RolloutAnswer `json:"rollout,omitempty"`
}

func rolloutAnswer(ro nmp.Rollout) api.RolloutAnswer {
	return api.RolloutAnswer{Started: ro.Started, Failed: ro.Failed, PrecheckFailed: ro.PrecheckFailed, Paused: ro.Paused, Reason: ro.Reason}
}

func (s *API) ListNMPs(w http.ResponseWriter, r *http.Request) *web.Error {
	org, e := s.inOrg(r)
	if e != nil {
		return e
	}
	if e := s.nmpViews(); e != nil {
		return e
	}
	out := []NMPAnswer{}
	for _, p := range s.nm.world.Policies(org) {
		out = append(out, NMPAnswer{Org: org, Name: p.Ev.Name, NMP: nmp.ToDocument(p.Ev)})
	}
	web.WriteJSON(w, http.StatusOK, map[string]any{"org": org, "nmps": out})
	return nil
}

func (s *API) lookupNMP(r *http.Request) (*nmp.Policy, *web.Error) {
	org, e := s.inOrg(r)
	if e != nil {
		return nil, e
	}
	name := r.PathValue("name")
	if err := nmp.CheckName("NMP name", name); err != nil {
		return nil, web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.nmpViews(); e != nil {
		return nil, e
	}
	p := s.nm.world.Policy(keyOf(org, name))
	if p == nil {
		return nil, web.Errorf(http.StatusNotFound, "org %s has no node management policy %s", org, name)
	}
	return p, nil
}

func (s *API) GetNMP(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.lookupNMP(r)
	if e != nil {
		return e
	}
	ro := rolloutAnswer(s.nm.world.Rollout(p.Key))
	web.WriteJSON(w, http.StatusOK, NMPAnswer{Org: p.Ev.Org, Name: p.Ev.Name, NMP: nmp.ToDocument(p.Ev), Rollout: &ro})
	return nil
}

const nmpExample = `{"constraints": ["arch == amd64"], "enabled": true, "agentUpgradePolicy": {"atLeastVersion": "current", "start": "now", "duration": 600}}`

// putNMP creates or replaces an NMP. ?dryRun=true answers what it would
// do (the nodes it applies to, the conflicts) without storing it.
func (s *API) PutNMP(w http.ResponseWriter, r *http.Request) *web.Error {
	org, e := s.inOrg(r)
	if e != nil {
		return e
	}
	name := r.PathValue("name")
	doc := &nmp.Document{}
	if e := web.DecodeJSON(w, r, nmp.MaxBodyBytes, doc, true, nmpExample); e != nil {
		return e
	}
	if doc.Owner == "" {
		doc.Owner = web.PrincipalOf(r.Context()).Name
	}
	return s.publishNMP(w, r, org, name, doc, r.URL.Query().Get("dryRun") == "true")
}

func (s *API) publishNMP(w http.ResponseWriter, r *http.Request, org, name string, doc *nmp.Document, dry bool) *web.Error {
	if e := s.nmpViews(); e != nil {
		return e
	}
	key := keyOf(org, name)
	unlock := s.Lock("nmp " + key)
	defer unlock()
	now := time.Now().UTC().Truncate(time.Millisecond)
	// lastUpdated moves forward with every change of an NMP, even two in
	// one millisecond: it orders NMPs ("the newer wins") and tells when
	// the view shows this change.
	if old := s.nm.world.Policy(key); old != nil && !now.After(old.Ev.LastUpdated) {
		now = old.Ev.LastUpdated.Add(time.Millisecond)
	}
	ev, err := nmp.Build(org, name, doc, now)
	if err != nil {
		var ref *nmp.Refusal
		if errors.As(err, &ref) {
			return web.Errorf(http.StatusConflict, "%v", err)
		}
		return web.Errorf(http.StatusBadRequest, "NMP %s: %v", key, err)
	}
	c, err := nmp.Compile(ev)
	if err != nil {
		return web.Errorf(http.StatusBadRequest, "NMP %s: %v", key, err)
	}
	ans := NMPAnswer{Org: org, Name: name, NMP: nmp.ToDocument(ev), Nodes: s.nm.world.NodesOf(c), Conflicts: s.nm.world.Conflicts(c), DryRun: dry}
	if dry {
		web.WriteJSON(w, http.StatusOK, ans)
		return nil
	}
	val, err := s.Env.Codec.Encode(ev)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode NMP %s: %v", c.Key, err)
	}
	rec := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.NMPPolicies), Key: []byte(c.Key), Value: val}
	if err := s.Produce(r.Context(), rec); err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "store NMP %s: %v; nothing was stored, retry", c.Key, err)
	}
	s.WaitOwnWrite(r.Context(), s.nm.world.Topic(topology.NMPPolicies), rec)
	web.WriteJSON(w, http.StatusOK, ans)
	return nil
}

func (s *API) DeleteNMP(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.lookupNMP(r)
	if e != nil {
		return e
	}
	unlock := s.Lock("nmp " + p.Key)
	defer unlock()
	rec := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.NMPPolicies), Key: []byte(p.Key)}
	if err := s.Produce(r.Context(), rec); err != nil {
		return web.Errorf(http.StatusServiceUnavailable, "remove NMP %s: %v; retry", p.Key, err)
	}
	s.WaitOwnWrite(r.Context(), s.nm.world.Topic(topology.NMPPolicies), rec)
	web.WriteJSON(w, http.StatusOK, map[string]any{"org": p.Ev.Org, "name": p.Ev.Name, "removed": true})
	return nil
}

func (s *API) NmpNodes(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.lookupNMP(r)
	if e != nil {
		return e
	}
	nodes := []string{}
	versions := map[string]string{} // node -> the agent version it registered
	for _, k := range s.nm.world.NodesOf(p) {
		_, n := splitKey(k)
		nodes = append(nodes, n)
		if node := s.nm.world.Node(k); node != nil {
			versions[n] = node.Ev.SoftwareVersion
		}
	}
	web.WriteJSON(w, http.StatusOK, api.NMPNodes{Org: p.Ev.Org, Name: p.Ev.Name, Enabled: p.Ev.Enabled, Nodes: nodes, Versions: versions,
		Conflicts: s.nm.world.Conflicts(p)})
	return nil
}

func (s *API) NmpStatus(w http.ResponseWriter, r *http.Request) *web.Error {
	p, e := s.lookupNMP(r)
	if e != nil {
		return e
	}
	counts, failing, precheck, rolledBack := s.nm.stateCounts(p)
	n := 0
	for _, c := range counts {
		n += c
	}
	web.WriteJSON(w, http.StatusOK, api.NMPStatus{Org: p.Ev.Org, Name: p.Ev.Name, Enabled: p.Ev.Enabled, Nodes: n, States: counts, Failing: failing,
		PrecheckFailed: precheck, RolledBack: rolledBack, Rollout: rolloutAnswer(s.nm.world.Rollout(p.Key))})
	return nil
}

// nmpAction is POST .../nmps/{name}/enable|disable|resume|rollback.
// enable takes {"confirmAllNodes": true} for an NMP that reaches every node.
func (s *API) NmpAction(act string) web.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) *web.Error { return s.doNMPAction(w, r, act) }
}

// MaxActionBytes bounds the optional body of an NMP action.
const MaxActionBytes = 4096

func (s *API) doNMPAction(w http.ResponseWriter, r *http.Request, act string) *web.Error {
	p, e := s.lookupNMP(r)
	if e != nil {
		return e
	}
	var body struct {
		ConfirmAllNodes bool `json:"confirmAllNodes"`
	}
	if e := web.DecodeOptionalJSON(w, r, MaxActionBytes, &body, `{"confirmAllNodes": true}, or no body`); e != nil {
		return e
	}
	doc := nmp.ToDocument(p.Ev)
	doc.LastUpdated = ""
	// Only enabling needs a confirmation: an NMP stored enabled was
	// confirmed when it was enabled.
	doc.ConfirmAllNodes = true
	switch act {
	case "enable":
		doc.Enabled = true
		doc.ConfirmAllNodes = body.ConfirmAllNodes
	case "disable":
		doc.Enabled = false
	case "resume":
		doc.ResumedAt = time.Now().UTC().Format(time.RFC3339Nano)
		doc.Rollback = false
	case "rollback":
		doc.Rollback = true
	default:
		return web.Errorf(http.StatusNotFound, "no action %q on an NMP; use enable, disable, resume or rollback", act)
	}
	return s.publishNMP(w, r, p.Ev.Org, p.Ev.Name, doc, false)
}
