// Command pfbench measures policyflow on the embedded backend (an
// in-process kfake broker and a real Consul agent) and reports every speed
// as a ratio against a ceiling measured in the same run: franz-go
// pass-through copies of the records each stage carries (plain and
// transactional) and Consul's best transaction rate. It runs
// each Kafka-to-Kafka stage and the consul-writer alone on a prepared
// topic, the Kafka-to-Kafka stages again with more consumer-group members
// on the same workload, then the whole pipeline end to end, prints a table
// and writes a JSON report under .bench/ (one file per run). See README.md
// next to it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// options are the command's settings.
type options struct {
	binDir, outDir     string
	partitions         int
	work               workload
	reps, fleet        int
	ceilingRecords     int
	ceilingMiB         int
	consulKeys         int
	consulOpsPerTxn    intList
	consulClients      intList
	members            intList
	rounds             int
	timeout            time.Duration
	skipAlone          bool
	skipEndToEnd       bool
	skipACM            bool
	acmChanges         int
	acmRate            int
	acmElements        int
	acmOps             int
	skipAdmission      bool
	skipCatchup        bool
	catchupComponents  int
	catchupMemoryLimit string
	skipPlacement      bool
	placementReps      int
	admission          admissionWork
	profile            time.Duration
	until              string
	logLevel           string
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.binDir, "bin-dir", "", "directory with the stage binaries (default bin/ in the repository root; `make build` puts them there)")
	fs.StringVar(&o.outDir, "out-dir", "", "directory for the JSON reports and the stages' logs (default .bench/ in the repository root)")
	fs.IntVar(&o.partitions, "partitions", 6, "partitions of every topic")
	fs.IntVar(&o.work.Components, "components", 100_000, "components registered for the stage-alone runs")
	fs.IntVar(&o.work.PerDeployment, "per-deployment", 10, "components per deployment")
	fs.IntVar(&o.work.Policies, "policies", 10_000, "policies in the catalog; deployment d wants policy d mod policies")
	fs.IntVar(&o.work.Changes, "changes", 10_000, "policy changes fed to the matcher (each copied to every partition)")
	fs.IntVar(&o.work.BodyBytes, "body-bytes", 1024, "size of a policy_body")
	fs.IntVar(&o.reps, "reps", 200, "end to end: updates of the one script-notified component, one after another")
	fs.IntVar(&o.fleet, "fleet", 10_000, "end to end: components one update reaches (notified by webhook)")
	fs.IntVar(&o.ceilingRecords, "ceiling-records", 200_000, "records per pass-through ceiling (the stage's input records, cycled)")
	fs.IntVar(&o.ceilingMiB, "ceiling-mib", 256, "cap on the bytes of one pass-through ceiling")
	fs.IntVar(&o.consulKeys, "consul-keys", 30_000, "keys written by the Consul ceiling")
	o.consulOpsPerTxn = intList{64, consulkv.MaxTxnOps}
	o.consulClients = intList{1, 2, 4, 8, 16}
	fs.Var(&o.consulOpsPerTxn, "consul-ops", "operations per transaction the Consul ceiling tries, comma-separated (the best way of writing is the ceiling)")
	fs.Var(&o.consulClients, "consul-clients", "concurrent writers the Consul ceiling tries, comma-separated (the best way of writing is the ceiling)")
	o.members = intList{1, 2}
	fs.Var(&o.members, "members", "member processes of each Kafka-to-Kafka stage, comma-separated: the first is the stage-alone run (with its ceilings); each further one repeats the matcher, segmenter and executor on a fresh stack with that many members, to compare with the first")
	fs.IntVar(&o.rounds, "rounds", 3, "runs of each Kafka-to-Kafka stage alone, each followed by one copy of each pass-through ceiling (stage and ceiling alternate): every rate and ratio is the median of the rounds, printed with its spread (least-greatest); the scaling runs take as many")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "longest wait for one measured step")
	fs.BoolVar(&o.skipAlone, "skip-alone", false, "skip the stage-alone runs, their ceilings and the scaling runs")
	fs.BoolVar(&o.skipEndToEnd, "skip-e2e", false, "skip the end-to-end runs")
	fs.BoolVar(&o.skipACM, "skip-acm", false, "skip the participant replicas' runs (sync lag, rebuild, operations)")
	fs.IntVar(&o.acmChanges, "acm-changes", 5000, "participant replicas: changes timed for the sync lag")
	fs.IntVar(&o.acmRate, "acm-rate", 1000, "participant replicas: changes per second for the sync lag")
	fs.IntVar(&o.acmElements, "acm-elements", 10_000, "participant replicas: element instances a new replica rebuilds")
	fs.IntVar(&o.acmOps, "acm-ops", 3000, "participant replicas: operations timed with 1 and with 3 replicas")
	fs.BoolVar(&o.skipAdmission, "skip-admission", false, "skip the admission runs")
	fs.BoolVar(&o.skipCatchup, "skip-catchup", false, "skip the catch-up runs")
	fs.IntVar(&o.catchupComponents, "catchup-components", 100_000, "catch-up: components of the whole pipeline, five policies each")
	fs.StringVar(&o.catchupMemoryLimit, "catchup-memory-limit", "460MiB", "catch-up: every stage's --memory-limit; the default is what auto sets in the Kubernetes manifests' 512 MiB containers (off: none)")
	fs.BoolVar(&o.skipPlacement, "skip-placement", false, "skip the placement measures (checks and proposals in process)")
	fs.IntVar(&o.placementReps, "placement-reps", 20, "placement: repetitions of each measure")
	fs.IntVar(&o.admission.Policies, "admission-policies", 1000, "admission: application policies, spread over --admission-tenants (a few global)")
	fs.IntVar(&o.admission.Tenants, "admission-tenants", 100, "admission: tenants")
	fs.IntVar(&o.admission.Requests, "admission-requests", 20_000, "admission: deployment requests of the backlog the stage decides alone")
	fs.IntVar(&o.admission.Reps, "admission-reps", 200, "admission: requests timed one at a time for the latency")
	fs.StringVar(&o.until, "until", "", "stop the stage-alone runs after this stage (matcher, segmenter, executor or consul-writer); each needs the ones before it")
	fs.DurationVar(&o.profile, "cpu-profile", 0, "save a CPU profile of this long of each stage-alone run, from its first record, as <stage>.cpu.pprof next to the logs (0: none)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level of the bench's own clients and of the embedded broker")
}

func (o *options) validate() error {
	switch {
	case o.partitions < 1:
		return fmt.Errorf("--partitions %d: want at least 1", o.partitions)
	case o.work.Components < 1 || o.work.PerDeployment < 1 || o.work.Policies < 1:
		return errors.New("--components, --per-deployment and --policies must be at least 1")
	case o.work.Changes < 1 || o.work.Changes > o.work.Policies:
		return fmt.Errorf("--changes %d: want 1 to --policies (%d)", o.work.Changes, o.work.Policies)
	case o.acmChanges < 100 || o.acmRate < 1 || o.acmElements < 1 || o.acmOps < 1:
		return fmt.Errorf("--acm-changes %d (at least 100), --acm-rate %d, --acm-elements %d, --acm-ops %d (at least 1)", o.acmChanges, o.acmRate, o.acmElements, o.acmOps)
	case o.work.BodyBytes < 200:
		return fmt.Errorf("--body-bytes %d: want at least 200", o.work.BodyBytes)
	case o.rounds < 1:
		return fmt.Errorf("--rounds %d: want at least 1 (3 or more for a median)", o.rounds)
	case o.reps < 1 || o.fleet < 1:
		return errors.New("--reps and --fleet must be at least 1")
	case o.placementReps < 1:
		return fmt.Errorf("--placement-reps %d: want at least 1", o.placementReps)
	case o.admission.Policies < 1 || o.admission.Tenants < 1 || o.admission.Requests < 1 || o.admission.Reps < 1:
		return errors.New("--admission-policies, --admission-tenants, --admission-requests and --admission-reps must be at least 1")
	case o.until != "" && !slices.ContainsFunc(aloneStages, func(s aloneStage) bool { return s.name == o.until }):
		return fmt.Errorf("--until %q: want matcher, segmenter, executor or consul-writer", o.until)
	case len(o.consulOpsPerTxn) == 0 || slices.Min(o.consulOpsPerTxn) < 1 || slices.Max(o.consulOpsPerTxn) > consulkv.MaxTxnOps:
		return fmt.Errorf("--consul-ops %v: Consul takes 1 to %d operations per transaction", o.consulOpsPerTxn, consulkv.MaxTxnOps)
	case len(o.consulClients) == 0 || slices.Min(o.consulClients) < 1 || slices.Max(o.consulClients) > 64:
		return fmt.Errorf("--consul-clients %v: want 1 to 64 concurrent writers", o.consulClients)
	case len(o.members) == 0 || slices.Min(o.members) < 1 || slices.Max(o.members) > o.partitions:
		return fmt.Errorf("--members %v: want 1 to --partitions (%d) members per stage; a member beyond the partition count gets none", o.members, o.partitions)
	}
	return nil
}

// bench is one running measurement stack.
type bench struct {
	kafka          runtime.Kafka
	adm            *kadm.Client
	prod           *kgo.Client
	codec          *events.Codec
	consulAddr     string
	consul         *consulapi.Client
	binDir, logDir string
	timeout        time.Duration
	pollRecords    int
	partitions     int
	ceilingRecords int
	ceilingBytes   int
	bodyBytes      int
	log            zerolog.Logger
	profile        time.Duration
	// runTag tells the stages' logs of a repeated stage-alone run apart
	// from the first run's ("" in the first run).
	runTag string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pfbench:", err)
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(1)
	}
}

// parse reads the command line and checks it: what run measures with (a
// test sets each flag and checks it reaches the options).
func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("pfbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("pfbench takes no arguments, got %q; see --help", fs.Args())
	}
	return o, o.validate()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	root, rootErr := devstack.RepoRoot()
	if o.binDir == "" || o.outDir == "" {
		if rootErr != nil {
			return fmt.Errorf("not in a policyflow checkout (%v): give --bin-dir and --out-dir", rootErr)
		}
		if o.binDir == "" {
			o.binDir = filepath.Join(root, "bin")
		}
		if o.outDir == "" {
			o.outDir = filepath.Join(root, ".bench")
		}
	}
	started := time.Now().UTC()
	stamp := started.Format("20060102T150405Z")
	logDir := filepath.Join(o.outDir, "run-"+stamp)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	level, err := devstack.ParseLogLevel(o.logLevel)
	if err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: "15:04:05"}).Level(level).With().Timestamp().Logger()
	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}

	rep := Report{StartedAt: started, Settings: settings(o, root), LoadBefore: loadAverage()}
	progress("load average before: %s", formatLoad(rep.LoadBefore))
	if !o.skipAlone {
		if err := withStack(ctx, o, logDir, log, func(b *bench) error {
			progress("stage-alone runs: loading %d components, %d policies, %d changes x %d partitions",
				o.work.Components, o.work.Policies, o.work.Changes, o.partitions)
			return b.alone(ctx, o, &rep, progress)
		}); err != nil {
			return err
		}
		for i, n := range o.members[1:] {
			if err := withStack(ctx, o, logDir, log, func(b *bench) error {
				progress("scaling: stage-alone runs again with %d members per stage, on the same workload", n)
				b.runTag, b.profile = fmt.Sprintf(".run%d", i+2), 0
				return b.scaleOut(ctx, o, n, &rep, progress)
			}); err != nil {
				return err
			}
		}
		rep.scalingRatios()
	}
	if !o.skipAdmission {
		if err := withStack(ctx, o, logDir, log, func(b *bench) error {
			a, err := b.admission(ctx, o.admission, progress)
			rep.Admission = &a
			return err
		}); err != nil {
			return err
		}
	}
	if !o.skipCatchup {
		if err := withStack(ctx, o, logDir, log, func(b *bench) error {
			c, err := b.catchUp(ctx, o.catchupComponents, o.catchupMemoryLimit, progress)
			rep.Catchup = &c
			return err
		}); err != nil {
			return err
		}
	}
	if !o.skipPlacement {
		progress("placement: checks and proposals in process, %d reps each", o.placementReps)
		p, err := placementBench(o.placementReps)
		if err != nil {
			return err
		}
		rep.Placement = &p
	}
	if !o.skipEndToEnd {
		if err := withStack(ctx, o, logDir, log, func(b *bench) error {
			progress("end to end: %d components registered, %d updates of one component, then one update of %d", o.fleet+1, o.reps, o.fleet)
			e, err := b.endToEnd(ctx, o.reps, o.fleet)
			rep.EndToEnd = &e
			return err
		}); err != nil {
			return err
		}
	}
	if !o.skipACM {
		a, err := acmBench(ctx, o, log, progress)
		if err != nil {
			return err
		}
		rep.ACM = &a
	}
	rep.FinishedAt, rep.LoadAfter = time.Now().UTC(), loadAverage()
	rep.Logs = logDir
	return finish(&rep, filepath.Join(o.outDir, "bench-"+stamp+".json"), stdout)
}

// finish writes the JSON report to path and the tables to stdout, and
// returns the bench's verdict: an error (pfbench exits 1) when a scaling
// run wrote other records than its stage's first run (scalingVerdict).
// The report is written either way.
func finish(rep *Report, path string, stdout io.Writer) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return err
	}
	rep.table(stdout)
	fmt.Fprintf(stdout, "\nreport: %s\nstage logs: %s\n", path, rep.Logs)
	return rep.scalingVerdict()
}

// withStack starts a fresh broker and Consul agent, applies the topology,
// runs fn and tears everything down.
func withStack(ctx context.Context, o options, logDir string, log zerolog.Logger, fn func(*bench) error) error {
	broker, err := devstack.StartBroker(devstack.BrokerOptions{Partitions: int32(o.partitions), Logger: log.With().Str("component", "broker").Logger()})
	if err != nil {
		return err
	}
	defer broker.Close()
	bin, err := devstack.ConsulBinary()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	agent, err := devstack.StartConsul(cctx, devstack.ConsulOptions{Binary: bin, Logger: log})
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = agent.Stop() }()
	k := runtime.Kafka{Brokers: broker.Addrs, FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 250 * time.Millisecond}
	prod, err := producer(k)
	if err != nil {
		return err
	}
	defer prod.Close()
	adm := kadm.NewClient(prod)
	if _, err := topology.Apply(ctx, adm, topology.Default(), topology.Options{Partitions: int32(o.partitions)}); err != nil {
		return fmt.Errorf("apply topology: %w", err)
	}
	cl, err := consulkv.Config{Addr: agent.Addr}.Client()
	if err != nil {
		return err
	}
	env := runtime.NewEnv(k, log)
	b := &bench{kafka: k, adm: adm, prod: prod, codec: env.Codec, consulAddr: agent.Addr, consul: cl,
		binDir: o.binDir, logDir: logDir, timeout: o.timeout, pollRecords: env.PollRecords, partitions: o.partitions,
		ceilingRecords: o.ceilingRecords, ceilingBytes: o.ceilingMiB << 20, bodyBytes: o.work.BodyBytes, log: log, profile: o.profile}
	if err := runtime.PublishSchemas(ctx, env); err != nil {
		return fmt.Errorf("publish schemas: %w", err)
	}
	return fn(b)
}

// alone runs the stage-alone measurements in pipeline order: each stage's
// prepared input is what the stage before it produced.
func (b *bench) alone(ctx context.Context, o options, rep *Report, progress func(string, ...any)) error {
	w := o.work
	w.Notify = events.NotifyNone
	if err := w.load(ctx, b.kafka, b.codec, int32(o.partitions)); err != nil {
		return err
	}
	rep.Settings.Workload = w
	for _, st := range aloneStages {
		if err := b.prepare(ctx, st, w); err != nil {
			return err
		}
		if st.name == topology.StageConsulWriter {
			progress("consul ceiling: %d keys of %d bytes, %v writers x %v per transaction", o.consulKeys, o.work.BodyBytes, o.consulClients, o.consulOpsPerTxn)
			c, sweep, err := bestConsulCeiling(ctx, b.consul, "pfbench-ceiling/", o.consulKeys, o.work.BodyBytes, o.consulClients, o.consulOpsPerTxn, consulCeilingRuns-1)
			if err != nil {
				return fmt.Errorf("consul ceiling: %w", err)
			}
			rep.Ceilings.Consul, rep.Ceilings.ConsulSweep = &c, sweep
		}
		members := 1
		if st.kafkaToKafka() {
			members = o.members[0]
		}
		var run StageRun
		if st.kafkaToKafka() {
			progress("%s alone on %s, %d rounds alternating with its ceilings", st.name, st.input, o.rounds)
			r, m, digest, err := b.stageRounds(ctx, st, members, o.rounds, true, progress)
			run = r
			run.Stage, run.Target = st.name, st.target
			if err != nil {
				return err
			}
			rep.Scaling = append(rep.Scaling, newScaleRun(run, m, digest, nil))
		} else {
			progress("%s alone on %s", st.name, st.input)
			r, _, _, err := b.runAlone(ctx, st.name, st.input, members)
			run = r
			run.Stage, run.Target = st.name, st.target
			if err != nil {
				return err
			}
			if run.OutputRecords, run.KeysWritten, err = b.countApplied(ctx, st.output); err != nil {
				return fmt.Errorf("%s: count outputs on %s: %w", st.name, st.output, err)
			}
			run.KeysPerSec = float64(run.KeysWritten) / run.Seconds
			run.Ratio = run.KeysPerSec / rep.Ceilings.Consul.KeysPerSec
			run.RatioTo = "Consul transactions, the best of the ceiling's ways of writing"
		}
		rep.Stages = append(rep.Stages, run)
		if run.RatioAvroSpread != nil {
			progress("%s: %.0f records/s, ratio %s, of avro %s (medians of %d rounds, least-greatest)", st.name, run.RecordsPerSec, run.RatioSpread, run.RatioAvroSpread, len(run.Rounds))
		} else {
			progress("%s: %.0f records/s, ratio %.2f", st.name, run.RecordsPerSec, run.Ratio)
		}
		if st.name == o.until {
			break
		}
	}
	return nil
}

// prepare readies a stage's input before it runs alone.
func (b *bench) prepare(ctx context.Context, st aloneStage, w workload) error {
	switch st.name {
	case topology.StageMatcher:
		// The registrations are history: the matcher restores them
		// from deploy.components when assigned and handles changes.
		if err := skipInputs(ctx, b.kafka, b.kafka.Prefix+"policyflow-"+st.name,
			b.kafka.Topic(topology.DeployComponents), b.kafka.Topic(topology.CatchupRequests)); err != nil {
			return fmt.Errorf("matcher: skip the registrations: %w", err)
		}
	case topology.StageSegmenter:
		if err := w.loadUpdates(ctx, b.kafka, b.codec); err != nil {
			return fmt.Errorf("segmenter: %w", err)
		}
	}
	return nil
}

// intList is a flag of comma-separated whole numbers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out intList
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", f)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
