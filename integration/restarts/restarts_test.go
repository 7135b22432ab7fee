package restarts

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/topology"
)

// components are n component ids, c000 on.
func components(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c%03d", i)
	}
	return out
}

// The consul-writer is stopped while three updates are published and
// reach the executor; started again, it brings Consul to the newest
// version, each component is notified of what it got, and nothing goes
// backwards.
func TestConsulWriterStoppedWhileThreeUpdatesArePublished(t *testing.T) {
	s := newStack(t)
	const pid = "RS.Config_writer"
	comps := components(10)
	watch := s.watchConsul(comps, pid)
	s.register(comps, []string{pid}, s.webhook)
	s.publish(pid, 1)
	s.waitConsul(comps, pid, 1)
	s.waitNotified(comps, pid, 1)

	s.stop(topology.StageConsulWriter)
	for v := 2; v <= 4; v++ {
		s.publish(pid, v)
	}
	s.waitExecuted(comps, pid, 4)
	began := s.restart(topology.StageConsulWriter)
	s.waitConsul(comps, pid, 4)
	t.Logf("every component held version 4 in Consul %s after the consul-writer was started", time.Since(began).Round(time.Millisecond))
	s.waitNotified(comps, pid, 4)
	s.noProblems(watch)
}

// The executor is killed (SIGKILL) after it took in an update of 200
// components and before every one of them has it in Consul; started
// again, it brings every component to the newest version, and no
// component is notified of a generation twice or goes backwards.
func TestExecutorKilledMidBatch(t *testing.T) {
	s := newStack(t)
	const pid = "RS.Config_executor"
	comps := components(200)
	watch := s.watchConsul(comps, pid)
	s.register(comps, []string{pid}, s.webhook)
	s.publish(pid, 1)
	s.waitConsul(comps, pid, 1)
	s.waitNotified(comps, pid, 1)

	// The kill comes as soon as the executor counts the update's first
	// record in: unless it has done the whole update by then, it is in
	// the middle of it. A kill that came too late is tried again with
	// the next version.
	v, began := 1, time.Time{}
	for attempt := 1; ; attempt++ {
		v++
		before := s.metric(topology.StageExecutor, "policyflow_records_in_total", `stage="executor"`, "policy.segments")
		s.publish(pid, v)
		// Polled without a pause: the executor takes well under a
		// second over the whole update.
		deadline := time.Now().Add(settle)
		for s.metric(topology.StageExecutor, "policyflow_records_in_total", `stage="executor"`, "policy.segments") <= before {
			if time.Now().After(deadline) {
				t.Fatalf("the executor took no record of version %d in within %s", v, settle)
			}
		}
		s.kill(topology.StageExecutor)
		held := 0
		for _, got := range s.inConsul(comps, pid) {
			if got == v {
				held++
			}
		}
		t.Logf("attempt %d: executor killed with %d of %d components holding version %d in Consul", attempt, held, len(comps), v)
		began = s.restart(topology.StageExecutor)
		if held < len(comps) {
			break
		}
		if attempt == 5 {
			t.Fatalf("the executor finished every update before it was killed, %d times: no kill came mid-batch", attempt)
		}
	}
	s.waitConsul(comps, pid, v)
	t.Logf("every component held version %d in Consul %s after the executor was started", v, time.Since(began).Round(time.Millisecond))
	s.waitNotified(comps, pid, v)
	s.noProblems(watch)
}

// claim reads a component's notification claim (nil: none).
func (s *stack) claim(component string) *consulkv.Claim {
	s.t.Helper()
	kv, _, err := s.kv.KV().Get(consulkv.ClaimKey(s.scn(component)), nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if kv == nil {
		return nil
	}
	c, err := consulkv.ParseClaim(kv.Value)
	if err != nil {
		s.t.Fatal(err)
	}
	return &c
}

// waitRecorded waits until a component's claim records the outcome of
// its latest notification as ok.
func (s *stack) waitRecorded(component string) {
	s.t.Helper()
	s.eventually("the outcome of "+component+"'s latest notification recorded", func() error {
		notes := s.hooks.of(component)
		cl := s.claim(component)
		if len(notes) == 0 || cl == nil || cl.Generation != int64(notes[len(notes)-1].gen) || cl.Outcome != consulkv.OutcomeOK {
			return fmt.Errorf("claim %+v", cl)
		}
		return nil
	})
}

// The agent-notifier is killed (SIGKILL) while components' scripts run and
// others wait for a slot, their notifications claimed; started again, it
// runs every script for the newest update, the claimed ones that had not
// run among them, and runs no script again for an update whose run had
// completed before the kill.
func TestNotifierKilledWhileScriptsRun(t *testing.T) {
	s := newStack(t, func(s *stack) { s.notifyConcurrency = 2 })
	const pid = "RS.Config_notifier"
	comps := components(6)
	scripts := map[string]script{}
	for _, c := range comps {
		scripts[c] = s.newScript(c, sleepy)
	}
	s.publish(pid, 1)
	s.register(comps, []string{pid}, func(c string) events.NotifyTarget {
		return events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: scripts[c].path, TimeoutMs: 30000}
	})
	s.waitRun(scripts, pid, 1)
	s.eventually("every notification of version 1 recorded", func() error {
		for _, c := range comps {
			if cl := s.claim(c); cl == nil || cl.Outcome != consulkv.OutcomeOK {
				return fmt.Errorf("%s's claim: %+v", c, cl)
			}
		}
		return nil
	})

	s.publish(pid, 2)
	startedV2 := func(runs []run) bool {
		return slices.ContainsFunc(runs, func(r run) bool { return !r.done && r.note.versions[pid] == 2 })
	}
	unfinished := func(c string) bool {
		cl := s.claim(c)
		if cl == nil {
			return false
		}
		done, _ := cl.Finished()
		return !done
	}
	// The kill comes once a script runs with version 2 and another
	// component's notification is claimed and waits for a slot.
	s.eventually("a script runs with version 2 and another waits, claimed", func() error {
		running, waiting := 0, 0
		for c, sc := range scripts {
			switch started := startedV2(sc.runs(t)); {
			case started:
				running++
			case unfinished(c):
				waiting++
			}
		}
		if running == 0 || waiting == 0 {
			return fmt.Errorf("%d running, %d claimed and waiting", running, waiting)
		}
		return nil
	})
	// What completed is read before the kill, so that nothing in it
	// completed after.
	completed := map[string][]run{}
	for c, sc := range scripts {
		for _, r := range sc.runs(t) {
			if r.done {
				completed[c] = append(completed[c], r)
			}
		}
	}
	s.kill(topology.StageAgentNotifier)
	var claimedNotRun, running []string
	for _, c := range comps {
		if !unfinished(c) {
			continue
		}
		if startedV2(scripts[c].runs(t)) {
			running = append(running, c)
		} else {
			claimedNotRun = append(claimedNotRun, c)
		}
	}
	t.Logf("agent-notifier killed: %d notifications claimed and not run %v, %d scripts running %v", len(claimedNotRun), claimedNotRun, len(running), running)
	if len(claimedNotRun) == 0 {
		t.Fatalf("the kill found no notification claimed and not yet run (%d components, %d at once): nothing to take over", len(comps), s.notifyConcurrency)
	}
	starts := func() int {
		n := 0
		for _, sc := range scripts {
			for _, r := range sc.runs(t) {
				if !r.done {
					n++
				}
			}
		}
		return n
	}
	atKill := starts()
	began := s.restart(topology.StageAgentNotifier)
	s.eventually("a script started by the restarted agent-notifier", func() error {
		if n := starts(); n == atKill {
			return fmt.Errorf("%d scripts started, as at the kill", n)
		}
		return nil
	})
	t.Logf("the restarted agent-notifier started its first script %s after it was started", time.Since(began).Round(time.Millisecond))

	// Every script runs for version 2: those claimed and not run before
	// the kill too.
	s.waitRun(scripts, pid, 2)
	for _, c := range comps {
		runs := scripts[c].runs(t)
		for _, d := range completed[c] {
			n := 0
			for _, r := range runs {
				if !r.done && r.raw == d.raw {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: the script ran %d times with %s, which had completed before the kill", c, n, d.raw)
			}
		}
	}
}

// The agent-notifier is stopped while each of five policies of a
// component gets a new version; started again, it tells the component
// of every policy whose version changed since its last successful
// notification, in the updated_policies of the notification that first
// carries it. Then the component's webhook fails the notifications of two
// updates, which are recorded as failed: the next one it takes lists the
// policies of those updates too.
func TestNotificationAfterSkippedGenerationsListsEveryChangedPolicy(t *testing.T) {
	s := newStack(t, func(s *stack) { s.notifyAttempts = 1 })
	var pids []string
	for i := 1; i <= 5; i++ {
		pids = append(pids, fmt.Sprintf("RS.Config_skip%d", i))
	}
	comps := components(1)
	s.register(comps, pids, s.webhook)
	// One policy after the other, each notified and its outcome
	// recorded before the next: what the component was told is then
	// known before the notifier stops.
	for _, pid := range pids {
		s.publish(pid, 1)
		s.waitNotified(comps, pid, 1)
		s.waitRecorded(comps[0])
	}
	told := len(s.hooks.of(comps[0]))

	s.stop(topology.StageAgentNotifier)
	for _, pid := range pids {
		s.publish(pid, 2)
	}
	for _, pid := range pids {
		s.waitConsul(comps, pid, 2)
	}
	began := s.restart(topology.StageAgentNotifier)
	s.eventually("a notification from the restarted agent-notifier", func() error {
		if n := len(s.hooks.of(comps[0])); n == told {
			return errors.New("none yet")
		}
		return nil
	})
	t.Logf("the restarted agent-notifier delivered its first notification %s after it was started", time.Since(began).Round(time.Millisecond))
	for _, pid := range pids {
		s.waitNotified(comps, pid, 2)
	}
	notes := s.hooks.of(comps[0])
	for k, n := range notes[told:] {
		t.Logf("notification %d after the restart: generation %d, updated_policies %v", k+1, n.gen, n.updated)
	}
	first := notes[told]
	for _, pid := range pids {
		if first.versions[pid] == 2 && first.updated[pid] != 2 {
			t.Errorf("the first notification after the restart holds version 2 of %s but does not list it in updated_policies %v", pid, first.updated)
		}
	}

	// Two updates whose notifications fail, then one that is taken.
	c := comps[0]
	told = len(s.hooks.of(c))
	s.hooks.fail(c, true)
	s.publish(pids[0], 3)
	s.publish(pids[1], 3)
	s.eventually("the notification of version 3 of "+pids[1]+" recorded as failed", func() error {
		refused := s.hooks.refusedOf(c)
		if len(refused) == 0 || refused[len(refused)-1].versions[pids[1]] != 3 {
			return fmt.Errorf("%d notifications refused, the last without version 3 of %s", len(refused), pids[1])
		}
		cl := s.claim(c)
		if cl == nil {
			return errors.New("no claim")
		}
		if done, ok := cl.Finished(); cl.Generation != int64(refused[len(refused)-1].gen) || !done || ok {
			return fmt.Errorf("claim %+v, want generation %d failed", cl, refused[len(refused)-1].gen)
		}
		return nil
	})
	s.hooks.fail(c, false)
	s.publish(pids[2], 3)
	s.waitNotified(comps, pids[2], 3)
	notes = s.hooks.of(c)
	if len(notes) != told+1 {
		t.Fatalf("%d notifications taken since the failures, want 1", len(notes)-told)
	}
	if last := notes[told]; last.updated[pids[0]] != 3 || last.updated[pids[1]] != 3 || last.updated[pids[2]] != 3 {
		t.Fatalf("the notification after two failed ones lists updated_policies %v, want version 3 of %v", last.updated, pids[:3])
	}
	s.noProblems(nil)
}
