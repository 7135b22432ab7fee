// Package apicheck holds the North API to its OpenAPI document: an
// http.RoundTripper that checks every request a client sends and every
// answer it gets (route, parameters, body, status, content type and body
// schema) against the document, and records each exchange that does not
// fit. The North API's own tests and the integration suites send their
// requests through it, so that an answer that drifted from the document
// fails the test that saw it.
//
// The rules, per exchange:
//
//   - a route the document does not describe must be answered 4xx with a
//     JSON {"error": "..."}; anything else is a route the document lacks;
//   - a request the document refuses (a missing or malformed parameter or
//     body) must be answered 4xx: the server accepting what its document
//     calls invalid is drift. Tokens are not judged here: whether one is
//     needed is how the server was started (--insecure-no-auth), and a
//     refusal must still be a documented 401 or 403;
//   - every answer's status must be one the operation documents, with a
//     content type and a body its schema allows.
package apicheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// CoverageEnv, when set to a file name, makes every checked exchange append
// a line "METHOD /documented/path STATUS" to that file: the routes the
// tests exercise, to compare with those the document describes.
const CoverageEnv = "PF_APICHECK_COVERAGE"

func init() {
	// Agent packages are uploaded as tar.gz: checked as bytes; the status
	// page is HTML: checked as text.
	openapi3filter.RegisterBodyDecoder("application/gzip", openapi3filter.FileBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
}

// Spec is a loaded OpenAPI document ready to check exchanges against.
type Spec struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	specsMu sync.Mutex
	specs   = map[[32]byte]*Spec{}
)

// Load parses and validates an OpenAPI 3 document. The same bytes are
// parsed once per process.
func Load(document []byte) (*Spec, error) {
	sum := sha256.Sum256(document)
	specsMu.Lock()
	defer specsMu.Unlock()
	if s := specs[sum]; s != nil {
		return s, nil
	}
	doc, err := openapi3.NewLoader().LoadFromData(document)
	if err != nil {
		return nil, fmt.Errorf("not an OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("not valid OpenAPI 3: %w", err)
	}
	// The servers of the document are where the dev stack listens; the
	// checked clients talk to servers on any address, so routes are
	// matched on the path alone.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the document: %w", err)
	}
	s := &Spec{doc: doc, router: router}
	specs[sum] = s
	return s, nil
}

// Operations are the "METHOD /path" operations the document describes,
// sorted.
func (s *Spec) Operations() []string {
	var out []string
	for path, item := range s.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// Recorder collects the exchanges that did not fit the document.
type Recorder struct {
	mu        sync.Mutex
	failures  []string
	exchanges int
	closed    bool
}

func (r *Recorder) add(failure string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.failures = append(r.failures, failure)
	}
}

func (r *Recorder) count() {
	r.mu.Lock()
	r.exchanges++
	r.mu.Unlock()
}

// Failures are the exchanges that did not fit, each saying what was sent,
// what came back and how it differs from the document.
func (r *Recorder) Failures() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...)
}

// Exchanges is how many exchanges were checked.
func (r *Recorder) Exchanges() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exchanges
}

// close stops recording: exchanges still under way when a test ends are
// not the test's.
func (r *Recorder) close() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return append([]string(nil), r.failures...)
}

// Transport checks every exchange through next (http.DefaultTransport when
// nil) against the document, recording what does not fit in rec. The
// exchange itself goes on unchanged: the caller gets the server's answer
// whatever the check found.
func (s *Spec) Transport(next http.RoundTripper, rec *Recorder) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{spec: s, next: next, rec: rec}
}

// Client is an HTTP client for a test whose exchanges are checked against
// the document; the test fails, when it ends, for each one that did not fit.
func Client(t testing.TB, document []byte) *http.Client {
	t.Helper()
	return &http.Client{Transport: Wrap(t, document, nil)}
}

// Wrap is Client's transport around next (http.DefaultTransport when nil),
// for clients that carry a transport of their own.
func Wrap(t testing.TB, document []byte, next http.RoundTripper) http.RoundTripper {
	t.Helper()
	spec, err := Load(document)
	if err != nil {
		t.Fatalf("the North API's OpenAPI document: %v", err)
	}
	rec := &Recorder{}
	t.Cleanup(func() { Report(t, rec) })
	return spec.Transport(next, rec)
}

// Report fails t once for each exchange rec recorded as not fitting the
// document, and stops rec recording.
func Report(t testing.TB, rec *Recorder) {
	t.Helper()
	for _, f := range rec.close() {
		t.Errorf("answer differs from the OpenAPI document (services/north-api/northapi/openapi.json): %s", f)
	}
}

type transport struct {
	spec *Spec
	next http.RoundTripper
	rec  *Recorder
}

// bodyLimit bounds how much of a body a failure message quotes.
const bodyLimit = 400

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		reqBody, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	send := req.Clone(req.Context())
	setBody(send, reqBody)
	resp, err := tr.next.RoundTrip(send)
	if err != nil {
		return resp, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if err != nil {
		return resp, nil // the caller sees the broken answer itself
	}
	tr.rec.count()
	if problem := tr.spec.check(req, reqBody, resp, respBody); problem != "" {
		tr.rec.add(fmt.Sprintf("%s %s -> %d %s: %s; answer %s", req.Method, req.URL.RequestURI(), resp.StatusCode,
			resp.Header.Get("Content-Type"), problem, quote(respBody)))
	}
	return resp, nil
}

func setBody(req *http.Request, body []byte) {
	if body == nil {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
		return
	}
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.Body, _ = req.GetBody()
}

func quote(b []byte) string {
	if len(b) > bodyLimit {
		return fmt.Sprintf("%q…", b[:bodyLimit])
	}
	return fmt.Sprintf("%q", b)
}

// check answers what in one exchange does not fit the document, or "".
func (s *Spec) check(sent *http.Request, reqBody []byte, resp *http.Response, respBody []byte) string {
	req := sent.Clone(context.Background())
	setBody(req, reqBody)
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		coverage(req.Method, "(undocumented) "+req.URL.Path, resp.StatusCode)
		if resp.StatusCode/100 != 4 {
			return "the document describes no such route, yet the server answered " + http.StatusText(resp.StatusCode) +
				": describe the route under \"paths\""
		}
		return s.checkError(resp, respBody)
	}
	coverage(req.Method, route.Path, resp.StatusCode)
	defaultContentType(req, route)
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
			SkipSettingDefaults: true,
		},
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && resp.StatusCode/100 != 4 {
		return fmt.Sprintf("the server answered %d to a request the document refuses (%v): "+
			"either the document is too strict or the server too lenient", resp.StatusCode, oneLine(err))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return oneLine(err)
	}
	return ""
}

// defaultContentType gives a request with a body and no Content-Type the
// one media type its operation documents: the server reads a body as what
// the route takes, whatever the client called it, so a client that did not
// say is checked as if it had said so.
func defaultContentType(req *http.Request, route *routers.Route) {
	if req.ContentLength == 0 || req.Header.Get("Content-Type") != "" || route.Operation == nil || route.Operation.RequestBody == nil {
		return
	}
	rb := route.Operation.RequestBody.Value
	if rb == nil || len(rb.Content) != 1 {
		return
	}
	for mt := range rb.Content {
		req.Header.Set("Content-Type", mt)
	}
}

// checkError checks an answer to a route the document does not describe:
// a JSON object with a non-empty "error".
func (s *Spec) checkError(resp *http.Response, body []byte) string {
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Sprintf("an error answer must be application/json, not %q", ct)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		return "an error answer must be a JSON object with a non-empty \"error\""
	}
	return ""
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

var coverageMu sync.Mutex

// coverage appends one exchange to the file CoverageEnv names, if any.
func coverage(method, path string, status int) {
	name := os.Getenv(CoverageEnv)
	if name == "" {
		return
	}
	coverageMu.Lock()
	defer coverageMu.Unlock()
	f, err := os.OpenFile(name, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s %d\n", method, path, status)
}
