package agentnotifier

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// runsOf reads the update ids a script wrote, one line a run.
func runsOf(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// waitOutcome polls the claim of scn until check accepts it.
func waitOutcome(t *testing.T, consul *api.Client, scn, what string, check func(consulkv.Claim) bool) consulkv.Claim {
	t.Helper()
	var last consulkv.Claim
	testkit.Eventually(t, 60*time.Second, func() error {
		p, _, err := consul.KV().Get(consulkv.ClaimKey(scn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if p != nil {
			if last, err = consulkv.ParseClaim(p.Value); err == nil && check(last) {
				return nil
			}
		}
		return fmt.Errorf("claim of %s: %+v, want %s", scn, last, what)
	})
	return last
}

// catchUpOn asks for a catch-up on the partition of component id (the
// request lands on every partition in production; the notifier handles
// the partition of component.applied it is on); renotify names the
// component to notify again whatever its claim says.
func catchUpOn(t *testing.T, c *stagetest.Cluster, id, request string, renotify bool) {
	t.Helper()
	req := &events.CatchupRequest{RequestID: request, Scope: events.ScopeAll, Reason: "test", RequestedAt: time.Now().UTC()}
	if renotify {
		req.ComponentID = &id
	}
	c.Produce(t, topology.CatchupRequests, id, req)
}

// A script that fails every attempt is recorded failed; a catch-up runs it
// again (the script works by then), a second catch-up does not, and an
// operator's renotify runs it once more, once per request.
func TestCatchUpRunsAFailedNotificationAgain(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.CatchupRequests, topology.CatchupProgress, topology.DLQ(topology.StageAgentNotifier))
	scripts, state := t.TempDir(), t.TempDir()
	runs, broken := filepath.Join(state, "runs"), filepath.Join(state, "broken")
	script := writeScript(t, scripts, "flaky.sh", fmt.Sprintf("echo \"$POLICYFLOW_UPDATE_ID\" >> %s\nif [ -e %s ]; then echo broken >&2; exit 3; fi\n", runs, broken))
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stage := stageOn(t, consulCfg, scripts)
	stagetest.Run(t, stage, stagetest.Env(c.Kafka))
	const id = "flaky"
	holdGeneration(t, consul, 1, id)
	c.Produce(t, topology.ComponentApplied, id, update(id, 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script}))
	cl := waitOutcome(t, consul, id, "failed", func(c consulkv.Claim) bool { return c.Outcome == consulkv.OutcomeFailed })
	if cl.Attempts != DefaultAttempts || len(runsOf(t, runs)) != DefaultAttempts {
		t.Fatalf("claim %+v and %d runs, want %d attempts", cl, len(runsOf(t, runs)), DefaultAttempts)
	}

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	catchUpOn(t, c, id, "r1", false)
	cl = waitOutcome(t, consul, id, "ok after the catch-up", func(c consulkv.Claim) bool { return c.Outcome == consulkv.OutcomeOK })
	if n := len(runsOf(t, runs)); n != DefaultAttempts+1 {
		t.Fatalf("%d runs after the catch-up, want %d", n, DefaultAttempts+1)
	}
	prog := stagetest.Decode[*events.CatchupProgress](t, c.Read(t, topology.CatchupProgress, 1, 60*time.Second)[0])
	if prog.RequestID != "r1" || prog.Stage != events.ProgressAgentNotifier || prog.Compared != 1 || prog.Differed != 1 {
		t.Fatalf("catch-up progress %+v, want r1: 1 component looked at, 1 notification run again", prog)
	}

	// Notified with success: a catch-up leaves it be.
	before := cl.At
	catchUpOn(t, c, id, "r2", false)
	waitCommitted(t, c, stage.GroupIn(c.Kafka), topology.CatchupRequests)
	if got := waitOutcome(t, consul, id, "ok", func(c consulkv.Claim) bool { return c.Outcome == consulkv.OutcomeOK }); got.At != before {
		t.Fatalf("a catch-up claimed a notification that had succeeded: %+v", got)
	}

	// An operator asks: run again, once however often the request is read.
	catchUpOn(t, c, id, "r3", true)
	catchUpOn(t, c, id, "r3", true)
	waitOutcome(t, consul, id, "renotified for r3", func(c consulkv.Claim) bool { return c.Outcome == consulkv.OutcomeOK && c.Renotify == "r3" })
	waitCommitted(t, c, stage.GroupIn(c.Kafka), topology.CatchupRequests)
	waitOutcome(t, consul, id, "finished", func(c consulkv.Claim) bool { done, _ := c.Finished(); return done })
	if got := runsOf(t, runs); len(got) != DefaultAttempts+2 {
		t.Fatalf("runs %v, want %d: the failed ones, the catch-up's and one for the operator's request", got, DefaultAttempts+2)
	}
}

// The consul-writer's catch-up repaired a folder a component had been
// notified of (its record: the same generation, catch_up, a greater
// consul_index): the component is notified again, of every policy it
// holds, once.
func TestRepairedFolderIsNotifiedAgain(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.CatchupRequests, topology.CatchupProgress, topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	rec := newRecorder(t, scripts)
	target := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: rec.script}
	stagetest.Run(t, stageOn(t, consulCfg, scripts), stagetest.Env(c.Kafka))
	const id = "repaired"
	holdGeneration(t, consul, 1, id)
	a := update(id, 1, target)
	a.ConsulIndex = 10
	c.Produce(t, topology.ComponentApplied, id, a)
	waitOutcome(t, consul, id, "notified", func(c consulkv.Claim) bool { return c.Outcome == consulkv.OutcomeOK })

	repair := *a
	repair.CatchUp, repair.ConsulIndex, repair.UpdatedRefs = true, 20, nil
	c.Produce(t, topology.ComponentApplied, id, &repair)
	cl := waitOutcome(t, consul, id, "notified of the repair", func(c consulkv.Claim) bool { return c.Outcome == consulkv.OutcomeOK && c.ConsulIndex == 20 })
	calls := rec.calls(t)
	if len(calls) != 2 {
		t.Fatalf("script calls %q, want the update's and the repair's", calls)
	}
	for _, call := range calls {
		if call[1] != wantPayload(id, 1) {
			t.Fatalf("script call %q, want %s: the repaired policy told as updated", call, wantPayload(id, 1))
		}
	}
	// The repair's record read again, then the next update: one call more.
	c.Produce(t, topology.ComponentApplied, id, &repair)
	holdGeneration(t, consul, 2, id)
	c.Produce(t, topology.ComponentApplied, id, update(id, 2, target))
	waitOutcome(t, consul, id, "generation 2 notified", func(c consulkv.Claim) bool { return c.Generation == 2 && c.Outcome == consulkv.OutcomeOK })
	if calls := rec.calls(t); len(calls) != 3 {
		t.Fatalf("%d script calls, want 3: the repair read again was notified again (claim was %+v)", len(calls), cl)
	}
}
