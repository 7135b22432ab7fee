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
	"strconv"
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

// settings are what the command line sets.
type settings struct {
	o      runtime.Options
	consul consulkv.Config
	reg    northapi.Registration
	c      northapi.Config
	// orgs, packageDir and maxUnpacked are node management's (see
	// Options).
	orgs, packageDir string
	maxUnpacked      int64
	// orgList is orgs, checked.
	orgList []string
}

// flags is the North API's command line, filled into the returned
// settings on Parse.
func flags() (*flag.FlagSet, *settings) {
	fs := flag.NewFlagSet("north-api", flag.ContinueOnError)
	st := &settings{reg: northapi.RegistrationFromEnv()}
	// The North API reads its views without a consumer group: it takes
	// no --session-timeout or --instance-id.
	st.o.RegisterFlagsNoGroup(fs)
	st.consul.RegisterFlags(fs)
	st.reg.RegisterFlags(fs)
	if f := fs.Lookup("http-addr"); f != nil && os.Getenv("PF_HTTP_ADDR") == "" {
		st.o.HTTPAddr, f.DefValue = defaultOpsAddr, defaultOpsAddr
	}
	st.c.RegisterFlags(fs)
	fs.StringVar(&st.orgs, "orgs", os.Getenv("PF_ORGS"), "comma-separated orgs node management serves; a request for another org answers 404; empty: any (env PF_ORGS)")
	fs.StringVar(&st.packageDir, "package-dir", os.Getenv("PF_PACKAGE_DIR"), "directory where uploaded agent packages are stored by SHA-256; empty: none are taken (env PF_PACKAGE_DIR)")
	st.maxUnpacked = nmp.DefaultMaxUnpackedBytes
	if v, err := strconv.ParseInt(os.Getenv("PF_MAX_UNPACKED_PACKAGE_BYTES"), 10, 64); err == nil {
		st.maxUnpacked = v
	}
	fs.Int64Var(&st.maxUnpacked, "max-unpacked-package-bytes", st.maxUnpacked, "largest decompressed size of an uploaded agent package (its tar stream); a package decompressing to more, such as a gzip bomb, is refused (env PF_MAX_UNPACKED_PACKAGE_BYTES)")
	return fs, st
}

// parse reads the command line and checks it: it returns what main runs
// with (a test sets each flag and checks it reaches the settings).
func parse(args []string) (*settings, error) {
	fs, st := flags()
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("north-api takes no arguments, got %q; see north-api -h", fs.Args())
	}
	if err := st.o.Check(); err != nil {
		return nil, err
	}
	if err := st.c.Check(); err != nil {
		return nil, err
	}
	for _, o := range strings.Split(st.orgs, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if err := nmp.CheckName("--orgs org", o); err != nil {
			return nil, err
		}
		st.orgList = append(st.orgList, o)
	}
	if _, err := st.reg.Rules(); err != nil {
		return nil, err
	}
	return st, nil
}

func main() {
	st, err := parse(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "north-api: invalid configuration: %v\n", err)
		os.Exit(2)
	}
	o, c := &st.o, &st.c
	consul, reg, orgList := st.consul, st.reg, st.orgList
	log := runtime.NewLogger(os.Stderr, o.LogLevel, o.Text())
	if err := o.SetMemoryLimit(log); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	opts := northapi.Options{Consul: consul, InsecureNoAuth: c.InsecureNoAuth, HTTP: c.HTTP, RateLimit: c.RateLimit(), Registration: reg, StageOps: c.StageOps,
		PackageDir: st.packageDir, MaxUnpackedPackageBytes: st.maxUnpacked, Orgs: orgList, MaxPlacements: c.MaxPlacements, Hooks: c.Hooks}
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
	if opts.TLS, err = c.TLSConfig(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}

	ctx, cancel := runtime.SignalContext(context.Background())
	defer cancel()
	env := runtime.NewEnv(o.Kafka, log)
	tracer, stopTracing, err := o.Tracing.Start(context.Background(), "north-api")
	if err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	defer stopTracing()
	env.Tracer = tracer
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
