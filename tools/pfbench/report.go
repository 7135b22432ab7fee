package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/policyflow/policyflow/tools/devstack"
)

// Report is one run's JSON report.
type Report struct {
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// LoadBefore and LoadAfter are the machine's load average (1, 5, 15
	// minutes) as the bench started and finished: the machine may be shared.
	LoadBefore [3]float64 `json:"load_average_before"`
	LoadAfter  [3]float64 `json:"load_average_after"`
	Settings   Settings   `json:"settings"`
	Ceilings   Ceilings   `json:"ceilings"`
	Stages     []StageRun `json:"stages"`
	// Scaling is each Kafka-to-Kafka stage run alone with every member
	// count of --members, the first run of each stage first.
	Scaling  []ScaleRun `json:"scaling,omitempty"`
	EndToEnd *EndToEnd  `json:"end_to_end,omitempty"`
	// ACM is the participant replicas' runs.
	ACM *ACMBench `json:"acm,omitempty"`
	// Admission is the admission stage's section.
	Admission *AdmissionRun `json:"admission,omitempty"`
	// Catchup is the catch-up of every component at scale.
	Catchup *CatchupRun `json:"catchup,omitempty"`
	// Placement is the placement checks' and proposals' section.
	Placement *PlacementRun `json:"placement,omitempty"`
	Logs      string        `json:"logs"`
}

// Ceilings are the raw rates the stages are compared with. The Kafka
// pass-through ceilings are per stage (the records it carries), in Stages.
type Ceilings struct {
	Consul *ConsulCeiling `json:"consul,omitempty"`
	// ConsulSweep is every run the Consul ceiling is the best of.
	ConsulSweep []ConsulCeiling `json:"consul_sweep,omitempty"`
}

// Settings say what was measured on what.
type Settings struct {
	Workload   workload          `json:"workload"`
	Partitions int               `json:"partitions"`
	Members    []int             `json:"members"`
	Rounds     int               `json:"rounds"`
	Reps       int               `json:"e2e_reps"`
	Fleet      int               `json:"e2e_fleet"`
	Backend    string            `json:"backend"`
	Go         string            `json:"go"`
	OSArch     string            `json:"os_arch"`
	Cores      int               `json:"cores"`
	GOMAXPROCS int               `json:"gomaxprocs"`
	CPU        string            `json:"cpu"`
	Commit     string            `json:"commit"`
	Consul     string            `json:"consul"`
	Libraries  map[string]string `json:"libraries"`
}

func settings(o options, root string) Settings {
	s := Settings{
		Workload: o.work, Partitions: o.partitions, Members: o.members, Rounds: o.rounds, Reps: o.reps, Fleet: o.fleet,
		Backend:    "embedded: kfake in this process (in memory), Consul agent -dev; every stage its own process",
		Go:         goruntime.Version(),
		OSArch:     goruntime.GOOS + "/" + goruntime.GOARCH,
		Cores:      goruntime.NumCPU(),
		GOMAXPROCS: goruntime.GOMAXPROCS(0),
		CPU:        cpuModel(),
		Libraries:  map[string]string{},
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			for _, want := range []string{"github.com/twmb/franz-go", "github.com/hamba/avro", "github.com/hashicorp/consul/api", "github.com/rs/zerolog"} {
				if strings.HasPrefix(d.Path, want) {
					s.Libraries[d.Path] = d.Version
				}
			}
		}
	}
	if root != "" {
		if out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output(); err == nil {
			s.Commit = strings.TrimSpace(string(out))
		}
	}
	if bin, err := devstack.ConsulBinary(); err == nil {
		if out, err := exec.Command(bin, "version").Output(); err == nil {
			s.Consul = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
		}
	}
	return s
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// table prints the report for people.
func (r Report) table(w io.Writer) {
	s := r.Settings
	fmt.Fprintf(w, "policyflow bench  %s  commit %s  %s, %d cores  %s\n", r.StartedAt.Format(time.RFC3339), s.Commit, s.Go, s.Cores, s.CPU)
	fmt.Fprintf(w, "workload: %d components (%d per deployment), %d policies of %d B, %d changes x %d partitions\n",
		s.Workload.Components, s.Workload.PerDeployment, s.Workload.Policies, s.Workload.BodyBytes, s.Workload.Changes, s.Partitions)
	fmt.Fprintf(w, "load average (1/5/15 min): before %s, after %s (%s)\n\n", formatLoad(r.LoadBefore), formatLoad(r.LoadAfter), r.FinishedAt.Sub(r.StartedAt).Round(time.Second))
	if len(r.Stages) > 0 {
		if s.Rounds > 1 {
			fmt.Fprintf(w, "Kafka-to-Kafka stages: %d rounds of stage then ceilings, alternating; rate and ratios are medians (least-greatest)\n", s.Rounds)
		}
		if len(s.Members) > 0 && s.Members[0] > 1 {
			fmt.Fprintf(w, "Kafka-to-Kafka stages alone with %d members each\n", s.Members[0])
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "stage alone\tinput\trec bytes\trate/s\tceiling/s\tratio\ttarget\tavro copy/s\tof avro\tpeak RSS MiB\tCPU s stage/broker\t")
		for _, st := range r.Stages {
			rate, ceiling := st.RecordsPerSec, 0.0
			unit := "rec"
			if st.KeysPerSec > 0 {
				rate, unit = st.KeysPerSec, "keys"
				if r.Ceilings.Consul != nil {
					ceiling = r.Ceilings.Consul.KeysPerSec
				}
			} else if st.CeilingTransactional != nil {
				ceiling = st.CeilingTransactional.RecordsPerSec
			}
			avro, ofAvro := "-", "-"
			if st.CeilingAvro != nil {
				avro, ofAvro = fmt.Sprintf("%.0f", st.CeilingAvro.RecordsPerSec), fmt.Sprintf("%.2f", st.RatioAvro)
				if sp := st.RatioAvroSpread; sp != nil && len(st.Rounds) > 1 {
					ofAvro = sp.String()
				}
			}
			ratio := fmt.Sprintf("%.2f", st.Ratio)
			if sp := st.RatioSpread; sp != nil && len(st.Rounds) > 1 {
				ratio = sp.String()
			}
			fmt.Fprintf(tw, "%s\t%d rec\t%d\t%.0f %s\t%.0f\t%s%s\t%.1f\t%s\t%s\t%.0f\t%.2f/%.2f in %.2f\t\n", st.Stage, st.InputRecords, st.InputRecordBytes,
				rate, unit, ceiling, ratio, miss(st.Ratio >= st.Target), st.Target, avro, ofAvro, st.PeakRSSMiB, st.StageCPU, st.BenchCPU, st.Seconds)
		}
		tw.Flush()
		fmt.Fprintln(w)
		if len(r.Scaling) > 0 {
			r.scalingTable(w)
			fmt.Fprintln(w)
		}
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ceiling\trecords\trec bytes\tplain rec/s\ttransactional rec/s\ttransactional avro rec/s\t")
		for _, st := range r.Stages {
			if st.CeilingPlain != nil && st.CeilingTransactional != nil {
				avro := "-"
				if st.CeilingAvro != nil {
					avro = fmt.Sprintf("%.0f", st.CeilingAvro.RecordsPerSec)
				}
				fmt.Fprintf(tw, "kafka pass-through (%s input)\t%d\t%d\t%.0f\t%.0f\t%s\t\n", st.Stage, st.CeilingPlain.Records, st.CeilingPlain.RecordBytes,
					st.CeilingPlain.RecordsPerSec, st.CeilingTransactional.RecordsPerSec, avro)
			}
		}
		tw.Flush()
		if c := r.Ceilings.Consul; c != nil {
			fmt.Fprintf(w, "consul: %.0f keys/s (%d keys of %d B, %d per transaction, %d concurrent writers: the best of %d runs)\n",
				c.KeysPerSec, c.Keys, c.ValueBytes, c.OpsPerTxn, c.Clients, len(r.Ceilings.ConsulSweep))
		}
		fmt.Fprintln(w)
	}
	if a := r.ACM; a != nil {
		a.table(w)
		fmt.Fprintln(w)
	}
	if r.Admission != nil {
		r.admissionTable(w)
		fmt.Fprintln(w)
	}
	if c := r.Catchup; c != nil {
		c.table(w)
		fmt.Fprintln(w)
	}
	if r.Placement != nil {
		r.placementTable(w)
		fmt.Fprintln(w)
	}
	if e := r.EndToEnd; e != nil {
		fmt.Fprintf(w, "end to end (PDP notification -> North API -> every stage -> Consul -> notified)\n")
		fmt.Fprintf(w, "  1 component, %d updates: script run p50 %.1f ms  p95 %.1f ms  p99 %.1f ms%s (target p99 <= %.0f ms); Consul written p50 %.1f ms  p99 %.1f ms; %d failed\n",
			e.Reps, e.ScriptMs.P50, e.ScriptMs.P95, e.ScriptMs.P99, miss(e.ScriptMs.P99 <= e.TargetP99Ms), e.TargetP99Ms, e.ConsulMs.P50, e.ConsulMs.P99, e.Failed)
		fmt.Fprintf(w, "  %d components, one update: all written %.2f s, all notified (%s) %.2f s%s (target <= %.0f s); first gather %.2f s\n",
			e.FleetSize, e.FleetWritten, strings.ToLower(e.FleetNotify), e.FleetDone, miss(e.FleetDone <= e.TargetFleetS), e.TargetFleetS, e.FleetFirst)
		var parts []string
		for _, name := range e2eStages {
			if v, ok := e.PeakRSSMiB[name]; ok {
				parts = append(parts, fmt.Sprintf("%s %.0f", name, v))
			}
		}
		fmt.Fprintf(w, "  peak RSS MiB during end to end: %s\n", strings.Join(parts, ", "))
	}
}

// scalingTable prints each Kafka-to-Kafka stage's runs by member count,
// and says loudly which wrote other records than the stage's first run.
func (r Report) scalingTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scaling\tmembers\trate/s\tx 1 member\tCPU s/1k rec\tCPU x 1 member\tsteady CPU s/1k (x 1)\tCPU s per member\tpeak RSS MiB\tstart->first rec s\trecords handled\taborted txns\tsame output\t")
	// The runs of a stage together, stages in pipeline order.
	rows := slices.Clone(r.Scaling)
	slices.SortStableFunc(rows, func(a, b ScaleRun) int { return stageOrder(a.Stage) - stageOrder(b.Stage) })
	var differ []ScaleRun
	for _, sr := range rows {
		ratio, cpuRatio := "-", "-"
		if sr.RatioToOne > 0 {
			ratio = fmt.Sprintf("%.2f", sr.RatioToOne)
		}
		if sr.CPUToOne > 0 {
			cpuRatio = fmt.Sprintf("%.2f", sr.CPUToOne)
		}
		steady := "-"
		if sr.SteadyCPUPer1k > 0 {
			steady = fmt.Sprintf("%.3f", sr.SteadyCPUPer1k)
			if sr.SteadyToOne > 0 {
				steady += fmt.Sprintf(" (%.2f)", sr.SteadyToOne)
			}
		}
		cpus := make([]string, len(sr.CPU))
		for i, c := range sr.CPU {
			cpus[i] = fmt.Sprintf("%.1f", c)
		}
		first := fmt.Sprintf("%.2f", sr.StartToFirstRecord)
		handled := strconv.Itoa(sr.handled())
		if sr.Members > 1 {
			if sr.StartToEveryMember > 0 {
				first += fmt.Sprintf(" (all %.2f)", sr.StartToEveryMember)
			} else {
				first += fmt.Sprintf(" (%d of %d handled any)", sr.membersThatHandled(), sr.Members)
			}
			parts := make([]string, len(sr.Handled))
			for i, n := range sr.Handled {
				parts[i] = strconv.Itoa(n)
			}
			handled += " = " + strings.Join(parts, "+")
		}
		same := "yes"
		switch {
		case sr.Reference:
			same = "reference"
		case !sr.SameOutput:
			same = "NO !"
			differ = append(differ, sr)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%.3f\t%s\t%s\t%s\t%.0f\t%s\t%s\t%d\t%s\t\n", sr.Stage, sr.Members, sr.RecordsPerSec, ratio,
			sr.CPUPer1k, cpuRatio, steady, strings.Join(cpus, "+"), sr.PeakRSSMiB, first, handled, sr.AbortedTxns, same)
	}
	tw.Flush()
	for _, sr := range differ {
		fmt.Fprintf(w, "! %s\n", r.howOutputDiffers(sr))
	}
}

// stageOrder is a stage's place in the pipeline.
func stageOrder(stage string) int {
	return slices.IndexFunc(aloneStages, func(s aloneStage) bool { return s.name == stage })
}

// miss marks a figure that misses its target.
func miss(ok bool) string {
	if ok {
		return ""
	}
	return " !"
}
