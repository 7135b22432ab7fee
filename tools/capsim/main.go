// Command capsim simulates the matcher and the executor at a fleet size
// no test broker holds: it builds their state for every component in one
// process with the stages' own code (matcher.Partition, executor.Model),
// split over partitions as a consumer group of one member per partition
// holds it, and measures the heap it takes per component, a catch-up of
// every component with nothing changed, and one policy change that
// reaches every component, carried through the segmenter (Fill, Outputs)
// and the executor (Next) to the records each stage would write, encoded
// with the project's codec to count their bytes, and the consul-writer's
// plan of the Consul writes. Kafka is not run; with --consul-components
// it writes one Consul shard's folders to a Consul server of its own and
// measures it. See README.md and docs/capacity.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/policyflow/policyflow/events"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "capsim:", err)
		os.Exit(1)
	}
}

// Report is what a capsim invocation measured, run by run.
type Report struct {
	Machine string    `json:"machine"`
	GOGC    int       `json:"gogc"`
	Runs    []*Result `json:"runs"`
	// Shards are the Consul shards written (--consul-components).
	Shards []*ShardRun `json:"consul_shards,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("capsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("components", "100000", "fleet sizes to simulate, comma-separated (e.g. 10000,100000,1000000); \"\" for none")
	partitions := fs.String("partitions", "6", "partition counts (one member each) to split every size over, comma-separated")
	bodyBytes := fs.Int("body-bytes", 1024, "size of a policy body")
	rounds := fs.Int("rounds", 3, "rounds of the catch-up and of the fleet change in the matcher (each a new version); times are medians")
	sample := fs.Int("consul-sample", 1000, "components whose Consul writes are planned")
	memLimit := fs.String("memory-limit", "5GiB", "soft memory limit of the process (debug.SetMemoryLimit); 0 for none")
	gcPercent := fs.Int("gc-percent", 70, "garbage collector target, the matcher's and the executor's own (runtime.Stage.GCPercent)")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	shardSizes := fs.String("consul-components", "", "also write this many components' folders to a Consul server of their own (one shard) and measure it, comma-separated sizes; needs the consul binary (make consul)")
	consulWriters := fs.Int("consul-writers", 8, "concurrent writers and readers of the Consul shard")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	var ns []int
	if *sizes != "" {
		if ns, err = ints(*sizes); err != nil {
			return fmt.Errorf("--components: %w", err)
		}
	}
	ps, err := ints(*partitions)
	if err != nil {
		return fmt.Errorf("--partitions: %w", err)
	}
	if *bodyBytes < 300 {
		return fmt.Errorf("--body-bytes %d: want at least 300", *bodyBytes)
	}
	if *rounds < 1 {
		return fmt.Errorf("--rounds %d: want at least 1", *rounds)
	}
	if limit, err := parseBytes(*memLimit); err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	} else if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	debug.SetGCPercent(*gcPercent)
	codec, err := events.NewCodec()
	if err != nil {
		return err
	}
	progress := func(format string, a ...any) {
		if !*quiet {
			fmt.Fprintf(stderr, "capsim: "+format+"\n", a...)
		}
	}
	rep := Report{Machine: machine(), GOGC: *gcPercent}
	for _, n := range ns {
		for _, p := range ps {
			progress("%d components over %d partitions", n, p)
			s := &sim{n: n, parts: p, bodyBytes: *bodyBytes, rounds: *rounds, sample: min(*sample, n), codec: codec, progress: progress}
			res, err := s.run(context.Background())
			if err != nil {
				return fmt.Errorf("%d components over %d partitions: %w", n, p, err)
			}
			rep.Runs = append(rep.Runs, res)
		}
	}
	if *shardSizes != "" {
		ks, err := ints(*shardSizes)
		if err != nil {
			return fmt.Errorf("--consul-components: %w", err)
		}
		for _, k := range ks {
			progress("consul: one shard of %d components", k)
			sh, err := shard(context.Background(), k, *bodyBytes, *consulWriters, progress)
			if err != nil {
				return fmt.Errorf("consul shard of %d components: %w", k, err)
			}
			rep.Shards = append(rep.Shards, sh)
		}
	}
	rep.table(stdout)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(f), "_", ""))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want positive integers", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBytes reads 5GiB, 512MiB or a number of bytes.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want bytes, e.g. 5GiB", s)
	}
	return n * mult, nil
}

// machine says what ran the simulation: cores, memory, CPU model.
func machine() string {
	cpu := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(data)); len(f) > 1 {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s", runtime.NumCPU(), cpu, mem)
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (r Report) table(w io.Writer) {
	fmt.Fprintf(w, "machine: %s; GOGC %d\n\n", r.Machine, r.GOGC)
	if len(r.Runs) > 0 {
		r.runsTable(w)
	}
	if len(r.Shards) > 0 {
		r.shardsTable(w)
	}
}

func (r Report) runsTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "components\tpartitions\tmatcher B/comp\tmatcher MiB/member\texecutor regs B/comp\texecutor colls B/comp\texecutor MiB/member\tload avg\t")
	for _, x := range r.Runs {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s → %s\t\n", x.Components, x.Partitions, x.Matcher.HeapPerComponent,
			mib(x.Matcher.HeapLargestMember), x.Executor.RegistrationsPerComponent, x.Executor.CollectionsPerComponent,
			mib(x.Executor.HeapLargestMember), x.LoadBefore, x.LoadAfter)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "times: sum over the partitions (one core for all) / the slowest partition (a member per partition), seconds; µs per component")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "components\tpartitions\tmatcher restore\tmatcher catch-up\tmatcher change\tmatcher encode\tsegmenter\texecutor decode\texecutor decide\texecutor encode\texecutor keep\t")
	sp := func(s Spread) string { return fmt.Sprintf("%.2f/%.2f (%.1f)", s.SumS, s.MaxS, s.PerComponentUS) }
	for _, x := range r.Runs {
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", x.Components, x.Partitions, x.Matcher.RestoreS,
			sp(x.Matcher.Catchup), sp(x.Matcher.Change), sp(x.Matcher.ChangeEncode), sp(x.Segmenter.Fill),
			sp(x.Executor.Decode), sp(x.Executor.Decide), sp(x.Executor.Encode), sp(x.Executor.Keep))
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "one fleet-wide policy change: records and bytes per topic")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "components\tpartitions\ttopic\trecords\tMiB\tB/component\t")
	for _, x := range r.Runs {
		for _, u := range x.Update {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%.1f\t%.0f\t\n", x.Components, x.Partitions, u.Topic, u.Records, mib(uint64(u.Bytes)), u.PerComponent)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Consul (the consul-writer's plan) and record sizes")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "components\tpartitions\tops/comp\tkeys written/comp\tcomps/txn\twrite txns\tread txns\tkeys held/comp\tfolder B\tcomponent B\tcatalog entry B\tchange B\tcollection B\tholding B\tapplied B\t")
	for _, x := range r.Runs {
		c, s := x.Consul, x.Sizes
		fmt.Fprintf(tw, "%d\t%d\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", x.Components, x.Partitions, c.OpsPerComponent,
			c.KeysPerComponent, c.WriteTxnsEach, c.WriteTxns, c.ReadTxns, c.KeysHeld, c.FolderBytes, s.Component, s.CatalogEntry, s.Change,
			s.Collection, s.Holding, s.Applied)
	}
	tw.Flush()
}

func (r Report) shardsTable(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "one Consul shard, a server of its own: the folders written, the agent's memory, a catch-up's check of every folder")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "components\tkeys\tvalue MiB\twrite s\tkeys/s\tagent MiB before\tafter\tpeak\tKiB/comp\tsnapshot MiB\tB/comp\tlistings s\tlistings/s\tcheck-index s\tcomps/s\tload avg\t")
	for _, x := range r.Shards {
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.0f\t%.1f\t%.0f\t%.2f\t%.0f\t%s → %s\t\n", x.Components, x.Keys,
			mib(uint64(x.ValueBytes)), x.WriteS, x.KeysPerS, x.RSSBeforeMiB, x.RSSAfterMiB, x.HWMMiB, x.PerComponentKiB,
			mib(uint64(x.SnapshotBytes)), x.SnapshotPerComponent, x.ListS, x.ListPerS, x.CheckS, x.CheckPerS, x.LoadBefore, x.LoadAfter)
	}
	tw.Flush()
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
