package admissionapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/placement"
	"github.com/policyflow/policyflow/topology"
)

const datacenterExample = `{"id": "dc1", "levels": [{"name": "rack"}, {"name": "pm", "within": ["rack"]}], "dimensions": ["vcpu"], "location": [{"id": "r1", "level": "rack"}, {"id": "pm1", "level": "pm", "parent": "r1", "capacity": [16]}], "network": [{"id": "tor1"}, {"id": "pm1", "parent": "tor1", "bandwidth": 1e9}]}`

const placementExample = `{"datacenter": "dc1", "resources": [{"id": "vm1", "kind": "vm", "demand": [2]}, {"id": "vm2", "kind": "vm", "demand": [2]}], "groups": [{"id": "g", "members": ["vm1", "vm2"]}], "placement_policies": [{"id": "apart", "type": "anti-collocation", "mode": "hard", "applies_to": ["g"], "properties": {"level": "pm"}}]}`

// model is the indexed model of a datacenter that validates.
func (v *datacentersView) model(id string) (*placement.Model, bool) {
	d, ok := v.get(id)
	if !ok || d.model == nil {
		return nil, false
	}
	return d.model, true
}

func (v *datacentersView) list() []*datacenter { return v.Sorted() }

// DatacenterAnswer is a datacenter model as the API shows it.
type DatacenterAnswer struct {
	DatacenterID string   `json:"datacenter_id"`
	Leaves       int      `json:"leaves"`
	Levels       []string `json:"levels"`
	Dimensions   []string `json:"dimensions"`
	UpdatedBy    string   `json:"updated_by,omitempty"`
	Created      string   `json:"created"`
	Updated      string   `json:"updated"`
	// Error says why a record written around the API does not validate.
	Error string `json:"error,omitempty"`
	// Model is the whole model (GET of one datacenter, PUT).
	Model json.RawMessage `json:"model,omitempty"`
}

// DatacenterList is the answer of GET /v1/datacenters.
type DatacenterList struct {
	Datacenters []DatacenterAnswer `json:"datacenters"`
}

func datacenterAnswer(d *datacenter, withModel bool) DatacenterAnswer {
	a := DatacenterAnswer{DatacenterID: d.rec.DatacenterID, Leaves: int(d.rec.Leaves), Levels: []string{}, Dimensions: []string{},
		UpdatedBy: d.rec.UpdatedBy, Created: d.rec.Created.UTC().Format(time.RFC3339Nano), Updated: d.rec.Updated.UTC().Format(time.RFC3339Nano)}
	if d.model != nil {
		a.Levels = d.model.LevelNames()
		a.Dimensions = append(a.Dimensions, d.model.Datacenter().Dimensions...)
	}
	if d.err != nil {
		a.Error = d.err.Error()
	}
	if withModel {
		a.Model = json.RawMessage(d.rec.Model)
	}
	return a
}

func (s *API) ListDatacenters(w http.ResponseWriter, r *http.Request) *web.Error {
	if e := s.Views.Need(topology.Datacenters); e != nil {
		return e
	}
	out := DatacenterList{Datacenters: []DatacenterAnswer{}}
	for _, d := range s.dcs.list() {
		out.Datacenters = append(out.Datacenters, datacenterAnswer(d, false))
	}
	web.WriteJSON(w, http.StatusOK, out)
	return nil
}

// datacenterID is the id in the path, checked.
func datacenterID(r *http.Request) (string, *web.Error) {
	id := r.PathValue("datacenter_id")
	if err := check.ID("", id); err != nil {
		return "", web.Errorf(http.StatusBadRequest, "datacenter_id %v: the segment after /v1/datacenters/ names the datacenter", err)
	}
	return id, nil
}

// datacenterOf is the datacenter the path names: 404 when there is none.
func (s *API) datacenterOf(r *http.Request) (*datacenter, *web.Error) {
	id, e := datacenterID(r)
	if e != nil {
		return nil, e
	}
	if e := s.Views.Need(topology.Datacenters); e != nil {
		return nil, e
	}
	d, ok := s.dcs.get(id)
	if !ok {
		return nil, web.Errorf(http.StatusNotFound, "datacenter %s does not exist; GET /v1/datacenters lists the datacenters, PUT /v1/datacenters/%s stores one", id, id)
	}
	return d, nil
}

func (s *API) GetDatacenter(w http.ResponseWriter, r *http.Request) *web.Error {
	d, e := s.datacenterOf(r)
	if e != nil {
		return e
	}
	web.WriteJSON(w, http.StatusOK, datacenterAnswer(d, true))
	return nil
}

// putDatacenter stores a datacenter model: 400 listing every problem of
// a model that does not validate.
func (s *API) PutDatacenter(w http.ResponseWriter, r *http.Request) *web.Error {
	id, e := datacenterID(r)
	if e != nil {
		return e
	}
	data, e := web.ReadBody(w, r, placement.MaxDatacenterBytes)
	if e != nil {
		return e
	}
	var dc placement.Datacenter
	if e := web.DecodeBytes(data, &dc, true, datacenterExample); e != nil {
		return e
	}
	if dc.ID == "" {
		dc.ID = id
	}
	if dc.ID != id {
		return web.Errorf(http.StatusBadRequest, "id: the model is datacenter %q but the path names %q; make them the same", dc.ID, id)
	}
	m, err := placement.Compile(&dc)
	if err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	canon, err := dc.JSON()
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode datacenter %s: %v", id, err)
	}
	if e := s.Views.Need(topology.Datacenters); e != nil {
		return e
	}
	unlock := s.Lock("datacenter " + id)
	defer unlock()
	if e := s.Views.Need(topology.Deployments); e != nil {
		return e
	}
	// The deployments on it must fit the new model: their leaves kept,
	// with the capacity and bandwidth they use.
	if _, used := s.deps.on(id); !used.Empty() {
		if ps := m.Holds(used); len(ps) > 0 {
			return web.Errorf(http.StatusConflict, "datacenter %s would not hold what is deployed on it: %s; delete those deployments first (DELETE /v1/deployments/{deployment_id}) or keep their leaves and capacity", id, strings.Join(ps, "; "))
		}
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := &events.Datacenter{DatacenterID: id, Model: string(canon), Leaves: int32(m.Leaves()), UpdatedBy: web.PrincipalOf(r.Context()).Name, Created: now, Updated: now}
	if cur, ok := s.dcs.get(id); ok {
		rec.Created = cur.rec.Created
	}
	value, err := s.Env.Codec.Encode(rec)
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "encode datacenter %s: %v", id, err)
	}
	kr := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.Datacenters), Key: []byte(id), Value: value}
	if err := s.Produce(r.Context(), kr); err != nil {
		return s.ProduceFailed(err)
	}
	s.WaitOwnWrite(r.Context(), s.dcs, kr)
	s.Log.Info().Str("datacenter_id", id).Int("leaves", m.Leaves()).Str("by", web.DescribeCaller(web.PrincipalOf(r.Context()))).Msg("datacenter stored")
	web.WriteJSON(w, http.StatusOK, datacenterAnswer(&datacenter{rec: rec, model: m}, true))
	return nil
}

func (s *API) DeleteDatacenter(w http.ResponseWriter, r *http.Request) *web.Error {
	d, e := s.datacenterOf(r)
	if e != nil {
		return e
	}
	id := d.rec.DatacenterID
	unlock := s.Lock("datacenter " + id)
	defer unlock()
	if e := s.Views.Need(topology.Deployments); e != nil {
		return e
	}
	if ids, _ := s.deps.on(id); len(ids) > 0 {
		return web.Errorf(http.StatusConflict, "datacenter %s is in use by deployments %s; delete them first (DELETE /v1/deployments/{deployment_id})", id, strings.Join(ids, ", "))
	}
	kr := &kgo.Record{Topic: s.Env.Kafka.Topic(topology.Datacenters), Key: []byte(id)}
	if err := s.Produce(r.Context(), kr); err != nil {
		return s.ProduceFailed(err)
	}
	s.WaitOwnWrite(r.Context(), s.dcs, kr)
	s.Log.Info().Str("datacenter_id", id).Str("by", web.DescribeCaller(web.PrincipalOf(r.Context()))).Msg("datacenter deleted")
	web.WriteJSON(w, http.StatusOK, datacenterAnswer(d, false))
	return nil
}

// PlacementAnswer is the answer of POST /v1/placements: a placement that
// meets every hard policy.
type PlacementAnswer struct {
	Datacenter string            `json:"datacenter"`
	Placement  map[string]string `json:"placement"`
	// Warnings are the soft policies the placement does not meet and the
	// policies that are recorded, not checked.
	Warnings []placement.Finding `json:"warnings"`
	// Steps is how many leaves the search tried.
	Steps int `json:"steps"`
}

// PlacementUnmet is the 422 answer of POST /v1/placements: no placement
// meets the hard policies together.
type PlacementUnmet struct {
	Error string `json:"error"`
	// Policies are the hard policies that cannot be met together (and
	// "non-overload" when capacity is short).
	Policies []string `json:"policies"`
	// Resource is the resource the search found no leaf for.
	Resource string `json:"resource,omitempty"`
}

// ProposeTimeout bounds the search of one POST /v1/placements, besides
// placement.DefaultMaxSteps leaves tried.
const ProposeTimeout = 10 * time.Second

// postPlacement proposes a placement for a template (the placement part
// of a deployment request), synchronously; the search is bounded by
// placement.DefaultMaxSteps leaves tried and ProposeTimeout.
func (s *API) PostPlacement(w http.ResponseWriter, r *http.Request) *web.Error {
	data, e := web.ReadBody(w, r, web.MaxRequestBytes)
	if e != nil {
		return e
	}
	var tpl placement.Template
	if e := web.DecodeBytes(data, &tpl, true, placementExample); e != nil {
		return e
	}
	if tpl.Datacenter == "" {
		return web.Errorf(http.StatusBadRequest, "datacenter is missing: name the datacenter to place on (GET /v1/datacenters lists them); send JSON such as %s", placementExample)
	}
	if err := tpl.Validate(); err != nil {
		return web.Errorf(http.StatusBadRequest, "%v", err)
	}
	if e := s.Views.Need(topology.Datacenters, topology.Deployments); e != nil {
		return e
	}
	d, ok := s.dcs.get(tpl.Datacenter)
	if !ok {
		return web.Errorf(http.StatusNotFound, "datacenter %s does not exist; GET /v1/datacenters lists the datacenters", tpl.Datacenter)
	}
	if d.model == nil {
		return web.Errorf(http.StatusConflict, "datacenter %s does not validate (%v); store a valid model with PUT /v1/datacenters/%s", tpl.Datacenter, d.err, tpl.Datacenter)
	}
	caller := web.PrincipalOf(r.Context())
	release, e := s.placementSlot(w, caller.Tenant)
	if e != nil {
		return e
	}
	defer release()
	// Only the capacity no deployment uses is free.
	_, used := s.deps.on(tpl.Datacenter)
	free := d.model.Remaining(used)
	if caller.Role == auth.RoleTenant {
		free = d.model.RemainingFor(used, caller.Tenant) // a tenant reads its own deployments' names only
	}
	p, err := placement.Propose(free, &tpl, placement.Options{Timeout: ProposeTimeout})
	var inf *placement.Infeasible
	var inv *placement.Invalid
	switch {
	case errors.As(err, &inf):
		web.WriteJSON(w, http.StatusUnprocessableEntity, PlacementUnmet{Error: inf.Error(), Policies: inf.Policies, Resource: inf.Resource})
		return nil
	case errors.As(err, &inv):
		return web.Errorf(http.StatusBadRequest, "%v", err)
	case err != nil:
		return web.Errorf(http.StatusInternalServerError, "propose a placement: %v", err)
	}
	web.WriteJSON(w, http.StatusOK, PlacementAnswer{Datacenter: tpl.Datacenter, Placement: p.Placement, Warnings: p.Warnings, Steps: p.Steps})
	return nil
}
