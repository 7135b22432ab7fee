// Package notify is the agent-notifier stage: it tells each component that
// its policies changed, by running its reconfigure script or calling its
// webhook, at most once per update, claiming each notification in Consul
// first.
package notify

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// DefaultTimeout bounds a script or webhook whose notify target names no
// timeout of its own.
const DefaultTimeout = 30 * time.Second

// consulTimeout bounds one Consul request.
const consulTimeout = time.Minute

// Config is the agent-notifier's own configuration.
type Config struct {
	// Timeout is how long a script or webhook may take when the
	// component's notify target does not say (timeout_ms 0).
	Timeout time.Duration
}

// DefaultConfig reads PF_NOTIFY_TIMEOUT, falling back to DefaultTimeout.
func DefaultConfig() Config {
	c := Config{Timeout: DefaultTimeout}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_NOTIFY_TIMEOUT", "")); err == nil {
		c.Timeout = d
	}
	return c
}

// RegisterFlags adds the agent-notifier's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Timeout, "notify-timeout", c.Timeout,
		"how long a reconfigure script or webhook may take when the component does not say (env PF_NOTIFY_TIMEOUT)")
}

// Validate says what is wrong with the configuration.
func (c Config) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("--notify-timeout %s: want a positive duration", c.Timeout)
	}
	return nil
}

// Stage is the agent-notifier configured from the environment (and from
// flags when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is the agent-notifier with the given configuration. It reads
// component.applied at least once, in order, and notifies components.
func StageWith(cfg Config) runtime.Stage {
	n := &notifier{cfg: cfg}
	return runtime.Stage{
		Name:   topology.StageAgentNotifier,
		Mode:   runtime.AtLeastOnce,
		Inputs: []string{topology.ComponentApplied},
		Flags:  n.cfg.RegisterFlags,
		Setup:  n.setup,
	}
}

type notifier struct {
	cfg   Config
	kv    *api.KV
	txn   *api.Txn
	http  *http.Client
	log   zerolog.Logger
	retry runtime.Backoff
}

func (n *notifier) setup(_ context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	if err := n.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	cl, err := env.Consul.Client()
	if err != nil {
		return nil, nil, fmt.Errorf("agent-notifier: %w", err)
	}
	n.kv, n.txn = cl.KV(), cl.Txn()
	n.http = &http.Client{}
	n.log = env.Log.With().Str("stage", topology.StageAgentNotifier).Logger()
	n.retry = env.Retry
	return n.handle, nil, nil
}

// handle sends each record to the part of the notifier for its topic.
func (n *notifier) handle(ctx context.Context, in runtime.Input) ([]runtime.Output, error) {
	switch in.Topic {
	case topology.ComponentApplied:
		return n.component(ctx, in)
	default:
		return nil, runtime.Permanentf("agent-notifier: no handler for topic %s", in.Topic)
	}
}
