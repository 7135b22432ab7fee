// Command devbroker runs policyflow's embedded Kafka-protocol cluster
// (kfake, three brokers by default) as a standalone process, for
// containers and for anyone who wants the broker without the rest of the
// dev stack. It prints
// `devbroker listening on <addr>` once it accepts connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
)

// configFlag collects repeated --broker-config key=value flags.
type configFlag map[string]string

func (f configFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+f[k])
	}
	return strings.Join(parts, ",")
}

func (f configFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(k) == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	f[strings.TrimSpace(k)] = v
	return nil
}

func main() {
	// The first signal closes the broker cleanly (its data dir gets the
	// last writes and offsets); a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, errUsage) {
			os.Exit(2) // the flag package has already explained
		}
		fmt.Fprintln(os.Stderr, "devbroker:", err)
		os.Exit(1)
	}
}

// errUsage marks command-line errors the flag package has already printed.
var errUsage = errors.New("usage")

// settings are what devbroker's flags set: the broker's options (but its
// logger) and the log level.
type settings struct {
	broker     devstack.BrokerOptions
	partitions int
	logLevel   string
	level      zerolog.Level
	// adminAddr and adminTokenFile serve the fault endpoint (admin.go)
	// when adminAddr is set.
	adminAddr, adminTokenFile string
}

// newFlags is devbroker's command line, filled into st on Parse.
func newFlags(st *settings, stderr io.Writer) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("devbroker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: devbroker [flags]\n\nRuns a Kafka-protocol cluster (kfake, three brokers by default, on consecutive ports) with optional on-disk state.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	b := &st.broker
	fs.StringVar(&b.Listen, "listen", runtime.EnvOr("PF_BROKER_LISTEN", "127.0.0.1:9092"), "host:port of the first broker; the next ones take the next ports (9092, 9093, 9094); port 0 picks free ones (env PF_BROKER_LISTEN)")
	fs.StringVar(&b.Advertise, "advertise", runtime.EnvOr("PF_BROKER_ADVERTISE", ""), "host or host:port clients are told to connect to (the first broker's; the next ones the next ports); default the listen address, with 127.0.0.1 for 0.0.0.0 (env PF_BROKER_ADVERTISE)")
	defCount, err := strconv.Atoi(runtime.EnvOr("PF_BROKER_COUNT", strconv.Itoa(devstack.DefaultBrokers)))
	if err != nil {
		return nil, fmt.Errorf("PF_BROKER_COUNT=%q: want a number of brokers", os.Getenv("PF_BROKER_COUNT"))
	}
	fs.IntVar(&b.Brokers, "broker-count", defCount, fmt.Sprintf("number of brokers, 1 to %d (env PF_BROKER_COUNT)", devstack.MaxBrokers))
	fs.StringVar(&b.DataDir, "data-dir", runtime.EnvOr("PF_BROKER_DATA_DIR", ""), "directory that keeps topics, records, groups and offsets across restarts; empty keeps them in memory (env PF_BROKER_DATA_DIR)")
	defSync, err := strconv.ParseBool(runtime.EnvOr("PF_BROKER_SYNC", "false"))
	if err != nil {
		return nil, fmt.Errorf("PF_BROKER_SYNC=%q: want true or false", os.Getenv("PF_BROKER_SYNC"))
	}
	fs.BoolVar(&b.Sync, "sync", defSync, "fsync every batch written to --data-dir before it is acknowledged: acknowledged records survive a power loss, at the cost of a disk flush per batch; without it they survive a kill of the process, not of the machine (env PF_BROKER_SYNC)")
	defParts, err := strconv.Atoi(runtime.EnvOr("PF_BROKER_PARTITIONS", "10"))
	if err != nil {
		return nil, fmt.Errorf("PF_BROKER_PARTITIONS=%q: want a number", os.Getenv("PF_BROKER_PARTITIONS"))
	}
	fs.IntVar(&st.partitions, "partitions", defParts, "partitions of topics created without a count (env PF_BROKER_PARTITIONS)")
	fs.StringVar(&st.logLevel, "log-level", runtime.EnvOr("PF_LOG_LEVEL", "warn"), "log level: none, error, warn, info, debug (env PF_LOG_LEVEL)")
	fs.StringVar(&st.adminAddr, "admin-addr", "", "loopback host:port of the fault endpoint (POST /v1/faults/{leader-move,coordinator-move,broker-restart,retriable-errors}); empty, the default, serves none")
	fs.StringVar(&st.adminTokenFile, "admin-token-file", "", "bearer token file of the fault endpoint, created with a random token (mode 0600) when missing; required with --admin-addr")
	cfgs := configFlag{}
	b.BrokerConfigs = cfgs
	fs.Var(cfgs, "broker-config", "broker config key=value, repeatable, e.g. log.cleaner.backoff.ms=1000 or message.max.bytes=2097152")
	return fs, nil
}

// parse reads the command line and checks it: what run starts the broker
// with (a test sets each flag and checks it reaches the settings).
func parse(args []string, stderr io.Writer) (*settings, error) {
	st := &settings{}
	fs, err := newFlags(st, stderr)
	if err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (every setting is a flag; see -h)", fs.Args())
	}
	if st.broker.Brokers < 1 || st.broker.Brokers > devstack.MaxBrokers {
		return nil, fmt.Errorf("--broker-count %d: want a number of brokers between 1 and %d", st.broker.Brokers, devstack.MaxBrokers)
	}
	if st.adminAddr != "" {
		if err := checkLoopback(st.adminAddr); err != nil {
			return nil, err
		}
		if st.adminTokenFile == "" {
			return nil, errors.New("--admin-addr needs --admin-token-file: the fault endpoint answers only requests with its bearer token")
		}
	}
	if st.partitions < 1 || st.partitions > 1<<20 {
		return nil, fmt.Errorf("--partitions %d: want a number between 1 and %d", st.partitions, 1<<20)
	}
	st.broker.Partitions = int32(st.partitions)
	if st.level, err = devstack.ParseLogLevel(st.logLevel); err != nil {
		return nil, err
	}
	return st, nil
}

// run starts the broker the flags in args describe, prints the ready line
// on stdout and serves until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	st, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	opts := st.broker
	opts.Logger = zerolog.New(stderr).Level(st.level).With().Timestamp().Str("component", "devbroker").Logger()
	var token string
	if st.adminAddr != "" {
		if token, err = adminToken(st.adminTokenFile); err != nil {
			return err
		}
	}
	b, err := devstack.StartBroker(opts)
	if err != nil {
		return err
	}
	var srv *http.Server
	if st.adminAddr != "" {
		ln, err := net.Listen("tcp", st.adminAddr)
		if err != nil {
			b.Close()
			return fmt.Errorf("--admin-addr %s: %w", st.adminAddr, err)
		}
		srv = &http.Server{Handler: adminHandler(b, token), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		fmt.Fprintf(stderr, "devbroker: fault endpoint on http://%s/v1/faults/ (bearer token in %s)\n", ln.Addr(), st.adminTokenFile)
	}
	// Containers wait for this exact line; keep its shape.
	fmt.Fprintf(stdout, "devbroker listening on %s\n", strings.Join(b.Addrs, ","))

	<-ctx.Done()
	fmt.Fprintln(stderr, "devbroker: shutting down (interrupt again to force)")
	if srv != nil {
		// No fault may reach the cluster while it closes.
		_ = srv.Close()
	}
	b.Close()
	return nil
}
