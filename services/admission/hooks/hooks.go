// Package hooks holds the operator's rules for the HTTP endpoints
// application policies may name: the external policy engines of
// io.policyflow.admission.External and the webhooks of instance notices.
// An endpoint's host must be one the operator allows
// (--admission-hook-allow, env PF_ADMISSION_HOOK_ALLOW): the North API
// refuses a policy naming another when it is written, and the admission
// stage checks again when it calls, on the resolved address (the rules of
// package notifytarget: no proxy, no redirect, no loopback or metadata
// address reached through a name).
package hooks

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/policyflow/policyflow/services/notifytarget"
)

// Flag and Env name the allowed hosts.
const (
	Flag = "admission-hook-allow"
	Env  = "PF_ADMISSION_HOOK_ALLOW"
)

// ErrNoHosts is why every endpoint is refused when the operator allowed
// no host.
var ErrNoHosts = errors.New("no host is allowed for the endpoints of application policies: set --" + Flag + " (env " + Env + ") on the North API and the admission stage")

// MaxAnswerBytes bounds the answer of an endpoint that is read.
const MaxAnswerBytes = 64 << 10

// Config is the operator's allowed hosts. The zero Config allows none.
type Config struct {
	// Allow are the host, host:port, *.domain, address or CIDR patterns
	// endpoints may be on.
	Allow []string
}

// ConfigFromEnv reads PF_ADMISSION_HOOK_ALLOW (comma separated).
func ConfigFromEnv() Config {
	var c Config
	for _, p := range strings.Split(os.Getenv(Env), ",") {
		if p = strings.TrimSpace(p); p != "" {
			c.Allow = append(c.Allow, p)
		}
	}
	return c
}

// RegisterFlags adds --admission-hook-allow to fs; it may be given
// several times, the first use replacing what the environment said.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	set := false
	fs.Func(Flag, "host, host:port, *.domain, IP address or CIDR prefix the endpoints of application policies (external engines, notice webhooks) may be on; repeat for several, none means a policy may name no endpoint (env "+Env+", comma separated)", func(v string) error {
		var items []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				items = append(items, p)
			}
		}
		if len(items) == 0 {
			return errors.New("empty value")
		}
		if !set {
			c.Allow, set = nil, true
		}
		c.Allow = append(c.Allow, items...)
		return nil
	})
}

// Rules checks the configuration: every pattern well formed.
func (c Config) Rules() (Rules, error) {
	t, err := notifytarget.Config{WebhookAllow: c.Allow, Flag: "--" + Flag, Env: Env}.Rules()
	if err != nil {
		return Rules{}, err
	}
	return Rules{targets: t, client: t.Client(4)}, nil
}

// MustRules is Rules for configurations a program builds itself (tests);
// it panics on a bad one.
func (c Config) MustRules() Rules {
	r, err := c.Rules()
	if err != nil {
		panic(err)
	}
	return r
}

// Rules are the checked configuration. The zero Rules allow nothing.
type Rules struct {
	targets notifytarget.Rules
	client  *http.Client
}

// Allowed lists the allowed patterns as the operator gave them.
func (r Rules) Allowed() []string { return r.targets.WebhookAllow() }

// Check says whether raw may be called: an absolute http or https URL on
// an allowed host.
func (r Rules) Check(raw string) error {
	if len(r.Allowed()) == 0 {
		if _, err := r.targets.CheckWebhook(raw); err != nil && !errors.Is(err, notifytarget.ErrNoWebhookHosts) && !strings.Contains(err.Error(), "no host is allowed") {
			return errors.New(strings.Replace(err.Error(), "webhook_url ", "", 1))
		}
		return ErrNoHosts
	}
	_, err := r.targets.CheckWebhook(raw)
	if err != nil {
		return errors.New(strings.Replace(err.Error(), "webhook_url ", "", 1))
	}
	return nil
}

// Call POSTs body, JSON, to raw when the rules allow it, and returns the
// answer's body (at most MaxAnswerBytes). An answer other than 2xx is an
// error naming its status. ctx bounds the call.
func (r Rules) Call(ctx context.Context, raw string, body []byte) ([]byte, error) {
	if err := r.Check(raw); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, raw, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", notifytarget.MaskURL(raw), err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "policyflow-admission")
	cl := r.client
	if cl == nil {
		cl = r.targets.Client(4)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", notifytarget.MaskURL(raw), unwrapURL(err))
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s: reading the answer: %w", notifytarget.MaskURL(raw), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("POST %s answered %s", notifytarget.MaskURL(raw), resp.Status)
	}
	if len(ans) > MaxAnswerBytes {
		return nil, fmt.Errorf("POST %s: the answer is over %d bytes", notifytarget.MaskURL(raw), MaxAnswerBytes)
	}
	return ans, nil
}

// unwrapURL drops url.Error's repetition of the method and URL.
func unwrapURL(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && strings.HasPrefix(err.Error(), "Post ") {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
