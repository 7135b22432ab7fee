package policy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"regexp/syntax"
	"runtime"
	"sort"
	"strings"
	"sync"
	"weak"
)

// Filter is a policy filter: the parameters of the PDP's /getConfig (except
// the per-request requestID). Given, non-empty fields are AND-ed.
type Filter struct {
	// PolicyName is a Go regular expression matched from the start (not to
	// the end) of the body's full policyName; the filter also matches when
	// PolicyName equals the body's policy_id or full policyName. A filter
	// without PolicyName matches nothing.
	PolicyName string `json:"policyName,omitempty"`
	// ConfigName must equal matchingConditions.ConfigName.
	ConfigName string `json:"configName,omitempty"`
	// OnapName must equal matchingConditions.ONAPName.
	OnapName string `json:"onapName,omitempty"`
	// ConfigAttributes: every key must be in matchingConditions with the
	// same value and the same JSON type.
	ConfigAttributes map[string]any `json:"configAttributes,omitempty"`
	// Unique is carried for compatibility with /getConfig; it does not
	// change matching.
	Unique bool `json:"unique,omitempty"`
}

// CompiledFilter is a Filter checked and prepared for matching. It is
// immutable and safe for concurrent use.
type CompiledFilter struct {
	filter   Filter
	attrs    map[string]any // ConfigAttributes in decoded-JSON form
	attrKeys []string       // sorted keys of attrs
	pat      *pattern       // keeps the shared compiled policyName in patterns
	re       *regexp.Regexp // nil when PolicyName is empty
	anchored string         // the expression re was compiled from
	prefix   []int32        // what every matching name starts with, see prefixElems
	exact    bool           // prefix alone decides whether re matches
	all      bool           // re matches every name, e.g. ".*"
}

// CompileFilter checks a filter and compiles its policyName. A policyName
// Go cannot compile is refused with an error naming the field, the pattern
// and Go's reason. ConfigAttributes must be encodable as JSON.
func CompileFilter(f Filter) (*CompiledFilter, error) {
	c := &CompiledFilter{filter: f}
	if len(f.ConfigAttributes) > 0 {
		attrs, ok := roundTrip(f.ConfigAttributes).(map[string]any)
		if !ok {
			data, err := json.Marshal(f.ConfigAttributes)
			return nil, fmt.Errorf("compile policy filter: configAttributes %s cannot be encoded as a JSON object: %v",
				string(data), err)
		}
		c.attrs = attrs
		c.attrKeys = make([]string, 0, len(attrs))
		for k := range attrs {
			c.attrKeys = append(c.attrKeys, k)
		}
		sort.Strings(c.attrKeys)
		c.filter.ConfigAttributes = attrs
	}
	if f.PolicyName == "" {
		return c, nil
	}
	pat, err := compilePattern(f.PolicyName)
	if err != nil {
		return nil, err
	}
	c.pat, c.re, c.anchored, c.prefix, c.exact, c.all = pat, pat.re, pat.anchored, pat.prefix, pat.exact, pat.all
	return c, nil
}

// pattern is a policyName compiled: shared, read only, by every filter
// with the same policyName.
type pattern struct {
	re       *regexp.Regexp
	anchored string
	prefix   []int32
	exact    bool
	all      bool
}

// patterns are the policyNames compiled, each held weakly: an entry lives
// as long as a CompiledFilter uses it, and is then dropped. Components
// registered from one blueprint share a policyName however their other
// conditions differ; a compiled expression costs 1-2 KiB, so 100,000
// filters of a few hundred policyNames kept 150 MiB of copies.
var patterns = struct {
	sync.Mutex
	m map[string]weak.Pointer[pattern]
}{m: map[string]weak.Pointer[pattern]{}}

// compilePattern is the compiled policyName, from patterns when a filter
// in use has it.
func compilePattern(name string) (*pattern, error) {
	patterns.Lock()
	wp, ok := patterns.m[name]
	patterns.Unlock()
	if ok {
		if p := wp.Value(); p != nil {
			return p, nil
		}
	}
	parsed, err := syntax.Parse(name, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("compile policy filter: policyName %q is not a regular expression Go accepts: %w",
			name, err)
	}
	p := &pattern{anchored: anchor(name)}
	re, err := regexp.Compile(p.anchored)
	if err != nil {
		return nil, fmt.Errorf("compile policy filter: policyName %q is not a regular expression Go accepts (anchored as %s): %w",
			name, p.anchored, err)
	}
	p.re = re
	p.prefix, p.exact = prefixElems(parsed)
	if matchesEveryName(parsed, re) {
		p.prefix, p.exact, p.all = nil, true, true
	}
	patterns.Lock()
	defer patterns.Unlock()
	if q := patterns.m[name].Value(); q != nil {
		return q, nil // compiled meanwhile by another caller
	}
	key := strings.Clone(name)
	patterns.m[key] = weak.Make(p)
	runtime.AddCleanup(p, func(key string) {
		patterns.Lock()
		defer patterns.Unlock()
		if wp, ok := patterns.m[key]; ok && wp.Value() == nil {
			delete(patterns.m, key)
		}
	}, key)
	return p, nil
}

// anchor wraps a pattern that parses on its own so that it matches only at
// the start of the input. A trailing \Q quote without \E would swallow the
// closing parenthesis, so it is closed first.
func anchor(pattern string) string {
	if unterminatedQuote(pattern) {
		pattern += `\E`
	}
	return "^(?:" + pattern + ")"
}

func unterminatedQuote(p string) bool {
	for i := 0; i < len(p); {
		if p[i] != '\\' || i+1 >= len(p) {
			i++
			continue
		}
		if p[i+1] != 'Q' {
			i += 2
			continue
		}
		end := strings.Index(p[i+2:], `\E`)
		if end < 0 {
			return true
		}
		i += 2 + end + 2
	}
	return false
}

// matchesEveryName reports whether the anchored expression matches at the
// start of every name: it does when it can match the empty string there
// and nothing in it looks past the start (no $, \b or \B), as for ".*".
func matchesEveryName(parsed *syntax.Regexp, anchored *regexp.Regexp) bool {
	return !looksAhead(parsed) && anchored.MatchString("")
}

func looksAhead(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEndText, syntax.OpEndLine, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	}
	for _, sub := range re.Sub {
		if looksAhead(sub) {
			return true
		}
	}
	return false
}

// Filter returns the filter as given (ConfigAttributes in decoded-JSON
// form).
func (c *CompiledFilter) Filter() Filter { return c.filter }

// NameRegexp is the compiled, anchored policyName expression (Pattern),
// shared by every filter with the same policyName; nil when PolicyName is
// empty. It is safe for concurrent use.
func (c *CompiledFilter) NameRegexp() *regexp.Regexp { return c.re }

// Pattern is the anchored regular expression the policyName is matched
// with, e.g. "^(?:DCAE.Config_.*)"; "" when the filter has no policyName.
func (c *CompiledFilter) Pattern() string { return c.anchored }

// String renders the filter as JSON.
func (c *CompiledFilter) String() string {
	data, err := json.Marshal(c.filter)
	if err != nil {
		return fmt.Sprintf("%+v", c.filter)
	}
	return string(data)
}

// view is what matching needs from a body, computed once per body.
type view struct {
	name string
	id   string
	ok   bool   // the body can match: name and id are known, matchingConditions is usable
	why  string // why not ok
	mc   map[string]any
}

// newView reads a body for matching. matchingConditions that are absent
// count as {}; present but not an object (null, a list, a string), they
// make the body match no filter, as Check refuses such a body.
func newView(b Body) view {
	v := view{name: b.PolicyName()}
	mc, present := b[FieldMatchingConditions]
	switch m := mc.(type) {
	case map[string]any:
		v.mc = m
	case nil:
	default:
		if jsonKind(mc) == kindObject {
			v.mc = asObject(m)
		}
	}
	switch {
	case b == nil:
		v.why = "policy_body is null: it matches no filter"
	case v.name == "":
		v.why = "policy_body has no policyName: it matches no filter"
	case present && v.mc == nil:
		v.why = fmt.Sprintf("policy_body %q: matchingConditions is %s, not an object: it matches no filter",
			v.name, describeValue(mc))
	default:
		id, err := PolicyID(v.name)
		if err != nil {
			v.why = fmt.Sprintf("policy_body %q: %v: it matches no filter", v.name, err)
		} else {
			v.id, v.ok = id, true
		}
	}
	return v
}

// nameMatches reports whether the policyName condition holds.
func (c *CompiledFilter) nameMatches(v *view) bool {
	p := c.filter.PolicyName
	return c.all || p == v.id || p == v.name || c.re.MatchString(v.name)
}

// MatchesName reports whether the filter's policyName condition holds for a
// full policyName, as it does in Match: a filter without policyName
// matches no name.
func (c *CompiledFilter) MatchesName(policyName string) bool {
	if c.re == nil {
		return false
	}
	v := view{name: policyName}
	v.id, _ = PolicyID(policyName)
	return c.nameMatches(&v)
}

// restMatches checks every condition except the policyName one.
func (c *CompiledFilter) restMatches(v *view) bool {
	if c.filter.OnapName != "" {
		if s, ok := v.mc[MatchingONAPName].(string); !ok || s != c.filter.OnapName {
			return false
		}
	}
	if c.filter.ConfigName != "" {
		if s, ok := v.mc[MatchingConfigName].(string); !ok || s != c.filter.ConfigName {
			return false
		}
	}
	for _, k := range c.attrKeys {
		have, ok := v.mc[k]
		if !ok || !jsonEqual(c.attrs[k], have) {
			return false
		}
	}
	return true
}

func (c *CompiledFilter) matchView(v *view) bool {
	return c.re != nil && v.ok && c.nameMatches(v) && c.restMatches(v)
}

// Match reports whether the body matches the filter, with one human-readable
// reason per condition checked, e.g.
//
//	policyName "DCAE.Config_VM_MEMORY.222.xml" matches ^(?:DCAE.Config_.*)
//	configAttributes key1: want "value1" (string), have 1 (number)
//
// Every condition is checked and explained, also after one failed.
func (c *CompiledFilter) Match(b Body) (bool, []string) {
	if c.re == nil {
		return false, []string{"filter has no policyName: it matches nothing"}
	}
	v := newView(b)
	if !v.ok {
		return false, []string{v.why}
	}
	matched := true
	var reasons []string
	p := c.filter.PolicyName
	switch {
	case p == v.id:
		reasons = append(reasons, fmt.Sprintf("policy_id %q equals the filter's policyName", v.id))
	case p == v.name:
		reasons = append(reasons, fmt.Sprintf("policyName %q equals the filter's policyName", v.name))
	case c.re.MatchString(v.name):
		reasons = append(reasons, fmt.Sprintf("policyName %q matches %s", v.name, c.anchored))
	default:
		matched = false
		reasons = append(reasons, fmt.Sprintf("policyName %q does not match %s, and its policy_id %q is not %q",
			v.name, c.anchored, v.id, p))
	}
	check := func(label, key string, want any) {
		have, ok := v.mc[key]
		switch {
		case v.mc == nil:
			matched = false
			reasons = append(reasons, fmt.Sprintf("%s: want %s, but the policy has no matchingConditions",
				label, describeValue(want)))
		case !ok:
			matched = false
			reasons = append(reasons, fmt.Sprintf("%s: want %s, but matchingConditions has no %s",
				label, describeValue(want), key))
		default:
			if !jsonEqual(want, have) {
				matched = false
			}
			reasons = append(reasons, fmt.Sprintf("%s: want %s, have %s", label, describeValue(want), describeValue(have)))
		}
	}
	if c.filter.OnapName != "" {
		check("onapName", MatchingONAPName, c.filter.OnapName)
	}
	if c.filter.ConfigName != "" {
		check("configName", MatchingConfigName, c.filter.ConfigName)
	}
	for _, k := range c.attrKeys {
		check("configAttributes "+k, k, c.attrs[k])
	}
	return matched, reasons
}

// DecodeConfigAttributes decodes a configAttributes JSON object as carried
// in events (numbers kept exact). "" and "null" give nil.
func DecodeConfigAttributes(s string) (map[string]any, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	v, err := decodeJSONValue([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decode configAttributes %q: %w", s, err)
	}
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("decode configAttributes %q: got %s, want a JSON object", s, jsonKind(v))
	}
	return m, nil
}
