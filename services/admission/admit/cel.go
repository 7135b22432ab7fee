package admit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"google.golang.org/protobuf/types/known/structpb"
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
// the same order of magnitude.
var CostLimit uint64 = 1_000_000

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

// compileExpr parses and type-checks an expression, wanting one of the
// output types (dyn is always accepted: map fields are dyn).
func compileExpr(env *cel.Env, field, expr string, want ...*cel.Type) (cel.Program, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, paramErr(field, "is empty: give a CEL expression")
	}
	if len(expr) > MaxExpressionBytes {
		return nil, paramErr(field, "is %d bytes; at most %d are allowed", len(expr), MaxExpressionBytes)
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		return nil, paramErr(field, "does not compile: %s", strings.ReplaceAll(iss.Err().Error(), "<input>", "line"))
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
		return nil, paramErr(field, "yields %s; it must yield %s", out, strings.Join(names, " or "))
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, paramErr(field, "%v", err)
	}
	return prg, nil
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
		field := m.Field
		rs.mutators = append(rs.mutators, mutator{rule: f, fn: func(r *Request, emit func(Mutation)) error {
			reqV := celRequest(r)
			for i := range r.Applications {
				a := &r.Applications[i]
				out, _, err := prg.Eval(map[string]any{"request": reqV, "app": reqV["applications"].([]any)[i]})
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
		}})
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
		msg, expr, scope := v.Message, v.Expression, v.Scope
		check := func(vars map[string]any, object func() string, emit func(string, string)) {
			out, _, err := prg.Eval(vars)
			if err != nil {
				emit(object(), fmt.Sprintf("%s (the expression %q could not be evaluated: %v)", msg, expr, err))
				return
			}
			if ok, isBool := out.Value().(bool); !isBool || !ok {
				emit(object(), msg)
			}
		}
		rs.validators = append(rs.validators, validator{rule: f, fn: func(r *Request, emit func(string, string)) {
			reqV := celRequest(r)
			if scope == ScopeRequest {
				check(map[string]any{"request": reqV}, func() string { return fmt.Sprintf("environment %q", r.Environment) }, emit)
				return
			}
			for i := range r.Applications {
				a := &r.Applications[i]
				check(map[string]any{"request": reqV, "app": reqV["applications"].([]any)[i]}, a.describe, emit)
			}
		}})
	}
	return rs, nil
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
