package web

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRequestBody feeds the one reader of every JSON request body
// truncated, padded and hostile bytes: it never panics, and a body it
// accepts is UTF-8, one valid JSON value that is not null, nested at most
// MaxJSONDepth deep; a refusal is a 400 with a reason.
func FuzzRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}`, `{"a":1,"a":2}`, `null`, ` null `, `{"a":`, `{"a":1}}`, `{"a":1} {"b":2}`, "{\"a\":\"\xff\"}",
		strings.Repeat("[", 200) + strings.Repeat("]", 200), `{"a":[1,2,{"b":{"b":1,"c":2,"b":3}}]}`,
		`{"n":1e300}`, `"just a string"`, "\xef\xbb\xbf{}", `{"a":1}` + strings.Repeat(" ", 1000),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		e := DecodeBytes(data, &v, false, `{}`)
		if e != nil {
			if e.Status != 400 || e.Msg == "" {
				t.Fatalf("refused with %d %q, want 400 with a reason", e.Status, e.Msg)
			}
			return
		}
		if !utf8.Valid(data) || !json.Valid(data) || bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			t.Fatalf("accepted %q: not UTF-8, not one JSON value, or null", data)
		}
		if d := depth(v); d > MaxJSONDepth {
			t.Fatalf("accepted %d levels of nesting, more than %d", d, MaxJSONDepth)
		}
	})
}

// depth is how deep objects and arrays nest in a decoded value.
func depth(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			d = max(d, depth(e))
		}
		return d + 1
	case []any:
		for _, e := range x {
			d = max(d, depth(e))
		}
		return d + 1
	}
	return 0
}
