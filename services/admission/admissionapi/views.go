package admissionapi

import (
	"sort"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
	"github.com/policyflow/policyflow/services/placement"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// appPolicy is one application policy of the view, with its compiled
// form (nil when the record does not compile: written around the API).
type appPolicy struct {
	rec      *events.AppPolicy
	compiled *admit.Compiled
	err      error
}

// appPoliciesView is app.policies: the tenant application policies,
// compiled as they are read.
type appPoliciesView struct {
	*runtime.TableOf[*events.AppPolicy, *appPolicy]
}

func followAppPolicies(env runtime.Env) (*appPoliciesView, error) {
	t, err := runtime.FollowTableOf(env, topology.AppPolicies, func(m runtime.Msg[*events.AppPolicy], _ *appPolicy, _ bool) (*appPolicy, error) {
		c, err := admit.CompilePolicy(m.Value)
		return &appPolicy{rec: m.Value, compiled: c, err: err}, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &appPoliciesView{t}, nil
}

func (v *appPoliciesView) get(id string) (*appPolicy, bool) { return v.Value(id) }

// list returns every policy, by id.
func (v *appPoliciesView) list() []*appPolicy { return v.Sorted() }

// compiled returns every policy that compiles.
func (v *appPoliciesView) compiled() []*admit.Compiled {
	var out []*admit.Compiled
	for _, p := range v.Sorted() {
		if p.compiled != nil {
			out = append(out, p.compiled)
		}
	}
	return out
}

// withName returns the id of the policy with the name, if any.
func (v *appPoliciesView) withName(name string) (string, bool) {
	return v.Find(func(p *appPolicy) bool { return p.rec.Name == name })
}

// verdictsView is admission.verdicts: the latest verdict of each
// deployment, and the latest admitted one (the request the deployment
// runs with), for audits.
type verdictsView struct {
	*runtime.TableOf[*events.AdmissionVerdict, *verdicts]
}

// verdicts are a deployment's latest verdict and its latest admitted one
// (nil when none was admitted since the deployment was last deleted).
type verdicts struct {
	latest, admitted *events.AdmissionVerdict
}

func followVerdicts(env runtime.Env) (*verdictsView, error) {
	t, err := runtime.FollowTableOf(env, topology.AdmissionVerdicts, func(m runtime.Msg[*events.AdmissionVerdict], prev *verdicts, had bool) (*verdicts, error) {
		v := &verdicts{latest: m.Value}
		if had {
			v.admitted = prev.admitted
		}
		if m.Value.Admitted {
			v.admitted = m.Value
		}
		return v, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &verdictsView{t}, nil
}

func (v *verdictsView) get(id string) (*events.AdmissionVerdict, bool) {
	e, ok := v.Value(id)
	if !ok {
		return nil, false
	}
	return e.latest, true
}

// admittedList returns the latest admitted verdict of every deployment,
// by deployment id.
func (v *verdictsView) admittedList() []*events.AdmissionVerdict {
	var out []*events.AdmissionVerdict
	for _, e := range v.Sorted() {
		if e.admitted != nil {
			out = append(out, e.admitted)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DeploymentID < out[j].DeploymentID })
	return out
}

// datacenter is one datacenter of the view with its indexed model (nil
// when the record does not validate: written around the API).
type datacenter struct {
	rec   *events.Datacenter
	model *placement.Model
	err   error
}

// datacentersView is placement.datacenters, each model indexed as it is
// read.
type datacentersView struct {
	*runtime.TableOf[*events.Datacenter, *datacenter]
}

func followDatacenters(env runtime.Env) (*datacentersView, error) {
	t, err := runtime.FollowTableOf(env, topology.Datacenters, func(m runtime.Msg[*events.Datacenter], _ *datacenter, _ bool) (*datacenter, error) {
		md, err := placement.ParseDatacenter([]byte(m.Value.Model))
		return &datacenter{rec: m.Value, model: md, err: err}, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &datacentersView{t}, nil
}

func (v *datacentersView) get(id string) (*datacenter, bool) { return v.Value(id) }

// deploymentsView is deploy.deployments: what each admitted deployment
// holds.
type deploymentsView struct {
	*runtime.TableOf[*events.Deployment, *events.Deployment]
}

func followDeployments(env runtime.Env) (*deploymentsView, error) {
	t, err := runtime.FollowTableOf(env, topology.Deployments, func(m runtime.Msg[*events.Deployment], _ *events.Deployment, _ bool) (*events.Deployment, error) {
		return m.Value, nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return &deploymentsView{t}, nil
}

func (v *deploymentsView) get(id string) (*events.Deployment, bool) { return v.Value(id) }

// set is every deployment, by id.
func (v *deploymentsView) set() admit.DeployedSet {
	out := admit.DeployedSet{}
	for _, d := range v.Sorted() {
		out[d.DeploymentID] = d
	}
	return out
}

// on are the deployments placed on a datacenter, by id, and what they
// use of it.
func (v *deploymentsView) on(datacenter string) ([]string, *placement.Usage) {
	var ids []string
	u := &placement.Usage{}
	for _, d := range v.Sorted() {
		if d.Datacenter == datacenter {
			ids = append(ids, d.DeploymentID)
			u.Add(d.DeploymentID, admit.UseOf(d))
			u.Own(d.DeploymentID, d.Tenant)
		}
	}
	return ids, u
}
