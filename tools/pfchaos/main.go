// Command pfchaos runs policyflow's fault matrix on the embedded backend:
// every stage and the North API as processes of their own (from bin/), an
// in-process broker on a data directory, a real Consul agent, and a
// stream of policy updates with a fault in its middle: each stage and the
// North API killed (SIGKILL), the broker restarted, Consul stopped for a
// while, a rebalance storm. It prints, per fault, the components that
// lost the newest version, the duplicated notifications, the steps
// backwards and the recovery time, and exits 1 when any count is not 0.
// See README.md next to it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/tools/pfchaos/chaos"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	failed, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pfchaos:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// settings are what pfchaos's flags set.
type settings struct {
	o        chaos.Options
	outDir   string
	logLevel string
	level    zerolog.Level
	// external runs against the cluster the environment names.
	external bool
}

// newFlags is pfchaos's command line, filled into st (and faults, its
// --faults) on Parse.
func newFlags(st *settings, faults *string, stderr io.Writer) *flag.FlagSet {
	o := &st.o
	fs := flag.NewFlagSet("pfchaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.BinDir, "bin-dir", "", "directory with the stage binaries and north-api (default bin/ in the repository root; `make build` puts them there)")
	fs.StringVar(&st.outDir, "out-dir", "", "directory for the run's data and logs (default .chaos/ in the repository root; one run-<time> directory per run)")
	fs.StringVar(faults, "faults", strings.Join(o.Faults, ","), "faults to run, comma-separated, in order")
	fs.IntVar(&o.Components, "components", o.Components, "components, notified by webhook")
	fs.IntVar(&o.Policies, "policies", o.Policies, "policies; component i wants policy i mod policies")
	fs.IntVar(&o.Updates, "updates", o.Updates, "policy updates per fault; the fault comes after half of them")
	fs.DurationVar(&o.Pace, "pace", o.Pace, "time between two updates until the fault is over (the rest go at once)")
	fs.DurationVar(&o.ConsulDown, "consul-down", o.ConsulDown, "how long consul-down keeps Consul stopped")
	fs.IntVar(&o.StormRounds, "storm-rounds", o.StormRounds, "join-and-leave rounds of rebalance-storm")
	fs.DurationVar(&o.SessionTimeout, "session-timeout", o.SessionTimeout, "every stage's --session-timeout")
	fs.BoolVar(&o.Dynamic, "dynamic-members", false, "run the stages without --instance-id (dynamic group members), to compare: a killed stage's partitions then wait out --session-timeout")
	fs.DurationVar(&o.Settle, "settle", o.Settle, "how long to wait after a fault for every component to reach the newest version; what is still behind then is lost")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions of every topic")
	fs.DurationVar(&o.Hold, "hold", o.Hold, "how long the version published during the fault stays the newest after the fault ended")
	fs.DurationVar(&o.OwedAfter, "owed-after", o.OwedAfter, "a version that stays the newest this long is owed to every component (a version superseded sooner may be skipped)")
	fs.DurationVar(&o.ProgressBound, "progress-bound", o.ProgressBound, "longest wait after a fault for a run of the version that was newest when it ended")
	fs.DurationVar(&o.ReplaceBound, "replace-bound", o.ReplaceBound, "the same after replace-<stage> (a new member identity)")
	fs.DurationVar(&o.FailFor, "fail-for", o.FailFor, "how long script-fails keeps the component scripts failing")
	fs.DurationVar(&o.PauseFor, "pause", o.PauseFor, "how long pause-agent-notifier keeps the notifier stopped (SIGSTOP); longer than its 15s lease for the other notifier to take its claims over")
	fs.StringVar(&o.StageImages, "stage-images", o.StageImages, "stage images of the containers faults, %s standing for the stage (deploy/build-images.sh consul-writer builds the one they run; PF_IMAGE_TAG sets its tag)")
	fs.DurationVar(&o.Disconnected, "disconnected", o.Disconnected, "how long network-disconnect keeps the stage's container off the network")
	fs.StringVar(&o.ConsulImage, "consul-image", o.ConsulImage, "image of the Consul servers of consul-leader-loss (deploy/build-images.sh consul builds it)")
	fs.BoolVar(&st.external, "external", false, "run against the Kafka cluster and Consul the environment names (PF_BROKERS, PF_SASL_*, PF_TLS*, PF_CONSUL_ADDR, PF_CONSUL_TOKEN) instead of an in-process broker and a local agent; only the faults that stop neither run, under a prefix of the run's own removed at its end")
	fs.StringVar(&st.logLevel, "log-level", "warn", "level of this command's own log (the broker's and Consul's lifecycle)")
	return fs
}

// parse reads the command line and checks it: what run injects faults
// with (a test sets each flag and checks it reaches the settings).
func parse(args []string, stderr io.Writer) (*settings, error) {
	st := &settings{o: chaos.Defaults()}
	faults := ""
	fs := newFlags(st, &faults, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("pfchaos takes no arguments, got %q; see --help", fs.Args())
	}
	o := &st.o
	if st.external {
		ext, err := chaos.ExternalFromEnv()
		if err != nil {
			return nil, fmt.Errorf("--external: %w", err)
		}
		o.External = ext
		faultsSet := false
		fs.Visit(func(f *flag.Flag) { faultsSet = faultsSet || f.Name == "faults" })
		if !faultsSet {
			faults = strings.Join(chaos.ExternalFaults(), ",")
		}
	}
	o.Faults = nil
	for _, f := range strings.Split(faults, ",") {
		if f = strings.TrimSpace(f); f != "" {
			o.Faults = append(o.Faults, f)
		}
	}
	if o.Components < 1 || o.Policies < 1 || o.Updates < 2 || o.Partitions < 1 {
		return nil, fmt.Errorf("--components, --policies and --partitions must be at least 1 and --updates at least 2")
	}
	level, err := devstack.ParseLogLevel(st.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	st.level = level
	return st, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (failed bool, err error) {
	st, err := parse(args, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return false, nil
		}
		return false, err
	}
	o, outDir, level := st.o, st.outDir, st.level
	if o.BinDir == "" || outDir == "" {
		root, err := devstack.RepoRoot()
		if err != nil {
			return false, fmt.Errorf("not in a policyflow checkout (%v): give --bin-dir and --out-dir", err)
		}
		if o.BinDir == "" {
			o.BinDir = filepath.Join(root, "bin")
		}
		if outDir == "" {
			outDir = filepath.Join(root, ".chaos")
		}
	}
	o.Log = zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05"}).Level(level).With().Timestamp().Logger()
	o.Dir = filepath.Join(outDir, "run-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return false, err
	}
	o.Progress = func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	m, err := chaos.Run(ctx, o)
	if err != nil {
		return false, fmt.Errorf("%w\nlogs: %s", err, o.Dir)
	}
	m.Print(stdout)
	fmt.Fprintf(stdout, "\nlogs and data: %s\n", o.Dir)
	return m.Failed(), nil
}
