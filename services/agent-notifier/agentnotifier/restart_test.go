package agentnotifier

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// notifierChildEnv, when set, makes TestNotifierChild an agent-notifier
// of its own: the test binary, run as a child process, stands in for a
// notifier that is killed (SIGKILL) in the middle of a notification. It
// holds a childSpec in JSON.
const notifierChildEnv = "PF_TEST_NOTIFIER_CHILD"

// childSpec is what the child notifier does: with the Consul agent at
// Consul, scripts allowed from Scripts and the instance id Instance, it
// notifies generation Gen of component ID by Script, and then waits to be
// killed.
type childSpec struct {
	Consul, Scripts, Instance string
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
	cfg.Consul = consulkv.Config{Addr: spec.Consul}
	n := &notifier{cfg: cfg}
	env := stagetest.Env(runtime.Kafka{})
	env.InstanceID = spec.Instance
	h, _, err := n.setup(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	target := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: spec.Script}
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
	elsewhere := *n.runner
	elsewhere.PIDNS = "pid:[4026599999]"
	n.runner = &elsewhere
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

	kill(t, notifierProcess(t, childSpec{Consul: consulCfg.Addr, Scripts: scripts, Instance: instance, ID: id, Gen: 1, Script: script}, ledger), ledger)
	p, _, err := consul.KV().Get(consulkv.ClaimKey(id), nil)
	if err != nil || p == nil {
		t.Fatalf("claim: %v %v", p, err)
	}
	left, err := consulkv.ParseClaim(p.Value)
	until, leased := leaseEnd(&left)
	if done, _ := left.Finished(); err != nil || done || left.Instance != instance || !leased || time.Until(until) < 2*restartBound {
		t.Fatalf("claim as the killed notifier left it: %+v (%v); want it unfinished, naming instance %s, its lease running well past %s from now", left, err, instance, 2*restartBound)
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
	if took := time.Duration(runs[1].first - restarted.UnixNano()); took > restartBound {
		t.Fatalf("the restarted notifier ran the notification %s after it started, want within %s (the lease ran until %s)", took, restartBound, until.Format(time.RFC3339Nano))
	}
}
