package admit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/policyflow/policyflow/services/notifytarget"
)

// KindExternal asks an external policy engine (seed 001: "honor policies
// from the third party policy engine"), as Kubernetes' admission webhooks
// and Gatekeeper's external data do.
const KindExternal = "io.policyflow.admission.External"

// Failure policies of an external engine that does not answer.
const (
	// FailClosed denies the request (the default: a policy that cannot
	// be asked does not let everything through).
	FailClosed = "Fail"
	// FailOpen admits it with a warning.
	FailOpen = "Ignore"
)

// External timeouts.
const (
	DefaultExternalTimeout = 2 * time.Second
	MaxExternalTimeout     = 10 * time.Second
)

// ExternalRule is the rule of an external engine's findings.
const ExternalRule = "external"

// ExternalCaller POSTs body (JSON) to url and returns the answer's body;
// an error when there is no 2xx answer in time (ctx carries the policy's
// timeout). The stage and the North API give one that calls only the
// hosts the operator allows (package hooks); tests give their own.
type ExternalCaller func(ctx context.Context, url string, body []byte) ([]byte, error)

// Env is what an evaluation may call besides the policies.
type Env struct {
	// External calls external engines; nil: none can be called, and
	// each External policy fails as its failurePolicy says.
	External ExternalCaller
	// Deployed is what is already deployed (nil: the request is counted
	// alone), for the rules per environment and per tenant.
	Deployed *Deployed
}

// ExternalQuery is what an external engine is sent: the request as the
// mutations left it.
type ExternalQuery struct {
	PolicyID string   `json:"policy_id"`
	Request  *Request `json:"request"`
}

// ExternalAnswer is what an external engine answers.
type ExternalAnswer struct {
	// Allowed is required: false denies (a warning in audit mode).
	Allowed *bool  `json:"allowed"`
	Message string `json:"message"`
}

// Endpoint is a URL a policy calls, with the field that names it.
type Endpoint struct {
	Field string // e.g. "objectModel.url"
	URL   string
}

// Endpoints are the URLs the policy calls; the North API refuses a
// policy naming a host the operator does not allow.
func (c *Compiled) Endpoints() []Endpoint { return c.rules.endpoints }

func init() {
	kinds[KindExternal] = kind{
		doc:     "asks an external policy engine: POSTs {policy_id, request} as JSON to url (a host the operator allows) and denies when it answers {\"allowed\": false, \"message\"}; when it does not answer within timeoutSeconds (default 2, at most 10) or answers otherwise, failurePolicy Fail (the default) denies and Ignore admits with a warning",
		params:  []string{"url", "failurePolicy", "timeoutSeconds"},
		compile: compileExternal,
	}
}

// checkEndpoint says what is wrong with an endpoint's URL (its host is
// checked against the operator's rules elsewhere).
func checkEndpoint(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return paramErr(field, "%s is not an absolute http or https URL, e.g. https://engine.example:8443/decide", notifytarget.MaskURL(raw))
	}
	if u.Fragment != "" {
		return paramErr(field, "holds a #fragment, which is never sent")
	}
	return nil
}

func compileExternal(p params) (ruleSet, error) {
	raw, err := p.str("url", true)
	if err != nil {
		return ruleSet{}, err
	}
	if err := checkEndpoint("url", raw); err != nil {
		return ruleSet{}, err
	}
	fp, err := p.str("failurePolicy", false)
	if err != nil {
		return ruleSet{}, err
	}
	switch fp {
	case "":
		fp = FailClosed
	case FailClosed, FailOpen:
	default:
		return ruleSet{}, paramErr("failurePolicy", "%q is not a failure policy; use %q (deny when the engine cannot be asked, the default) or %q (admit with a warning)", fp, FailClosed, FailOpen)
	}
	timeout := DefaultExternalTimeout
	if p.has("timeoutSeconds") {
		n, err := p.count("timeoutSeconds")
		if err != nil {
			return ruleSet{}, err
		}
		if n < 1 || time.Duration(n)*time.Second > MaxExternalTimeout {
			return ruleSet{}, paramErr("timeoutSeconds", "%d is out of range: give 1 to %d", n, int(MaxExternalTimeout/time.Second))
		}
		timeout = time.Duration(n) * time.Second
	}
	shown := notifytarget.MaskURL(raw)
	return ruleSet{
		endpoints: []Endpoint{{Field: "objectModel.url", URL: raw}},
		validators: []validator{{rule: ExternalRule, external: true, fn: func(b *budget, r *Request, emit func(string, string)) {
			ans, err := askExternal(b, raw, timeout, r)
			switch {
			case err != nil && fp == FailOpen:
				b.soft = true
				emit("request", fmt.Sprintf("the external engine at %s could not decide: %v; failurePolicy %s admits without it", shown, err, fp))
				b.soft = false
			case err != nil:
				emit("request", fmt.Sprintf("the external engine at %s could not decide: %v; failurePolicy %s denies (set failurePolicy %s to admit when it cannot be asked)", shown, err, fp, FailOpen))
			case !*ans.Allowed:
				msg := ans.Message
				if msg == "" {
					msg = "(no message)"
				}
				emit("request", fmt.Sprintf("the external engine at %s denies: %s", shown, msg))
			}
		}}},
	}, nil
}

// askExternal sends the request to the engine at raw and reads its
// answer, within timeout.
func askExternal(b *budget, raw string, timeout time.Duration, r *Request) (ExternalAnswer, error) {
	if b.external == nil {
		return ExternalAnswer{}, fmt.Errorf("no external engine may be called here")
	}
	body, err := json.Marshal(ExternalQuery{PolicyID: b.policyID, Request: r})
	if err != nil {
		return ExternalAnswer{}, fmt.Errorf("encode the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	out, err := b.external(ctx, raw, body)
	if err != nil {
		if ctx.Err() != nil && b.ctx.Err() == nil {
			return ExternalAnswer{}, fmt.Errorf("no answer within %s (%v)", timeout, err)
		}
		return ExternalAnswer{}, err
	}
	var ans ExternalAnswer
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(&ans); err != nil || ans.Allowed == nil {
		return ExternalAnswer{}, fmt.Errorf(`its answer is not {"allowed": true|false, "message": "..."}: %s`, strings.TrimSpace(truncate(string(out), 200)))
	}
	return ans, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
