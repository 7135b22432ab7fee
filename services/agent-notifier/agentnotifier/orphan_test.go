package agentnotifier

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// ledgerScript is a reconfigure script that takes a while: it appends
// "start <update> <pid> <ns>", then "tick <update> <pid> <ns>" every
// 100 ms, ticks times, then "end <update> <pid> <ns>" to ledger, so that
// the ledger shows when each run ran and whether it finished.
func ledgerScript(t *testing.T, dir, ledger string, ticks int) string {
	t.Helper()
	line := func(kind string) string {
		return fmt.Sprintf(`echo "%s $POLICYFLOW_UPDATE_ID $$ $(date +%%s%%N)" >> %s`, kind, ledger)
	}
	return writeScript(t, dir, "ledger.sh", fmt.Sprintf("%s\ni=0\nwhile [ $i -lt %d ]; do sleep 0.1; %s; i=$((i+1)); done\n%s\n",
		line("start"), ticks, line("tick"), line("end")))
}

// ledgerRun is one run of a ledger script: from its start to its last
// line, and whether it ended.
type ledgerRun struct {
	update     string
	pid        string
	first, end int64
	ended      bool
}

// ledgerRuns reads a ledger into its runs, in the order they started.
func ledgerRuns(t *testing.T, ledger string) []*ledgerRun {
	t.Helper()
	f, err := os.Open(ledger)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*ledgerRun
	byPID := map[string]*ledgerRun{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			t.Fatalf("ledger line %q", sc.Text())
		}
		at, err := strconv.ParseInt(fs[3], 10, 64)
		if err != nil {
			t.Fatalf("ledger line %q: %v", sc.Text(), err)
		}
		r := byPID[fs[2]]
		if fs[0] == "start" {
			r = &ledgerRun{update: fs[1], pid: fs[2], first: at}
			byPID[fs[2]] = r
			out = append(out, r)
		}
		if r == nil {
			t.Fatalf("ledger line %q of a run that never started", sc.Text())
		}
		r.end, r.ended = at, r.ended || fs[0] == "end"
	}
	return out
}

// checkLedger fails the test when two runs overlapped or a run of an
// update that had ended ran again; it returns the runs.
func checkLedger(t *testing.T, ledger string) []*ledgerRun {
	t.Helper()
	runs := ledgerRuns(t, ledger)
	for k := 1; k < len(runs); k++ {
		prev, r := runs[k-1], runs[k]
		if r.first <= prev.end {
			t.Errorf("run %d (pid %s, %s) started %s before run %d (pid %s, %s) wrote its last line: they overlapped",
				k+1, r.pid, r.update, time.Duration(prev.end-r.first), k, prev.pid, prev.update)
		}
		for _, p := range runs[:k] {
			if p.ended && p.update == r.update {
				t.Errorf("update %s ran again (pid %s) after a run of it (pid %s) had finished", r.update, r.pid, p.pid)
			}
		}
	}
	return runs
}

// deadRunner names a notifier process of this machine that has ended.
func deadRunner(t *testing.T) *consulkv.Runner {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	r := thisRunner()
	r.PID, r.Start = cmd.Process.Pid, 1
	return r
}

// A notifier that died left its component's script running (as a script
// whose notifier had no parent-death signal, or a child the script
// started, does) and its claim unfinished, within its lease. The notifier
// started next on the same machine sees the owner gone, stops what it left
// running, and only then runs the notification again, or the component's
// next generation: the runs do not overlap, and the update runs to its
// end once.
func TestTakeoverStopsWhatTheDeadNotifierLeftRunning(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("a notifier sees the processes of a dead one through /proc")
	}
	t.Run("same generation", func(t *testing.T) { takeOverFromTheDead(t, 1) })
	t.Run("a newer generation", func(t *testing.T) { takeOverFromTheDead(t, 2) })
}

// takeOverFromTheDead runs TestTakeoverStopsWhatTheDeadNotifierLeftRunning
// with generation 1 left running, and the record of generation gen.
func takeOverFromTheDead(t *testing.T, gen int64) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	ledger := filepath.Join(t.TempDir(), "ledger")
	script := ledgerScript(t, scripts, ledger, 30)
	const id = "orphaned"
	target := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script}
	left, a := update(id, 1, target), update(id, gen, target)
	holdGeneration(t, consul, gen, id)

	// As the dead notifier left it: its script running, its claim
	// unfinished and leased for an hour.
	host, _ := os.Hostname()
	dead := host + "/dead-run"
	orphan := exec.Command(script, ReconfigureType, "{}")
	orphan.Env = append(notifytarget.ScriptEnv(), Delivery{ComponentID: id, UpdateID: left.UpdateID, Generation: 1, Run: dead}.Env()...)
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- orphan.Wait() }()
	t.Cleanup(func() { _ = orphan.Process.Kill() })
	now := time.Now().UTC()
	cl := consulkv.Claim{UpdateID: left.UpdateID, Generation: 1, At: now.Format(time.RFC3339Nano), LeaseUntil: now.Add(time.Hour).Format(time.RFC3339Nano),
		Owner: dead, Runner: deadRunner(t), ConsulIndex: left.ConsulIndex}
	if _, err := consul.KV().Put(&api.KVPair{Key: consulkv.ClaimKey(id), Value: cl.JSON()}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if len(ledgerRuns(t, ledger)) == 0 {
			return errors.New("the orphaned script wrote nothing to its ledger")
		}
		return nil
	})

	c.Produce(t, topology.ComponentApplied, id, a)
	stagetest.Run(t, stageOn(t, consulCfg, scripts), stagetest.Env(c.Kafka))
	got, _ := waitClaim(t, consul, id, a.UpdateID)
	if done, ok := got.Finished(); !done || !ok || got.Owner == dead {
		t.Fatalf("claim after the takeover: %+v, want it finished ok by the new notifier", got)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the script the dead notifier left running still runs")
	}
	runs := checkLedger(t, ledger)
	if len(runs) != 2 || runs[0].ended || !runs[1].ended || runs[1].update != a.UpdateID {
		t.Fatalf("ledger runs %+v, want the orphaned run stopped unfinished and one run of %s to its end", runs, a.UpdateID)
	}
	// The stopped run counts as an attempt of its generation when the
	// pass that killed it is the one that claims; a claim retried after
	// a busy Consul finds nothing left to kill and counts the finished
	// run only. A newer generation counts its own runs only.
	if gen == 1 && got.Attempts != 2 && got.Attempts != 1 || gen > 1 && got.Attempts != 1 {
		t.Errorf("claim says %d attempts, want 2 (the run stopped and the run that finished), or 1 (1 only for a newer generation)", got.Attempts)
	}
}

// runScriptChildEnv, when set, makes TestRunScriptChild a notifier that
// runs the script it names: the test binary, run as a child process,
// stands in for an agent-notifier that is killed.
const runScriptChildEnv = "PF_TEST_RUN_SCRIPT_CHILD"

func TestRunScriptChild(t *testing.T) {
	script := os.Getenv(runScriptChildEnv)
	if script == "" {
		t.Skip("run by TestScriptDiesWithTheNotifier")
	}
	rules, err := notifytarget.Config{ScriptDirs: []string{filepath.Dir(script)}}.Rules()
	if err != nil {
		t.Fatal(err)
	}
	RunScript(context.Background(), rules, script, Delivery{ComponentID: "c", UpdateID: "u-child", Generation: 1}, []byte("{}"), time.Minute)
}

// A notifier killed (SIGKILL) while its script runs leaves no script
// running: the kernel kills the script with it.
func TestScriptDiesWithTheNotifier(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	scripts := t.TempDir()
	ledger := filepath.Join(t.TempDir(), "ledger")
	script := ledgerScript(t, scripts, ledger, 100)
	child := exec.Command(os.Args[0], "-test.run=^TestRunScriptChild$", "-test.count=1")
	child.Env = append(os.Environ(), runScriptChildEnv+"="+script)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	testkit.Eventually(t, 30*time.Second, func() error {
		if len(ledgerRuns(t, ledger)) == 0 {
			return errors.New("the notifier's script wrote nothing to its ledger")
		}
		return nil
	})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	pid, _ := strconv.Atoi(ledgerRuns(t, ledger)[0].pid)
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	testkit.Eventually(t, 5*time.Second, func() error {
		if state, _, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
			return fmt.Errorf("the script (pid %d) still runs after its notifier was killed", pid)
		}
		return nil
	})
	if runs := ledgerRuns(t, ledger); runs[0].ended {
		t.Fatalf("the script ran to its end: %+v", runs[0])
	}
}

// A claim of a notifier on another machine names processes this one
// cannot see: a process here that carries the same run and component in
// its environment is not that notifier's, and is left alone.
func TestTakeoverLeavesProcessesItCannotSee(t *testing.T) {
	if goruntime.GOOS != "linux" {
		t.Skip("a notifier sees the processes of a dead one through /proc")
	}
	const id, owner = "elsewhere-claimed", "elsewhere/dead-run"
	proc := exec.Command("sleep", "60")
	proc.Env = append(notifytarget.ScriptEnv(), Delivery{ComponentID: id, UpdateID: id + "-u1", Generation: 1, Run: owner}.Env()...)
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	elsewhere := *thisRunner()
	elsewhere.Host = "elsewhere"
	n := &notifier{owner: "here/run", runner: thisRunner()}
	j := &job{a: &events.ComponentApplied{ComponentID: id, UpdateID: id + "-u1", Generation: 1}}
	killed, ok := n.stopLeft(&consulkv.Claim{UpdateID: id + "-u1", Generation: 1, Owner: owner, Runner: &elsewhere}, j)
	if killed != 0 || !ok {
		t.Fatalf("stopLeft of another machine's claim killed %d process(es) here (stopped %v), want none", killed, ok)
	}
	if state, _, found := procStat(proc.Process.Pid); !found || state == 'Z' || state == 'X' {
		t.Fatalf("the process (pid %d) that is not the claim's notifier's was stopped", proc.Process.Pid)
	}
}
