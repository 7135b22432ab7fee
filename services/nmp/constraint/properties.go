package constraint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Property types, as Open Horizon names them. A property given without a
// type takes the type of its JSON value.
const (
	TypeString  = "string"
	TypeInt     = "int"
	TypeFloat   = "float"
	TypeBool    = "boolean"
	TypeList    = "list of strings"
	TypeVersion = "version"
)

// Property is a named policy property.
type Property struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
	Type  string `json:"type,omitempty"`
}

// Properties are a policy's properties, by name.
type Properties map[string]Property

// MaxProperties bounds how many properties one policy carries.
const MaxProperties = 256

// ParseProperties reads a JSON array of {name, value[, type]} and checks
// each property's value against its type.
func ParseProperties(raw []byte) (Properties, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Properties{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var list []Property
	if err := dec.Decode(&list); err != nil {
		return nil, fmt.Errorf("properties: want a JSON array of {\"name\", \"value\"[, \"type\"]}: %w", err)
	}
	return NewProperties(list)
}

// NewProperties checks a list of properties and indexes it by name.
func NewProperties(list []Property) (Properties, error) {
	if len(list) > MaxProperties {
		return nil, fmt.Errorf("properties: %d of them, at most %d", len(list), MaxProperties)
	}
	ps := make(Properties, len(list))
	for i, p := range list {
		if p.Name == "" {
			return nil, fmt.Errorf("properties[%d]: no name", i)
		}
		if _, dup := ps[p.Name]; dup {
			return nil, fmt.Errorf("properties[%d]: %q is given twice", i, p.Name)
		}
		v, err := normalize(p)
		if err != nil {
			return nil, fmt.Errorf("properties[%d] %q: %w", i, p.Name, err)
		}
		ps[p.Name] = v
	}
	return ps, nil
}

// normalize checks a property's value against its type and gives it the
// Go type evaluation expects: string, float64, bool, []string, or a
// version (string with Type TypeVersion).
func normalize(p Property) (Property, error) {
	switch v := p.Value.(type) {
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			return p, fmt.Errorf("value %s: %w", v, err)
		}
		p.Value = f
	case int:
		p.Value = float64(v)
	case int64:
		p.Value = float64(v)
	}
	switch p.Type {
	case "":
		switch v := p.Value.(type) {
		case string, float64, bool:
		case []any:
			l, err := stringList(v)
			if err != nil {
				return p, err
			}
			p.Value, p.Type = l, TypeList
		case nil:
			return p, fmt.Errorf("no value")
		default:
			return p, fmt.Errorf("value of type %T: want a string, number, boolean or list of strings", v)
		}
	case TypeString:
		if _, ok := p.Value.(string); !ok {
			return p, fmt.Errorf("type string, value %v is not a string", p.Value)
		}
	case TypeInt:
		f, ok := p.Value.(float64)
		if !ok || f != float64(int64(f)) {
			return p, fmt.Errorf("type int, value %v is not an integer", p.Value)
		}
	case TypeFloat:
		if _, ok := p.Value.(float64); !ok {
			return p, fmt.Errorf("type float, value %v is not a number", p.Value)
		}
	case TypeBool:
		if _, ok := p.Value.(bool); !ok {
			return p, fmt.Errorf("type boolean, value %v is not true or false", p.Value)
		}
	case TypeVersion:
		s, ok := p.Value.(string)
		if !ok {
			return p, fmt.Errorf("type version, value %v is not a string", p.Value)
		}
		if _, err := ParseVersion(s); err != nil {
			return p, err
		}
	case TypeList:
		switch v := p.Value.(type) {
		case string:
			p.Value = splitList(v)
		case []any:
			l, err := stringList(v)
			if err != nil {
				return p, err
			}
			p.Value = l
		case []string:
		default:
			return p, fmt.Errorf("type list of strings, value %v is not a comma-separated string or a list", p.Value)
		}
	default:
		return p, fmt.Errorf("unknown type %q: want string, int, float, boolean, list of strings or version", p.Type)
	}
	return p, nil
}

func stringList(v []any) ([]string, error) {
	l := make([]string, len(v))
	for i, e := range v {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("list element %d is %T, want a string", i, e)
		}
		l[i] = s
	}
	return l, nil
}

func splitList(s string) []string {
	parts := strings.Split(s, ",")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Eval implements Expr: a comparison with a property the properties do
// not hold is false, whatever the operator.
func (c Compare) Eval(ps Properties) bool {
	p, ok := ps[c.Prop]
	if !ok {
		return false
	}
	switch c.Op {
	case In:
		return c.in(p)
	case Eq:
		return c.eq(p)
	case Ne:
		return !c.eq(p)
	}
	cmp, ok := c.order(p)
	if !ok {
		return false
	}
	switch c.Op {
	case Lt:
		return cmp < 0
	case Gt:
		return cmp > 0
	case Le:
		return cmp <= 0
	case Ge:
		return cmp >= 0
	}
	return false
}

// eq is == : a version against a version or range, a number against a
// number, a boolean against true/false, a list holding the value, a
// string equal to it (or, unquoted with commas, to one of its elements).
func (c Compare) eq(p Property) bool {
	if c.Value.Range != nil {
		return inRange(p, c.Value.Range)
	}
	switch v := p.Value.(type) {
	case float64:
		f, ok := number(c.Value.Raw)
		return ok && f == v
	case bool:
		b, err := strconv.ParseBool(c.Value.Raw)
		return err == nil && !c.Value.Quoted && b == v
	case []string:
		for _, want := range splitList(c.Value.Raw) {
			for _, have := range v {
				if have == want {
					return true
				}
			}
		}
		return false
	case string:
		if p.Type == TypeVersion {
			a, err1 := ParseVersion(v)
			b, err2 := ParseVersion(c.Value.Raw)
			return err1 == nil && err2 == nil && a.Compare(b) == 0
		}
		if v == c.Value.Raw {
			return true
		}
		if strings.Contains(c.Value.Raw, ",") {
			for _, want := range splitList(c.Value.Raw) {
				if want == v {
					return true
				}
			}
		}
	}
	return false
}

// in holds when the property's value (or one element of a list) is one of
// the comma-separated values, or a version lies in the range.
func (c Compare) in(p Property) bool {
	if c.Value.Range != nil {
		return inRange(p, c.Value.Range)
	}
	if r, err := ParseRange(c.Value.Raw); err == nil && strings.ContainsAny(c.Value.Raw, "[(") {
		return inRange(p, r)
	}
	wants := splitList(c.Value.Raw)
	var haves []string
	switch v := p.Value.(type) {
	case []string:
		haves = v
	case string:
		haves = []string{v}
	case float64:
		for _, w := range wants {
			if f, ok := number(w); ok && f == v {
				return true
			}
		}
		return false
	case bool:
		haves = []string{strconv.FormatBool(v)}
	}
	for _, h := range haves {
		for _, w := range wants {
			if h == w {
				return true
			}
		}
	}
	return false
}

// order compares the property with the value: as numbers, else as
// versions; ok is false when they are not comparable.
func (c Compare) order(p Property) (int, bool) {
	switch v := p.Value.(type) {
	case float64:
		f, ok := number(c.Value.Raw)
		if !ok {
			return 0, false
		}
		switch {
		case v < f:
			return -1, true
		case v > f:
			return 1, true
		}
		return 0, true
	case string:
		a, err1 := ParseVersion(v)
		b, err2 := ParseVersion(c.Value.Raw)
		if err1 != nil || err2 != nil {
			return 0, false
		}
		return a.Compare(b), true
	}
	return 0, false
}

func inRange(p Property, r *VersionRange) bool {
	s, ok := p.Value.(string)
	if !ok {
		return false
	}
	v, err := ParseVersion(s)
	return err == nil && r.Contains(v)
}
