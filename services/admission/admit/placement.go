package admit

import (
	"fmt"
	"strings"

	"github.com/policyflow/policyflow/services/placement"
)

// PlacementPolicyID names, in findings, the placement checks that are no
// policy of the request's: an unknown datacenter, a placement that does
// not fit the datacenter.
const PlacementPolicyID = "placement"

// Datacenters looks a datacenter model up by id.
type Datacenters func(id string) (*placement.Model, bool)

// CheckPlacement checks the placement of a request that names a
// datacenter (seed 002, package placement) and adds what it finds to the
// verdict: a hard policy's finding (and the non-overload rule's) is a
// violation, a soft one a warning. An
// unknown datacenter, or a placement that does not fit it (an unknown
// leaf or level, a resource not placed, a demand of the wrong length),
// is a violation with the reason. used is what other deployments use of
// the datacenter (nil: nothing): the non-overload rule and the bandwidth
// check count it (placement.Model.Remaining). A request naming no
// datacenter is left as it is.
func CheckPlacement(v *Verdict, dcs Datacenters, used *placement.Usage) {
	r := v.Request
	if r == nil || r.Datacenter == "" {
		return
	}
	defer func() { v.Admitted = len(v.Violations) == 0 }()
	m, ok := dcs(r.Datacenter)
	if !ok {
		v.Violations = append(v.Violations, Finding{PolicyID: PlacementPolicyID, Rule: "placement.datacenter", Object: fmt.Sprintf("datacenter %q", r.Datacenter),
			Message: fmt.Sprintf("unknown datacenter %q: store its model first (PUT /v1/datacenters/%s, policyctl dc apply FILE) or name another", r.Datacenter, r.Datacenter)})
		return
	}
	// The findings name the requesting tenant's deployments only.
	fs, err := placement.Check(m.RemainingFor(used, r.Tenant), &r.Template)
	if err != nil {
		v.Violations = append(v.Violations, Finding{PolicyID: PlacementPolicyID, Rule: "placement.template", Object: fmt.Sprintf("placement on datacenter %q", r.Datacenter), Message: err.Error()})
		return
	}
	for _, f := range fs {
		object := "placement"
		if len(f.Resources) > 0 {
			object = "resources " + strings.Join(f.Resources, ", ")
		}
		af := Finding{PolicyID: f.PolicyID, Rule: "placement." + f.Type, Object: object, Message: f.Message}
		if f.Hard {
			v.Violations = append(v.Violations, af)
		} else {
			v.Warnings = append(v.Warnings, af)
		}
	}
}

// PlacementUse is what an admitted request's placement takes of its
// datacenter (placement.Model.Use); nothing for a request that names no
// datacenter, or one its placement does not fit (it was not admitted).
func PlacementUse(r *Request, dcs Datacenters) placement.Use {
	if r.Datacenter == "" {
		return placement.Use{}
	}
	m, ok := dcs(r.Datacenter)
	if !ok {
		return placement.Use{}
	}
	u, err := m.Use(&r.Template)
	if err != nil {
		return placement.Use{}
	}
	return u
}
