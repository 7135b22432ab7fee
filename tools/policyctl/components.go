package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
)

// DefaultAPI is the North API policyctl talks to unless told otherwise.
const defaultAPI = "http://127.0.0.1:8080"

const (
	componentPutSummary      = "register or change a component from a JSON file (- for stdin) through the North API"
	componentDeleteSummary   = "uninstall a component: its policies leave its Consul folder"
	componentStatusSummary   = "show what a component has in Consul, per policy: version, update_id, Consul index, notified"
	componentRenotifySummary = "notify a component again of what Consul holds for it, however its last notification ended"
)

func init() {
	register(command{name: "component put", summary: componentPutSummary, run: runComponentPut})
	register(command{name: "component delete", summary: componentDeleteSummary, run: runComponentDelete})
	register(command{name: "component status", summary: componentStatusSummary, run: runComponentStatus})
	register(command{name: "component renotify", summary: componentRenotifySummary, run: runComponentRenotify})
}

// inputKey carries the reader commands take "-" and piped input from.
type inputKey struct{}

// withCommandInput makes commands read stdin from r (tests).
func withCommandInput(ctx context.Context, r io.Reader) context.Context {
	return context.WithValue(ctx, inputKey{}, r)
}

// commandInput is where a command reads stdin.
func commandInput(ctx context.Context) io.Reader {
	if r, ok := ctx.Value(inputKey{}).(io.Reader); ok {
		return r
	}
	return os.Stdin
}

// readFileArg reads the file named by arg, or stdin for "-".
func readFileArg(ctx context.Context, arg string) ([]byte, error) {
	if arg == "-" {
		data, err := io.ReadAll(commandInput(ctx))
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", arg, err)
	}
	return data, nil
}

// readJSONArg reads FILE|- and checks it is one JSON value, saying where
// it is not.
func readJSONArg(ctx context.Context, arg string) ([]byte, error) {
	data, err := readFileArg(ctx, arg)
	if err != nil {
		return nil, err
	}
	return checkJSON(arg, data)
}

// checkJSON checks that data (read from FILE|-) is one JSON value.
func checkJSON(arg string, data []byte) ([]byte, error) {
	name := arg
	if arg == "-" {
		name = "stdin"
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s is empty; it must hold JSON", name)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %s", name, jsonErrorAt(data, err))
	}
	if dec.More() {
		return nil, fmt.Errorf("%s holds more than one JSON value; put them in one array or object", name)
	}
	return data, nil
}

// jsonErrorAt names the line and column of a JSON syntax error.
func jsonErrorAt(data []byte, err error) string {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return "it ends before the JSON value is complete"
		}
		return err.Error()
	}
	line, col := 1, 1
	for i := int64(0); i < se.Offset-1 && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("line %d, column %d: %v", line, col, se)
}

// apiClient is a thin HTTP client of the North API.
type apiClient struct {
	base      string
	timeout   time.Duration
	token     string
	tokenFile string
	// header is sent with every request, besides the token.
	header http.Header
}

// registerAPIFlags adds --api, --token, --token-file and --timeout to fs.
func registerAPIFlags(fs *flag.FlagSet) *apiClient {
	c := &apiClient{}
	fs.StringVar(&c.base, "api", runtime.EnvOr("PF_API", defaultAPI), "URL of the North API (env PF_API)")
	fs.StringVar(&c.token, "token", runtime.EnvOr("PF_TOKEN", ""), "bearer token of the North API; PF_TOKEN keeps it out of the process list (env PF_TOKEN)")
	fs.StringVar(&c.tokenFile, "token-file", runtime.EnvOr("PF_TOKEN_FILE", ""),
		"file holding the bearer token, when no --token (env PF_TOKEN_FILE; default: policyctl.token of 'policyctl dev''s data dir, .data/ or PF_DEV_DATA_DIR, when it exists)")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "give up when the North API has not answered within this time")
	return c
}

// apiError is an answer of the North API other than 2xx.
type apiError struct {
	status int
	reason string
}

func (e *apiError) Error() string { return e.reason }

// do sends a request and returns the answer's body when it is 2xx.
// Anything else becomes an error with the API's reason and what to do.
func (c *apiClient) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	return c.doType(ctx, method, path, body, "application/json")
}

// doType is do with a body of another content type.
func (c *apiClient) doType(ctx context.Context, method, path string, body []byte, contentType string) ([]byte, error) {
	base := strings.TrimRight(c.base, "/")
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageErrorf("--api %q is not an http(s) URL such as %s", c.base, defaultAPI)
	}
	token, from, err := c.bearer()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		auth.SetBearer(req, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the North API at %s: %w\nStart it (the northapi service) or point --api / PF_API at it", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the answer of %s %s: %w", method, base+path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return data, nil
	}
	reason := strings.TrimSpace(string(data))
	var eb struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
		reason = eb.Error
	}
	if reason == "" {
		reason = "no reason given"
	}
	advice := whatToDo(resp.StatusCode)
	if resp.StatusCode == http.StatusUnauthorized {
		advice = tokenAdvice(from)
	}
	return nil, &apiError{status: resp.StatusCode, reason: fmt.Sprintf("the North API refused %s %s (%s): %s\n%s",
		method, path, resp.Status, reason, advice)}
}

// whatToDo is the advice for a refused request.
func whatToDo(status int) string {
	switch {
	case status == http.StatusNotFound:
		return "Check the id; nothing by that name is known to policyflow."
	case status == http.StatusRequestEntityTooLarge:
		return "Send less in one request."
	case status == http.StatusForbidden:
		return "The token's role or tenant does not allow this; use a token that does."
	case status == http.StatusTooManyRequests:
		return "The North API limits each client's rate; wait a moment and run the command again."
	case status >= 400 && status < 500:
		return "Fix the input as the reason says and run the command again."
	case status == http.StatusServiceUnavailable:
		return "The North API is starting or cannot reach Kafka; run the command again shortly (repeating it is safe)."
	default:
		return "Check the North API's log; repeating the command is safe."
	}
}

// printAnswer writes a JSON answer indented on stdout.
func printAnswer(ctx context.Context, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(data), "", "  "); err != nil {
		buf.Reset()
		buf.Write(bytes.TrimSpace(data))
	}
	buf.WriteByte('\n')
	_, err := stdout(ctx).Write(buf.Bytes())
	return err
}

func runComponentPut(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "component put", componentPutSummary+
		"\n\nThe file is the component as JSON: component_id (or --id), deployment_id, service_component_name, tenant,"+
		"\npolicy_ids, policy_filters [{filter_id, policyName, configName, onapName, configAttributes, unique}],"+
		"\nnotify {kind: script|webhook|none, script_path, webhook_url, timeout_ms} and config {...}."+
		"\n\nGiven several files (one component each, with its component_id), it registers them one after"+
		"\nthe other with a progress bar on a terminal (a line per component otherwise) and a summary; it"+
		"\nexits 1 when one was refused, after trying every one.", "FILE|- [FILE...]")
	api := registerAPIFlags(fs)
	id := fs.String("id", "", "component id, when the file has no component_id (one file only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErrorf("component put takes a FILE (or - for stdin), or several FILEs")
	}
	if fs.NArg() > 1 {
		if *id != "" {
			return usageErrorf("--id names the component of one file; with %d files each file gives its component_id", fs.NArg())
		}
		p := newProgress(ctx, "component", fs.NArg())
		for _, f := range fs.Args() {
			cid, err := putComponent(ctx, api, f, "", false)
			if cid == "" {
				cid = f
			}
			p.step(cid, err)
		}
		return p.finish()
	}
	_, err := putComponent(ctx, api, fs.Arg(0), *id, true)
	return err
}

// putComponent registers the component of one file (its component_id, or
// id when given) and prints the answer when print is set.
func putComponent(ctx context.Context, api *apiClient, file, id string, print bool) (string, error) {
	data, err := readJSONArg(ctx, file)
	if err != nil {
		return "", err
	}
	var head struct {
		ComponentID string `json:"component_id"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return "", fmt.Errorf("%s must hold one JSON object (the component): %w", file, err)
	}
	cid := id
	if cid == "" {
		cid = head.ComponentID
	}
	if cid == "" {
		return "", usageErrorf("%s has no component_id; add \"component_id\" to it or pass --id", file)
	}
	answer, err := api.do(ctx, http.MethodPut, "/v1/components/"+url.PathEscape(cid), data)
	if err != nil {
		return cid, err
	}
	if print {
		return cid, printAnswer(ctx, answer)
	}
	return cid, nil
}

// runIDCommand runs a command that takes one component id.
func runIDCommand(ctx context.Context, args []string, name, summary string, call func(*apiClient, string) ([]byte, error)) error {
	return runOneIDCommand(ctx, args, name, summary, "COMPONENT_ID", call)
}

// runOneIDCommand runs a command that takes one id (named idName in its
// usage) and prints the North API's answer.
func runOneIDCommand(ctx context.Context, args []string, name, summary, idName string, call func(*apiClient, string) ([]byte, error)) error {
	fs := newFlagSet(ctx, name, summary, idName)
	api := registerAPIFlags(fs)
	out := registerOutputFlag(fs, outputJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return usageErrorf("%s takes one %s, got %d arguments", name, idName, fs.NArg())
	}
	answer, err := call(api, fs.Arg(0))
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, answer, nil)
}

// runListCommand runs a command that takes no argument and prints the
// North API's answer to GET path.
func runListCommand(ctx context.Context, args []string, name, summary, path string) error {
	fs := newFlagSet(ctx, name, summary, "")
	api := registerAPIFlags(fs)
	out := registerOutputFlag(fs, outputJSON)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	format, err := out.check()
	if err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageErrorf("%s takes no arguments, got %d", name, fs.NArg())
	}
	answer, err := api.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	return printOutput(stdout(ctx), format, answer, nil)
}

func runComponentDelete(ctx context.Context, args []string) error {
	return runIDCommand(ctx, args, "component delete", componentDeleteSummary, func(api *apiClient, id string) ([]byte, error) {
		return api.do(ctx, http.MethodDelete, "/v1/components/"+url.PathEscape(id), nil)
	})
}

func runComponentStatus(ctx context.Context, args []string) error {
	return runIDCommand(ctx, args, "component status", componentStatusSummary, func(api *apiClient, id string) ([]byte, error) {
		return api.do(ctx, http.MethodGet, "/v1/components/"+url.PathEscape(id)+"/status", nil)
	})
}

func runComponentRenotify(ctx context.Context, args []string) error {
	return runIDCommand(ctx, args, "component renotify", componentRenotifySummary, func(api *apiClient, id string) ([]byte, error) {
		return api.do(ctx, http.MethodPost, "/v1/components/"+url.PathEscape(id)+"/renotify", nil)
	})
}
