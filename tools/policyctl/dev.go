package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/stages"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

const devSummary = "run the whole pipeline on this machine: embedded Kafka broker, Consul agent and every stage, until interrupted"

func init() {
	register(command{name: "dev", summary: devSummary, run: runDev})
}

// devStack is the running embedded stack, as post-start hooks see it.
type devStack struct {
	// Kafka reaches the embedded broker, under the topic prefix.
	Kafka runtime.Kafka
	// Consul reaches the Consul agent.
	Consul consulkv.Config
	// Topology is how the topics were applied (prefix, partitions).
	Topology topology.Options
	// Env is the environment the stages run with (logs, metrics, health).
	Env runtime.Env
	// DataDir holds the stack's state; "" with --ephemeral.
	DataDir string
	// OpsAddr is the host:port of the ops listener: /healthz, /readyz
	// (every stage and the North API's views) and /metrics.
	OpsAddr string
	// StageConfig is what the stages are built with; prepare hooks may
	// change it (e.g. point pdp-ingest at a PDP simulator they started).
	// An empty PDPURL means the user gave no --pdp-url.
	StageConfig stages.Config
	// Targets is where notifications may go, for the agent-notifier and
	// the North API alike; prepare hooks may add to it (the demo adds
	// its script directory).
	Targets notifytarget.Config
	// Stages are the stages running in the process; set once the
	// prepare hooks have run.
	Stages []runtime.Stage
	// Out is where the command prints for the user.
	Out io.Writer

	banner []string
}

// devWebhookAllow is where webhooks may go on a dev stack unless
// --webhook-allow says otherwise: this machine, but for the stack's own
// ports (webhookRefusals).
var devWebhookAllow = []string{"127.0.0.1", "::1"}

// webhookRefusals turns the host:ports the dev stack serves on into
// refused webhook patterns: a loopback or unspecified host stands for
// that port on every loopback address, IPv4 and IPv6.
func webhookRefusals(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		ip := net.ParseIP(host)
		if host == "localhost" || ip != nil && (ip.IsLoopback() || ip.IsUnspecified()) {
			out = append(out, "127.0.0.0/8:"+port, "[::1]:"+port)
			continue
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out
}

// AddBannerLine adds a line such as "PDP simulator  http://..." to the
// start-up banner; prepare hooks call it (run hooks start after the banner).
func (s *devStack) AddBannerLine(label, value string) {
	s.banner = append(s.banner, fmt.Sprintf("  %-16s %s", label, value))
}

// devHook plugs extra work into `policyctl dev`, such as loading demo data.
// Register hooks from an init function with registerDevHook.
type devHook struct {
	// name identifies the hook in logs and errors.
	name string
	// flags, when set, adds the hook's flags to the dev command (e.g.
	// --demo); the hook reads them in prepare and run.
	flags func(fs *flag.FlagSet)
	// prepare, when set, runs once the broker, Consul and the topology are
	// up and before the stages are built and the banner is printed, in
	// registration order; it may change s.StageConfig and add banner
	// lines. An error stops the stack before it starts.
	prepare func(ctx context.Context, s *devStack) error
	// run, when set, starts once the stages are running, concurrently
	// with them. It returns when its work is done (nil, or the context's
	// error on shutdown); any other error stops the whole stack.
	run func(ctx context.Context, s *devStack) error
}

// devHooks run in registration order, each in its own goroutine.
var devHooks []devHook

func registerDevHook(h devHook) {
	if h.name == "" || (h.prepare == nil && h.run == nil) {
		panic("policyctl: a dev hook needs a name and a prepare or run function")
	}
	devHooks = append(devHooks, h)
}

// devFlags are the settings of `policyctl dev`.
type devFlags struct {
	dataDir        string
	ephemeral      bool
	brokerAddr     string
	brokerCount    int
	brokerSync     bool
	consulAddr     string
	httpAddr       string
	prefix         string
	partitions     int
	pdpURL         string
	only           string
	logLevel       string
	logFormat      string
	brokerLogLevel string
	pprof          bool
	targets        notifytarget.Config
	// tracing is where every stage and the North API of the stack send
	// their spans (--otlp-endpoint).
	tracing runtime.Tracing
}

func (f *devFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", runtime.EnvOr("PF_DEV_DATA_DIR", ""), "directory for the stack's state: broker in <dir>/kafka, Consul in <dir>/consul (default .data in the repository root; env PF_DEV_DATA_DIR)")
	fs.BoolVar(&f.ephemeral, "ephemeral", false, "keep nothing: in-memory broker and 'consul agent -dev'; --data-dir is ignored")
	fs.StringVar(&f.brokerAddr, "broker-addr", runtime.EnvOr("PF_DEV_BROKER_ADDR", runtime.DefaultBrokers), "host:port of the embedded Kafka cluster's first broker; the next ones take the next ports (9092, 9093, 9094); port 0 picks free ones (env PF_DEV_BROKER_ADDR)")
	fs.BoolVar(&f.brokerSync, "broker-sync", envBool("PF_BROKER_SYNC", false), "fsync every batch the embedded broker writes to its data dir before acknowledging it: acknowledged records survive a power loss, at the cost of a disk flush per batch; without it they survive a kill of the process, not of the machine (env PF_BROKER_SYNC)")
	fs.IntVar(&f.brokerCount, "broker-count", envInt("PF_BROKER_COUNT", devstack.DefaultBrokers), fmt.Sprintf("brokers of the embedded Kafka cluster, 1 to %d; partition leaders and coordinators are spread over them (env PF_BROKER_COUNT)", devstack.MaxBrokers))
	fs.StringVar(&f.consulAddr, "consul-addr", runtime.EnvOr("PF_DEV_CONSUL_ADDR", consulkv.DefaultAddr), "host:port of the Consul agent's HTTP API and UI; port 0 picks a free one (env PF_DEV_CONSUL_ADDR)")
	fs.StringVar(&f.httpAddr, "http-addr", runtime.EnvOr("PF_HTTP_ADDR", "127.0.0.1:9090"), "host:port of /healthz, /readyz and /metrics of the stages and the North API (env PF_HTTP_ADDR)")
	fs.BoolVar(&f.pprof, "pprof", false, "also serve the Go profiles under /debug/pprof/ on --http-addr")
	f.tracing.RegisterFlags(fs)
	fs.StringVar(&f.prefix, "topic-prefix", runtime.EnvOr("PF_TOPIC_PREFIX", ""), "prefix for every topic name (env PF_TOPIC_PREFIX)")
	fs.IntVar(&f.partitions, "partitions", 0, "give every topic this many partitions; 0 keeps the topology's counts")
	fs.StringVar(&f.pdpURL, "pdp-url", runtime.EnvOr("PF_PDP_URL", ""), "PDP API base URL pdp-ingest fetches policy bodies from (env PF_PDP_URL; default pdp-ingest's own)")
	fs.StringVar(&f.only, "stages", "all", "comma separated stages to run, \"all\" or \"none\" (broker and Consul only)")
	fs.StringVar(&f.logLevel, "log-level", runtime.EnvOr("PF_LOG_LEVEL", "info"), "debug, info, warn or error (env PF_LOG_LEVEL)")
	runtime.LogFormatFlag(fs, &f.logFormat, runtime.LogText)
	fs.StringVar(&f.brokerLogLevel, "broker-log-level", "warn", "log level of the embedded broker: none, error, warn, info or debug")
	// On one machine, webhooks to this machine are what a developer
	// tries first; --webhook-allow (or PF_WEBHOOK_ALLOW) replaces it.
	f.targets = notifytarget.ConfigFromEnv()
	if len(f.targets.WebhookAllow) == 0 {
		f.targets.WebhookAllow = slices.Clone(devWebhookAllow)
	}
	f.targets.RegisterFlags(fs)
}

// selectStages picks the stages --stages names from every stage there is;
// it only reads the stages' names.
func selectStages(all []runtime.Stage, only string) ([]runtime.Stage, error) {
	switch strings.TrimSpace(only) {
	case "", "all":
		return all, nil
	case "none":
		return nil, nil
	}
	var out []runtime.Stage
	for _, name := range runtime.SplitList(only) {
		i := slices.IndexFunc(all, func(s runtime.Stage) bool { return s.Name == name })
		if i < 0 {
			names := make([]string, 0, len(all))
			for _, s := range all {
				names = append(names, s.Name)
			}
			if len(names) == 0 {
				return nil, usageErrorf("--stages: no stage %q; no stages exist yet", name)
			}
			return nil, usageErrorf("--stages: no stage %q; the stages are %s", name, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// defaultDataDir is .data in the repository root, or in the working
// directory outside a checkout.
func defaultDataDir() (string, error) {
	if root, err := devstack.RepoRoot(); err == nil {
		return filepath.Join(root, ".data"), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("choose a data dir: %w", err)
	}
	return filepath.Join(wd, ".data"), nil
}

func runDev(ctx context.Context, args []string) error {
	var f devFlags
	fs := newFlagSet(ctx, "dev", devSummary, "")
	f.register(fs)
	for _, h := range devHooks {
		if h.flags != nil {
			h.flags(fs)
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("dev takes no arguments, got %q", fs.Args())
	}
	if f.partitions < 0 || f.partitions > 1<<16 {
		return usageErrorf("--partitions %d: want 0 (the topology's counts) or a positive count", f.partitions)
	}
	if f.brokerCount < 1 || f.brokerCount > devstack.MaxBrokers {
		return usageErrorf("--broker-count %d (or PF_BROKER_COUNT): want a number of brokers between 1 and %d", f.brokerCount, devstack.MaxBrokers)
	}
	brokerLevel, err := devstack.ParseLogLevel(f.brokerLogLevel)
	if err != nil {
		return usageErrorf("--broker-log-level: %v", err)
	}
	if _, err := f.targets.Rules(); err != nil {
		return usageErrorf("%v", err)
	}
	// Every stage and the North API trace into one provider.
	tracer, stopTracing, err := f.tracing.Start(ctx, "policyctl-dev")
	if err != nil {
		return usageErrorf("%v", err)
	}
	defer stopTracing()
	// Check --stages now; the stages are built after the prepare hooks.
	if _, err := selectStages(stages.All(), f.only); err != nil {
		return err
	}
	var kafkaDir, consulDir string
	if !f.ephemeral {
		if f.dataDir == "" {
			if f.dataDir, err = defaultDataDir(); err != nil {
				return err
			}
		}
		if f.dataDir, err = filepath.Abs(f.dataDir); err != nil {
			return fmt.Errorf("resolve data dir %s: %w", f.dataDir, err)
		}
		kafkaDir, consulDir = filepath.Join(f.dataDir, "kafka"), filepath.Join(f.dataDir, "consul")
		unlock, err := devstack.LockDir(f.dataDir)
		if err != nil {
			return fmt.Errorf("%w; is another `policyctl dev` running on it? stop it, or use --data-dir or --ephemeral", err)
		}
		defer unlock()
	}
	consulBin, err := devstack.ConsulBinary()
	if err != nil {
		return err
	}

	if err := runtime.CheckLogFormat(f.logFormat); err != nil {
		return fmt.Errorf("PF_LOG_FORMAT: %w", err)
	}
	logJSON := f.logFormat == runtime.LogJSON
	log := runtime.NewLogger(stderr(ctx), f.logLevel, !logJSON)
	if logJSON {
		log = log.With().Str("service", "policyctl-dev").Logger()
	}

	// Broker.
	broker, err := devstack.StartBroker(devstack.BrokerOptions{
		Brokers:    f.brokerCount,
		Listen:     f.brokerAddr,
		DataDir:    kafkaDir,
		Sync:       f.brokerSync,
		Partitions: int32(f.partitions),
		Logger:     log.Level(max(brokerLevel, log.GetLevel())).With().Str("component", "broker").Logger(),
	})
	if err != nil {
		return fmt.Errorf("%w (is another broker or `policyctl dev` using %s or the %d ports from it? pick another with --broker-addr)", err, f.brokerAddr, f.brokerCount)
	}
	defer func() {
		broker.Close()
		log.Info().Msg("broker stopped")
	}()

	// Consul.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	agent, err := devstack.StartConsul(cctx, devstack.ConsulOptions{
		Binary:   consulBin,
		DataDir:  consulDir,
		HTTPAddr: f.consulAddr,
		Logger:   log.With().Str("component", "consul").Logger(),
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting
		}
		return fmt.Errorf("%w\n(is another Consul agent using %s? pick another with --consul-addr)", err, f.consulAddr)
	}
	defer func() {
		if err := agent.Stop(); err != nil {
			log.Warn().Err(err).Msg("stop consul agent")
		} else {
			log.Info().Msg("consul agent stopped")
		}
	}()

	kafka := runtime.Kafka{
		Brokers:        broker.Addrs,
		Prefix:         f.prefix,
		FetchMaxWait:   250 * time.Millisecond,
		MetadataMinAge: 250 * time.Millisecond,
	}
	consul := consulkv.Config{Addr: agent.Addr}

	// Topology.
	topo := topology.Options{Prefix: f.prefix, Partitions: int32(f.partitions)}
	report, err := applyDevTopology(ctx, kafka, topo)
	if err != nil {
		return err
	}

	// Health and metrics listener, bound before the banner names it.
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fmt.Errorf("listen for health and metrics on %s: %w (pick another with --http-addr)", f.httpAddr, err)
	}

	env := runtime.NewEnv(kafka, log)
	env.Tracer = tracer
	stack := &devStack{Kafka: kafka, Consul: consul, Topology: topo, Env: env, Out: stdout(ctx),
		DataDir: f.dataDir, OpsAddr: ln.Addr().String(), StageConfig: stages.Config{PDPURL: f.pdpURL, Consul: consul}, Targets: f.targets}
	if f.ephemeral {
		stack.DataDir = ""
	}
	for _, h := range devHooks {
		if h.prepare == nil {
			continue
		}
		if err := h.prepare(ctx, stack); err != nil {
			ln.Close()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%s: %w", h.name, err)
		}
	}
	// Whatever --webhook-allow says, webhooks do not reach the stack's
	// own services: Consul's HTTP API, Serf and server RPC ports, the
	// broker, the ops listener, the North API and the PDP simulator.
	own := append([]string{agent.Addr, ln.Addr().String()}, broker.Addrs...)
	own = append(own, agent.Internal...)
	for _, l := range []net.Listener{devAPIListener, devPDPListener} {
		if l != nil {
			own = append(own, l.Addr().String())
		}
	}
	stack.Targets.WebhookRefuse = append(stack.Targets.WebhookRefuse, webhookRefusals(own)...)
	if _, err := stack.Targets.Rules(); err != nil {
		ln.Close()
		return usageErrorf("%v", err)
	}
	stack.StageConfig.NotifyTargets = stack.Targets
	run, err := selectStages(stages.With(stack.StageConfig), f.only)
	if err != nil {
		ln.Close()
		return err
	}
	stack.Stages = run
	// /readyz and the status page show a stage that stops as not running
	// instead of leaving it out.
	for _, st := range run {
		env.Health.Expect(st.Name)
	}
	printDevBanner(stdout(ctx), stack, broker, agent, ln.Addr().String(), f, report)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := runtime.ServeListener(gctx, ln, env, runtime.Options{Pprof: f.pprof}.OpsRoutes()); err != nil {
			return fmt.Errorf("serve health and metrics on %s: %w", ln.Addr(), err)
		}
		return nil
	})
	g.Go(func() error {
		if err := runtime.PublishSchemas(gctx, env); err != nil && gctx.Err() == nil {
			log.Warn().Err(err).Msg("publish schemas")
		}
		return nil
	})
	g.Go(func() error {
		if len(run) == 0 {
			<-gctx.Done()
			return nil
		}
		return runtime.RunStages(gctx, env, run...)
	})
	g.Go(func() error {
		// The agent should outlive the stack; if it dies, say so and stop.
		select {
		case <-agent.Done():
			return fmt.Errorf("consul agent exited on its own; see %s", agent.LogFile)
		case <-gctx.Done():
			return nil
		}
	})
	for _, h := range devHooks {
		if h.run == nil {
			continue
		}
		g.Go(func() error {
			if err := h.run(gctx, stack); err != nil && gctx.Err() == nil {
				return fmt.Errorf("%s: %w", h.name, err)
			}
			return nil
		})
	}

	<-gctx.Done()
	if ctx.Err() != nil {
		log.Info().Msg("stopping: stages drain and leave their groups (interrupt again to exit at once)")
	}
	err = g.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// applyDevTopology creates or updates the topics on the embedded broker.
func applyDevTopology(ctx context.Context, kafka runtime.Kafka, o topology.Options) (topology.Report, error) {
	opts, err := kafka.ClientOpts()
	if err != nil {
		return topology.Report{}, fmt.Errorf("apply topology: %w", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ClientID("policyctl-dev"))...)
	if err != nil {
		return topology.Report{}, fmt.Errorf("apply topology: create client for %s: %w", strings.Join(kafka.Brokers, ","), err)
	}
	defer cl.Close()
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	report, err := topology.Apply(actx, kadm.NewClient(cl), topology.Default(), o)
	if err != nil {
		return report, fmt.Errorf("apply topology to the embedded broker: %w", err)
	}
	return report, nil
}

func printDevBanner(w io.Writer, s *devStack, b *devstack.Broker, a *devstack.ConsulAgent, httpAddr string, f devFlags, report topology.Report) {
	names := make([]string, 0, len(s.Stages))
	for _, st := range s.Stages {
		names = append(names, st.Name)
	}
	stageLine := strings.Join(names, ", ")
	if len(names) == 0 {
		stageLine = "none running (broker and Consul only)"
	}
	state := "in memory only (--ephemeral): everything is gone when this stops"
	if !f.ephemeral {
		state = f.dataDir + " (kafka/, consul/, the API token, the PDP simulator's policies); delete it or run `make clean` to start over"
	}
	prefix := ""
	if s.Kafka.Prefix != "" {
		prefix = fmt.Sprintf(" (prefix %q)", s.Kafka.Prefix)
	}
	profiles := ""
	if f.pprof {
		profiles = "  /debug/pprof/"
	}
	fmt.Fprintf(w, `policyflow dev stack is running
  Kafka broker     %s
  Consul           http://%s/ui   (HTTP API %s, log %s)
  health, metrics  http://%s/healthz  /readyz  /metrics%s
  topics           %s%s
  stages           %s
  state            %s
  scripts from     %s
  webhooks to      %s (never the ports above)
`, strings.Join(b.Addrs, ","), a.Addr, a.Addr, a.LogFile, httpAddr, profiles, report.String(), prefix, stageLine, state,
		listOr(s.Targets.ScriptDirs, "nowhere (--script-dir)"), listOr(s.Targets.WebhookAllow, "nowhere (--webhook-allow)"))
	for _, l := range s.banner {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, `Use --brokers %s with policyctl and the stage binaries, and --consul-addr %s
with those that reach Consul (consul-writer, agent-notifier, north-api).
Stop with Ctrl-C: stages drain and leave their groups; a second Ctrl-C exits at once.
`, strings.Join(b.Addrs, ","), a.Addr)
}

// listOr joins a list for the banner, or says what an empty one means.
func listOr(l []string, empty string) string {
	if len(l) == 0 {
		return empty
	}
	return strings.Join(l, ", ")
}

// envInt is the integer in environment variable name, or def when it is
// unset or not a number (a flag's default; a bad value shows as the
// default in --help and is refused by the flag's own check when given).
func envInt(name string, def int) int {
	v, err := strconv.Atoi(strings.TrimSpace(os.Getenv(name)))
	if err != nil {
		if os.Getenv(name) != "" {
			return -1 // refused with the flag's reason
		}
		return def
	}
	return v
}

// envBool is the boolean in the environment variable name, or def when it
// is unset or not a boolean (strconv.ParseBool).
func envBool(name string, def bool) bool {
	if v, err := strconv.ParseBool(strings.TrimSpace(os.Getenv(name))); err == nil {
		return v
	}
	return def
}
