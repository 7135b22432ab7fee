package admit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/policyflow/policyflow/services/check"
)

// Limits of CEL rules.
const (
	// MaxCELRules bounds the validations plus mutations of one policy.
	MaxCELRules = 64
	// MaxExpressionBytes bounds one expression.
	MaxExpressionBytes = 4 << 10
)

// CostLimit is the most one CEL expression may cost in one evaluation (in
// CEL's cost units, roughly one per operation and per element a
// comprehension visits); an evaluation over it stops and counts as a
// violation. Kubernetes gives one ValidatingAdmissionPolicy expression
// the same order of magnitude. An expression whose worst case, estimated
// when the policy is written, is over it is refused (CheckCost).
var CostLimit uint64 = 1_000_000

// interruptEvery is how many comprehension iterations CEL runs between
// two looks at the context that stops an evaluation.
const interruptEvery = 100

// Scopes of a CEL validation.
const (
	// ScopeApplication evaluates the expression once per application,
	// with app (the application) and request.
	ScopeApplication = "application"
	// ScopeRequest evaluates it once, with request only.
	ScopeRequest = "request"
)

// celValidation and celMutation are the parameters of a CEL policy.
type celValidation struct {
	Expression string `json:"expression"`
	Message    string `json:"message"`
	Scope      string `json:"scope"`
}

type celMutation struct {
	Field      string `json:"field"`
	Expression string `json:"expression"`
}

var (
	requestEnv *cel.Env
	appEnv     *cel.Env
)

func init() {
	var err error
	dynMap := cel.MapType(cel.StringType, cel.DynType)
	if requestEnv, err = cel.NewEnv(cel.Variable("request", dynMap)); err != nil {
		panic(err)
	}
	if appEnv, err = cel.NewEnv(cel.Variable("request", dynMap), cel.Variable("app", dynMap)); err != nil {
		panic(err)
	}
}

// celProgram is a compiled expression and the most one evaluation of it
// can cost, estimated from the request's limits (celSizes).
type celProgram struct {
	prg cel.Program
	// field names the expression in the objectModel.
	field string
	// worst is the estimated cost of one evaluation at worst.
	worst uint64
}

// eval evaluates the expression within the request's budget: it stops
// when the budget's context ends, and what it cost is charged to the
// budget.
func (p celProgram) eval(b *budget, vars map[string]any) (ref.Val, error) {
	out, det, err := p.prg.ContextEval(b.ctx, vars)
	b.charge(det)
	return out, err
}

// compileExpr parses and type-checks an expression, wanting one of the
// output types (dyn is always accepted: map fields are dyn), and
// estimates its worst-case cost.
func compileExpr(env *cel.Env, field, expr string, want ...*cel.Type) (celProgram, error) {
	if strings.TrimSpace(expr) == "" {
		return celProgram{}, paramErr(field, "is empty: give a CEL expression")
	}
	if len(expr) > MaxExpressionBytes {
		return celProgram{}, paramErr(field, "is %d bytes; at most %d are allowed", len(expr), MaxExpressionBytes)
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return celProgram{}, paramErr(field, "does not compile: %s", strings.ReplaceAll(iss.Err().Error(), "<input>", "line"))
	}
	out := ast.OutputType()
	ok := len(want) == 0 || out.IsExactType(cel.DynType)
	for _, w := range want {
		ok = ok || out.IsExactType(w) || out.IsAssignableType(w)
	}
	if !ok {
		names := make([]string, len(want))
		for i, w := range want {
			names[i] = w.String()
		}
		return celProgram{}, paramErr(field, "yields %s; it must yield %s", out, strings.Join(names, " or "))
	}
	est, err := env.EstimateCost(ast, celSizes{})
	if err != nil {
		return celProgram{}, paramErr(field, "its cost cannot be estimated: %v", err)
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(interruptEvery))
	if err != nil {
		return celProgram{}, paramErr(field, "%v", err)
	}
	return celProgram{prg: prg, field: field, worst: est.Max}, nil
}

// celSizes tells CEL's cost estimator how large the values of a request
// can be at most, as Kubernetes derives them from a schema's maxItems and
// maxLength: request.applications holds at most MaxApplications, ids at
// most 255 bytes, and anything else no more than a request of
// MaxRequestBytes can hold (a string one character per byte, a list of
// strings one element per 3 bytes, `"",`; any other list or map one per 2
// bytes).
type celSizes struct{}

func (celSizes) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	switch n.Type().Kind() {
	case types.StringKind, types.BytesKind, types.ListKind, types.MapKind, types.DynKind:
	default:
		return nil
	}
	size := func(max uint64) *checker.SizeEstimate { return &checker.SizeEstimate{Min: 0, Max: max} }
	p := n.Path()
	if len(p) == 2 && p[0] == "request" {
		switch p[1] {
		case "applications":
			return size(MaxApplications)
		case "deployment_id", "tenant":
			return size(check.MaxIDBytes)
		}
	}
	// An application: app.<field>, or an element of request.applications.
	var field string
	switch {
	case len(p) == 2 && p[0] == "app":
		field = p[1]
	case len(p) == 4 && p[0] == "request" && p[1] == "applications" && strings.HasPrefix(p[2], "@"):
		field = p[3]
	}
	switch field {
	case "name":
		return size(check.MaxIDBytes)
	case "inherits", "scripts":
		return size(MaxRequestBytes / 3)
	}
	switch n.Type().Kind() {
	case types.ListKind, types.MapKind:
		return size(MaxRequestBytes / 2)
	}
	return size(MaxRequestBytes) // a string, or dyn: a string at worst

}

func (celSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// fieldTypes is what a mutation of a field must yield.
func fieldTypes(field string) []*cel.Type {
	switch field {
	case "flavor", "image":
		return []*cel.Type{cel.StringType}
	case "instances":
		return []*cel.Type{cel.IntType, cel.UintType, cel.DoubleType}
	case "scripts":
		return []*cel.Type{cel.ListType(cel.StringType), cel.ListType(cel.DynType)}
	}
	return nil // a property takes any JSON value
}

func compileCEL(p params) (ruleSet, error) {
	var vs []celValidation
	var ms []celMutation
	if raw, ok := p["validations"]; ok {
		if err := strictUnmarshal(raw, &vs); err != nil {
			return ruleSet{}, paramErr("validations", "must be an array of {expression, message, scope}: %v", err)
		}
	}
	if raw, ok := p["mutations"]; ok {
		if err := strictUnmarshal(raw, &ms); err != nil {
			return ruleSet{}, paramErr("mutations", "must be an array of {field, expression}: %v", err)
		}
	}
	if len(vs)+len(ms) == 0 {
		return ruleSet{}, paramErr("validations", "and mutations are both empty: give at least one rule")
	}
	if len(vs)+len(ms) > MaxCELRules {
		return ruleSet{}, paramErr("validations", "and mutations hold %d rules; at most %d are allowed", len(vs)+len(ms), MaxCELRules)
	}
	var rs ruleSet
	for i, m := range ms {
		f := fmt.Sprintf("mutations[%d]", i)
		if err := checkField(m.Field); err != nil {
			return ruleSet{}, paramErr(f+".field", "%v", err)
		}
		prg, err := compileExpr(appEnv, f+".expression", m.Expression, fieldTypes(m.Field)...)
		if err != nil {
			return ruleSet{}, err
		}
		rs.cel = append(rs.cel, prg)
		rs.mutators = append(rs.mutators, celMutator(f, m.Field, prg))
	}
	for i, v := range vs {
		f := fmt.Sprintf("validations[%d]", i)
		if v.Message == "" {
			return ruleSet{}, paramErr(f+".message", "is missing: say what a request that fails the expression does wrong")
		}
		env := appEnv
		switch v.Scope {
		case "", ScopeApplication:
		case ScopeRequest:
			env = requestEnv
		default:
			return ruleSet{}, paramErr(f+".scope", "%q is not a scope; use %q (once per application, with app and request) or %q (once, with request)", v.Scope, ScopeApplication, ScopeRequest)
		}
		prg, err := compileExpr(env, f+".expression", v.Expression, cel.BoolType)
		if err != nil {
			return ruleSet{}, err
		}
		rs.cel = append(rs.cel, prg)
		rs.validators = append(rs.validators, celValidator(f, v, prg))
	}
	return rs, nil
}

// celMutator is mutation rule f: it sets field of each application to
// what prg computes, emitting each change.
func celMutator(f, field string, prg celProgram) mutator {
	return mutator{rule: f, fn: func(b *budget, r *Request, emit func(Mutation)) error {
		reqV := celRequest(r)
		for i := range r.Applications {
			a := &r.Applications[i]
			if b.stopped(i, len(r.Applications)) {
				return nil
			}
			out, err := prg.eval(b, map[string]any{"request": reqV, "app": reqV["applications"].([]any)[i]})
			if err != nil {
				return fmt.Errorf("%s: %s: %w", a.describe(), f, err)
			}
			pv, err := out.ConvertToNative(reflect.TypeOf(&structpb.Value{}))
			if err != nil {
				return fmt.Errorf("%s: %s: the value is not JSON: %w", a.describe(), f, err)
			}
			nv := pv.(*structpb.Value).AsInterface()
			old := jsonText(getField(a, field))
			if old == jsonText(nv) {
				continue
			}
			if err := setField(a, field, nv); err != nil {
				return fmt.Errorf("%s: %s: %w", a.describe(), f, err)
			}
			emit(Mutation{Application: a.Name, Field: field, Old: old, New: jsonText(getField(a, field))})
		}
		return nil
	}}
}

// celValidator is validation rule f: prg, once per application or once
// per request (v.Scope), emitting v.Message for each object that fails
// it.
func celValidator(f string, v celValidation, prg celProgram) validator {
	msg, expr, scope := v.Message, v.Expression, v.Scope
	check := func(b *budget, vars map[string]any, object func() string, emit func(string, string)) {
		out, err := prg.eval(b, vars)
		if b.ctx.Err() != nil {
			return // the verdict is not given
		}
		if err != nil {
			emit(object(), fmt.Sprintf("%s (the expression %q could not be evaluated: %v)", msg, expr, err))
			return
		}
		if ok, isBool := out.Value().(bool); !isBool || !ok {
			emit(object(), msg)
		}
	}
	return validator{rule: f, fn: func(b *budget, r *Request, emit func(string, string)) {
		reqV := celRequest(r)
		if scope == ScopeRequest {
			if !b.stopped(0, len(r.Applications)) {
				check(b, map[string]any{"request": reqV}, func() string { return fmt.Sprintf("environment %q", r.Environment) }, emit)
			}
			return
		}
		for i := range r.Applications {
			a := &r.Applications[i]
			if b.stopped(i, len(r.Applications)) {
				return
			}
			check(b, map[string]any{"request": reqV, "app": reqV["applications"].([]any)[i]}, a.describe, emit)
		}
	}}
}

// strictUnmarshal decodes JSON refusing unknown fields.
func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// celRequest is the request as CEL sees it: its JSON form with every
// field present (app.image is "" rather than a missing key when none was
// given) and whole numbers as int.
func celRequest(r *Request) map[string]any {
	apps := make([]any, len(r.Applications))
	for i := range r.Applications {
		apps[i] = celApp(&r.Applications[i])
	}
	return map[string]any{"deployment_id": r.DeploymentID, "tenant": r.Tenant, "environment": r.Environment, "applications": apps}
}

// celApp is an application as CEL sees it.
func celApp(a *Application) map[string]any {
	inherits := make([]any, len(a.Inherits))
	for i, c := range a.Inherits {
		inherits[i] = c
	}
	scripts := make([]any, len(a.Scripts))
	for i, c := range a.Scripts {
		scripts[i] = c
	}
	props := map[string]any{}
	for k, v := range a.Properties {
		props[k] = celJSON(v)
	}
	return map[string]any{"name": a.Name, "package": a.Package, "class": a.Class, "inherits": inherits,
		"instances": int64(a.Instances), "flavor": a.Flavor, "image": a.Image, "properties": props, "scripts": scripts}
}

// celJSON is a JSON value with numbers as int64 when whole, else float64.
func celJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = celJSON(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = celJSON(e)
		}
		return l
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case int:
		return int64(x)
	case float64:
		if x == float64(int64(x)) {
			return int64(x)
		}
	}
	return v
}

func ints(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = ints(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = ints(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
