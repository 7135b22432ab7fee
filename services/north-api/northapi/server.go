// Package northapi is policyflow's North API: the HTTP service through which
// deployment systems, policy engines, operators and edge agents reach the
// pipeline. It is a shell: the server, the route table (routes.go, the one
// place that lists the routes and the roles that may call them, with each
// route's owner check in owners.go), the token and rate-limit guard,
// configuration and the OpenAPI document. The handlers and their read
// views are each subsystem's: services/policy/policyapi (components,
// policies, catch-ups, rollouts, status, the DCAE read routes),
// services/nmp/nmpapi (node management), services/admission/admissionapi
// (admission and placement) and services/acm/acmapi (participants), all
// built on services/internal/web. Every route but /healthcheck and /ui/
// needs a bearer token; tenants are scoped to their own data.
package northapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	capi "github.com/hashicorp/consul/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/acm/acmapi"
	"github.com/policyflow/policyflow/services/admission/admissionapi"
	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/nmp/nmpapi"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/runtime"
)

// DefaultAddr is where the North API listens unless told otherwise.
const DefaultAddr = "127.0.0.1:8080"

// RateLimit bounds the requests of one client (web.RateLimit).
type RateLimit = web.RateLimit

// HTTPLimits bound the connections of the API's HTTP server
// (web.HTTPLimits).
type HTTPLimits = web.HTTPLimits

// Options tune a Server. Tokens is required unless InsecureNoAuth; the
// other zero values take the defaults.
type Options struct {
	// Consul is the agent whose folders the API reads (zero: as the
	// environment says, consulkv.FromEnv).
	Consul consulkv.Config
	// Tokens names the caller of each bearer token (an *auth.Store of the
	// tokens file). Every route but /healthcheck needs a token.
	Tokens Authenticator
	// InsecureNoAuth serves every caller as admin, without a token.
	InsecureNoAuth bool
	// HTTP bounds the connections ServeListener accepts.
	HTTP HTTPLimits
	// RateLimit bounds each client's requests.
	RateLimit RateLimit
	// TLS, when set, makes ServeListener serve HTTPS with it (LoadTLS).
	TLS *tls.Config

	// ViewWait bounds how long a component write waits for the service's
	// own deploy.components view to show it, so that the next write sees
	// its generation (default 15s). The write is accepted either way.
	ViewWait time.Duration
	// ProduceTimeout bounds how long a request waits for Kafka to
	// acknowledge its records (default 30s).
	ProduceTimeout time.Duration
	// Registration is what a component registration may ask for; the
	// zero value allows no script and no webhook.
	Registration Registration
	// StageOps are the ops listeners (host:port or URL) of the stages,
	// whose /readyz and /metrics the status page reads; when empty it
	// shows the stages running in this process (the dev stack).
	StageOps []string
	// PackageDir is where agent packages are stored (by SHA-256); empty:
	// the API stores none. MaxPackageBytes bounds one (default 512 MiB),
	// MaxUnpackedPackageBytes its decompressed size (default
	// nmp.DefaultMaxUnpackedBytes).
	PackageDir              string
	MaxPackageBytes         int64
	MaxUnpackedPackageBytes int64
	// Orgs, when set, are the orgs node management serves; a request for
	// another org answers 404. Empty: any well-formed org name.
	Orgs []string
	// MaxPlacements bounds the placement computations running at once
	// (default admissionapi.DefaultMaxPlacements); one more answers 503.
	MaxPlacements int
	// Hooks are the hosts application policies' endpoints (external
	// engines, notice webhooks) may be on; the zero value allows none.
	Hooks hooks.Config
	// RolloutEvery is how often the running staged rollouts are moved on
	// (default policyapi.DefaultRolloutEvery).
	RolloutEvery time.Duration
}

// Server is the North API: a producer, the read views and the HTTP
// handlers. Build it with New, start its views with Run, serve Handler.
type Server struct {
	env    runtime.Env
	log    zerolog.Logger
	opts   Options
	cl     *kgo.Client
	consul *capi.Client

	kit *web.Kit          // producer, read views' readiness, locks
	pol *policyapi.API    // the policy flow
	acm *acmapi.API       // automation-composition participants
	nmp *nmpapi.API       // node management
	adm *admissionapi.API // admission and placement

	rules   policyapi.ComponentRules
	limiter *web.Limiter

	requests *prometheus.CounterVec
	produced *prometheus.CounterVec
}

// New builds a Server on env: the Kafka producer (idempotent), the Consul
// client and the read views (empty until Run reads them).
func New(env runtime.Env, opts Options) (*Server, error) {
	if env.Codec == nil || env.Metrics == nil || env.Health == nil {
		return nil, errors.New("north api: Env is missing its codec, metrics or health: build it with runtime.NewEnv")
	}
	if opts.ViewWait <= 0 {
		opts.ViewWait = 15 * time.Second
	}
	if opts.ProduceTimeout <= 0 {
		opts.ProduceTimeout = 30 * time.Second
	}
	if opts.MaxPlacements <= 0 {
		opts.MaxPlacements = admissionapi.DefaultMaxPlacements
	}
	if opts.Consul == (consulkv.Config{}) {
		opts.Consul = consulkv.FromEnv()
	}
	if opts.Tokens == nil && !opts.InsecureNoAuth {
		return nil, errors.New("north api: no tokens: every caller but /healthcheck needs a bearer token; give a tokens file (--tokens-file), or --insecure-no-auth on a network where every client is trusted")
	}
	rules, err := opts.Registration.Rules()
	if err != nil {
		return nil, fmt.Errorf("north api: %w", err)
	}
	s := &Server{
		env:     env,
		log:     env.Log.With().Str("service", "north-api").Logger(),
		opts:    opts,
		limiter: web.NewLimiter(opts.RateLimit),
		rules:   rules,
	}
	if opts.InsecureNoAuth {
		s.log.Warn().Msg("AUTHENTICATION IS OFF (--insecure-no-auth): anyone who reaches the North API may register components, choose the scripts they run and read every policy and Consul folder")
	}
	s.log.Info().Strs("script_dirs", rules.Targets.ScriptDirs()).Strs("webhook_allow", rules.Targets.WebhookAllow()).
		Msg("notification targets components may register")
	kopts, err := env.Kafka.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("north api: %w", err)
	}
	kopts = append(kopts,
		kgo.WithLogger(runtime.KgoLogger(s.log)),
		kgo.ClientID("policyflow-north-api"),
		kgo.RecordPartitioner(runtime.Partitioner()),
		kgo.RecordDeliveryTimeout(opts.ProduceTimeout),
		kgo.ProducerLinger(0),
	)
	kopts = append(kopts, env.Tracer.ClientOpts()...)
	if env.MaxRecordBytes > 0 {
		kopts = append(kopts, kgo.ProducerBatchMaxBytes(env.MaxRecordBytes), kgo.BrokerMaxWriteBytes(2*env.MaxRecordBytes))
	}
	s.cl, err = kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("north api: create Kafka producer: %w", err)
	}
	s.consul, err = opts.Consul.Client()
	if err != nil {
		s.cl.Close()
		return nil, fmt.Errorf("north api: %w", err)
	}
	if s.requests, err = web.RegisterCounter(env.Metrics.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyflow_north_api_requests_total", Help: "North API requests by route and status code.",
	}, []string{"route", "code"})); err == nil {
		s.produced, err = web.RegisterCounter(env.Metrics.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "policyflow_north_api_records_produced_total", Help: "Records the North API produced, by topic.",
		}, []string{"topic"}))
	}
	if err == nil {
		err = registerTokensStale(env.Metrics.Registry, opts.Tokens)
	}
	if err != nil {
		s.cl.Close()
		return nil, fmt.Errorf("north api: register metrics: %w", err)
	}
	s.kit = web.NewKit(env, s.log, s.cl, s.produced, opts.ViewWait, opts.ProduceTimeout)
	if err := s.followViews(); err != nil {
		s.Close()
		return nil, fmt.Errorf("north api: %w", err)
	}
	return s, nil
}

// followViews builds each subsystem's API, which starts its read views
// on the kit: runtime tables of their topics, and node management's world
// folded as the nmp-hub folds it.
func (s *Server) followViews() (err error) {
	if s.pol, err = policyapi.New(s.kit, s.consul, policyapi.Options{
		Consul: s.opts.Consul, Rules: s.rules, StageOps: s.opts.StageOps,
		DeploymentTenant: func(id string) (string, bool) {
			v, ok := s.adm.Verdict(id)
			if !ok {
				return "", false
			}
			return v.Tenant, true
		},
	}); err != nil {
		return err
	}
	if s.acm, err = acmapi.New(s.kit); err != nil {
		return err
	}
	hookRules, err := s.opts.Hooks.Rules()
	if err != nil {
		return fmt.Errorf("north api: %w", err)
	}
	if s.adm, err = admissionapi.New(s.kit, admissionapi.Options{
		MaxPlacements: s.opts.MaxPlacements, Owners: s.pol.Owners(), CheckComponents: s.pol.CheckDeploymentComponents,
		Hooks: hookRules,
	}); err != nil {
		return err
	}
	s.nmp, err = nmpapi.New(s.kit, nmpapi.Options{
		Orgs: s.opts.Orgs, PackageDir: s.opts.PackageDir,
		MaxPackageBytes: s.opts.MaxPackageBytes, MaxUnpackedPackageBytes: s.opts.MaxUnpackedPackageBytes,
		WriteTimeout: s.opts.HTTP.WithDefaults().WriteTimeout,
	})
	return err
}

// Run watches the read views catch up and keeps them marked on health
// until ctx is done.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.pol.DriveRollouts(ctx, s.opts.RolloutEvery)
	}()
	defer func() { cancel(); <-done }()
	return s.kit.Views.Run(ctx)
}

// Close stops the read views and releases the producer. Call it after Run
// returned.
func (s *Server) Close() {
	if s.kit != nil {
		s.kit.Views.Close()
	}
	s.cl.Close()
}

// Ready reports whether every read view has caught up.
func (s *Server) Ready() bool { return s.kit.Views.Ready() }

// Handler serves the API's routes, each behind its token check. Health,
// readiness (every view caught up) and metrics are not among them: they
// are on the ops listener (runtime.Serve with the same Env).
func (s *Server) Handler() http.Handler { return s.routes() }

// Serve runs a Server on env at addr until ctx is done: views, producer
// and HTTP server.
func Serve(ctx context.Context, env runtime.Env, addr string, opts Options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("north api: listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, env, ln, opts)
}

// ServeListener is Serve on an open listener.
func ServeListener(ctx context.Context, env runtime.Env, ln net.Listener, opts Options) error {
	s, err := New(env, opts)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- s.Run(ctx) }()
	srv := opts.HTTP.Server(s.Handler(), opts.TLS, s.log)
	go func() {
		serve, scheme := srv.Serve, "http"
		if opts.TLS != nil {
			// The certificates are in srv.TLSConfig.
			serve, scheme = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }, "https"
		}
		s.log.Info().Str("addr", ln.Addr().String()).Str("scheme", scheme).Bool("client_certificates", opts.TLS != nil && opts.TLS.ClientCAs != nil).Msg("north api listening")
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("north api: serve HTTP on %s: %w", ln.Addr(), err)
			return
		}
		errs <- nil
	}()
	var first error
	select {
	case <-ctx.Done():
	case first = <-errs:
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	return first
}

// produce writes records and waits for them to be acknowledged.
func (s *Server) produce(ctx context.Context, recs ...*kgo.Record) error {
	return s.kit.Produce(ctx, recs...)
}

// waitOwnWrite waits, bounded by ViewWait, until this replica's view has
// read rec, so the caller's next request sees the write (a component's
// next write its generation, a node's new token).
func (s *Server) waitOwnWrite(ctx context.Context, view web.OwnWriteWaiter, rec *kgo.Record) {
	s.kit.WaitOwnWrite(ctx, view, rec)
}

// needViews answers 503 while one of the named topics' views has not
// caught up, so no answer is built from a partial view.
func (s *Server) needViews(bases ...string) *web.Error { return s.kit.Views.Need(bases...) }

// newID returns 16 random bytes in hex, for notification and request ids.
func newID() string { return web.NewID() }

// newUUID is a random (version 4) UUID.
func newUUID() string { return web.NewUUID() }

// registerTokensStale registers policyflow_tokens_file_stale: 1 while the
// tokens file cannot be loaded (a typo, a half-written file) and the
// tokens loaded before it stay in force, which the log says once; 0
// otherwise, and always for tokens not read from a file.
func registerTokensStale(r *prometheus.Registry, tokens any) error {
	store, _ := tokens.(*auth.Store)
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "policyflow_tokens_file_stale",
		Help: "1 while the North API's tokens file cannot be loaded and the tokens loaded before it stay in force.",
	}, func() float64 {
		if store != nil && store.Stale() {
			return 1
		}
		return 0
	})
	if err := r.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return err
		}
	}
	return nil
}
