package northapi

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/admit"
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
type appPoliciesView struct{ *keyedView[appPolicy] }

func newAppPoliciesView(codec *events.Codec) *appPoliciesView {
	return &appPoliciesView{newKeyedView(func(ctx context.Context, id string, raw []byte) (*appPolicy, error) {
		var p events.AppPolicy
		if err := codec.DecodeInto(ctx, raw, &p); err != nil {
			return nil, fmt.Errorf("application policies view: decode policy %q: %w", id, err)
		}
		c, err := admit.CompilePolicy(&p)
		return &appPolicy{rec: &p, compiled: c, err: err}, nil
	})}
}

// list returns every policy, by id.
func (v *appPoliciesView) list() []*appPolicy { return v.sorted() }

// compiled returns every policy that compiles.
func (v *appPoliciesView) compiled() []*admit.Compiled {
	var out []*admit.Compiled
	for _, p := range v.sorted() {
		if p.compiled != nil {
			out = append(out, p.compiled)
		}
	}
	return out
}

// withName returns the id of the policy with the name, if any.
func (v *appPoliciesView) withName(name string) (string, bool) {
	return v.find(func(p *appPolicy) bool { return p.rec.Name == name })
}

// verdictsView is admission.verdicts: the latest verdict of each
// deployment, and the latest admitted one (the request the deployment
// runs with), for audits.
type verdictsView struct {
	codec    *events.Codec
	mu       sync.RWMutex
	latest   map[string]*events.AdmissionVerdict
	admitted map[string]*events.AdmissionVerdict
}

func newVerdictsView(codec *events.Codec) *verdictsView {
	return &verdictsView{codec: codec, latest: map[string]*events.AdmissionVerdict{}, admitted: map[string]*events.AdmissionVerdict{}}
}

func (v *verdictsView) apply(ctx context.Context, rec *kgo.Record) error {
	id := string(rec.Key)
	if rec.Value == nil {
		v.mu.Lock()
		delete(v.latest, id)
		delete(v.admitted, id)
		v.mu.Unlock()
		return nil
	}
	var e events.AdmissionVerdict
	if err := v.codec.DecodeInto(ctx, rec.Value, &e); err != nil {
		return fmt.Errorf("verdicts view: decode verdict %q: %w", rec.Key, err)
	}
	v.mu.Lock()
	v.latest[id] = &e
	if e.Admitted {
		v.admitted[id] = &e
	}
	v.mu.Unlock()
	return nil
}

func (v *verdictsView) get(id string) (*events.AdmissionVerdict, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	e, ok := v.latest[id]
	return e, ok
}

// admittedList returns the latest admitted verdict of every deployment,
// by deployment id.
func (v *verdictsView) admittedList() []*events.AdmissionVerdict {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*events.AdmissionVerdict, 0, len(v.admitted))
	for _, e := range v.admitted {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DeploymentID < out[j].DeploymentID })
	return out
}
