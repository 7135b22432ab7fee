package policyapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/rollout"
	"github.com/policyflow/policyflow/topology"
)

// Source names the North API in the events it writes.
const Source = "north-api"

const (
	notificationExample = `{"loadedPolicies": [{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "versionNo": "5", "matches": {"ONAPName": "DCAE"}}], "removedPolicies": []}`
	policiesExample     = `[{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "policyVersion": "5", "policyConfigStatus": "CONFIG_RETRIEVED", "matchingConditions": {"ONAPName": "DCAE"}, "config": {"key": "value"}}]`
	catchupExample      = `{"deployment_id": "dep-1"} or {} for every deployment`
	filterExample       = `{"policyName": "DCAE.Config_.*", "onapName": "DCAE", "configAttributes": {"key1": "value1"}}`
)

// maxPushedBytes bounds the bodies one pushed notification carries, so a
// record stays under the broker's default message size.
const maxPushedBytes = 900 << 10

// NotificationAccepted names one record a notification or push produced.
type NotificationAccepted struct {
	PolicyID       string   `json:"policy_id"`
	NotificationID string   `json:"notification_id"`
	Versions       []string `json:"versions,omitempty"`
}

// NotificationsAccepted is the answer of POST /v1/pdp/notifications and
// POST /v1/policies.
type NotificationsAccepted struct {
	Notifications []NotificationAccepted `json:"notifications"`
}

func (s *API) PdpNotifications(w http.ResponseWriter, r *http.Request) *web.Error {
	var n policy.Notification
	if e := web.DecodeJSON(w, r, web.MaxRequestBytes, &n, true, notificationExample); e != nil {
		return e
	}
	if len(n.LoadedPolicies) == 0 && len(n.RemovedPolicies) == 0 {
		return web.Errorf(http.StatusBadRequest, "the notification names no policy: loadedPolicies and removedPolicies are both empty; send %s", notificationExample)
	}
	if err := n.Validate(); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if dry, e := web.DryRun(r); e != nil || dry {
		if e != nil {
			return e
		}
		return s.whatIfNotification(w, r, n)
	}
	now := time.Now().UTC()
	byID := map[string]*events.PdpNotification{}
	ids := n.PolicyIDs()
	for _, id := range ids {
		byID[id] = &events.PdpNotification{
			NotificationID:  web.NewID(),
			Source:          Source,
			ReceivedAt:      now,
			LoadedPolicies:  []events.LoadedPolicy{},
			RemovedPolicies: []events.UnloadedPolicy{},
			PushedBodies:    []string{},
		}
	}
	for _, l := range n.LoadedPolicies {
		id, _ := policy.PolicyID(l.PolicyName)
		m := l.Matches
		if m == nil {
			m = map[string]string{}
		}
		byID[id].LoadedPolicies = append(byID[id].LoadedPolicies, events.LoadedPolicy{PolicyName: l.PolicyName, VersionNo: l.VersionNo, Matches: m})
	}
	for _, rp := range n.RemovedPolicies {
		id, _ := policy.PolicyID(rp.PolicyName)
		byID[id].RemovedPolicies = append(byID[id].RemovedPolicies, events.UnloadedPolicy{PolicyName: rp.PolicyName, VersionNo: rp.VersionNo})
	}
	var recs []*kgo.Record
	out := NotificationsAccepted{Notifications: []NotificationAccepted{}}
	for _, id := range ids {
		ev := byID[id]
		value, err := s.Env.Codec.Encode(ev)
		if err != nil {
			return web.Errorf(http.StatusInternalServerError, "encode notification for %s: %v", id, err)
		}
		recs = append(recs, &kgo.Record{Topic: s.Env.Kafka.Topic(topology.PDPNotifications), Key: []byte(id), Value: value})
		var versions []string
		for _, l := range ev.LoadedPolicies {
			if l.VersionNo != "" {
				versions = append(versions, l.VersionNo)
			}
		}
		out.Notifications = append(out.Notifications, NotificationAccepted{PolicyID: id, NotificationID: ev.NotificationID, Versions: versions})
	}
	if err := s.Produce(r.Context(), recs...); err != nil {
		return s.ProduceFailed(err)
	}
	s.Log.Info().Strs("policy_ids", ids).Msg("PDP notification accepted")
	web.WriteJSON(w, http.StatusAccepted, out)
	return nil
}

// pushPolicies publishes policy bodies pushed with no PDP behind them: one
// policy_body object or an array of them, each checked by policy.Check
// (the rules are in the policy package doc). One refused body refuses the
// whole request with 400 and the reason; what is published is each
// body's canonical JSON, grouped per policy_id.
func (s *API) PushPolicies(w http.ResponseWriter, r *http.Request) *web.Error {
	var raw json.RawMessage
	if e := web.DecodeJSON(w, r, web.MaxPoliciesRequestBytes, &raw, false, policiesExample); e != nil {
		return e
	}
	dry, e := web.DryRun(r)
	if e != nil {
		return e
	}
	if isPlanned(raw) {
		if dry {
			return s.whatIfPlanned(w, r, raw)
		}
		return s.pushPlanned(w, r, raw)
	}
	bodies := []json.RawMessage{raw}
	if t := bytes.TrimSpace(raw); t[0] == '[' {
		var err error
		if bodies, err = policy.SplitList(t); err != nil {
			return web.Errorf(http.StatusBadRequest, "%v; send a policy_body object or an array of them, e.g. %s", err, policiesExample)
		}
	}
	if len(bodies) == 0 {
		return web.Errorf(http.StatusBadRequest, "the array holds no policy; send at least one policy_body, e.g. %s", policiesExample)
	}
	if dry {
		out, e := s.whatIfOf(r, bodies)
		if e != nil {
			return e
		}
		web.WriteJSON(w, http.StatusOK, out)
		return nil
	}
	type group struct {
		id       string
		bodies   []string
		versions []string
		size     int
	}
	var groups []*group
	open := map[string]*group{}
	for i, b := range bodies {
		c, e := s.checkPushed(i, b)
		if e != nil {
			return e
		}
		g := open[c.PolicyID]
		if g == nil || g.size+len(c.JSON) > maxPushedBytes {
			g = &group{id: c.PolicyID}
			open[c.PolicyID] = g
			groups = append(groups, g)
		}
		g.bodies = append(g.bodies, string(c.JSON))
		g.versions = append(g.versions, c.PolicyVersion)
		g.size += len(c.JSON)
	}
	now := time.Now().UTC()
	var recs []*kgo.Record
	out := NotificationsAccepted{Notifications: []NotificationAccepted{}}
	for _, g := range groups {
		ev := &events.PdpNotification{
			NotificationID:  web.NewID(),
			Source:          Source,
			ReceivedAt:      now,
			LoadedPolicies:  []events.LoadedPolicy{},
			RemovedPolicies: []events.UnloadedPolicy{},
			PushedBodies:    g.bodies,
		}
		value, err := s.Env.Codec.Encode(ev)
		if err != nil {
			return web.Errorf(http.StatusInternalServerError, "encode pushed policies of %s: %v", g.id, err)
		}
		recs = append(recs, &kgo.Record{Topic: s.Env.Kafka.Topic(topology.PDPNotifications), Key: []byte(g.id), Value: value})
		out.Notifications = append(out.Notifications, NotificationAccepted{PolicyID: g.id, NotificationID: ev.NotificationID, Versions: g.versions})
	}
	if err := s.Produce(r.Context(), recs...); err != nil {
		return s.ProduceFailed(err)
	}
	s.Log.Info().Int("policies", len(bodies)).Msg("policies pushed")
	web.WriteJSON(w, http.StatusAccepted, out)
	return nil
}

func (s *API) Catchup(w http.ResponseWriter, r *http.Request) *web.Error {
	var body api.CatchupBody
	if e := web.DecodeOptionalJSON(w, r, web.MaxRequestBytes, &body, catchupExample); e != nil {
		return e
	}
	req := &events.CatchupRequest{
		RequestID:   web.NewID(),
		Scope:       events.ScopeAll,
		Reason:      body.Reason,
		RequestedAt: time.Now().UTC(),
	}
	if req.Reason == "" {
		req.Reason = "requested through the North API"
	}
	key := events.ScopeAll
	if body.DeploymentID != "" {
		if err := CheckID("deployment_id", body.DeploymentID); err != nil {
			return web.Errorf(http.StatusBadRequest, "%v", err)
		}
		if e := s.Views.Need(topology.DeployComponents); e != nil {
			return e
		}
		if !s.components.hasDeployment(body.DeploymentID) {
			return web.Errorf(http.StatusNotFound, "no registered component belongs to deployment %s, so there is nothing to catch up; check the deployment_id, or leave it out to catch up every deployment",
				body.DeploymentID)
		}
		req.Scope = events.ScopeDeployment
		d := body.DeploymentID
		req.DeploymentID = &d
		key = d
	}
	n, e := s.requestCatchup(r, req, key)
	if e != nil {
		return e
	}
	s.Log.Info().Str("request_id", req.RequestID).Str("scope", req.Scope).Str("deployment_id", body.DeploymentID).Msg("catch-up requested")
	web.WriteJSON(w, http.StatusAccepted, api.CatchupAccepted{RequestID: req.RequestID, Scope: req.Scope, DeploymentID: body.DeploymentID, Partitions: n})
	return nil
}

// requestCatchup writes req, keyed by key, on every partition of
// catchup.requests, and says on how many.
func (s *API) requestCatchup(r *http.Request, req *events.CatchupRequest, key string) (int, *web.Error) {
	n, e := s.ProduceEveryPartition(r.Context(), topology.CatchupRequests, key, req)
	return int(n), e
}

// RenotifyAccepted is the answer of POST
// /v1/components/{component_id}/renotify: the catch-up request that
// carries it.
type RenotifyAccepted struct {
	RequestID    string `json:"request_id"`
	ComponentID  string `json:"component_id"`
	DeploymentID string `json:"deployment_id"`
	Partitions   int    `json:"partitions"`
}

// renotify asks for a component to be notified again of what Consul
// holds, however its last notification ended: a catch-up of its
// deployment that names it, which the agent-notifier runs once.
func (s *API) Renotify(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("component_id")
	if err := CheckID("component_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.DeployComponents); e != nil {
		return e
	}
	c, ok := s.components.get(id)
	if !ok {
		return web.Errorf(http.StatusNotFound, "no registered component %s: check the component_id (policyctl component list)", id)
	}
	if notifiesNothing(c.Notify) {
		return web.Errorf(http.StatusConflict, "component %s has no notify target (notify kind none): it reads its policies from Consul and has nothing to be notified by", id)
	}
	dep := c.DeploymentID
	req := &events.CatchupRequest{RequestID: web.NewID(), Scope: events.ScopeDeployment, DeploymentID: &dep, ComponentID: &id,
		Reason: "renotify requested through the North API", RequestedAt: time.Now().UTC()}
	n, e := s.requestCatchup(r, req, dep)
	if e != nil {
		return e
	}
	s.Log.Info().Str("request_id", req.RequestID).Str("component_id", id).Str("deployment_id", dep).Msg("renotify requested")
	web.WriteJSON(w, http.StatusAccepted, RenotifyAccepted{RequestID: req.RequestID, ComponentID: id, DeploymentID: dep, Partitions: n})
	return nil
}

// checkPushed is the North API's check of the i-th pushed body: policy.Check
// (400), then olderThanLoaded (409). c is set when policy.Check accepted
// the body.
func (s *API) checkPushed(i int, b []byte) (c policy.Checked, _ *web.Error) {
	c, err := policy.Check(b)
	if err != nil {
		return c, web.Errorf(http.StatusBadRequest, "policies[%d] is refused: %v; nothing of this request was published", i, err)
	}
	return c, s.olderThanLoaded(i, c)
}

// olderThanLoaded refuses (409) a pushed body whose version is older than
// the one the catalog holds: pdp-ingest would keep the loaded one and
// only log the push, so the caller is told here what would happen.
// Version fencing stays pdp-ingest's (the catalog read here may be a
// moment behind).
func (s *API) olderThanLoaded(i int, c policy.Checked) *web.Error {
	if s.Views.Need(topology.PolicyCatalog) != nil {
		return nil
	}
	e, ok := s.catalog.get(c.PolicyID)
	if !ok {
		return nil
	}
	loaded, ok := policy.ParseVersion(e.PolicyVersion)
	if !ok || c.Version >= loaded {
		return nil
	}
	return web.Errorf(http.StatusConflict, "policies[%d]: version %d of %s is older than the loaded version %s, which stays in force; nothing of this request was published (push a version greater than %s)",
		i, c.Version, c.PolicyID, e.PolicyVersion, e.PolicyVersion)
}

func (s *API) PolicyLatest(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("policy_id")
	if id == "" {
		return web.Errorf(http.StatusBadRequest, "policy_id is missing: GET /policy_latest/{policy_id}")
	}
	if e := s.Views.Need(topology.PolicyCatalog, topology.PolicyRollouts); e != nil {
		return e
	}
	e, ok := s.catalog.get(id)
	if !ok || !mayReadPolicy(web.PrincipalOf(r.Context()), e) {
		// Another tenant's policy answers as one that does not exist.
		hint := "the PDP has not announced it, or it was removed; announce it with POST /v1/pdp/notifications or push it with POST /v1/policies"
		if derived, err := policy.PolicyID(id); err == nil && derived != id {
			hint = fmt.Sprintf("%q is a full policyName; ask for its policy_id %q", id, derived)
		}
		return web.Errorf(http.StatusNotFound, "no policy %s in the policy catalog: %s", id, hint)
	}
	lp := api.LatestPolicy{PolicyID: e.PolicyID, PolicyBody: e.Body}
	if e.Status == events.StatusErrored {
		// The PDP's latest version is invalid: the last valid one stays
		// in force, and the answer says so.
		lp.Status, lp.Error = e.Status, e.Error
	}
	if ro, _ := s.staged.Value(id); ro != nil {
		if in, decided := rollout.InForce(ro, e.PolicyVersion, e.bodyHash()); decided {
			lp.AbortedVersion, lp.InForce = e.PolicyVersion, &api.InForce{None: true}
			if in != nil {
				lp.InForce = &api.InForce{PolicyVersion: in.PolicyVersion, PolicyBody: json.RawMessage(in.Body), Revision: in.Revision}
			}
		}
	}
	web.WriteJSON(w, http.StatusOK, lp)
	return nil
}

// filterBody is the body of POST /policies_latest: a PDP /getConfig-style
// policy filter, given as is or under "policy_filter".
type filterBody struct {
	PolicyName       string          `json:"policyName"`
	ConfigName       string          `json:"configName"`
	OnapName         string          `json:"onapName"`
	ConfigAttributes json.RawMessage `json:"configAttributes"`
	Unique           bool            `json:"unique"`
	// Carried by some callers; ignored.
	FilterID  string `json:"filter_id"`
	RequestID string `json:"requestID"`
}

// compile turns the filter into a compiled policy filter, or says what to
// fix. maxRegex bounds policyName, as it bounds a component's filters.
func (f filterBody) compile(maxRegex int) (*policy.CompiledFilter, error) {
	if f.PolicyName == "" {
		return nil, errors.New("policyName is missing; a filter without policyName matches nothing: give a regular expression such as \"DCAE.Config_.*\"")
	}
	if n := len(f.PolicyName); n > maxRegex {
		return nil, fmt.Errorf("policyName is %d bytes; at most %d are allowed (--max-filter-regex-bytes): shorten the regular expression", n, maxRegex)
	}
	var attrs map[string]any
	if raw := bytes.TrimSpace(f.ConfigAttributes); len(raw) > 0 {
		m, err := policy.DecodeConfigAttributes(string(raw))
		if err != nil {
			return nil, fmt.Errorf("configAttributes must be a JSON object: %w", err)
		}
		attrs = m
	}
	cf, err := policy.CompileFilter(policy.Filter{
		PolicyName: f.PolicyName, ConfigName: f.ConfigName, OnapName: f.OnapName,
		ConfigAttributes: attrs, Unique: f.Unique,
	})
	if err != nil {
		return nil, fmt.Errorf("%w; fix the expression (Go RE2 syntax: no lookaround or backreferences)", err)
	}
	return cf, nil
}

// parseFilterBody reads the body of POST /policies_latest: a filter,
// given as is or as the only field "policy_filter", with no field
// filterBody does not know and a policyName of at most maxRegex bytes.
func parseFilterBody(data []byte, maxRegex int) (*policy.CompiledFilter, *web.Error) {
	var wrapper map[string]json.RawMessage
	if e := web.DecodeBytes(data, &wrapper, false, filterExample); e != nil {
		return nil, e
	}
	if inner, ok := wrapper["policy_filter"]; ok && len(wrapper) == 1 {
		data = inner
	}
	var f filterBody
	if e := web.DecodeBytes(data, &f, true, filterExample); e != nil {
		return nil, e
	}
	cf, err := f.compile(maxRegex)
	if err != nil {
		return nil, web.Errorf(http.StatusBadRequest, "policy filter: %v", err)
	}
	return cf, nil
}

func (s *API) PoliciesLatest(w http.ResponseWriter, r *http.Request) *web.Error {
	data, e := web.ReadBody(w, r, web.MaxRequestBytes)
	if e != nil {
		return e
	}
	cf, e := parseFilterBody(data, s.rules.maxRegex())
	if e != nil {
		return e
	}
	if e := s.Views.Need(topology.PolicyCatalog); e != nil {
		return e
	}
	out := map[string]api.LatestPolicy{}
	for _, e := range s.catalog.matching(cf, web.PrincipalOf(r.Context())) {
		out[e.PolicyID] = api.LatestPolicy{PolicyID: e.PolicyID, PolicyBody: e.Body}
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// consulValue carries a Consul value as JSON when it is JSON, else as a
// JSON string.
func consulValue(v []byte) json.RawMessage {
	if len(bytes.TrimSpace(v)) > 0 && json.Valid(v) {
		return json.RawMessage(v)
	}
	s, _ := json.Marshal(string(v))
	return s
}

func (s *API) ServiceComponentAll(w http.ResponseWriter, r *http.Request) *web.Error {
	scn := r.PathValue("service_component_name")
	if err := CheckID("service_component_name", scn); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	caller := web.PrincipalOf(r.Context())
	if e := s.mayReadFolder(caller, scn); e != nil {
		return e
	}
	if caller.Role == auth.RoleTenant {
		if e := s.Views.Need(topology.PolicyCatalog); e != nil {
			return e
		}
	}
	q := (&capi.QueryOptions{}).WithContext(r.Context())
	kv := s.consul.KV()
	cfgPair, _, err := kv.Get(consulkv.ConfigKey(scn), q)
	if err != nil {
		return s.consulFailed(consulkv.ConfigKey(scn), err)
	}
	prefix := consulkv.Prefix(scn)
	pairs, meta, err := kv.List(prefix, q)
	if err != nil {
		return s.consulFailed(prefix, err)
	}
	if meta != nil && meta.ResultsFilteredByACLs {
		// Consul leaves out, without an error, the keys the token may
		// not read: the folder would be shown incomplete.
		return s.consulDenied(prefix, true)
	}
	out := map[string]json.RawMessage{}
	items := []json.RawMessage{}
	event := json.RawMessage("null")
	for _, p := range pairs {
		pid, isItem := consulkv.ItemPolicyID(scn, p.Key)
		switch rest := strings.TrimPrefix(p.Key, prefix); {
		case isItem:
			// A tenant is not shown another tenant's policy, even one
			// written to its folder before owners were checked.
			if e, ok := s.catalog.get(pid); ok && !mayReadPolicy(caller, e) {
				continue
			}
			items = append(items, consulValue(p.Value))
		case p.Key == consulkv.EventKey(scn):
			event = consulValue(p.Value)
		case strings.HasPrefix(p.Key, consulkv.Folder(scn)):
			// Other bookkeeping of the policies folder (the notifier's
			// claim, folder placeholders).
		case rest != "" && !strings.Contains(rest, "/") && rest != "config" && rest != "policies":
			out[rest] = consulValue(p.Value)
		}
	}
	switch {
	case cfgPair != nil:
		out["config"] = consulValue(cfgPair.Value)
	default:
		if e := s.Views.Need(topology.DeployComponents); e != nil {
			return e
		}
		c, ok := s.components.byServiceComponent(scn)
		switch {
		case ok:
			out["config"] = json.RawMessage(c.Config)
		case len(pairs) == 0:
			return web.Errorf(http.StatusNotFound, "no service component %s: Consul has no key %s or %s* and no registered component has that service_component_name; register it with PUT /v1/components/{component_id}",
				scn, scn, scn+":")
		default:
			out["config"] = json.RawMessage("{}")
		}
	}
	pol, err := json.Marshal(map[string]any{"items": items, "event": event})
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode policies of %s: %v", scn, err)
	}
	out["policies"] = pol
	// The seed's answer carries when it was made and the request's id
	// (the caller's X-ONAP-RequestID, else a new one).
	rid := requestID(w, r)
	ts, _ := json.Marshal(time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
	out["timestamp"], out["requestID"] = ts, json.RawMessage(strconv.Quote(rid))
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// HeaderRequestID is ONAP's request id header: given by a caller, it is
// echoed in the answer (and in the body where ONAP's answer names it).
const HeaderRequestID = "X-ONAP-RequestID"

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestID is the caller's X-ONAP-RequestID when it is a plain id of up
// to 64 characters, else a new UUID; it is set on the answer's header.
func requestID(w http.ResponseWriter, r *http.Request) string {
	id := r.Header.Get(HeaderRequestID)
	if !requestIDPattern.MatchString(id) {
		id = web.NewUUID()
	}
	w.Header().Set(HeaderRequestID, id)
	return id
}

// consulFailed is the answer to a failed read of key (a key prefix when
// it ends in ':') from Consul: 502, saying what to fix on the North API's
// side: the right its token lacks, the token Consul does not know, or the
// agent not reached.
func (s *API) consulFailed(key string, err error) *web.Error {
	switch {
	case consulkv.TokenRefused(err):
		return web.Errorf(http.StatusBadGateway, "read %s from Consul at %s: Consul refused the North API's token (ACL not found); check the North API's --consul-token (PF_CONSUL_TOKEN or CONSUL_HTTP_TOKEN)", key, s.opts.Consul.Addr)
	case consulkv.Denied(err):
		return s.consulDenied(key, strings.HasSuffix(key, ":"))
	}
	return web.Errorf(http.StatusBadGateway, "read %s from Consul at %s: %v; check --consul-addr and that Consul is up", key, s.opts.Consul.Addr, err)
}

// consulDenied is the answer to a read of key (or of the keys under it,
// prefix) that Consul denied the North API's token: 502 with the rule to
// grant that token.
func (s *API) consulDenied(key string, prefix bool) *web.Error {
	rule := fmt.Sprintf("key %q { policy = \"read\" }", key)
	if prefix {
		rule = fmt.Sprintf("key_prefix %q { policy = \"read\" }", key)
	}
	return web.Errorf(http.StatusBadGateway, "Consul at %s denied the North API's token the right to read %s; grant the token %s", s.opts.Consul.Addr, key, rule)
}
