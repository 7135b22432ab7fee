package admit

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"

	"github.com/policyflow/policyflow/events"
)

// RequestBudget is the CEL cost (in the units of CostLimit) one request
// may spend in all, over every CEL rule of every policy that applies and
// every application: a request that runs out of it is denied (rule
// BudgetRule) without its remaining rules evaluated. An evaluation starts
// only while the budget is not spent and costs at most CostLimit, so a
// request costs at most RequestBudget + CostLimit: that bounds the time
// one request can hold the requests behind it.
var RequestBudget uint64 = 10_000_000

// BudgetRule is the rule of the finding that denies a request whose
// budget ran out.
const BudgetRule = "admission-budget"

// budget is what the evaluation of one request may still spend, and the
// context that ends it.
type budget struct {
	ctx          context.Context
	limit, spent uint64
	// ranOut is set once the budget is spent, with how many of how
	// many applications the rule being evaluated had decided then.
	ranOut   bool
	done, of int
	// deployed is what is already deployed (nil: nothing counted), for
	// the rules that count it.
	deployed *Deployed
	// original is the request as the tenant sent it, before any
	// mutation (nil: the request evaluated is the original).
	original *Request
	// external calls external engines (Env.External); policyID is the
	// policy whose rule runs.
	external ExternalCaller
	policyID string
	// soft is set by a rule while it emits a finding that only warns
	// (an external engine that failed open).
	soft bool
}

func newBudget(ctx context.Context) *budget { return &budget{ctx: ctx, limit: RequestBudget} }

// charge adds what one CEL evaluation cost.
func (b *budget) charge(det *cel.EvalDetails) {
	if det == nil {
		return
	}
	if c := det.ActualCost(); c != nil {
		b.spent += *c
	}
}

// stopped reports whether evaluation must stop before the rule being
// evaluated decides application i of n: the context ended, or the budget
// is spent (recorded the first time).
func (b *budget) stopped(i, n int) bool {
	if b.ctx.Err() != nil {
		return true
	}
	if b.spent < b.limit {
		return false
	}
	if !b.ranOut {
		b.ranOut, b.done, b.of = true, i, n
	}
	return true
}

// over reports whether the evaluation stops after rule of p, which
// decided all n applications: the context ended, or the budget ran out,
// which adds to findings the one that denies the request.
func (b *budget) over(p *Compiled, rule string, n int, findings *[]Finding) bool {
	if !b.stopped(n, n) {
		return false
	}
	if b.ctx.Err() == nil {
		*findings = append(*findings, b.finding(p, rule))
	}
	return true
}

// finding is the violation that denies a request whose budget ran out,
// at a rule of a policy.
func (b *budget) finding(p *Compiled, rule string) Finding {
	return Finding{PolicyID: p.ID, Rule: BudgetRule, Object: "request",
		Message: fmt.Sprintf("admission budget of %d CEL cost units exhausted after %d of %d applications (at rule %s; %d units spent); the remaining rules were not evaluated, so the request is denied: make the policy's expressions cheaper or split the deployment", b.limit, b.done, b.of, rule, b.spent)}
}

// Applicable returns the policies that apply to the tenant, in the order
// Evaluate runs them: by priority, lowest first (so the highest priority
// mutates last and its value wins), then by creation time, oldest first,
// then by policy id.
func Applicable(policies []*Compiled, tenant string) []*Compiled {
	var out []*Compiled
	for _, p := range policies {
		if p.AppliesTo(tenant) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, order)
	return out
}

// order is the order policies are evaluated in (see Applicable).
func order(a, b *Compiled) int {
	if a.Priority != b.Priority {
		return cmp.Compare(a.Priority, b.Priority)
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// Evaluate decides a normalized request against the policies (all of
// them; those of other tenants are left out): mutations first, in order,
// then validations on the mutated request (see the package doc). The
// request itself is not changed; the verdict holds the mutated copy. A
// mutation that fails (a CEL error, a value of the wrong type) is a
// violation of its policy, or a warning in audit mode. A request whose
// CEL rules spend more than RequestBudget is denied (rule BudgetRule),
// whatever the policy's mode. When ctx ends the evaluation stops and
// the error is ctx's: there is no verdict.
func Evaluate(ctx context.Context, req *Request, policies []*Compiled) (Verdict, error) {
	return EvaluateWith(ctx, req, policies, Env{})
}

// EvaluateDeployed is Evaluate counting what is already deployed: the
// rules per environment and per tenant (RequiredApplication,
// InstanceQuota's environment and tenant scopes, InstanceNotice) add the
// tenant's other deployments to the request. deployed nil counts the
// request alone.
func EvaluateDeployed(ctx context.Context, req *Request, policies []*Compiled, deployed *Deployed) (Verdict, error) {
	return EvaluateWith(ctx, req, policies, Env{Deployed: deployed})
}

// EvaluateWith is Evaluate with env: External policies ask their engine
// with env.External, and the rules that count what is deployed count
// env.Deployed.
func EvaluateWith(ctx context.Context, req *Request, policies []*Compiled, env Env) (Verdict, error) {
	b := newBudget(ctx)
	b.external = env.External
	b.deployed = env.Deployed
	return evaluate(b, req, policies)
}

func evaluate(b *budget, req *Request, policies []*Compiled) (Verdict, error) {
	v := Verdict{Violations: []Finding{}, Warnings: []Finding{}, Mutations: []Mutation{}, Policies: []string{}}
	r := req.Clone()
	// A default override asks what the tenant's request left a field at,
	// not what an earlier policy set it to.
	b.original = req
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
	// stop ends the evaluation after a rule when the context ended or the
	// budget ran out.
	stop := func(p *Compiled, rule string) bool { return b.over(p, rule, len(r.Applications), &v.Violations) }
	for _, p := range ps {
		for _, m := range p.rules.mutators {
			// A mutation that fails midway leaves the request as it was.
			before := r.Clone()
			var made []Mutation
			err := m.fn(b, r, func(mu Mutation) {
				mu.PolicyID, mu.Rule = p.ID, m.rule
				made = append(made, mu)
			})
			if stop(p, m.rule) {
				r = before
				return b.verdict(v, r)
			}
			if err != nil {
				r = before
				report(p, false, Finding{PolicyID: p.ID, Rule: m.rule, Object: "mutation", Message: fmt.Sprintf("could not be applied: %v", err)})
				continue
			}
			v.Mutations = append(v.Mutations, made...)
		}
	}
	v.Warnings = append(v.Warnings, conflicts(v.Mutations, ps)...)
	for _, p := range ps {
		b.policyID = p.ID
		for _, val := range p.rules.validators {
			val.fn(b, r, func(object, msg string) {
				f := Finding{PolicyID: p.ID, Rule: val.rule, Object: object, Message: msg}
				report(p, val.notice || b.soft, f)
				if val.notice || val.raises {
					v.Notices = append(v.Notices, Notice{Finding: f, Webhook: val.webhook})
				}
			})
			if stop(p, val.rule) {
				return b.verdict(v, r)
			}
		}
	}
	return b.verdict(v, r)
}

// verdict completes a verdict on the request as mutated, or is the
// context's error when it ended.
func (b *budget) verdict(v Verdict, r *Request) (Verdict, error) {
	if err := b.ctx.Err(); err != nil {
		return Verdict{}, fmt.Errorf("admission: evaluation of deployment %s stopped: %w", r.DeploymentID, context.Cause(b.ctx))
	}
	v.Request = r
	v.Admitted = len(v.Violations) == 0
	return v, nil
}

// EvaluateDeletion decides the deletion of deployment dep of a tenant
// against the policies (those of other tenants are left out), rest being
// the tenant's other deployments: each policy's deletion rules (today
// RequiredApplication's: an environment that keeps deployments keeps its
// required application) find what the deletion would break. A finding of
// a policy in enforce mode refuses the deletion (Admitted false), one in
// audit mode warns. The verdict's Request is nil.
func EvaluateDeletion(dep *events.Deployment, rest []*events.Deployment, policies []*Compiled) Verdict {
	v := Verdict{Violations: []Finding{}, Warnings: []Finding{}, Mutations: []Mutation{}, Policies: []string{}}
	for _, p := range Applicable(policies, dep.Tenant) {
		v.Policies = append(v.Policies, p.ID)
		for _, d := range p.rules.deletions {
			d.fn(dep, rest, func(object, msg string) {
				f := Finding{PolicyID: p.ID, Rule: d.rule, Object: object, Message: msg}
				if p.Mode == ModeAudit {
					v.Warnings = append(v.Warnings, f)
				} else {
					v.Violations = append(v.Violations, f)
				}
			})
		}
	}
	v.Admitted = len(v.Violations) == 0
	return v
}

// Audit is what one policy, enforced, would find in a request that was
// admitted: its validations' findings on the request as it was admitted
// (mutated), whatever the policy's mode, within the request's budget (a
// budget that runs out is a finding). Policies of other tenants find
// nothing; when ctx ends, the findings so far.
func Audit(ctx context.Context, req *Request, p *Compiled) []Finding {
	out := []Finding{}
	if !p.AppliesTo(req.Tenant) {
		return out
	}
	b := newBudget(ctx)
	for _, val := range p.rules.validators {
		if val.notice || val.external {
			continue
		}
		val.fn(b, req, func(object, msg string) {
			out = append(out, Finding{PolicyID: p.ID, Rule: val.rule, Object: object, Message: msg})
		})
		if b.over(p, val.rule, len(req.Applications), &out) {
			break
		}
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
