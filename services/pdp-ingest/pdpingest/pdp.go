package pdpingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/policyflow/policyflow/services/policy"
)

// PDP asks a policy engine's decision point for policy bodies with
// POST <URL>/getConfig, as the ONAP PDP API defines it.
type PDP struct {
	// URL is the PDP API base, e.g. http://127.0.0.1:8181 or
	// https://pdp:8081/pdp/api.
	URL string
	// Header is sent with every request (ONAP PDPs want ClientAuth,
	// Authorization and Environment).
	Header http.Header
	Client *http.Client
}

// NewPDP returns a client of the PDP at url with a per-request timeout.
func NewPDP(url string, timeout time.Duration, header http.Header) *PDP {
	return &PDP{URL: url, Header: header, Client: &http.Client{Timeout: timeout}}
}

// VersionsFilter is the /getConfig policyName that selects every version
// of a policy_id: the id, quoted, followed by ".<anything>".
func VersionsFilter(policyID string) string { return regexp.QuoteMeta(policyID) + `\..*` }

// maxResponseBytes bounds a /getConfig response: many versions of a policy
// of up to 512 KiB each.
const maxResponseBytes = 256 << 20

// noResponse is the policyConfigMessage of a PDP that could not reach its
// own back end: the answer says nothing about the policy.
const noResponse = "No Response Received"

// AllVersions returns every version of policyID the PDP has, one raw
// policy_body each, for policy.SelectLatestRaw to check (an empty list when
// it has none). Every error is transient: the PDP is unreachable, answered
// with an error status or with no JSON array of objects, or said it could
// not answer.
func (p *PDP) AllVersions(ctx context.Context, policyID string) ([]json.RawMessage, error) {
	return p.query(ctx, VersionsFilter(policyID), "the versions of "+policyID)
}

// Latest returns every policy_body whose policyName matches the regular
// expression filter (".*" for all), one raw body each, for a full
// reconciliation of the catalog with the PDP. Errors are as AllVersions'.
func (p *PDP) Latest(ctx context.Context, filter string) ([]json.RawMessage, error) {
	return p.query(ctx, filter, fmt.Sprintf("the policies matching %q", filter))
}

// query asks /getConfig for the bodies whose policyName matches filter;
// what names the request in errors.
func (p *PDP) query(ctx context.Context, filter, what string) ([]json.RawMessage, error) {
	endpoint := strings.TrimRight(p.URL, "/") + "/getConfig"
	fail := func(format string, args ...any) error {
		return fmt.Errorf("get %s from PDP %s: %s", what, endpoint, fmt.Sprintf(format, args...))
	}
	reqBody, err := json.Marshal(map[string]string{"policyName": filter})
	if err != nil {
		return nil, fail("encode request: %v", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(reqBody))
	if err != nil {
		return nil, fail("%v", err)
	}
	for k, vs := range p.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	client := p.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s from PDP %s: %w", what, endpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("get %s from PDP %s: read response: %w", what, endpoint, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil
	case resp.StatusCode == http.StatusBadRequest && notFound(data):
		return nil, nil
	case resp.StatusCode != http.StatusOK:
		return nil, fail("status %s: %s", resp.Status, snippet(data))
	}
	bodies, err := policy.SplitList(data)
	if err != nil {
		return nil, fail("%v", err)
	}
	// A lone entry without policyName is the PDP's way of saying it has
	// nothing, or that it could not answer.
	if len(bodies) == 1 {
		var lone struct {
			PolicyName    any `json:"policyName"`
			ConfigMessage any `json:"policyConfigMessage"`
		}
		if err := json.Unmarshal(bodies[0], &lone); err != nil {
			return nil, fail("%v", err)
		}
		if name, _ := lone.PolicyName.(string); name == "" {
			if msg, _ := lone.ConfigMessage.(string); msg == noResponse {
				return nil, fail("the PDP answered %q", msg)
			}
			return nil, nil
		}
	}
	return bodies, nil
}

// notFound reports whether a 400 answer is the PDP's "no policy matched":
// one entry without policyName whose status is CONFIG_NOT_FOUND.
func notFound(data []byte) bool {
	bodies, err := policy.DecodeBodies(data)
	if err != nil || len(bodies) != 1 {
		return false
	}
	status, _ := bodies[0][policy.FieldConfigStatus].(string)
	return bodies[0].PolicyName() == "" && status == policy.ConfigNotFound
}

func snippet(b []byte) string {
	const max = 300
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = s[:max] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

// ParseHeaders reads "Name=value" pairs separated by commas, as the
// --pdp-headers flag takes them.
func ParseHeaders(s string) (http.Header, error) {
	h := http.Header{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, value, ok := strings.Cut(kv, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("PDP header %q: want Name=value", kv)
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}
