package admit

import (
	"fmt"
	"slices"
	"strings"
)

// Applicable returns the policies that apply to the tenant, in the order
// Evaluate runs them (by policy id).
func Applicable(policies []*Compiled, tenant string) []*Compiled {
	var out []*Compiled
	for _, p := range policies {
		if p.AppliesTo(tenant) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *Compiled) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Evaluate decides a normalized request against the policies (all of
// them; those of other tenants are left out): mutations first, in order,
// then validations on the mutated request (see the package doc). The
// request itself is not changed; the verdict holds the mutated copy. A
// mutation that fails (a CEL error, a value of the wrong type) is a
// violation of its policy, or a warning in audit mode.
func Evaluate(req *Request, policies []*Compiled) Verdict {
	v := Verdict{Violations: []Finding{}, Warnings: []Finding{}, Mutations: []Mutation{}, Policies: []string{}}
	r := req.Clone()
	ps := Applicable(policies, req.Tenant)
	for _, p := range ps {
		v.Policies = append(v.Policies, p.ID)
	}
	report := func(p *Compiled, notice bool, f Finding) {
		if p.Mode == ModeAudit || notice {
			v.Warnings = append(v.Warnings, f)
			return
		}
		v.Violations = append(v.Violations, f)
	}
	for _, p := range ps {
		for _, m := range p.rules.mutators {
			// A mutation that fails midway leaves the request as it was.
			before := r.Clone()
			var made []Mutation
			err := m.fn(r, func(mu Mutation) {
				mu.PolicyID, mu.Rule = p.ID, m.rule
				made = append(made, mu)
			})
			if err != nil {
				r = before
				report(p, false, Finding{PolicyID: p.ID, Rule: m.rule, Object: "mutation", Message: fmt.Sprintf("could not be applied: %v", err)})
				continue
			}
			v.Mutations = append(v.Mutations, made...)
		}
	}
	for _, p := range ps {
		for _, val := range p.rules.validators {
			val.fn(r, func(object, msg string) {
				report(p, val.notice, Finding{PolicyID: p.ID, Rule: val.rule, Object: object, Message: msg})
			})
		}
	}
	v.Request = r
	v.Admitted = len(v.Violations) == 0
	return v
}

// Audit is what one policy, enforced, would find in a request that was
// admitted: its validations' findings on the request as it was admitted
// (mutated), whatever the policy's mode. Policies of other tenants find
// nothing.
func Audit(req *Request, p *Compiled) []Finding {
	out := []Finding{}
	if !p.AppliesTo(req.Tenant) {
		return out
	}
	for _, val := range p.rules.validators {
		if val.notice {
			continue
		}
		val.fn(req, func(object, msg string) {
			out = append(out, Finding{PolicyID: p.ID, Rule: val.rule, Object: object, Message: msg})
		})
	}
	return out
}

// Texts are the one-line messages of findings for a tenant.
func Texts(tenant string, fs []Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Text(tenant)
	}
	return out
}
