package policy

import (
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
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
	ka, oka := numberKey(a)
	kb, okb := numberKey(b)
	return oka && okb && ka == kb
}

// numberKey renders a number's exact value so that two numbers are equal
// exactly when their keys are: sign, significant digits and the decimal
// exponent of 0.<digits>, "0" for zero ("1.50e2" and "150" both give
// "15e3"). It works on the decimal text and never expands the exponent,
// so 1e999999 costs what its text costs. It is false for what is not a
// number, NaN and the infinities.
func numberKey(v any) (string, bool) {
	switch n := v.(type) {
	case json.Number:
		return decimalKey(string(n))
	case float64:
		return floatKey(n)
	case float32:
		return floatKey(float64(n))
	case int:
		return decimalKey(strconv.FormatInt(int64(n), 10))
	case int8:
		return decimalKey(strconv.FormatInt(int64(n), 10))
	case int16:
		return decimalKey(strconv.FormatInt(int64(n), 10))
	case int32:
		return decimalKey(strconv.FormatInt(int64(n), 10))
	case int64:
		return decimalKey(strconv.FormatInt(n, 10))
	case uint:
		return decimalKey(strconv.FormatUint(uint64(n), 10))
	case uint8:
		return decimalKey(strconv.FormatUint(uint64(n), 10))
	case uint16:
		return decimalKey(strconv.FormatUint(uint64(n), 10))
	case uint32:
		return decimalKey(strconv.FormatUint(uint64(n), 10))
	case uint64:
		return decimalKey(strconv.FormatUint(n, 10))
	}
	return "", false
}

// floatKey is the key of a float's exact binary value: every float64 has
// a finite decimal expansion of at most 767 significant digits.
func floatKey(f float64) (string, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", false
	}
	return decimalKey(new(big.Float).SetFloat64(f).Text('e', 800))
}

// decimalKey is numberKey of a number in JSON's syntax: -?int(.frac)?([eE][+-]?exp)?.
func decimalKey(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
		if exp == "" || !digitsOnly(strings.TrimLeft(exp[:1], "+-")+exp[1:]) {
			return "", false
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" || !digitsOnly(intPart) || !digitsOnly(frac) || strings.Contains(mant, ".") && frac == "" {
		return "", false
	}
	digits := intPart + frac
	point := len(intPart) // value = 0.<digits> × 10^point × 10^exp
	lead := len(digits) - len(strings.TrimLeft(digits, "0"))
	digits = strings.TrimRight(digits[lead:], "0")
	if digits == "" {
		return "0", true
	}
	e := new(big.Int)
	if exp != "" {
		if _, ok := e.SetString(strings.TrimPrefix(exp, "+"), 10); !ok {
			return "", false
		}
	}
	e.Add(e, big.NewInt(int64(point-lead)))
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + digits + "e" + e.String(), true
}

func digitsOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// RawKind names the JSON type of a raw (undecoded) value for messages, with
// its article: "an object", "an array", "a string", "a boolean", "null",
// "a number", or "nothing" for an empty one. It looks at the first byte
// only: the value is assumed to be valid JSON.
func RawKind(raw []byte) string {
	raw = []byte(strings.TrimSpace(string(raw)))
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an " + kindObject
	case '[':
		return "an " + kindArray
	case '"':
		return "a " + kindString
	case 't', 'f':
		return "a " + kindBool
	case 'n':
		return kindNull
	}
	return "a " + kindNumber
}
