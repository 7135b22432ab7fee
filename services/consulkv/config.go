package consulkv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
)

// DefaultAddr is the Consul agent of the embedded stack (`make run`).
const DefaultAddr = "127.0.0.1:8500"

// Config is how a process reaches the Consul agent.
type Config struct {
	Addr  string
	Token string
	// Requests, when set, counts every request of the clients made from
	// this configuration (Client, Connect): a test's measure of what a
	// stage's work costs in requests to Consul. It is no flag: a
	// process never sets it.
	Requests *RequestCounter
}

// FromEnv is the configuration the environment gives: the address in
// PF_CONSUL_ADDR, else CONSUL_HTTP_ADDR, else DefaultAddr; the ACL token
// in PF_CONSUL_TOKEN, else CONSUL_HTTP_TOKEN.
func FromEnv() Config {
	return Config{
		Addr:  runtime.EnvOr("PF_CONSUL_ADDR", runtime.EnvOr("CONSUL_HTTP_ADDR", DefaultAddr)),
		Token: runtime.EnvOr("PF_CONSUL_TOKEN", runtime.EnvOr("CONSUL_HTTP_TOKEN", "")),
	}
}

// RegisterFlags adds --consul-addr and --consul-token to fs, each
// defaulting to what FromEnv says.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := FromEnv()
	fs.StringVar(&c.Addr, "consul-addr", d.Addr, "Consul HTTP address (env PF_CONSUL_ADDR or CONSUL_HTTP_ADDR)")
	fs.StringVar(&c.Token, "consul-token", d.Token, "Consul ACL token (env PF_CONSUL_TOKEN or CONSUL_HTTP_TOKEN)")
}

// ResponseTimeout bounds the wait for the answer to one request of a
// Client, once it is sent. The stages' requests (reads, transactions, no
// blocking query) are answered within seconds; a request on a connection
// that died silently (the network cut, the agent's host gone, no reset
// ever coming) would otherwise hold its stage for the whole timeout of
// its context (minutes). After it, the request fails as transient and is
// retried on a new connection. A blocking query on a Client must set a
// WaitTime well under it.
var ResponseTimeout = 30 * time.Second

// Client returns a Consul API client for the configured agent. It keeps
// its connections open (stages send many requests, several at once),
// takes responses uncompressed (gzip of every folder read cost the agent
// more than the read on a busy host) and waits at most ResponseTimeout
// for an answer. With Requests set, its requests are counted on their way.
func (c Config) Client() (*api.Client, error) {
	cfg := api.DefaultConfig()
	cfg.Transport.MaxIdleConnsPerHost = 32
	cfg.Transport.DisableCompression = true
	cfg.Transport.ResponseHeaderTimeout = ResponseTimeout
	if c.Addr != "" {
		cfg.Address = c.Addr
	}
	if c.Token != "" {
		cfg.Token = c.Token
	}
	if c.Requests != nil {
		hc, err := api.NewHttpClient(cfg.Transport, cfg.TLSConfig)
		if err != nil {
			return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
		}
		hc.Transport = c.Requests.RoundTripper(hc.Transport)
		cfg.HttpClient = hc
	}
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("consul client for %s: %w", cfg.Address, err)
	}
	return cl, nil
}

// tokenCheckTimeout bounds the token check at start.
const tokenCheckTimeout = 10 * time.Second

// Connect is Client for a stage starting: it checks the token once
// (CheckToken) and fails when Consul refuses it, saying so, as no request
// with it could succeed. When the agent cannot be reached yet, it logs a
// warning and returns the client: the stage retries its requests until
// the agent is up, and a refused token then shows in their errors.
func (c Config) Connect(ctx context.Context, log zerolog.Logger) (*api.Client, error) {
	cl, err := c.Client()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, tokenCheckTimeout)
	defer cancel()
	tok, err := CheckToken(cctx, cl, c.Token)
	switch {
	case errors.Is(err, ErrTokenRefused):
		return nil, fmt.Errorf("Consul at %s: %w", c.Addr, err)
	case err != nil:
		log.Warn().Err(err).Str("consul", c.Addr).Msg("Consul not reachable at start; the token is checked by the first request")
	case tok.ACLs:
		log.Info().Str("consul", c.Addr).Str("accessor_id", tok.AccessorID).Str("description", tok.Description).Msg("Consul accepted the token")
	}
	return cl, nil
}

// Dependency is the Consul agent as a dependency of a stage's readiness
// (runtime.Health.Depend): the agent answers and its cluster has a leader,
// without which no write or consistent read succeeds. It asks
// /v1/status/leader, which needs no ACL.
func Dependency(cl *api.Client) runtime.Dependency {
	return runtime.Dependency{Name: "Consul", Check: func(ctx context.Context) error {
		leader, err := cl.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return err
		}
		if leader == "" {
			return errors.New("the Consul cluster has no leader")
		}
		return nil
	}}
}
