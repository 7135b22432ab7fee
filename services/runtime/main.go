package runtime

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// Options are the process-level settings every stage binary shares.
type Options struct {
	Kafka    Kafka
	HTTPAddr string
	// Pprof adds the Go profiles to the ops listener of HTTPAddr.
	Pprof    bool
	LogLevel string
	// SessionTimeout and InstanceID go to Env (see there).
	SessionTimeout time.Duration
	InstanceID     string
	// LogFormat is "json" (the default) or "text" (human-readable).
	LogFormat string
	// Tracing says where traces go; off by default.
	Tracing Tracing
	// MemoryLimit is the Go runtime's soft memory limit: auto, off or a
	// size (see ApplyMemoryLimit).
	MemoryLimit string
}

// RegisterFlags adds the shared flags (with PF_* env fallbacks) to fs.
func (o *Options) RegisterFlags(fs *flag.FlagSet) { o.register(fs, true) }

// DefaultSessionTimeout is the binaries' --session-timeout: what the
// manifests ship (deploy/k8s/config.yaml, deploy/compose.yaml), so that a
// stage started without them recovers from a killed member as fast as
// one deployed with them: 10 s, not the client's 45 s.
const DefaultSessionTimeout = 10 * time.Second

// RegisterFlagsNoGroup adds the shared flags but --session-timeout and
// --instance-id, for a binary that joins no consumer group (the North
// API): it would accept them and do nothing with them.
func (o *Options) RegisterFlagsNoGroup(fs *flag.FlagSet) { o.register(fs, false) }

func (o *Options) register(fs *flag.FlagSet, group bool) {
	o.Kafka.RegisterFlags(fs)
	fs.StringVar(&o.HTTPAddr, "http-addr", EnvOr("PF_HTTP_ADDR", "127.0.0.1:9090"), "address of the ops listener: /healthz, /readyz, /metrics and, with --pprof, /debug/pprof/ (env PF_HTTP_ADDR)")
	fs.BoolVar(&o.Pprof, "pprof", envBool("PF_PPROF", false), "serve the Go profiles under /debug/pprof/ on --http-addr; off by default, since /debug/pprof/cmdline shows secrets given as flags (env PF_PPROF)")
	fs.StringVar(&o.LogLevel, "log-level", EnvOr("PF_LOG_LEVEL", "info"), "debug, info, warn or error (env PF_LOG_LEVEL)")
	if group {
		fs.DurationVar(&o.SessionTimeout, "session-timeout", envDuration("PF_SESSION_TIMEOUT", DefaultSessionTimeout), "how long the consumer group waits for a silent member (one killed without leaving) before handing its partitions to the others, as the manifests ship it; 0 keeps the client's 45s (env PF_SESSION_TIMEOUT)")
		fs.StringVar(&o.InstanceID, "instance-id", EnvOr("PF_INSTANCE_ID", ""), "static group membership: a name unique among the stage's members that stays the same across restarts (a StatefulSet pod name); a restarted member takes its partitions back at once and fences its own unfinished transaction, instead of waiting out --session-timeout (env PF_INSTANCE_ID)")
	}
	LogFormatFlag(fs, &o.LogFormat, LogJSON)
	o.Tracing.RegisterFlags(fs)
	fs.StringVar(&o.MemoryLimit, "memory-limit", EnvOr("PF_MEMORY_LIMIT", MemoryLimitAuto), "the Go runtime's soft memory limit: auto (90% of the container's memory limit, unless GOMEMLIMIT is set), off, or a size such as 460MiB; near it the garbage collector works harder instead of letting the heap grow to twice what is live (env PF_MEMORY_LIMIT)")
}

// Log formats (--log-format).
const (
	LogJSON = "json"
	LogText = "text"
)

// LogFormatFlag registers --log-format, the one spelling of the log
// format every policyflow binary takes: json or text (human-readable),
// def by default, env PF_LOG_FORMAT.
func LogFormatFlag(fs *flag.FlagSet, dst *string, def string) {
	fs.Func("log-format", fmt.Sprintf("logs as json or text (human-readable); default %s (env PF_LOG_FORMAT)", def), func(v string) error {
		if err := CheckLogFormat(v); err != nil {
			return err
		}
		*dst = v
		return nil
	})
	*dst = EnvOr("PF_LOG_FORMAT", def)
	fs.Lookup("log-format").DefValue = def
}

// CheckLogFormat says what is wrong with a log format.
func CheckLogFormat(v string) error {
	if v != LogJSON && v != LogText {
		return fmt.Errorf("log format %q: want json or text", v)
	}
	return nil
}

// Text reports whether the options ask for human-readable logs.
func (o Options) Text() bool { return o.LogFormat == LogText }

// Check says what is wrong with the options (the Kafka settings and the
// log format, which may come from the environment).
func (o Options) Check() error {
	if err := CheckLogFormat(o.LogFormat); err != nil {
		return fmt.Errorf("PF_LOG_FORMAT: %w", err)
	}
	if err := CheckMemoryLimit(o.MemoryLimit); err != nil {
		return err
	}
	return o.Kafka.Validate()
}

// OpsRoutes are the routes the options add to the ops listener: the Go
// profiles with --pprof, else none.
func (o Options) OpsRoutes() map[string]http.Handler {
	if o.Pprof {
		return PprofRoutes()
	}
	return nil
}

// SignalContext returns a context cancelled by the first SIGINT/SIGTERM
// (drain: finish the record in hand, commit, leave the group); a second
// signal exits the process at once.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			signal.Stop(ch)
			return
		}
		fmt.Fprintln(os.Stderr, "draining: finishing the records in hand and leaving the group (signal again to exit now)")
		cancel()
		<-ch
		fmt.Fprintln(os.Stderr, "second signal: exiting now")
		os.Exit(1)
	}()
	return ctx, cancel
}

// RunStages runs stages in one process, each with its own client and
// group, until ctx is done or one fails.
func RunStages(ctx context.Context, env Env, stages ...Stage) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range stages {
		s := s
		g.Go(func() error {
			if err := s.Run(gctx, env); err != nil {
				return fmt.Errorf("stage %s: %w", s.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// FlagSet is the command line of a stage binary: the shared options and
// the stage's own flags, filled into the returned Options and the stage's
// configuration on Parse.
func FlagSet(s Stage) (*flag.FlagSet, *Options) {
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	o := &Options{}
	o.RegisterFlags(fs)
	if s.Flags != nil {
		s.Flags(fs)
	}
	return fs, o
}

// ParseStage parses a stage binary's command line (without the program
// name) into the shared options it returns and the stage's configuration
// (s.Flags, s.Settings), and checks the options: what Main runs with.
func ParseStage(s Stage, args []string) (*Options, error) {
	fs, o := FlagSet(s)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s takes no arguments, got %q; every setting is a flag (see -h)", s.Name, fs.Args())
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	return o, nil
}

// Main is the whole main function of a stage binary: flags, logging,
// signals, health and metrics server, schema publishing, and the stage.
func Main(s Stage) {
	o, err := ParseStage(s, os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "%s: invalid configuration: %v\n", s.Name, err)
		os.Exit(2)
	}
	log := NewLogger(os.Stderr, o.LogLevel, o.Text()).With().Str("service", s.Name).Logger()
	if err := o.SetMemoryLimit(log); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	s.SetGCPercent(log)
	ctx, cancel := SignalContext(context.Background())
	defer cancel()
	env := NewEnv(o.Kafka, log)
	env.SessionTimeout, env.InstanceID = o.SessionTimeout, o.InstanceID
	if o.InstanceID == "" && s.Name != "" {
		log.Warn().Dur("session_timeout", o.SessionTimeout).Msg("dynamic group membership (no --instance-id, which the manifests set to the pod name): a member killed without leaving keeps its partitions until the session timeout, and its open transaction until the transaction timeout")
	}
	tracer, stopTracing, err := o.Tracing.Start(ctx, s.Name)
	if err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	defer stopTracing()
	env.Tracer = tracer
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return Serve(gctx, o.HTTPAddr, env, o.OpsRoutes()) })
	g.Go(func() error {
		defer cancel()
		if err := PublishSchemas(gctx, env); err != nil {
			log.Warn().Err(err).Msg("publish schemas")
		}
		return s.Run(gctx, env)
	})
	if err := g.Wait(); err != nil {
		log.Error().Err(err).Msg("exiting")
		os.Exit(1)
	}
}
