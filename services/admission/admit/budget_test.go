package admit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// nested is a CEL list comprehension nested depth times over a 10-item
// list: its cost grows tenfold with each level (six levels reach
// CostLimit).
func nested(depth int) string {
	vars := "abcdefgh"
	inner := "true"
	for i := depth - 1; i >= 0; i-- {
		v := string(vars[i])
		cond := v + " > 0"
		if i == depth-1 {
			cond = strings.Join(strings.Split(vars[:depth], ""), "+") + " > 0"
		}
		if inner == "true" {
			inner = fmt.Sprintf("[1,2,3,4,5,6,7,8,9,10].all(%s, %s)", v, cond)
		} else {
			inner = fmt.Sprintf("[1,2,3,4,5,6,7,8,9,10].all(%s, %s)", v, inner)
		}
	}
	return inner
}

func celModel(validations, mutations string) string {
	return `{"validations":[` + validations + `],"mutations":[` + mutations + `],"?":{"type":"io.policyflow.admission.CEL"}}`
}

func rule(expr string) string { return fmt.Sprintf(`{"expression":%q,"message":"m"}`, expr) }

// manyApps is a request of tenant t1 with n applications.
func manyApps(t testing.TB, n int) *Request {
	t.Helper()
	apps := make([]string, n)
	for i := range apps {
		apps[i] = fmt.Sprintf(`{"name":"a%d","class":"x.A","scripts":["s.sh"]}`, i)
	}
	r, err := ParseRequest([]byte(`{"deployment_id":"d1","tenant":"t1","applications":[` + strings.Join(apps, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCheckCost(t *testing.T) {
	cases := []struct {
		name, model string
		field       string // the refused expression; "" when accepted
	}{
		{name: "six nested comprehensions over ten items", model: celModel(rule(nested(6)), ""), field: "objectModel.validations[0].expression"},
		{name: "five nested comprehensions", model: celModel(rule(nested(5)), ""), field: "objectModel.validations[0].expression"},
		{name: "four nested comprehensions", model: celModel(rule(nested(4)), "")},
		{name: "every pair of applications compared whole", model: celModel(rule("true")+","+fmt.Sprintf(`{"expression":%q,"message":"m","scope":"request"}`, "request.applications.all(a, request.applications.all(b, a == b || a.name != b.name))"), ""), field: "objectModel.validations[1].expression"},
		{name: "a comprehension over a list the request bounds only by its size", model: celModel(rule("app.scripts.exists(s, s == 'harden.sh')"), ""), field: "objectModel.validations[0].expression"},
		{name: "membership in that list", model: celModel(rule("'harden.sh' in app.scripts"), "")},
		{name: "a comprehension over the applications", model: celModel(fmt.Sprintf(`{"expression":%q,"message":"m","scope":"request"}`, "request.applications.exists(a, a['class'] == 'io.policyflow.Monitoring')"), "")},
		{name: "the README's rules", model: celModel(rule("app.instances <= 4 || app.flavor == 'm1.small'"), `{"field":"properties.owner","expression":"request.tenant + '/' + app.name"}`)},
		{name: "a costly mutation", model: celModel("", fmt.Sprintf(`{"field":"instances","expression":%q}`, nested(6)+" ? 1 : 2")), field: "objectModel.mutations[0].expression"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, "p", tc.model, "")
			err := c.CheckCost()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *ParamError", err)
			}
			limit := fmt.Sprintf("the limit of %d", CostLimit)
			if pe.Field != tc.field || !strings.Contains(pe.Msg, "estimated at ") || !strings.Contains(pe.Msg, limit) {
				t.Fatalf("err = %v, want field %s and a message with the estimate and %q", err, tc.field, limit)
			}
		})
	}
}

func TestRequestBudget(t *testing.T) {
	old := RequestBudget
	t.Cleanup(func() { RequestBudget = old })
	RequestBudget = 100_000
	cheap := rule("app.name != ''")
	costly := rule(nested(3)) // 10,551 units per application
	cases := []struct {
		name, model, mode string
		apps              int
		admitted          bool
		want              string // in the budget finding
	}{
		{name: "cheap rules fit", model: celModel(cheap, ""), apps: 200, admitted: true},
		{name: "costly rules on a few applications fit", model: celModel(costly, ""), apps: 9, admitted: true},
		{name: "costly rules on many applications run out", model: celModel(costly, ""), apps: 200, want: "admission budget of 100000 CEL cost units exhausted after 10 of 200 applications"},
		{name: "a policy in audit mode runs out too", model: celModel(costly, ""), mode: ModeAudit, apps: 200, want: "of 200 applications (at rule validations[0]"},
		{name: "the budget runs out on the last application of a rule", model: celModel(rule(nested(3)+" && "+nested(3))+","+cheap, ""), apps: 5, want: "exhausted after 5 of 5 applications (at rule validations[0]"},
		{name: "mutations run out", model: celModel("", fmt.Sprintf(`{"field":"image","expression":%q}`, nested(3)+" ? 'big' : 'small'")), apps: 200, want: "of 200 applications (at rule mutations[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, "p", tc.model, tc.mode)
			v, err := Evaluate(context.Background(), manyApps(t, tc.apps), []*Compiled{p})
			if err != nil {
				t.Fatal(err)
			}
			if v.Admitted != tc.admitted {
				t.Fatalf("admitted = %v, want %v; violations %v", v.Admitted, tc.admitted, Texts("t1", v.Violations))
			}
			if tc.admitted {
				return
			}
			last := v.Violations[len(v.Violations)-1]
			if last.Rule != BudgetRule || !strings.Contains(last.Message, tc.want) {
				t.Fatalf("last violation = %q, want rule %s and %q", last.Text("t1"), BudgetRule, tc.want)
			}
			if len(v.Mutations) != 0 {
				t.Errorf("a request that ran out of budget reports mutations %v", v.Mutations)
			}
		})
	}
}

// Audit spends a request's budget as Evaluate does: running out is a
// finding, and the rules after it are not evaluated.
func TestAuditRunsOutOfBudget(t *testing.T) {
	old := RequestBudget
	t.Cleanup(func() { RequestBudget = old })
	RequestBudget = 100_000
	p := mustCompile(t, "p", celModel(rule(nested(3))+","+rule("app.name == ''"), ""), "")
	got := Audit(context.Background(), manyApps(t, 200), p)
	if len(got) != 1 || got[0].Rule != BudgetRule || !strings.Contains(got[0].Message, "exhausted after 10 of 200 applications (at rule validations[0]") {
		t.Fatalf("audit findings = %v, want only the budget finding at validations[0]", got)
	}
}

func TestEvaluateStopsWhenContextEnds(t *testing.T) {
	oldBudget, oldLimit := RequestBudget, CostLimit
	t.Cleanup(func() { RequestBudget, CostLimit = oldBudget, oldLimit })
	// Only the context stops it: one evaluation of this rule costs
	// about ten million units, seconds of CPU.
	RequestBudget, CostLimit = 1<<62, 1<<62
	p := mustCompile(t, "p", celModel(rule(nested(7)), ""), "")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Evaluate(ctx, manyApps(t, 200), []*Compiled{p})
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if took > time.Second {
		t.Fatalf("Evaluate took %v after a 50ms deadline", took)
	}
}

// BenchmarkWorstCaseRequest times the costliest request a tenant can
// submit: MaxApplications applications, each evaluated by a rule that
// costs CostLimit, so that the request spends its whole budget. It
// reports the CEL cost units spent and the time per unit: the bound on how
// long one request can hold those behind it is RequestBudget + CostLimit
// units at that rate.
func BenchmarkWorstCaseRequest(b *testing.B) {
	p := mustCompile(b, "p", celModel(rule(nested(6)), ""), "")
	r := manyApps(b, MaxApplications)
	var spent uint64
	for b.Loop() {
		bu := newBudget(context.Background())
		v, err := evaluate(bu, r, []*Compiled{p})
		if err != nil || v.Admitted {
			b.Fatalf("admitted %v, err %v", v.Admitted, err)
		}
		spent = bu.spent
	}
	b.ReportMetric(float64(spent), "units/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(spent), "ns/unit")
}
