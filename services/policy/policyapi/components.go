package policyapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/topology"
)

const componentExample = `{"deployment_id": "dep-1", "service_component_name": "scn-1", "policy_ids": ["DCAE.Config_VM_MEMORY"], "policy_filters": [{"filter_id": "f1", "policyName": "DCAE.Config_.*"}], "notify": {"kind": "script", "script_path": "/opt/app/reconfigure.sh"}, "config": {}}`

// ComponentAccepted is the answer to a component write.
type ComponentAccepted struct {
	ComponentID string `json:"component_id"`
	Generation  int64  `json:"generation"`
	Deleted     bool   `json:"deleted,omitempty"`
}

func (s *API) PutComponent(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("component_id")
	if err := CheckID("component_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v: the last segment of /v1/components/{component_id} names the component", err)
	}
	var req ComponentRequest
	if e := web.DecodeJSON(w, r, web.MaxRequestBytes, &req, true, componentExample); e != nil {
		return e
	}
	if e := s.Views.Need(topology.DeployComponents); e != nil {
		return e
	}
	unlock := s.Lock(id)
	defer unlock()
	caller := web.PrincipalOf(r.Context())
	existing, _ := s.components.get(id)
	if e := mayWriteComponent(caller, id, existing, &req.Tenant); e != nil {
		return e
	}
	gen := s.components.generation(id) + 1
	c, err := BuildComponent(id, req, gen, time.Now(), s.rules)
	if err != nil {
		return web.Errorf(http.StatusBadRequest, "component %s: %v", id, err)
	}
	unlockFolder := s.Lock("folder " + c.ServiceComponentName)
	defer unlockFolder()
	if e := s.Views.Need(topology.AdmissionVerdicts); e != nil {
		return e
	}
	if e := s.claimNames(admit.Claim{Tenant: c.Tenant, DeploymentID: c.DeploymentID, ComponentID: id, Folder: c.ServiceComponentName,
		Operator: caller.Role != auth.RoleTenant}); e != nil {
		return e
	}
	if c.Notify.Kind == events.NotifyScript {
		if e := s.Views.Need(topology.PolicyCatalog); e != nil {
			return e
		}
		if err := s.checkScriptNotification(c); err != nil {
			return web.Errorf(http.StatusBadRequest, "component %s: %v", id, err)
		}
	}
	if len(c.PolicyIDs) > 0 {
		if e := s.Views.Need(topology.PolicyCatalog); e != nil {
			return e
		}
		if e := s.mayHoldPolicies(c); e != nil {
			return e
		}
	}
	value, err := s.Env.Codec.Encode(c)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode component %s: %v", id, err)
	}
	rec := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.DeployComponents), Key: []byte(id), Value: value}
	if err := s.Produce(r.Context(), rec); err != nil {
		return s.ProduceFailed(err)
	}
	s.WaitOwnWrite(r.Context(), s.components, rec)
	s.Log.Info().Str("component_id", id).Int64("generation", gen).Str("deployment_id", c.DeploymentID).Str("by", web.DescribeCaller(caller)).Msg("component registered")
	web.WriteJSON(w, http.StatusAccepted, ComponentAccepted{ComponentID: id, Generation: gen})
	return nil
}

func (s *API) DeleteComponent(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("component_id")
	if err := CheckID("component_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v: the last segment of /v1/components/{component_id} names the component", err)
	}
	if e := s.Views.Need(topology.DeployComponents); e != nil {
		return e
	}
	unlock := s.Lock(id)
	defer unlock()
	c, ok := s.components.get(id)
	if !ok {
		return web.Errorf(http.StatusNotFound, "component %s is not registered (it is not in %s); check the id with GET /v1/components/%s/status, or it was deleted already",
			id, s.Env.Kafka.Topic(topology.DeployComponents), id)
	}
	caller := web.PrincipalOf(r.Context())
	if e := mayWriteComponent(caller, id, c, nil); e != nil {
		return e
	}
	rec := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.DeployComponents), Key: []byte(id)}
	if err := s.Produce(r.Context(), rec); err != nil {
		return s.ProduceFailed(err)
	}
	s.WaitOwnWrite(r.Context(), s.components, rec)
	s.Log.Info().Str("component_id", id).Str("by", web.DescribeCaller(caller)).Msg("component deleted")
	web.WriteJSON(w, http.StatusAccepted, ComponentAccepted{ComponentID: id, Generation: c.Generation, Deleted: true})
	return nil
}

// ComponentStatus is the answer of GET /v1/components/{id}/status.
type ComponentStatus struct {
	ComponentID          string `json:"component_id"`
	DeploymentID         string `json:"deployment_id,omitempty"`
	ServiceComponentName string `json:"service_component_name"`
	// Registered is false once the component was deleted (or before the
	// registration was read).
	Registered bool   `json:"registered"`
	Generation int64  `json:"generation,omitempty"`
	NotifyKind string `json:"notify_kind,omitempty"`
	// Applied is what consul-writer last wrote to Consul; nil before the
	// first write.
	Applied *AppliedStatus `json:"applied"`
	// Notification is the agent-notifier's claim in Consul
	// (<scn>:policies/notified), URLs in it masked; nil when nothing was
	// notified.
	Notification json.RawMessage `json:"notification"`
	// Notified is true when the component was told of the last applied
	// update: its claim covers it and records success (exit code 0). A
	// notification that failed, or is still under way, is not notified.
	Notified bool           `json:"notified"`
	Policies []PolicyStatus `json:"policies"`
}

// AppliedStatus is the component's last write to Consul.
type AppliedStatus struct {
	UpdateID      string    `json:"update_id"`
	Action        string    `json:"action"`
	Generation    int64     `json:"generation"`
	ConsulIndex   int64     `json:"consul_index"`
	PoliciesCount int32     `json:"policies_count"`
	Uninstalled   bool      `json:"uninstalled"`
	AppliedAt     time.Time `json:"applied_at"`
}

// PolicyStatus is one policy of a component: the version in Consul, the
// update that brought it and whether the component was notified of it (as
// far as the claim shows: the last notification covers the policy's
// update and succeeded).
type PolicyStatus struct {
	PolicyID      string `json:"policy_id"`
	PolicyVersion string `json:"policy_version"`
	UpdateID      string `json:"update_id"`
	Generation    int64  `json:"generation"`
	ConsulIndex   int64  `json:"consul_index"`
	Notified      bool   `json:"notified"`
}

// covers reports whether a claim records that the component was told of
// the update (updateID, generation): it covers the update and the script
// or webhook succeeded (exit code 0).
func covers(c *consulkv.Claim, updateID string, generation int64) bool {
	return c != nil && c.ExitCode != nil && *c.ExitCode == 0 && (c.UpdateID == updateID || c.Generation >= generation)
}

// maskedClaim is the claim as the status shows it: every URL in its
// string fields masked (a claim written before URLs were masked may hold
// credentials).
func maskedClaim(raw []byte) (json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if s, ok := v.(string); ok {
			m[k] = notifytarget.MaskText(s)
		}
	}
	return json.Marshal(m)
}

func (s *API) ComponentStatus(w http.ResponseWriter, r *http.Request) *web.Error {
	id := r.PathValue("component_id")
	if err := CheckID("component_id", id); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.DeployComponents, topology.ComponentApplied); e != nil {
		return e
	}
	c, registered := s.components.get(id)
	a, applied := s.applied.get(id)
	if !registered && !applied {
		return web.Errorf(http.StatusNotFound, "component %s is unknown: neither %s nor %s has it; register it with PUT /v1/components/%s",
			id, s.Env.Kafka.Topic(topology.DeployComponents), s.Env.Kafka.Topic(topology.ComponentApplied), id)
	}
	if e := mayReadComponent(web.PrincipalOf(r.Context()), id, c, registered); e != nil {
		return e
	}
	st := ComponentStatus{ComponentID: id, Registered: registered, Policies: []PolicyStatus{}, Notification: json.RawMessage("null")}
	if registered {
		st.DeploymentID = c.DeploymentID
		st.ServiceComponentName = c.ServiceComponentName
		st.Generation = c.Generation
		st.NotifyKind = c.Notify.Kind
	}
	if !applied {
		web.WriteJSON(w, http.StatusOK, st)
		return nil
	}
	if st.ServiceComponentName == "" {
		st.ServiceComponentName = a.ServiceComponentName
	}
	if st.NotifyKind == "" {
		st.NotifyKind = a.Notify.Kind
	}
	st.Applied = &AppliedStatus{
		UpdateID: a.UpdateID, Action: a.Action, Generation: a.Generation, ConsulIndex: a.ConsulIndex,
		PoliciesCount: a.PoliciesCount, Uninstalled: a.Uninstalled, AppliedAt: a.AppliedAt,
	}

	scn := a.ServiceComponentName
	if scn == "" {
		scn = st.ServiceComponentName
	}
	var pair *capi.KVPair
	if scn != "" {
		key := consulkv.ClaimKey(scn)
		var err error
		pair, _, err = s.consul.KV().Get(key, (&capi.QueryOptions{}).WithContext(r.Context()))
		if err != nil {
			return s.consulFailed(key, err)
		}
	}
	var claim *consulkv.Claim
	if pair != nil && len(pair.Value) > 0 {
		cl, err := consulkv.ParseClaim(pair.Value)
		if err != nil {
			return web.Errorf(http.StatusBadGateway, "Consul key %s is not the notifier's JSON claim: %v", pair.Key, err)
		}
		claim = &cl
		masked, err := maskedClaim(pair.Value)
		if err != nil {
			return web.Errorf(http.StatusBadGateway, "Consul key %s is not the notifier's JSON claim: %v", pair.Key, err)
		}
		st.Notification = masked
	}
	st.Notified = covers(claim, a.UpdateID, a.Generation)
	for pid, p := range a.Policies {
		st.Policies = append(st.Policies, PolicyStatus{
			PolicyID:      pid,
			PolicyVersion: p.Version,
			UpdateID:      p.UpdateID,
			Generation:    p.Generation,
			ConsulIndex:   p.ConsulIndex,
			Notified:      covers(claim, p.UpdateID, p.Generation),
		})
	}
	sort.Slice(st.Policies, func(i, j int) bool { return st.Policies[i].PolicyID < st.Policies[j].PolicyID })
	web.WriteJSON(w, http.StatusOK, st)
	return nil
}
