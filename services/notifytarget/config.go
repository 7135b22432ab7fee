// Package notifytarget holds the operator's rules for where a component's
// notification may go: which directories reconfigure scripts may run from,
// which hosts webhooks may reach, how big a script's argument may be, and
// how a webhook URL is shown (its credentials masked). The North API
// applies them when a component is registered and the agent-notifier again
// right before each notification, so both take the same flags.
package notifytarget

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// Config is what the operator allows, as given by flags and environment.
// The zero Config allows no script and no webhook.
type Config struct {
	// ScriptDirs are the directories reconfigure scripts may run from.
	ScriptDirs []string
	// WebhookAllow are the host or host:port patterns webhooks may reach.
	WebhookAllow []string
	// WebhookRefuse are patterns, as in WebhookAllow, no webhook may
	// reach even where WebhookAllow allows it: the services of the stack
	// itself (policyctl dev refuses its Consul, North API, broker and
	// listeners this way).
	WebhookRefuse []string
	// Flag and Env name the flag and the environment variable that gave
	// WebhookAllow, in messages; "" is --webhook-allow and
	// PF_WEBHOOK_ALLOW.
	Flag, Env string
}

// ConfigFromEnv reads PF_SCRIPT_DIRS (comma or colon separated) and
// PF_WEBHOOK_ALLOW (comma separated).
func ConfigFromEnv() Config {
	return Config{
		ScriptDirs:   splitDirs(os.Getenv("PF_SCRIPT_DIRS")),
		WebhookAllow: splitPatterns(os.Getenv("PF_WEBHOOK_ALLOW")),
	}
}

// RegisterFlags adds --script-dir and --webhook-allow to fs. Both may be
// given several times; the first use replaces what the environment said.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&listFlag{dst: &c.ScriptDirs, split: splitDirs}, "script-dir",
		"directory reconfigure scripts may run from; repeat for several, none means no script runs (env PF_SCRIPT_DIRS, comma or colon separated)")
	fs.Var(&listFlag{dst: &c.WebhookAllow, split: splitPatterns}, "webhook-allow",
		"host, host:port, *.domain, IP address or CIDR prefix webhooks may reach; repeat for several, none means no webhook is called (env PF_WEBHOOK_ALLOW, comma separated)")
}

// Rules checks the configuration and returns the rules it sets: every
// script directory must be an absolute path of an existing directory
// (other than /), every webhook pattern well formed.
func (c Config) Rules() (Rules, error) {
	r := Rules{flag: c.Flag, env: c.Env}
	for _, d := range c.ScriptDirs {
		sd, err := newScriptDir(d)
		if err != nil {
			return Rules{}, fmt.Errorf("--script-dir %q: %w", d, err)
		}
		r.scriptDirs = append(r.scriptDirs, sd)
	}
	for _, p := range c.WebhookAllow {
		hp, err := parsePattern(p)
		if err != nil {
			return Rules{}, fmt.Errorf("%s %q: %w", r.flagName(), p, err)
		}
		r.hosts = append(r.hosts, hp)
	}
	for _, p := range c.WebhookRefuse {
		hp, err := parsePattern(p)
		if err != nil {
			return Rules{}, fmt.Errorf("refused webhook address %q: %w", p, err)
		}
		r.refused = append(r.refused, hp)
	}
	return r, nil
}

// MustRules is Rules for configurations a program builds itself (tests,
// the embedded stack); it panics on a bad one.
func (c Config) MustRules() Rules {
	r, err := c.Rules()
	if err != nil {
		panic(err)
	}
	return r
}

// Rules are the checked configuration. The zero Rules allow nothing.
type Rules struct {
	flag, env  string
	scriptDirs []scriptDir
	hosts      []hostPattern
	refused    []hostPattern
}

// listFlag is a repeatable flag: the first Set replaces the value the
// environment gave, later ones add to it.
type listFlag struct {
	dst   *[]string
	split func(string) []string
	set   bool
}

func (l *listFlag) String() string {
	if l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l *listFlag) Set(s string) error {
	items := l.split(s)
	if len(items) == 0 {
		return fmt.Errorf("empty value")
	}
	if !l.set {
		*l.dst, l.set = nil, true
	}
	*l.dst = append(*l.dst, items...)
	return nil
}

func splitDirs(s string) []string {
	return split(s, func(r rune) bool { return r == ',' || r == ':' })
}

func splitPatterns(s string) []string {
	return split(s, func(r rune) bool { return r == ',' })
}

func split(s string, sep func(rune) bool) []string {
	var out []string
	for _, p := range strings.FieldsFunc(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// flagName is the flag that allows hosts, for messages.
func (r Rules) flagName() string {
	if r.flag == "" {
		return "--webhook-allow"
	}
	return r.flag
}

// flagRef is the flag and its environment variable, for messages.
func (r Rules) flagRef() string {
	if r.flag == "" {
		return "--webhook-allow, env PF_WEBHOOK_ALLOW"
	}
	return r.flag + ", env " + r.env
}
