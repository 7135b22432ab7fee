package northapi

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/policyflow/policyflow/services/admission/admissionapi"
	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/runtime"
)

// Config is the North API's own command-line configuration (the runtime's
// flags give Kafka, Consul and the ops listener).
type Config struct {
	// Addr is where the API listens.
	Addr string
	// TokensFile is the bearer tokens file (auth.File); required unless
	// InsecureNoAuth.
	TokensFile string
	// StageOps are the stages' ops listeners the status page reads
	// (Options.StageOps).
	StageOps []string
	// InsecureNoAuth serves every caller without a token, as admin.
	InsecureNoAuth bool
	// TLSCert and TLSKey, when given, make the API serve HTTPS;
	// TLSClientCA also requires a client certificate signed by that CA.
	TLSCert, TLSKey, TLSClientCA string
	HTTP                         HTTPLimits
	// RatePerSecond (0 turns the limit off) and RateBurst bound each
	// client's requests.
	RatePerSecond float64
	RateBurst     int
	// MaxPlacements bounds the placement computations running at once.
	MaxPlacements int
	// Hooks are the hosts application policies' endpoints may be on.
	Hooks hooks.Config

	envErr error
}

// RegisterFlags adds the North API's flags, with PF_* environment
// fallbacks, to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "api-addr", runtime.EnvOr("PF_API_ADDR", DefaultAddr), "address of the North API (env PF_API_ADDR)")
	fs.StringVar(&c.TokensFile, "tokens-file", runtime.EnvOr("PF_TOKENS_FILE", ""),
		"bearer tokens file: JSON {\"tokens\": [{name, role, tenant, sha256}]}, reloaded when it changes; required unless --insecure-no-auth (env PF_TOKENS_FILE)")
	fs.BoolVar(&c.InsecureNoAuth, "insecure-no-auth", false, "serve every caller as admin, without a token; only on a network where every client is trusted")
	fs.StringVar(&c.TLSCert, "tls-cert", runtime.EnvOr("PF_API_TLS_CERT", ""), "PEM certificate (chain) the API serves HTTPS with, with --tls-key; not for Kafka, see --tls (env PF_API_TLS_CERT)")
	fs.StringVar(&c.TLSKey, "tls-key", runtime.EnvOr("PF_API_TLS_KEY", ""), "PEM private key of --tls-cert (env PF_API_TLS_KEY)")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", runtime.EnvOr("PF_API_TLS_CLIENT_CA", ""), "PEM CA bundle: require every client to present a certificate signed by it (mTLS; needs --tls-cert) (env PF_API_TLS_CLIENT_CA)")
	c.duration(fs, &c.HTTP.ReadHeaderTimeout, "read-header-timeout", "PF_API_READ_HEADER_TIMEOUT", web.DefaultReadHeaderTimeout, "longest time to read a request's headers")
	c.duration(fs, &c.HTTP.ReadTimeout, "read-timeout", "PF_API_READ_TIMEOUT", web.DefaultReadTimeout, "longest time to read a whole request, body included")
	c.duration(fs, &c.HTTP.WriteTimeout, "write-timeout", "PF_API_WRITE_TIMEOUT", web.DefaultWriteTimeout, "longest time from the end of a request's headers to the end of its answer")
	c.duration(fs, &c.HTTP.IdleTimeout, "idle-timeout", "PF_API_IDLE_TIMEOUT", web.DefaultIdleTimeout, "close keep-alive connections idle this long")
	c.HTTP.MaxHeaderBytes = c.envInt("PF_API_MAX_HEADER_BYTES", web.DefaultMaxHeaderBytes)
	fs.IntVar(&c.HTTP.MaxHeaderBytes, "max-header-bytes", c.HTTP.MaxHeaderBytes, "largest request headers, in bytes (env PF_API_MAX_HEADER_BYTES)")
	c.RatePerSecond = c.envFloat("PF_API_RATE_LIMIT", web.DefaultRatePerSecond)
	fs.Float64Var(&c.RatePerSecond, "rate-limit", c.RatePerSecond, "requests per second each client may send (per token, or per address without a valid token); 0 turns the limit off (env PF_API_RATE_LIMIT)")
	if v := os.Getenv("PF_STAGE_OPS"); v != "" {
		for _, a := range strings.Split(v, ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.StageOps = append(c.StageOps, a)
			}
		}
	}
	fs.Func("stage-ops", "ops listener (host:port, URL, or name=address) of a stage, whose /readyz and /metrics the status page /ui/ shows; a host that is a stage's name, or name=, names a stage that should run: it is listed down when it does not answer; repeatable; none: the stages of this process (env PF_STAGE_OPS, comma separated)", func(v string) error {
		c.StageOps = append(c.StageOps, v)
		return nil
	})
	c.RateBurst = c.envInt("PF_API_RATE_BURST", web.DefaultRateBurst)
	fs.IntVar(&c.RateBurst, "rate-burst", c.RateBurst, "requests a client may send at once above --rate-limit (env PF_API_RATE_BURST)")
	c.MaxPlacements = c.envInt("PF_API_MAX_PLACEMENTS", admissionapi.DefaultMaxPlacements)
	fs.IntVar(&c.MaxPlacements, "max-placements", c.MaxPlacements, "placement computations (POST /v1/placements, dry runs naming a datacenter) run at once; one more answers 503 with Retry-After (env PF_API_MAX_PLACEMENTS)")
	c.Hooks = hooks.ConfigFromEnv()
	c.Hooks.RegisterFlags(fs)
}

func (c *Config) duration(fs *flag.FlagSet, dst *time.Duration, name, env string, def time.Duration, usage string) {
	*dst = def
	if v := os.Getenv(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			c.envErr = fmt.Errorf("%s=%q is not a duration such as 30s: %w", env, v, err)
		} else {
			*dst = d
		}
	}
	fs.DurationVar(dst, name, *dst, fmt.Sprintf("%s (env %s)", usage, env))
}

func (c *Config) envInt(env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		c.envErr = fmt.Errorf("%s=%q is not a whole number: %w", env, v, err)
		return def
	}
	return n
}

func (c *Config) envFloat(env string, def float64) float64 {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		c.envErr = fmt.Errorf("%s=%q is not a number: %w", env, v, err)
		return def
	}
	return f
}

// Check says what to fix in a configuration the API cannot start with.
func (c Config) Check() error {
	if c.envErr != nil {
		return c.envErr
	}
	switch {
	case c.TokensFile == "" && !c.InsecureNoAuth:
		return errors.New("no --tokens-file (PF_TOKENS_FILE): the North API does not start without bearer tokens; write one with `policyctl token add`, or give --insecure-no-auth on a network where every client is trusted")
	case c.TokensFile != "" && c.InsecureNoAuth:
		return errors.New("--tokens-file and --insecure-no-auth contradict each other; give one")
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both to serve HTTPS, or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are checked on HTTPS only")
	case c.HTTP.ReadHeaderTimeout <= 0 || c.HTTP.ReadTimeout <= 0 || c.HTTP.WriteTimeout <= 0 || c.HTTP.IdleTimeout <= 0:
		return errors.New("--read-header-timeout, --read-timeout, --write-timeout and --idle-timeout must be positive")
	case c.HTTP.MaxHeaderBytes <= 0:
		return errors.New("--max-header-bytes must be positive")
	case c.RatePerSecond < 0 || c.RateBurst <= 0:
		return errors.New("--rate-limit must be 0 (off) or positive, and --rate-burst positive")
	case c.MaxPlacements <= 0:
		return errors.New("--max-placements must be positive")
	}
	if _, err := c.Hooks.Rules(); err != nil {
		return err
	}
	return nil
}

// RateLimit is the configured limit.
func (c Config) RateLimit() web.RateLimit {
	return web.RateLimit{PerSecond: c.RatePerSecond, Burst: c.RateBurst, Off: c.RatePerSecond == 0}
}

// TLSConfig loads the certificates of --tls-cert, --tls-key and
// --tls-client-ca; nil when the API serves plain HTTP.
func (c Config) TLSConfig() (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	return web.LoadTLS(c.TLSCert, c.TLSKey, c.TLSClientCA)
}
