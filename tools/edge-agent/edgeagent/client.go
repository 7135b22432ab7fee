package edgeagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/runtime"
)

// Client talks to the hub's North API as one node's agent.
type Client struct {
	Hub   string // base URL
	Token string
	Org   string
	Node  string
	HTTP  *http.Client
}

// HTTPError is an answer other than the one wanted.
type HTTPError struct {
	Code int
	Msg  string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("hub answered %d: %s", e.Code, e.Msg) }

func (c *Client) nodePath() string {
	return "/v1/orgs/" + url.PathEscape(c.Org) + "/nodes/" + url.PathEscape(c.Node)
}

func (c *Client) do(ctx context.Context, method, path string, body any, out any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Hub, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return resp, &HTTPError{Code: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp, fmt.Errorf("%s %s: answer is not the JSON expected: %w", method, path, err)
		}
	}
	return resp, nil
}

// Register registers (or updates) the node. It returns the node's own
// token when the hub issued one (the node had none).
func (c *Client) Register(ctx context.Context, r api.NodeRequest) (string, error) {
	var ans api.NodeRegistered
	_, err := c.do(ctx, http.MethodPut, c.nodePath(), r, &ans)
	if err != nil {
		return "", fmt.Errorf("register node %s/%s: %w", c.Org, c.Node, err)
	}
	return ans.Token, nil
}

// Report sends a status report.
func (c *Client) Report(ctx context.Context, r api.StatusRequest) error {
	_, err := c.do(ctx, http.MethodPut, c.nodePath()+"/status", r, nil)
	if err != nil {
		return fmt.Errorf("report %q for node %s/%s: %w", r.Status, c.Org, c.Node, err)
	}
	return nil
}

// Poll long-polls the directive: it answers when the directive's index is
// not index (nil when nothing changed within wait, or the node has none).
func (c *Client) Poll(ctx context.Context, index uint64, wait time.Duration) (*api.DirectiveAnswer, error) {
	path := c.nodePath() + "/directive"
	if index > 0 {
		path += "?index=" + strconv.FormatUint(index, 10) + "&wait=" + wait.String()
	}
	var d api.DirectiveAnswer
	resp, err := c.do(ctx, http.MethodGet, path, nil, &d)
	if err != nil {
		var he *HTTPError
		if ok := asHTTP(err, &he); ok && he.Code == http.StatusNotFound {
			return nil, nil
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusNotModified {
		return nil, nil
	}
	return &d, nil
}

func asHTTP(err error, he **HTTPError) bool {
	e, ok := err.(*HTTPError)
	if ok {
		*he = e
	}
	return ok
}

// Transport is the HTTP transport of an agent: HTTPS trusting the PEM
// CA bundle caFile (the system's roots when ""), HTTP/2 when the hub
// offers it.
func Transport(caFile string) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if caFile == "" {
		return t, nil
	}
	pool, err := runtime.CAPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}

// CheckHub refuses a hub URL that is not https://, or http:// without
// insecure: over plain HTTP whoever answers as the hub reads the node's
// token and chooses its directives.
func CheckHub(hub string, insecure bool) error {
	u, err := url.Parse(hub)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--hub %q is not a URL such as https://hub:8080", hub)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && insecure:
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("--hub %s is plain HTTP, which anyone on the path can read and answer: use https:// (with --ca-file for the hub's CA), or give --insecure on a network where that is acceptable", hub)
	}
	return fmt.Errorf("--hub %q: want an https:// URL", hub)
}

// Downloaded is a package file Download wrote: its SHA-256, computed
// while it was written, and its signature as the hub gave it, for the
// caller to check before it reads the package.
type Downloaded struct{ SHA256, Signature string }

// Download fetches a package version into a file and checks its SHA-256
// against want (and the hub's X-Checksum-Sha256).
func (c *Client) Download(ctx context.Context, version, want, dest string) (Downloaded, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.Hub, "/")+"/v1/agentpackages/"+url.PathEscape(version)+"/file", nil)
	if err != nil {
		return Downloaded{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	// A package may take longer than a poll: no overall timeout, the
	// context bounds it.
	dl := &http.Client{Transport: c.HTTP.Transport}
	resp, err := dl.Do(req)
	if err != nil {
		return Downloaded{}, fmt.Errorf("download package %s: %w", version, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return Downloaded{}, fmt.Errorf("download package %s: %w", version, &HTTPError{Code: resp.StatusCode, Msg: strings.TrimSpace(string(raw))})
	}
	f, err := os.Create(dest)
	if err != nil {
		return Downloaded{}, fmt.Errorf("download package %s: %w", version, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Downloaded{}, fmt.Errorf("download package %s: %w", version, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if hdr := resp.Header.Get(api.ChecksumHeader); want == "" {
		want = hdr
	}
	if want == "" || got != want {
		return Downloaded{}, &HashError{Version: version, Got: got, Want: want}
	}
	return Downloaded{SHA256: got, Signature: resp.Header.Get(api.SignatureHeader)}, nil
}

// HashError is a downloaded package whose SHA-256 is not the one expected.
type HashError struct{ Version, Got, Want string }

func (e *HashError) Error() string {
	return fmt.Sprintf("package %s: SHA-256 %s, want %s", e.Version, e.Got, e.Want)
}

// PackageSize is the size in bytes of a package version on the hub.
func (c *Client) PackageSize(ctx context.Context, version string) (int64, error) {
	var p api.PackageAnswer
	_, err := c.do(ctx, http.MethodGet, "/v1/agentpackages/"+url.PathEscape(version), nil, &p)
	return p.Size, err
}
