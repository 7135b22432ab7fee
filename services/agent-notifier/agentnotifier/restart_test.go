package agentnotifier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// inAContainer is r as a notifier in a container of its own names itself:
// in a PID namespace of its own, whose processes no other notifier of the
// machine sees (visible).
func inAContainer(r *consulkv.Runner) *consulkv.Runner {
	c := *r
	c.PIDNS = fmt.Sprintf("pid:[%d]", 4026500000+os.Getpid())
	return &c
}

// notifierChildEnv, when set, makes TestNotifierChild an agent-notifier
// of its own: the test binary, run as a child process, stands in for a
// notifier in a container of its own that is killed (SIGKILL) in the
// middle of a notification. It holds a childSpec in JSON.
const notifierChildEnv = "PF_TEST_NOTIFIER_CHILD"

// childSpec is what the child notifier does: with the Consul agent at
// Consul, scripts allowed from Scripts, the instance id Instance and the
// lease Lease, it notifies generation Gen of component ID by Script
// (with the timeout Timeout), and then waits to be killed.
type childSpec struct {
	Consul, Scripts, Instance string
	Lease, Timeout            time.Duration
	ID, Script                string
	Gen                       int64
}

func TestNotifierChild(t *testing.T) {
	raw := os.Getenv(notifierChildEnv)
	if raw == "" {
		t.Skip("run by the tests that kill a notifier")
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, spec.Scripts)
	cfg.Consul, cfg.Lease = consulkv.Config{Addr: spec.Consul}, spec.Lease
	n := &notifier{cfg: cfg}
	env := stagetest.Env(runtime.Kafka{})
	env.InstanceID = spec.Instance
	h, _, err := n.setup(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	n.runner = inAContainer(n.runner)
	target := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: spec.Script, TimeoutMs: int32(spec.Timeout / time.Millisecond)}
	if out := h(context.Background(), []runtime.Input{input(update(spec.ID, spec.Gen, target))}); out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	time.Sleep(10 * time.Minute) // until killed
}

// notifierProcess starts a notifier in a process of its own that notifies
// as spec says, and returns it once the script it ran wrote to ledger.
func notifierProcess(t *testing.T, spec childSpec, ledger string) *exec.Cmd {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNotifierChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), notifierChildEnv+"="+string(raw))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	testkit.Eventually(t, 90*time.Second, func() error {
		select {
		case <-exited:
			t.Fatalf("the notifier process ended before its script ran: %s", out.String())
		default:
		}
		if len(ledgerRuns(t, ledger)) == 0 {
			return errors.New("the script of the notifier process wrote nothing to its ledger yet")
		}
		return nil
	})
	return cmd
}

// kill kills a notifier process (SIGKILL) and waits until the script it
// ran ended too (the kernel kills it with the notifier, on Linux): as a
// container is killed, what ran in it ends with it.
func kill(t *testing.T, cmd *exec.Cmd, ledger string) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(ledgerRuns(t, ledger)[0].pid)
	testkit.Eventually(t, 10*time.Second, func() error {
		if state, _, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
			return fmt.Errorf("the script (pid %d) of the killed notifier still runs", pid)
		}
		return nil
	})
}

// notifierAs is a notifier with the instance id instance (none when
// empty), scripts allowed from scriptDirs, that cannot see the processes
// of the other notifiers of this machine, as a notifier started in a new
// PID namespace (a restarted container) cannot; and its batch handler.
func notifierAs(t *testing.T, consulCfg consulkv.Config, instance string, scriptDirs ...string) (*notifier, runtime.BatchHandler) {
	t.Helper()
	n := &notifier{cfg: testConfig(t, scriptDirs...)}
	n.cfg.Consul = consulCfg
	env := stagetest.Env(runtime.Kafka{})
	env.InstanceID = instance
	h, closeFn, err := n.setup(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	n.runner = inAContainer(n.runner)
	return n, h
}

// restartBound is how soon a notifier restarted under its instance id
// takes over the claim its previous run left unfinished: at once, give or
// take a slow machine; far below any lease.
const restartBound = 10 * time.Second

// A notifier killed in the middle of a notification and started again
// under the same instance id in a new PID namespace (a container
// restarted in its pod), where it cannot see its previous run's
// processes, takes the claim its previous run left unfinished over at
// once, its lease notwithstanding: static membership lets one live member
// hold the id, and the previous run's script died with it. A notifier of
// another instance id, or of none, cannot tell the killed one from one
// that still runs: it waits for the lease.
func TestRestartUnderTheSameInstanceIDTakesOverAtOnce(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("the script dies with its notifier through Linux's parent-death signal")
	}
	consulCfg, consul := stagetest.Consul(t)
	scripts := t.TempDir()
	ledger := filepath.Join(t.TempDir(), "ledger")
	script := ledgerScript(t, scripts, ledger, 30)
	const id, instance = "restarted", "agent-notifier-0"
	a := update(id, 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script})
	holdGeneration(t, consul, 1, id)

	// Its lease is long: a takeover at once is not its lease ending.
	old := childSpec{Consul: consulCfg.Addr, Scripts: scripts, Instance: instance, Lease: time.Minute, ID: id, Gen: 1, Script: script}
	kill(t, notifierProcess(t, old, ledger), ledger)
	p, _, err := consul.KV().Get(consulkv.ClaimKey(id), nil)
	if err != nil || p == nil {
		t.Fatalf("claim: %v %v", p, err)
	}
	left, err := consulkv.ParseClaim(p.Value)
	until, leased := leaseEnd(&left)
	if done, _ := left.Finished(); err != nil || done || left.Instance != instance || !leased || time.Until(until) < 2*restartBound || visible(left.Runner, thisRunner()) {
		t.Fatalf("claim as the killed notifier left it: %+v (%v); want it unfinished, naming instance %s, its lease running well past %s from now, its process one this one cannot see", left, err, instance, 2*restartBound)
	}

	ctx := context.Background()
	for _, other := range []string{"agent-notifier-1", ""} {
		_, h := notifierAs(t, consulCfg, other, scripts)
		if err := h(ctx, []runtime.Input{input(a)})[0].Err; !errors.Is(err, ErrClaimTaken) || !strings.Contains(err.Error(), "its lease ends at") {
			t.Fatalf("a notifier under instance id %q: %v; want it to wait for the lease (ErrClaimTaken)", other, err)
		}
	}

	restarted := time.Now()
	n, h := notifierAs(t, consulCfg, instance, scripts)
	if err := h(ctx, []runtime.Input{input(a)})[0].Err; err != nil {
		t.Fatalf("the notifier restarted under instance id %s did not take the claim over at once: %v", instance, err)
	}
	got, _ := waitClaim(t, consul, id, a.UpdateID)
	if done, ok := got.Finished(); !done || !ok || got.Owner != n.owner || got.Instance != instance {
		t.Fatalf("claim after the restart: %+v; want it finished ok by the restarted notifier %s", got, n.owner)
	}
	runs := checkLedger(t, ledger)
	if len(runs) != 2 || runs[0].ended || !runs[1].ended {
		t.Fatalf("ledger runs %+v; want the killed notifier's run cut short, then the restarted one's to its end", runs)
	}
	took := time.Duration(runs[1].first - restarted.UnixNano())
	t.Logf("the restarted notifier ran the notification %s after it started; the lease ran %s longer", took, time.Until(until).Round(time.Second))
	if took > restartBound {
		t.Fatalf("the restarted notifier ran the notification %s after it started, want within %s (the lease ran until %s)", took, restartBound, until.Format(time.RFC3339Nano))
	}
}

// ledgerScriptByGeneration is ledgerScript whose runs take ticks[gen] ticks
// for generation gen ($POLICYFLOW_GENERATION), 5 for the others.
func ledgerScriptByGeneration(t *testing.T, dir, ledger string, ticks map[int64]int) string {
	t.Helper()
	line := func(kind string) string {
		return fmt.Sprintf(`echo "%s $POLICYFLOW_UPDATE_ID $$ $(date +%%s%%N)" >> %s`, kind, ledger)
	}
	choose := "n=5\n"
	for gen, n := range ticks {
		choose += fmt.Sprintf("[ \"$POLICYFLOW_GENERATION\" = %d ] && n=%d\n", gen, n)
	}
	return writeScript(t, dir, "ledger.sh", fmt.Sprintf("%s\n%si=0\nwhile [ $i -lt $n ]; do sleep 0.1; %s; i=$((i+1)); done\n%s\n",
		line("start"), choose, line("tick"), line("end")))
}

// leasedStage is the agent-notifier stage (stageOn) with the lease lease,
// set by its flag.
func leasedStage(t *testing.T, consulCfg consulkv.Config, lease time.Duration, scriptDirs ...string) runtime.Stage {
	t.Helper()
	s := StageWith(testConfig(t, scriptDirs...))
	fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
	s.Flags(fs)
	if err := fs.Parse([]string{"--consul-addr", consulCfg.Addr, "--notify-lease", lease.String()}); err != nil {
		t.Fatal(err)
	}
	return s
}

// replaceSlack is how long after the lease of a killed notifier's last
// renewal ended its replacement may take to run the newer generation: a
// generous bound for a slow machine (it takes a few milliseconds).
const replaceSlack = 5 * time.Second

// A notifier's claim is held by its lease, renewed while its notification
// runs however long it takes (here ten leases): a replacement under a new
// instance id, given a newer generation of the component, waits. Once the
// notifier is killed its renewals stop, and the replacement takes over
// when the lease of the last renewal ended, not before and soon after,
// whatever the notify timeout (a minute here): the component's runs do
// not overlap, and the newer generation runs within the lease (and some
// slack) of the killed notifier's last renewal.
func TestReplacementTakesOverWhenTheLeaseOfTheLastRenewalEnds(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("the script dies with its notifier through Linux's parent-death signal")
	}
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	const id, lease, timeout = "replaced", 2 * time.Second, time.Minute
	scripts := t.TempDir()
	ledger := filepath.Join(t.TempDir(), "ledger")
	script := ledgerScriptByGeneration(t, scripts, ledger, map[int64]int{1: int(10 * lease / (100 * time.Millisecond))})
	target := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script, TimeoutMs: int32(timeout / time.Millisecond)}

	holdGeneration(t, consul, 1, id)
	old := notifierProcess(t, childSpec{Consul: consulCfg.Addr, Scripts: scripts, Instance: "agent-notifier-0", Lease: lease, Timeout: timeout, ID: id, Gen: 1, Script: script}, ledger)
	holdGeneration(t, consul, 2, id)
	env := stagetest.Env(c.Kafka)
	env.InstanceID = "agent-notifier-1"
	stagetest.Run(t, leasedStage(t, consulCfg, lease, scripts), env)
	c.Produce(t, topology.ComponentApplied, id, update(id, 2, target))

	// The old notifier's run goes on for three leases: renewed, its
	// claim holds the replacement back.
	testkit.Eventually(t, time.Minute, func() error {
		switch runs := ledgerRuns(t, ledger); {
		case len(runs) > 1:
			checkLedger(t, ledger)
			t.Fatalf("ledger runs %+v: another run started while the old notifier was alive and its run went on", runs)
		case len(runs) == 1 && runs[0].ended:
			t.Fatalf("ledger run %+v: the old notifier's run ended before it was killed", runs[0])
		case len(runs) == 0 || time.Duration(runs[0].end-runs[0].first) < 3*lease:
			return errors.New("the old notifier's run has not gone on for three leases yet")
		}
		return nil
	})
	kill(t, old, ledger)
	p, _, err := consul.KV().Get(consulkv.ClaimKey(id), nil)
	if err != nil || p == nil {
		t.Fatalf("claim: %v %v", p, err)
	}
	left, err := consulkv.ParseClaim(p.Value)
	ended, ok := leaseEnd(&left)
	claimedAt, _ := time.Parse(time.RFC3339Nano, left.At)
	if err != nil || !ok || left.Generation != 1 || ended.Sub(claimedAt) < 3*lease {
		t.Fatalf("claim as the killed notifier left it: %+v (%v); want generation 1's, its lease renewed for three leases and more", left, err)
	}

	got, _ := waitClaim(t, consul, id, id+"-u2")
	if done, ok := got.Finished(); !done || !ok || got.Instance != env.InstanceID {
		t.Fatalf("claim of generation 2: %+v; want it finished ok by the replacement", got)
	}
	runs := checkLedger(t, ledger)
	if len(runs) != 2 || runs[0].ended || runs[1].update != id+"-u2" || !runs[1].ended {
		t.Fatalf("ledger runs %+v; want the killed notifier's run of generation 1 cut short, then generation 2 to its end", runs)
	}
	after := time.Duration(runs[1].first - ended.UnixNano())
	t.Logf("the killed notifier's lease, renewed every %s, ended %s after its last renewal; generation 2 ran %s after that", lease/5, lease, after)
	if after < 0 || after > replaceSlack {
		t.Fatalf("generation 2 ran %s after the lease of the killed notifier's last renewal ended (%s); want after it, within %s",
			after, ended.Format(time.RFC3339Nano), replaceSlack)
	}
}

// The leases of the notifications under way are renewed together: one
// check-and-set transaction per renewal for all of them, not one per
// component. Held for three leases, the runs all go on to their end.
func TestRenewalsOfRunsUnderWayAreBatched(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	const comps, lease = 40, 2 * time.Second
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	hooks := newHookServer(t, func(string) { <-release })
	ids := make([]string, comps)
	for i := range ids {
		ids[i] = fmt.Sprintf("renewed-%02d", i)
	}
	holdGeneration(t, consul, 1, ids...)
	counter := consulkv.NewRequestCounter()
	consulCfg.Requests = counter
	cfg := testConfig(t)
	cfg.Lease, cfg.Concurrency = lease, comps
	h := batchHandler(t, consulCfg, cfg)
	t.Cleanup(free) // before the handler's close waits for the webhooks
	ins := make([]runtime.Input, comps)
	for i, id := range ids {
		ins[i] = input(update(id, 1, webhook(hooks.URL+"/"+id)))
	}
	for i, oc := range h(context.Background(), ins) {
		if oc.Err != nil {
			t.Fatalf("input %d: %v", i, oc.Err)
		}
	}
	testkit.Eventually(t, time.Minute, func() error {
		if n := int(hooks.came.Load()); n < comps {
			return fmt.Errorf("%d of %d webhooks called", n, comps)
		}
		return nil
	})
	before := counter.Counts()
	time.Sleep(3 * lease)
	held := counter.Counts().Since(before)
	free()
	waitOutcomes(t, consul, "renewed-", comps)
	pairs, _, err := consul.KV().List("renewed-", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pairs {
		if cl, err := consulkv.ParseClaim(p.Value); err == nil && cl.ExitCode != nil && (cl.Outcome != consulkv.OutcomeOK || cl.Attempts != 1) {
			t.Errorf("claim %s: %+v; want the one run to have ended ok", p.Key, cl)
		}
	}
	txns, ops := held.TxnsOf("kv cas"), held.OpsOf("kv cas")
	t.Logf("while %d runs went on for %s (lease %s, renewed every %s): %s", comps, 3*lease, lease, lease/5, held)
	// Every claim renewed about every fifth of the lease: some 15 times
	// each; a transaction for all of them each time.
	if ops < comps*5 || txns == 0 || ops/txns < comps/2 || held.Total() != txns {
		t.Fatalf("%d check-and-set transactions of %d operations in all (%d requests) while the runs went on; want the %d claims renewed again and again, all together in each transaction, and nothing else",
			txns, ops, held.Total(), comps)
	}
}

// A notification whose lease cannot be renewed (Consul does not answer
// the notifier any more) is stopped before its lease ends, by the
// notifier's own clock: its run does not go on past a lease Consul
// confirmed, and nothing is recorded.
func TestRunIsStoppedWhenItsLeaseCannotBeRenewed(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	const id, lease = "unrenewed", 2 * time.Second
	cut := make(chan time.Time, 1)
	rc := newReceiver(t, func(r *http.Request, _ http.ResponseWriter, _ string, _ int64, _ int) {
		<-r.Context().Done()
		cut <- time.Now()
	})
	n, _ := notifierWith(t, consulCfg, &aheadClock{}, func(c *Config) { c.Lease = lease })
	holdGeneration(t, consul, 1, id)
	ctx := context.Background()
	todo, err := n.read(ctx, jobsOf(t, n, update(id, 1, rc.hook(id, time.Minute))), func(j *job, err error) { t.Fatalf("read %s: %v", j.key, err) })
	if err != nil || len(todo) != 1 {
		t.Fatalf("read: %d jobs, %v", len(todo), err)
	}
	if claimed := n.claimAll(ctx, todo, func(j *job, err error) { t.Fatalf("claim %s: %v", j.key, err) }); len(claimed) != 1 {
		t.Fatalf("%d claimed", len(claimed))
	}
	j := todo[0]
	// From now on Consul does not answer this notifier.
	dead, err := api.NewClient(&api.Config{Address: "127.0.0.1:" + strconv.Itoa(stagetest.FreePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	n.txn = dead.Txn()
	if n.notify(ctx, j) || !j.unrecorded || j.lost {
		t.Fatalf("notification went on (unrecorded %v, lost %v); want it stopped, unrecorded", j.unrecorded, j.lost)
	}
	stopped := <-cut
	if guard, end := j.leased.Add(lease-n.fenceMargin()), j.leased.Add(lease); stopped.Before(guard) || stopped.After(end) {
		t.Fatalf("the run was stopped %s after its lease was written; want %s to %s (its guard, before the lease ends)", stopped.Sub(j.leased), lease-n.fenceMargin(), lease)
	}
	if got := rc.of(t, id); !sameGenerations(got, 1) {
		t.Fatalf("component sent %v, want generation 1 once", got)
	}
}
