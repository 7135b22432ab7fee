package policy

import (
	"encoding/json"
	"math"
	"math/big"
	"reflect"
)

// JSON types as they appear in messages.
const (
	kindNull    = "null"
	kindBool    = "boolean"
	kindNumber  = "number"
	kindString  = "string"
	kindObject  = "object"
	kindArray   = "array"
	kindUnknown = "non-JSON value"
)

// jsonKind names the JSON type of a decoded value. Go numeric types count
// as numbers so that values built in Go compare like decoded ones.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return kindNull
	case bool:
		return kindBool
	case string:
		return kindString
	case json.Number, float64, float32, int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64:
		return kindNumber
	case map[string]any, map[string]string, Body:
		return kindObject
	case []any, []string:
		return kindArray
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			return kindObject
		}
	case reflect.Slice, reflect.Array:
		return kindArray
	}
	return kindUnknown
}

// jsonEqual reports whether two decoded JSON values have the same JSON type
// and the same value: numbers compare by exact numeric value (1 equals 1.0),
// objects by keys and values, arrays element by element.
func jsonEqual(a, b any) bool {
	ka, kb := jsonKind(a), jsonKind(b)
	if ka != kb || ka == kindUnknown {
		return false
	}
	switch ka {
	case kindNull:
		return true
	case kindBool:
		return a.(bool) == b.(bool)
	case kindString:
		return a.(string) == b.(string)
	case kindNumber:
		return numberEqual(a, b)
	case kindObject:
		ma, mb := asObject(a), asObject(b)
		if ma == nil || mb == nil || len(ma) != len(mb) {
			return false
		}
		for k, va := range ma {
			vb, ok := mb[k]
			if !ok || !jsonEqual(va, vb) {
				return false
			}
		}
		return true
	case kindArray:
		sa, sb := asArray(a), asArray(b)
		if sa == nil || sb == nil || len(sa) != len(sb) {
			return false
		}
		for i := range sa {
			if !jsonEqual(sa[i], sb[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func asObject(v any) map[string]any {
	switch m := v.(type) {
	case map[string]any:
		return m
	case Body:
		return m
	case map[string]string:
		out := make(map[string]any, len(m))
		for k, s := range m {
			out[k] = s
		}
		return out
	}
	m, _ := roundTrip(v).(map[string]any)
	return m
}

func asArray(v any) []any {
	switch s := v.(type) {
	case []any:
		return s
	case []string:
		out := make([]any, len(s))
		for i, e := range s {
			out[i] = e
		}
		return out
	}
	arr, _ := roundTrip(v).([]any)
	return arr
}

// roundTrip converts an arbitrary Go value to its decoded JSON form.
func roundTrip(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	out, err := decodeJSONValue(data)
	if err != nil {
		return nil
	}
	return out
}

func numberEqual(a, b any) bool {
	if fa, ok := a.(float64); ok {
		if fb, ok := b.(float64); ok {
			return fa == fb
		}
	}
	if na, ok := a.(json.Number); ok {
		if nb, ok := b.(json.Number); ok && na == nb {
			return true
		}
	}
	ra, oka := toRat(a)
	rb, okb := toRat(b)
	return oka && okb && ra.Cmp(rb) == 0
}

func toRat(v any) (*big.Rat, bool) {
	r := new(big.Rat)
	switch n := v.(type) {
	case json.Number:
		if _, ok := r.SetString(string(n)); !ok {
			return nil, false
		}
		return r, true
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) {
			return nil, false
		}
		return r.SetFloat64(n), true
	case float32:
		f := float64(n)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, false
		}
		return r.SetFloat64(f), true
	case int:
		return r.SetInt64(int64(n)), true
	case int8:
		return r.SetInt64(int64(n)), true
	case int16:
		return r.SetInt64(int64(n)), true
	case int32:
		return r.SetInt64(int64(n)), true
	case int64:
		return r.SetInt64(n), true
	case uint:
		return r.SetUint64(uint64(n)), true
	case uint8:
		return r.SetUint64(uint64(n)), true
	case uint16:
		return r.SetUint64(uint64(n)), true
	case uint32:
		return r.SetUint64(uint64(n)), true
	case uint64:
		return r.SetUint64(n), true
	}
	return nil, false
}
