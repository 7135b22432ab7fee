package admit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/check"
	"github.com/policyflow/policyflow/services/policy"
)

// Policy modes.
const (
	// ModeEnforce denies a request that violates the policy.
	ModeEnforce = "enforce"
	// ModeAudit reports a violation as a warning and admits.
	ModeAudit = "audit"
)

// Limits of a policy.
const (
	// MaxObjectModelBytes bounds a policy's objectModel as JSON.
	MaxObjectModelBytes = 256 << 10
	// MaxTenants bounds the tenants one policy is assigned to.
	MaxTenants = 10000
	// MaxPriority bounds a policy's priority, either way.
	MaxPriority = 1_000_000
)

// ParamError is an objectModel that breaks its kind's contract, naming
// the field (seed 001: 400, "parameters doesn't match the contracts").
type ParamError struct {
	Field string // e.g. "objectModel.maxFlavor"
	Msg   string
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Msg }

func paramErr(field, format string, args ...any) error {
	return &ParamError{Field: "objectModel." + field, Msg: fmt.Sprintf(format, args...)}
}

// UnknownKindError is an objectModel whose "?".type is not a known policy
// kind (seed 001: 404, "specified class doesn't exist or it is not an
// Aspect").
type UnknownKindError struct{ Type string }

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("objectModel.?.type %q is not a known policy kind; the kinds are %s", e.Type, strings.Join(Kinds(), ", "))
}

// ruleSet is what a kind compiles its parameters to.
type ruleSet struct {
	mutators   []mutator
	validators []validator
	// cel are the CEL expressions of the rules, with their estimated
	// costs (CheckCost).
	cel []celProgram
	// endpoints are the URLs the rules call.
	endpoints []Endpoint
	// deletions find what deleting a deployment would break.
	deletions []deletionRule
}

// deletionRule finds what deleting deployment dep would break, given the
// tenant's other deployments (rest); each finding is emitted with its
// object.
type deletionRule struct {
	rule string
	fn   func(dep *events.Deployment, rest []*events.Deployment, emit func(object, msg string))
}

// mutator changes a request, reporting each change. A rule that
// evaluates CEL spends b and stops when b says so.
type mutator struct {
	rule string
	fn   func(b *budget, r *Request, emit func(Mutation)) error
}

// validator finds what is wrong with a request, spending b as a mutator
// does.
type validator struct {
	rule string
	// notice marks findings that never deny (the quota notification).
	notice bool
	// raises marks findings that deny (or warn, in audit mode) as any
	// validator's do and are also raised as notices (the instance
	// quota).
	raises bool
	// webhook, of a notice or a rule that raises, is where the notice
	// is sent ("" nowhere).
	webhook string
	// external marks a rule that asks an external engine: it is asked
	// when a request is decided, not when a policy is audited.
	external bool
	fn       func(b *budget, r *Request, emit func(object, msg string))
}

// kind compiles a policy kind's parameters.
type kind struct {
	doc     string
	params  []string // every parameter the kind takes
	compile func(p params) (ruleSet, error)
}

// Compiled is a policy ready for Evaluate: its kind's rules, compiled and
// checked.
type Compiled struct {
	ID   string
	Type string
	Mode string
	// Tenants it applies to; nil for every tenant.
	Tenants []string
	// Priority and Created order the policies (see Applicable).
	Priority int
	Created  time.Time
	rules    ruleSet
}

// AppliesTo reports whether the policy applies to the tenant.
func (c *Compiled) AppliesTo(tenant string) bool {
	return c.Tenants == nil || slices.Contains(c.Tenants, tenant)
}

// CheckCost refuses a policy with a CEL expression whose worst-case cost
// for one evaluation, estimated from the request's limits as Kubernetes
// estimates a ValidatingAdmissionPolicy's, is over CostLimit: a
// *ParamError naming the expression and stating the estimate and the
// limit. The North API calls it when a policy is created or replaced;
// the stage does not: there the request's budget bounds what an
// evaluation costs (an overrun counts as a violation), and leaving a
// validating policy out would admit what it refuses.
func (c *Compiled) CheckCost() error {
	for _, e := range c.rules.cel {
		if e.worst > CostLimit {
			return paramErr(e.field, "its worst-case cost is estimated at %d CEL cost units, over the limit of %d for one evaluation: iterate fewer or smaller lists (request.applications holds at most %d; app.inherits, app.scripts and app.properties are bounded only by the %d-byte request, so prefer 'x' in app.scripts to a comprehension over them) or nest fewer comprehensions", e.worst, CostLimit, MaxApplications, MaxRequestBytes)
		}
	}
	return nil
}

// Mutates reports whether the policy changes requests.
func (c *Compiled) Mutates() bool { return len(c.rules.mutators) > 0 }

// Validates reports whether the policy can find violations.
func (c *Compiled) Validates() bool { return len(c.rules.validators) > 0 }

// Kinds lists the known policy kinds (objectModel "?".type), sorted.
func Kinds() []string {
	out := make([]string, 0, len(kinds))
	for k := range kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// KindDoc says what a kind does and what parameters it takes.
func KindDoc(t string) (doc string, params []string, ok bool) {
	k, ok := kinds[t]
	if !ok {
		return "", nil, false
	}
	return k.doc, slices.Clone(k.params), true
}

// Meta is the "?" header of an objectModel.
type Meta struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
}

// Compile checks a policy's objectModel and compiles it. mode is
// ModeEnforce or ModeAudit ("" is enforce); tenants nil is every tenant.
// An objectModel that is not a JSON object or breaks its kind's contract
// is a *ParamError; an unknown kind an *UnknownKindError.
func Compile(id string, objectModel json.RawMessage, mode string, tenants []string) (*Compiled, error) {
	if len(objectModel) > MaxObjectModelBytes {
		return nil, paramErr("", "is %d bytes; at most %d are allowed", len(objectModel), MaxObjectModelBytes)
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(objectModel))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, &ParamError{Field: "objectModel", Msg: "must be a JSON object with a \"?\": {\"type\": <policy kind>} header"}
	}
	metaRaw, ok := raw["?"]
	if !ok {
		return nil, paramErr("?", "is missing: give {\"type\": <policy kind>}, one of %s", strings.Join(Kinds(), ", "))
	}
	var meta Meta
	if err := json.Unmarshal(metaRaw, &meta); err != nil {
		return nil, paramErr("?", "must be an object {\"type\": <policy kind>, \"id\": <optional>}: %v", err)
	}
	if meta.Type == "" {
		return nil, paramErr("?.type", "is missing: give one of %s", strings.Join(Kinds(), ", "))
	}
	k, ok := kinds[meta.Type]
	if !ok {
		return nil, &UnknownKindError{Type: meta.Type}
	}
	delete(raw, "?")
	for name := range raw {
		if !slices.Contains(k.params, name) {
			return nil, paramErr(name, "is not a parameter of %s; it takes %s", meta.Type, strings.Join(k.params, ", "))
		}
	}
	switch mode {
	case "":
		mode = ModeEnforce
	case ModeEnforce, ModeAudit:
	default:
		return nil, &ParamError{Field: "mode", Msg: fmt.Sprintf("%q is not a mode; use %q or %q", mode, ModeEnforce, ModeAudit)}
	}
	if len(tenants) > MaxTenants {
		return nil, &ParamError{Field: "tenantIds", Msg: fmt.Sprintf("names %d tenants; at most %d are allowed", len(tenants), MaxTenants)}
	}
	for i, t := range tenants {
		if err := check.ID("tenant id", t); err != nil {
			return nil, &ParamError{Field: fmt.Sprintf("tenantIds[%d]", i), Msg: err.Error()}
		}
	}
	rs, err := k.compile(params(raw))
	if err != nil {
		return nil, err
	}
	return &Compiled{ID: id, Type: meta.Type, Mode: mode, Tenants: tenants, rules: rs}, nil
}

// params are a kind's parameters, raw.
type params map[string]json.RawMessage

func (p params) has(name string) bool { _, ok := p[name]; return ok }

func (p params) str(name string, required bool) (string, error) {
	raw, ok := p[name]
	if !ok {
		if required {
			return "", paramErr(name, "is missing")
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", paramErr(name, "must be a string, got %s", policy.RawKind(raw))
	}
	if required && s == "" {
		return "", paramErr(name, "is empty")
	}
	return s, nil
}

func (p params) strs(name string, required bool) ([]string, error) {
	raw, ok := p[name]
	if !ok {
		if required {
			return nil, paramErr(name, "is missing")
		}
		return nil, nil
	}
	var s []string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, paramErr(name, "must be an array of strings, got %s", policy.RawKind(raw))
	}
	for i, v := range s {
		if v == "" {
			return nil, paramErr(fmt.Sprintf("%s[%d]", name, i), "is empty")
		}
	}
	if required && len(s) == 0 {
		return nil, paramErr(name, "is empty")
	}
	return s, nil
}

func (p params) count(name string) (int, error) {
	raw, ok := p[name]
	if !ok {
		return 0, paramErr(name, "is missing")
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, paramErr(name, "must be a whole number, got %s", policy.RawKind(raw))
	}
	v, err := n.Int64()
	if err != nil || v < 0 || v > MaxInstances*MaxApplications {
		return 0, paramErr(name, "%s is not a whole number from 0 to %d", n, MaxInstances*MaxApplications)
	}
	return int(v), nil
}

func (p params) value(name string) (any, bool, error) {
	raw, ok := p[name]
	if !ok {
		return nil, false, nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, false, paramErr(name, "%v", err)
	}
	return v, true, nil
}

// IsParamError reports whether err is a *ParamError.
func IsParamError(err error) bool { var p *ParamError; return errors.As(err, &p) }

// IsUnknownKind reports whether err is an *UnknownKindError.
func IsUnknownKind(err error) bool { var u *UnknownKindError; return errors.As(err, &u) }
