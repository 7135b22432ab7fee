// Command north-api runs policyflow's North API: the HTTP service that
// registers components, takes PDP notifications and pushed policies,
// requests catch-ups, and serves the latest policies, a component's Consul
// folder and its delivery status. Every caller but /healthcheck needs a
// bearer token of the tokens file (--tokens-file). /healthz, /readyz,
// /metrics and, with --pprof, the Go profiles are on a separate ops
// listener (--http-addr), never on the API's address (--api-addr).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/runtime"
)

// defaultOpsAddr is the ops listener's default: not a stage's 9090, so the
// North API and a stage run on one host with their defaults.
const defaultOpsAddr = "127.0.0.1:9091"

func main() {
	fs := flag.NewFlagSet("north-api", flag.ContinueOnError)
	var o runtime.Options
	o.RegisterFlags(fs)
	var consul consulkv.Config
	consul.RegisterFlags(fs)
	reg := northapi.RegistrationFromEnv()
	reg.RegisterFlags(fs)
	if f := fs.Lookup("http-addr"); f != nil && os.Getenv("PF_HTTP_ADDR") == "" {
		o.HTTPAddr, f.DefValue = defaultOpsAddr, defaultOpsAddr
	}
	var c northapi.Config
	c.RegisterFlags(fs)
	orgs := fs.String("orgs", os.Getenv("PF_ORGS"), "comma-separated orgs node management serves; a request for another org answers 404; empty: any (env PF_ORGS)")
	packageDir := fs.String("package-dir", os.Getenv("PF_PACKAGE_DIR"), "directory where uploaded agent packages are stored by SHA-256; empty: none are taken (env PF_PACKAGE_DIR)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "north-api takes no arguments, got %q; see north-api -h\n", fs.Args())
		os.Exit(2)
	}
	log := runtime.NewLogger(os.Stderr, o.LogLevel, o.LogText)
	if err := o.Kafka.Validate(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	if err := c.Check(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	var orgList []string
	for _, o := range strings.Split(*orgs, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if err := nmp.CheckName("--orgs org", o); err != nil {
			log.Error().Err(err).Msg("invalid configuration")
			os.Exit(2)
		}
		orgList = append(orgList, o)
	}
	if _, err := reg.Rules(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	opts := northapi.Options{Consul: consul, InsecureNoAuth: c.InsecureNoAuth, HTTP: c.HTTP, RateLimit: c.RateLimit(), Registration: reg, PackageDir: *packageDir, Orgs: orgList}
	var tokens *auth.Store
	if c.TokensFile != "" {
		var err error
		if tokens, err = auth.Open(c.TokensFile); err != nil {
			log.Error().Err(err).Msg("cannot load the bearer tokens")
			os.Exit(2)
		}
		if tokens.Len() == 0 {
			log.Warn().Str("file", c.TokensFile).Msg("the tokens file holds no token: every request but /healthcheck is refused until one is added")
		}
		log.Info().Str("file", c.TokensFile).Int("tokens", tokens.Len()).Msg("bearer tokens loaded; the file is reloaded when it changes")
		opts.Tokens = tokens
	}
	var err error
	if opts.TLS, err = c.TLSConfig(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}

	ctx, cancel := runtime.SignalContext(context.Background())
	defer cancel()
	env := runtime.NewEnv(o.Kafka, log)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := runtime.Serve(gctx, o.HTTPAddr, env, o.OpsRoutes()); err != nil {
			return fmt.Errorf("ops listener (--http-addr): %w", err)
		}
		return nil
	})
	if tokens != nil {
		g.Go(func() error {
			tokens.Watch(gctx, auth.DefaultReloadInterval, log)
			return nil
		})
	}
	g.Go(func() error {
		if err := runtime.PublishSchemas(gctx, env); err != nil {
			log.Warn().Err(err).Msg("publish schemas")
		}
		return nil
	})
	g.Go(func() error {
		defer cancel()
		return northapi.Serve(gctx, env, c.Addr, opts)
	})
	if err := g.Wait(); err != nil {
		log.Error().Err(err).Msg("exiting")
		os.Exit(1)
	}
}
