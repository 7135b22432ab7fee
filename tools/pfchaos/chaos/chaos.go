// Package chaos runs policyflow's fault matrix: the whole policy flow as
// separate processes (every stage and the North API from their binaries),
// an in-process broker on a data directory and a real Consul agent, a
// stream of policy updates, and one fault after another in the middle of
// the stream. After each fault it drives the stream to its end and counts,
// per fault, the components that lost the newest version, the duplicated
// notifications and every step backwards, observed continuously.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/topology"
)

// The faults of the embedded backend, by name: "kill-<process>" kills a
// stage or the North API with SIGKILL and starts it again at once under
// the same identity; "replace-<stage>" kills it and starts a replacement
// under a new instance id (a new pod: the group must first let the dead
// member go); "broker-restart" closes the broker and starts it again on
// its data directory and port; "consul-down" stops the Consul agent for
// Options.ConsulDown and starts it again on its data; "rebalance-storm"
// makes members of every consumer stage join and leave again and again;
// the cluster faults (ClusterFaults: leader-move, coordinator-move,
// broker-rolling-restart, retriable-errors) act on the broker's three
// brokers without stopping the cluster;
// "script-fails" makes every component script fail (exit 3) for
// Options.FailFor, then asks for a catch-up, which must notify them
// again; "consul-edit" edits every component's item in Consul by hand
// and asks for a catch-up, which must restore the items and notify each
// component again. "none" injects nothing: the baseline of what the
// ledger counts when nothing goes wrong. "pause-agent-notifier" runs a
// second agent-notifier (another instance id) beside the first and stops
// the first with SIGSTOP for Options.PauseFor, longer than its lease,
// while notifications it holds are under way, then lets it go on
// (SIGCONT): the other must take its claims over, and the resumed one
// must deliver nothing without proving its claim again.
const (
	FaultNone           = "none"
	FaultPauseNotifier  = "pause-agent-notifier"
	FaultBrokerRestart  = "broker-restart"
	FaultConsulDown     = "consul-down"
	FaultRebalanceStorm = "rebalance-storm"
	FaultScriptFails    = "script-fails"
	FaultConsulEdit     = "consul-edit"
	// The faults of the containers backend: the stack's Consul is then
	// three servers and a client agent in containers (Options.ConsulImage),
	// and ContainerStage runs in a container (Options.StageImages) on
	// their network. consul-leader-loss kills the leading server
	// (SIGKILL), the fault being over once the other two elected a
	// leader; network-disconnect cuts the stage's container off the
	// network (docker network disconnect) for Options.Disconnected, then
	// connects it again.
	FaultConsulLeaderLoss    = "consul-leader-loss"
	FaultNetworkDisconnected = "network-disconnect"
)

// containersFault reports the faults run on the containers stack.
func containersFault(f string) bool {
	return f == FaultConsulLeaderLoss || f == FaultNetworkDisconnected
}

// Kill is the fault that kills process name and starts it again under
// the same identity.
func Kill(name string) string { return "kill-" + name }

// Replace is the fault that kills stage name and starts a replacement
// under a new instance id.
func Replace(name string) string { return "replace-" + name }

// AllFaults are every fault this package runs, in the order it runs them.
func AllFaults() []string {
	out := []string{FaultNone}
	for _, s := range append(append([]string(nil), Stages...), NorthAPI) {
		out = append(out, Kill(s))
	}
	for _, s := range Stages {
		out = append(out, Replace(s))
	}
	out = append(out, FaultPauseNotifier)
	out = append(out, FaultBrokerRestart)
	out = append(out, ClusterFaults()...)
	return append(out, FaultConsulDown, FaultRebalanceStorm, FaultScriptFails, FaultConsulEdit,
		FaultConsulLeaderLoss, FaultNetworkDisconnected)
}

// Options configure Run.
type Options struct {
	// BinDir holds the stage binaries and the North API's.
	BinDir string
	// Dir holds the broker's and Consul's data and every process's log.
	Dir    string
	Faults []string
	// Components are notified by webhook; component i wants policy
	// i mod Policies.
	Components, Policies int
	// Updates are the policy updates of each fault's stream; the fault
	// comes after half of them, Pace apart.
	Updates int
	Pace    time.Duration
	// ConsulDown is how long consul-down keeps Consul stopped.
	ConsulDown time.Duration
	// StormRounds are the join-and-leave rounds of rebalance-storm.
	StormRounds int
	// SessionTimeout is every stage's --session-timeout.
	SessionTimeout time.Duration
	// Dynamic runs the stages without --instance-id: a killed stage's
	// partitions then wait out SessionTimeout (and the transaction it
	// left open its transaction timeout) before its restart gets them.
	Dynamic bool
	// Settle bounds the wait for every component to reach the newest
	// version after a fault; what is still behind then is lost.
	Settle time.Duration
	// Hold is how long the version published while the fault is in
	// effect stays the newest after the fault ended; OwedAfter is how
	// long a version must stay the newest to be owed to every component
	// (a version superseded sooner may be skipped for the newer one).
	Hold, OwedAfter time.Duration
	// ProgressBound is the longest a component may wait, after a fault
	// ended, for a run of the version that was newest then (or a newer
	// one); ReplaceBound the same after a replace-<stage> fault.
	ProgressBound, ReplaceBound time.Duration
	// FailFor is how long script-fails keeps the scripts failing.
	FailFor time.Duration
	// PauseFor is how long pause-agent-notifier keeps the notifier
	// stopped: longer than its lease (--notify-lease, 15 s), so that the
	// other notifier may take its claims over meanwhile.
	PauseFor   time.Duration
	Partitions int
	// ConsulImage is the image of the containers faults' Consul cluster.
	ConsulImage string
	// StageImages names the stage images of the containers faults, with
	// %s for the stage (ContainerStage runs in a container there).
	StageImages string
	// Disconnected is how long network-disconnect keeps the stage's
	// container off the network.
	Disconnected time.Duration
	Log          zerolog.Logger
	// External, when set, runs the faults against a Kafka cluster and a
	// Consul already running instead of an in-process broker and a local
	// agent; only ExternalFaults may then run.
	External *External
	// Progress, when set, is told what the run is doing.
	Progress func(format string, a ...any)
}

// Defaults are the options of `make chaos`.
func Defaults() Options {
	return Options{Faults: AllFaults(), Components: 200, Policies: 2, Updates: 20, Pace: 50 * time.Millisecond,
		ConsulDown: 30 * time.Second, StormRounds: 4, SessionTimeout: 10 * time.Second, Settle: 2 * time.Minute, Partitions: 3,
		Hold: 3 * time.Second, OwedAfter: 2 * time.Second, ProgressBound: 10 * time.Second, ReplaceBound: 20 * time.Second,
		FailFor: 5 * time.Second, PauseFor: 20 * time.Second,
		ConsulImage: DefaultConsulImage, StageImages: "policyflow/%s:dev", Disconnected: 20 * time.Second, Log: zerolog.Nop()}
}

// Row is one fault's result.
type Row struct {
	Fault string
	// Counters are the ledger's counts during the fault and until every
	// component settled.
	Counters
	// Behind counts components whose Consul item, or whose latest
	// finished run, was not at the newest version of their policy when
	// Settle ran out (each counts once per place).
	Behind int
	// Stall is how long after the fault ended the slowest component
	// waited for a run of the version that was newest then (or a newer
	// one); Bound the longest it may.
	Stall, Bound time.Duration
	// Recovery is the time from the end of the fault (the process
	// restarted, the broker or Consul back, the storm over) to every
	// component's Consul item and latest notification showing the
	// newest version.
	Recovery time.Duration
	// Err is a fault that could not be run; Details what was counted.
	Err     string
	Details []string
	// Took is the row's whole time: the stream, the fault, the settling.
	Took time.Duration
	// Note says what the fault did, when it says more than its name
	// (the cluster faults: moves made, errors injected).
	Note string
	// Rewound counts the times a stage's consumer was sent back over
	// records it had read, the broker reporting them lost
	// (policyflow_consumer_rewinds_total of every stage): a faithful
	// broker does that on no fault here, and each time the pipeline
	// handles the partition's history again.
	Rewound int
}

// Failed reports a row with something counted or an error. A late
// version fails it as a lost one does: it reached its component only
// after the progress bound, past what the matrix promises.
func (r Row) Failed() bool {
	return r.Lost != 0 || r.Late != 0 || r.Behind != 0 || r.Repeated != 0 || r.Overlapping != 0 || r.Backwards != 0 ||
		r.Unreadable != 0 || r.ReadyLied != 0 || r.LagHidden != 0 || r.Rewound != 0 || r.Stall > r.Bound || r.Err != ""
}

// Matrix is the result of a run.
type Matrix []Row

// Failed reports whether any row failed.
func (m Matrix) Failed() bool { return slices.ContainsFunc(m, Row.Failed) }

// Print writes the matrix as a table with every counter, then the
// details of failed rows.
func (m Matrix) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\truns\tfinished\tfailed\tlost\tlate\tbehind\trepeated\tredelivered\toverlapping\tbackwards\tunreadable\tready-lied\tlag-hidden\trewound\tstall/bound\trecovery\ttook\t")
	for _, r := range m {
		rec := fmt.Sprintf("%.1fs", r.Recovery.Seconds())
		if r.Err != "" {
			rec = "error"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1fs/%.0fs\t%s\t%.1fs\t\n", r.Fault, r.Runs, r.Finished, r.FailedRuns,
			r.Lost, r.Late, r.Behind, r.Repeated, r.Redelivered, r.Overlapping, r.Backwards, r.Unreadable, r.ReadyLied, r.LagHidden, r.Rewound,
			r.Stall.Seconds(), r.Bound.Seconds(), rec, r.Took.Seconds())
	}
	_ = tw.Flush()
	for _, r := range m {
		if r.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Fault, r.Note)
		}
	}
	for _, r := range m {
		if !r.Failed() && r.Redelivered == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", r.Fault)
		if r.Err != "" {
			fmt.Fprintf(w, "  error: %s\n", r.Err)
		}
		for _, d := range r.Details {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
}

// Run starts the stack, brings every component to version 1 of its
// policy, then runs each fault of o.Faults in the middle of a stream of
// o.Updates updates. An error is returned only when the stack cannot
// run; a fault that fails is a row of the matrix.
func Run(ctx context.Context, o Options) (Matrix, error) {
	progress := o.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	for _, f := range o.Faults {
		if !slices.Contains(AllFaults(), f) {
			return nil, fmt.Errorf("unknown fault %q; the faults are %s", f, strings.Join(AllFaults(), ", "))
		}
	}
	if err := checkExternal(o); err != nil {
		return nil, err
	}
	var embedded, containers []string
	for _, f := range o.Faults {
		if containersFault(f) {
			containers = append(containers, f)
		} else {
			embedded = append(embedded, f)
		}
	}
	var m Matrix
	if len(embedded) > 0 {
		progress("starting the broker, Consul, %d stages and the North API (logs and data in %s)", len(Stages), o.Dir)
		rows, err := runOn(ctx, o, false, embedded, progress)
		if err != nil {
			return m, err
		}
		m = append(m, rows...)
	}
	if len(containers) > 0 && ctx.Err() == nil {
		if err := DockerWorks(ctx); err != nil {
			for _, f := range containers {
				m = append(m, Row{Fault: f, Err: "not run: the containers faults need a Docker engine: " + err.Error()})
			}
			return m, nil
		}
		progress("starting the broker, a Consul cluster of three servers in containers, %d stages and the North API", len(Stages))
		co := o
		co.Dir = filepath.Join(o.Dir, "containers")
		rows, err := runOn(ctx, co, true, containers, progress)
		if err != nil {
			return m, err
		}
		m = append(m, rows...)
	}
	return m, nil
}

// runOn starts a stack, brings every component to the first version of
// its policy and runs the faults on it.
func runOn(ctx context.Context, o Options, withCluster bool, faults []string, progress func(string, ...any)) (Matrix, error) {
	s, err := startStack(ctx, o, withCluster)
	if err != nil {
		return nil, err
	}
	defer s.close()
	for p := 0; p < o.Policies; p++ {
		if err := s.publish(ctx, policyID(p)); err != nil {
			return nil, err
		}
	}
	if behind, err := s.settle(ctx); err != nil || len(behind) > 0 {
		return nil, errors.Join(fmt.Errorf("the first version did not reach every component: %s", strings.Join(behind, "; ")), err, s.alive())
	}
	var m Matrix
	for _, f := range faults {
		progress("%s: %d updates, the fault after %d", f, o.Updates, o.Updates/2)
		began := time.Now()
		r := s.runFault(ctx, f)
		r.Took = time.Since(began)
		progress("%s: runs %d, finished %d, failed %d, lost %d, late %d, behind %d, repeated %d, redelivered %d, overlapping %d, backwards %d, stall %.1fs (bound %.0fs), recovery %.1fs, took %.1fs %s",
			f, r.Runs, r.Finished, r.FailedRuns, r.Lost, r.Late, r.Behind, r.Repeated, r.Redelivered, r.Overlapping, r.Backwards, r.Stall.Seconds(), r.Bound.Seconds(), r.Recovery.Seconds(), r.Took.Seconds(), r.Err)
		m = append(m, r)
		if ctx.Err() != nil {
			break
		}
	}
	return m, nil
}

// runFault runs one fault in the middle of a stream of updates: half of
// them Pace apart, the fault, one update while it is in effect, the end
// of the fault, Hold with that version the newest (so it is owed to
// every component), then the rest Pace apart. It then waits for every
// component to settle and reads the ledger.
func (s *stack) runFault(ctx context.Context, fault string) Row {
	row := Row{Fault: fault, Bound: s.o.ProgressBound}
	if strings.HasPrefix(fault, "replace-") || s.o.Dynamic {
		// A new identity: the group first lets the dead member go.
		row.Bound = s.o.ReplaceBound
	}
	if fault == FaultPauseNotifier {
		// The second notifier joins before the stream, so that both
		// hold notifications when the first is paused.
		if err := s.startPeer(ctx, topology.StageAgentNotifier); err != nil {
			row.Err = err.Error()
			return row
		}
		defer s.stopPeer(ctx, topology.StageAgentNotifier)
	}
	s.obs.reset()
	rewinds := s.rewinds()
	from := time.Now()
	pause := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for i := 0; i < s.o.Updates/2; i++ {
		if err := s.publish(ctx, policyID(i%s.o.Policies)); err != nil {
			row.Err = err.Error()
			return row
		}
		pause(s.o.Pace)
	}
	s.obs.faultStarts()
	faultDone := s.inject(ctx, fault)
	// Published while the fault is in effect (again until the North API
	// takes it, when the fault is the North API's).
	if err := s.publishAll(ctx); err != nil {
		row.Err = err.Error()
		return row
	}
	if err := <-faultDone; err != nil {
		row.Err = err.Error()
		return row
	}
	ended := s.obs.faultEnds()
	row.Note = s.takeNote()
	pause(s.o.Hold)
	for i := s.o.Updates / 2; i < s.o.Updates; i++ {
		if err := s.publish(ctx, policyID(i%s.o.Policies)); err != nil {
			row.Err = err.Error()
			return row
		}
		pause(s.o.Pace)
	}
	behind, _ := s.settle(ctx)
	row.Recovery = time.Since(ended)
	row.Behind = len(behind)
	// The runs still under way end before the ledger is read: a run
	// counted later (a repeat, an overlap) must not be missed.
	for deadline := time.Now().Add(ScriptRun + WebhookDelay + 10*time.Second); s.obs.open() > 0 && time.Now().Before(deadline); {
		pause(50 * time.Millisecond)
	}
	row.Counters, row.Stall, row.Details = s.obs.verdict(from, s.o.OwedAfter, row.Bound, time.Now())
	row.Details = append(row.Details, behind...)
	var rewound []string
	row.Rewound, rewound = rewindsSince(rewinds, s.rewinds())
	row.Details = append(row.Details, rewound...)
	if fault == FaultPauseNotifier {
		row.Note = s.pausedNote()
	}
	if err := s.alive(); err != nil {
		row.Err = err.Error()
	}
	return row
}

// publishAll publishes the next version of every policy.
func (s *stack) publishAll(ctx context.Context) error {
	for p := 0; p < s.o.Policies; p++ {
		if err := s.publish(ctx, policyID(p)); err != nil {
			return err
		}
	}
	return nil
}

// inject starts the fault and returns once it is in effect (the process
// killed, the broker or Consul stopped, the container cut off, the storm
// begun); the channel gets its outcome once it is over.
func (s *stack) inject(ctx context.Context, fault string) <-chan error {
	done := make(chan error, 1)
	inEffect := make(chan struct{})
	var once sync.Once
	started := func() { once.Do(func() { close(inEffect) }) }
	go func() {
		err := s.fault(ctx, fault, started)
		started()
		done <- err
	}()
	<-inEffect
	return done
}

func (s *stack) fault(ctx context.Context, fault string, started func()) error {
	switch {
	case fault == FaultNone:
		started()
		return nil
	case fault == FaultPauseNotifier:
		return s.pause(ctx, topology.StageAgentNotifier, started)
	case strings.HasPrefix(fault, "kill-"):
		name := strings.TrimPrefix(fault, "kill-")
		s.procMu.Lock()
		p := s.procs[name]
		s.procMu.Unlock()
		p.Kill()
		started()
		if _, err := s.start(name, ""); err != nil {
			return err
		}
		return nil
	case strings.HasPrefix(fault, "replace-"):
		return s.replace(ctx, strings.TrimPrefix(fault, "replace-"), started)
	case fault == FaultScriptFails:
		return s.scriptsFail(ctx, started)
	case fault == FaultConsulEdit:
		return s.editConsul(ctx, started)
	case fault == FaultBrokerRestart:
		s.broker.Close()
		started()
		return s.startBroker(s.brokerAddr)
	case clusterFault(fault):
		note, err := s.clusterFault(ctx, fault, started)
		s.setNote(note)
		return err
	case fault == FaultConsulDown:
		s.consulMu.Lock()
		a := s.consul
		s.consulMu.Unlock()
		if err := a.Stop(); err != nil {
			return fmt.Errorf("stop Consul: %w", err)
		}
		started()
		s.watchTruth(ctx, time.Now().Add(s.o.ConsulDown))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.startConsul(ctx, s.consulAddr)
	case fault == FaultRebalanceStorm:
		started()
		return s.storm(ctx)
	case fault == FaultConsulLeaderLoss:
		return s.cluster.killLeader(ctx, started)
	case fault == FaultNetworkDisconnected:
		return s.cluster.disconnect(ctx, ContainerStage, s.o.Disconnected, started)
	}
	return fmt.Errorf("unknown fault %q", fault)
}

// storm makes a second member of every consumer stage join, waits until
// it is ready (it has its partitions), and makes it leave (drained), for
// StormRounds rounds; every join and every leave is a rebalance of the
// stage's group.
func (s *stack) storm(ctx context.Context) error {
	for round := 0; round < s.o.StormRounds; round++ {
		var wg sync.WaitGroup
		errs := make([]error, len(Stages))
		for i, name := range Stages {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := s.start(name, "-storm")
				if err != nil {
					errs[i] = err
					return
				}
				if err := s.ready(ctx, name+"-storm"); err != nil {
					errs[i] = err
				}
				p.Stop()
				s.procMu.Lock()
				delete(s.procs, name+"-storm")
				s.procMu.Unlock()
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// ShippedSessionTimeout is the session timeout the Kubernetes manifests
// give every stage (PF_SESSION_TIMEOUT in deploy/k8s/config.yaml under
// root), so that the matrix runs the stages as they are shipped: static
// members under their pod's name with that timeout.
func ShippedSessionTimeout(root string) (time.Duration, error) {
	path := filepath.Join(root, "deploy", "k8s", "config.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || k != "PF_SESSION_TIMEOUT" {
			continue
		}
		d, err := time.ParseDuration(strings.Trim(strings.TrimSpace(v), `"'`))
		if err != nil {
			return 0, fmt.Errorf("%s: PF_SESSION_TIMEOUT: %w", path, err)
		}
		return d, nil
	}
	return 0, fmt.Errorf("%s sets no PF_SESSION_TIMEOUT", path)
}
