package northapi

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
)

// httpError is a failed request: the status and what to tell the caller.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) *httpError {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// ErrorBody is the JSON body of every 4xx and 5xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, e *httpError) {
	writeJSON(w, e.status, ErrorBody{Error: e.msg})
}

// handlerFunc is an API handler that returns its failure.
type handlerFunc func(w http.ResponseWriter, r *http.Request) *httpError

// statusRecorder remembers the status written, for metrics.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// wrap turns a handlerFunc into an http.Handler that writes its error as
// JSON and counts the request under route.
func (s *Server) wrap(route string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.env.Tracer != nil {
			// The request's span: the records it produces continue its
			// trace through the pipeline.
			ctx, span := s.env.Tracer.Start(r.Context(), route)
			defer span.End()
			r = r.WithContext(ctx)
		}
		rec := &statusRecorder{ResponseWriter: w}
		if e := h(rec, r); e != nil {
			if e.status >= 500 {
				s.log.Warn().Str("route", route).Int("status", e.status).Msg(e.msg)
			}
			writeError(rec, e)
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		s.requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
	})
}

// decodeJSON reads the request body as one JSON value into v. strict
// refuses fields v does not have. limit bounds the body size.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, strict bool, example string) *httpError {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "request body is over the limit of %d bytes; send less per request", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "read request body: %v", err)
	}
	return decodeBytes(data, v, strict, example)
}

func decodeBytes(data []byte, v any, strict bool, example string) *httpError {
	if len(bytes.TrimSpace(data)) == 0 {
		return errorf(http.StatusBadRequest, "request body is empty; send JSON such as %s", example)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return errorf(http.StatusBadRequest, "%s; send JSON such as %s", describeJSONError(data, err), example)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, "malformed JSON: more data after the first JSON value at byte %d; send one JSON value", dec.InputOffset())
	}
	return nil
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
		return fmt.Sprintf("wrong JSON type: %s is a JSON %s but must be %s", field, te.Value, goTypeName(te.Type))
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return fmt.Sprintf("%s is not a field of this request (check its spelling)", strings.TrimPrefix(err.Error(), "json: "))
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
