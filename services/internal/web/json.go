package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Error is a failed request: the status and what to tell the caller.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Errorf is a failed request with status and a reason.
func Errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// ErrorBody is the JSON body of every 4xx and 5xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// WriteJSON answers v as indented JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError answers e as an ErrorBody.
func WriteError(w http.ResponseWriter, e *Error) {
	WriteJSON(w, e.Status, ErrorBody{Error: e.Msg})
}

// HandlerFunc is an API handler that returns its failure.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) *Error

// Request body limits.
const (
	// MaxRequestBytes bounds the body of most requests.
	MaxRequestBytes = 4 << 20
	// MaxPoliciesRequestBytes bounds POST /v1/policies, which carries full
	// policy bodies (each up to policy.MaxBodyBytes).
	MaxPoliciesRequestBytes = 64 << 20
)

// MaxJSONDepth bounds how deep objects and arrays nest in a request body:
// room for a pushed policy body (policy.MaxDepth) inside the array of a
// push, far less than what would make decoding costly.
const MaxJSONDepth = 128

// decodeJSON reads the request body as one JSON value into v (see
// decodeBytes). limit bounds the body size.
func DecodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, strict bool, example string) *Error {
	data, e := ReadBody(w, r, limit)
	if e != nil {
		return e
	}
	return DecodeBytes(data, v, strict, example)
}

// decodeOptionalJSON is decodeJSON for a route whose body may be left
// out: an empty body leaves v as it is; any other is decoded strictly.
func DecodeOptionalJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, example string) *Error {
	data, e := ReadBody(w, r, limit)
	if e != nil || len(trimJSONSpace(data)) == 0 {
		return e
	}
	return DecodeBytes(data, v, true, example)
}

// readBody reads the request body, at most limit bytes.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Error) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, Errorf(http.StatusRequestEntityTooLarge, "request body is over the limit of %d bytes; send less per request", mbe.Limit)
		}
		return nil, Errorf(http.StatusBadRequest, "read request body: %v", err)
	}
	return data, nil
}

// decodeBytes decodes data, one JSON value, into v. It refuses, saying
// where: bytes that are not UTF-8, a key given twice in an object, nesting
// deeper than MaxJSONDepth, a body that is JSON null, a value of the wrong
// type, and (strict) fields v does not have.
func DecodeBytes(data []byte, v any, strict bool, example string) *Error {
	if len(trimJSONSpace(data)) == 0 {
		return Errorf(http.StatusBadRequest, "request body is empty; send JSON such as %s", example)
	}
	if err := CheckJSONText(data); err != nil {
		return Errorf(http.StatusBadRequest, "%s; send JSON such as %s", err, example)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return Errorf(http.StatusBadRequest, "%s; send JSON such as %s", describeJSONError(data, err), example)
	}
	// More says nothing of a stray '}' or ']': whatever follows the value
	// but white space is refused.
	if off := dec.InputOffset(); len(trimJSONSpace(data[off:])) > 0 {
		return Errorf(http.StatusBadRequest, "malformed JSON: more data after the first JSON value at byte %d; send one JSON value", off)
	}
	return nil
}

// trimJSONSpace cuts what JSON counts as white space (space, tab, line
// feed, carriage return) from both ends of data. bytes.TrimSpace cuts more
// (form feed, vertical tab, U+0085, U+00A0): a value followed by a form
// feed would pass for one JSON value when it is not JSON at all.
func trimJSONSpace(data []byte) []byte {
	return bytes.Trim(data, " \t\n\r")
}

// checkJSONText walks the tokens of data and refuses what encoding/json
// would let through silently or slowly: bytes that are not UTF-8 (decoded
// as U+FFFD), a key given twice in an object (the last one wins), nesting
// deeper than MaxJSONDepth, and a body that is null (decoded as nothing
// at all). It leaves syntax errors to decoding.
func CheckJSONText(data []byte) error {
	if !utf8.Valid(data) {
		i := 0
		for {
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				return fmt.Errorf("byte %d (0x%02x) is not UTF-8: JSON text must be UTF-8", i, data[i])
			}
			i += size
		}
	}
	if bytes.Equal(trimJSONSpace(data), []byte("null")) {
		return errors.New("the body is JSON null, not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a number no float64 holds is no reason to stop
	// One frame per open object or array.
	type frame struct {
		keys    map[string]bool // the keys seen; nil in an array
		wantKey bool            // in an object: a key comes next
		n       int             // in an array: the values read
		at      string          // ".key" or "[i]" of the value being read
	}
	var stack []*frame
	// path renders where the first n open values are: "the top level",
	// or e.g. loadedPolicies[1].matches.
	path := func(n int) string {
		var sb strings.Builder
		for _, f := range stack[:n] {
			sb.WriteString(f.at)
		}
		if sb.Len() == 0 {
			return "the top level"
		}
		return strings.TrimPrefix(sb.String(), ".")
	}
	// valueRead moves the innermost open value past the value just read.
	valueRead := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if f.keys != nil {
			f.wantKey = true
			return
		}
		f.n++
		f.at = "[" + strconv.Itoa(f.n) + "]"
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			// The end, or a syntax error, which decoding describes.
			return nil
		}
		if key, ok := tok.(string); ok && len(stack) > 0 && stack[len(stack)-1].wantKey {
			f := stack[len(stack)-1]
			if f.keys[key] {
				return fmt.Errorf("the key %q appears twice in the object at %s; give every key once", key, path(len(stack)-1))
			}
			f.keys[key], f.wantKey, f.at = true, false, "."+key
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= MaxJSONDepth {
				return fmt.Errorf("objects and arrays nest more than %d levels deep at %s; flatten the body", MaxJSONDepth, path(len(stack)))
			}
			f := &frame{at: "[0]"}
			if tok == json.Delim('{') {
				f = &frame{keys: map[string]bool{}, wantKey: true}
			}
			stack = append(stack, f)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueRead()
		default:
			valueRead()
		}
	}
}

// describeJSONError says where and why a body is not the JSON expected.
func describeJSONError(data []byte, err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the offending one included.
		line, col := position(data, se.Offset-1)
		return fmt.Sprintf("malformed JSON at line %d, column %d: %v", line, col, se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the body ends before the JSON value is complete"
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			field = "the body"
		}
		if num, ok := strings.CutPrefix(te.Value, "number "); ok && goTypeName(te.Type) == "a number" {
			// A number the Go type cannot hold: too big, or a fraction
			// for an integer.
			return fmt.Sprintf("number out of range: %s is %s; give %s", field, num, numberKind(te.Type))
		}
		return fmt.Sprintf("wrong JSON type: %s is a JSON %s but must be %s", field, te.Value, goTypeName(te.Type))
	case strings.Contains(err.Error(), "json: unknown field"):
		// Also from a type's own decoding: "decode loadedPolicies entry:
		// json: unknown field ...".
		return fmt.Sprintf("%s is not a field of this request (check its spelling)", strings.Replace(err.Error(), "json: ", "", 1))
	}
	return fmt.Sprintf("malformed JSON: %v", err)
}

func goTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// numberKind says which numbers a numeric Go type holds.
func numberKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		return fmt.Sprintf("a number of at most %d bits", t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer from 0 to %d", uint64(1)<<t.Bits()-1)
	}
	return fmt.Sprintf("an integer from %d to %d", -(int64(1) << (t.Bits() - 1)), int64(1)<<(t.Bits()-1)-1)
}

func position(data []byte, off int64) (line, col int) {
	line, col = 1, 1
	for i := int64(0); i < off && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}
