package admit

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Fields a mutation may change, besides properties.<name>.
var mutableFields = []string{"flavor", "image", "instances", "scripts"}

// checkField says what is wrong with a field name a mutation names.
func checkField(f string) error {
	if name, ok := strings.CutPrefix(f, "properties."); ok {
		if name == "" {
			return fmt.Errorf("properties. names no property")
		}
		return nil
	}
	for _, m := range mutableFields {
		if f == m {
			return nil
		}
	}
	return fmt.Errorf("%q is not a field a mutation may change; use one of %s or properties.<name>", f, strings.Join(mutableFields, ", "))
}

// getField returns an application's field as a JSON value.
func getField(a *Application, f string) any {
	switch f {
	case "flavor":
		return a.Flavor
	case "image":
		return a.Image
	case "instances":
		return a.Instances
	case "scripts":
		return a.Scripts
	}
	name := strings.TrimPrefix(f, "properties.")
	if v, ok := a.Properties[name]; ok {
		return v
	}
	return nil
}

// setField sets an application's field, checking the value's type.
func setField(a *Application, f string, v any) error {
	switch f {
	case "flavor", "image":
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s must be a string, the value is %s", f, jsonText(v))
		}
		if f == "flavor" {
			a.Flavor = s
		} else {
			a.Image = s
		}
		return nil
	case "instances":
		n, ok := wholeNumber(v)
		if !ok || n < 1 || n > MaxInstances {
			return fmt.Errorf("instances must be a whole number from 1 to %d, the value is %s", MaxInstances, jsonText(v))
		}
		a.Instances = int(n)
		return nil
	case "scripts":
		list, ok := v.([]any)
		if !ok {
			if ss, ok := v.([]string); ok {
				a.Scripts = append([]string(nil), ss...)
				return nil
			}
			return fmt.Errorf("scripts must be a list of strings, the value is %s", jsonText(v))
		}
		out := make([]string, len(list))
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("scripts must be a list of strings, item %d is %s", i, jsonText(e))
			}
			out[i] = s
		}
		a.Scripts = out
		return nil
	}
	name := strings.TrimPrefix(f, "properties.")
	if a.Properties == nil {
		a.Properties = map[string]any{}
	}
	a.Properties[name] = v
	return nil
}

// wholeNumber reads an integer out of a JSON-ish value.
func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), n < 1<<62
	case float64:
		return int64(n), n == float64(int64(n))
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

// jsonText is v as compact JSON, for messages and mutation records.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}
