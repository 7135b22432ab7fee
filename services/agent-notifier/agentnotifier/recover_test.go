package agentnotifier

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/topology"
)

func intp(n int) *int { return &n }

func TestClaimAction(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	a := update("c", 5, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/x"})
	const self = "node-1/run-b"
	fresh, old := now.Add(-10*time.Second).Format(time.RFC3339Nano), now.Add(-2*time.Minute).Format(time.RFC3339Nano)
	until := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339Nano) }
	repair := update("c", 5, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/x"})
	repair.CatchUp, repair.ConsulIndex = true, 90
	cases := []struct {
		name   string
		claim  *consulkv.Claim
		a      *events.ComponentApplied
		seen   Seen
		want   Action
		reason string
	}{
		{name: "no claim", want: Notify},
		{name: "older generation claimed", claim: &consulkv.Claim{Generation: 4, ExitCode: intp(0), Outcome: consulkv.OutcomeOK}, want: Notify},
		{name: "older generation failed", claim: &consulkv.Claim{Generation: 4, ExitCode: intp(3), Outcome: consulkv.OutcomeFailed}, want: Notify},
		{name: "older generation unfinished, another instance, in its lease", claim: &consulkv.Claim{Generation: 4, Owner: "node-2/run-x", At: fresh, LeaseUntil: until(time.Minute)},
			want: Wait, reason: "generation 4 is being notified by node-2/run-x"},
		{name: "older generation unfinished, no owner, in its lease", claim: &consulkv.Claim{Generation: 4, At: fresh, LeaseUntil: until(time.Minute)}, want: Wait},
		{name: "older generation unfinished, its lease ended", claim: &consulkv.Claim{Generation: 4, Owner: "node-2/run-x", At: old, LeaseUntil: until(-time.Second)},
			want: Notify, reason: "its notifier is gone"},
		{name: "older generation unfinished, its notifier seen gone", claim: &consulkv.Claim{Generation: 4, Owner: "node-1/run-a", At: fresh, LeaseUntil: until(time.Minute)},
			seen: Seen{OwnerGone: true}, want: Notify, reason: "node-1/run-a is gone"},
		{name: "older generation unfinished, this run's own", claim: &consulkv.Claim{Generation: 4, Owner: self, At: fresh, LeaseUntil: until(time.Minute)},
			want: Notify, reason: "own run of generation 4 left no outcome"},
		{name: "newer generation claimed", claim: &consulkv.Claim{Generation: 6, UpdateID: "u6"}, want: Skip, reason: "generation 6 (update u6) was already claimed"},
		{name: "notified", claim: &consulkv.Claim{Generation: 5, UpdateID: "c-u5", ExitCode: intp(0), Outcome: consulkv.OutcomeOK}, want: Skip, reason: "already notified"},
		{name: "failed after its attempts", claim: &consulkv.Claim{Generation: 5, UpdateID: "c-u5", ExitCode: intp(3), Outcome: consulkv.OutcomeFailed, Attempts: 3},
			want: Skip, reason: "failed after 3 attempt(s)"},
		{name: "an exit code without an outcome is not finished", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(1), Owner: "node-2/run-x", At: fresh, LeaseUntil: until(time.Minute)},
			want: Wait, reason: "being notified by node-2/run-x"},
		{name: "failed, a catch-up asks again", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(3), Outcome: consulkv.OutcomeFailed},
			seen: Seen{Again: AgainFailed}, want: Notify, reason: "runs the failed notification again"},
		{name: "notified, a catch-up asks for failed ones", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(0), Outcome: consulkv.OutcomeOK},
			seen: Seen{Again: AgainFailed}, want: Skip, reason: "already notified"},
		{name: "notified, an operator asks", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(0), Outcome: consulkv.OutcomeOK},
			seen: Seen{Again: AgainAlways, Request: "r1"}, want: Notify, reason: "r1 asks"},
		{name: "notified for the operator's request already", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(0), Outcome: consulkv.OutcomeOK, Renotify: "r1"},
			seen: Seen{Again: AgainAlways, Request: "r1"}, want: Skip, reason: "already notified"},
		{name: "repaired after it was notified", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(0), Outcome: consulkv.OutcomeOK, ConsulIndex: 40},
			a: repair, want: Notify, reason: "repaired the folder (Consul index 90)"},
		{name: "the repair notified already", claim: &consulkv.Claim{Generation: 5, ExitCode: intp(0), Outcome: consulkv.OutcomeOK, ConsulIndex: 90},
			a: repair, want: Skip, reason: "already notified"},
		{name: "unfinished, this run's own", claim: &consulkv.Claim{Generation: 5, Owner: self, At: fresh}, want: Notify},
		{name: "unfinished, a previous run of this instance, in its lease", claim: &consulkv.Claim{Generation: 5, Owner: "node-1/run-a", At: fresh, LeaseUntil: until(time.Minute)},
			want: Wait, reason: "its lease ends at"},
		{name: "unfinished, its notifier seen gone", claim: &consulkv.Claim{Generation: 5, Owner: "node-1/run-a", At: fresh, LeaseUntil: until(time.Minute)},
			seen: Seen{OwnerGone: true}, want: Notify, reason: "node-1/run-a is gone"},
		{name: "unfinished, the previous run under this notifier's instance id, in its lease", claim: &consulkv.Claim{Generation: 5, Owner: "node-1/run-a", Instance: "node-1", At: fresh, LeaseUntil: until(time.Minute)},
			seen: Seen{Instance: "node-1"}, want: Notify, reason: "previous run under instance id node-1"},
		{name: "older generation unfinished by the previous run under this notifier's instance id", claim: &consulkv.Claim{Generation: 4, Owner: "node-1/run-a", Instance: "node-1", At: fresh, LeaseUntil: until(time.Minute)},
			seen: Seen{Instance: "node-1"}, want: Notify, reason: "previous run under instance id node-1"},
		{name: "unfinished under another instance id, in its lease", claim: &consulkv.Claim{Generation: 5, Owner: "node-2/run-x", Instance: "node-2", At: fresh, LeaseUntil: until(time.Minute)},
			seen: Seen{Instance: "node-1"}, want: Wait, reason: "its lease ends at"},
		{name: "unfinished under an instance id, this notifier has none", claim: &consulkv.Claim{Generation: 5, Owner: "node-1/run-a", Instance: "node-1", At: fresh, LeaseUntil: until(time.Minute)},
			want: Wait, reason: "its lease ends at"},
		{name: "unfinished by a run without an instance id, its owner named like this one", claim: &consulkv.Claim{Generation: 5, Owner: "node-1/run-a", At: fresh, LeaseUntil: until(time.Minute)},
			seen: Seen{Instance: "node-1"}, want: Wait, reason: "its lease ends at"},
		{name: "unfinished, its lease ended", claim: &consulkv.Claim{Generation: 5, Owner: "node-2/run-x", At: fresh, LeaseUntil: until(-time.Second)},
			want: Notify, reason: "its notifier is gone"},
		{name: "unfinished, another instance, in its lease", claim: &consulkv.Claim{Generation: 5, Owner: "node-2/run-x", At: old, LeaseUntil: until(time.Minute)}, want: Wait, reason: "being notified by node-2/run-x"},
		{name: "unfinished, another instance, no lease", claim: &consulkv.Claim{Generation: 5, Owner: "node-2/run-x", At: fresh}, want: Notify, reason: "its notifier is gone"},
		{name: "unfinished, no owner (older notifier), stale", claim: &consulkv.Claim{Generation: 5, At: old}, want: Notify},
		{name: "unfinished, no owner, in its lease", claim: &consulkv.Claim{Generation: 5, At: fresh, LeaseUntil: until(time.Minute)}, want: Wait},
		{name: "uninstalled", a: &events.ComponentApplied{Uninstalled: true, Generation: 5}, want: Skip, reason: "uninstalled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := a
			if tc.a != nil {
				rec = tc.a
			}
			seen := tc.seen
			seen.Self, seen.Now = self, now
			got, why := ClaimAction(tc.claim, rec, seen)
			if got != tc.want || !strings.Contains(why, tc.reason) {
				t.Fatalf("ClaimAction = %d %q, want %d with %q", got, why, tc.want, tc.reason)
			}
		})
	}
}

// A notifier killed between the claim and the outcome: the record's offset
// was committed once it was claimed, so the member that gets the partition
// next must find the unfinished claim and run the notification again.
func TestUnfinishedNotificationIsRunAgainAfterARestart(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	rec := newRecorder(t, scripts)
	target := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: rec.script}
	host, _ := os.Hostname()

	env := stagetest.Env(c.Kafka)
	stage := stageOn(t, consulCfg, scripts)
	stop := stagetest.Run(t, stage, env)
	holdGeneration(t, consul, 1, "crash-own", "crash-other", "crash-done")
	for _, id := range []string{"crash-own", "crash-other", "crash-done"} {
		c.Produce(t, topology.ComponentApplied, id, update(id, 1, target))
		waitClaim(t, consul, id, id+"-u1")
	}
	waitCommitted(t, c, stage.GroupIn(c.Kafka), topology.ComponentApplied)
	stop()
	if n := len(rec.calls(t)); n != 3 {
		t.Fatalf("%d script calls before the crash, want 3", n)
	}

	// As a crash leaves them: claimed, never finished. One by a notifier
	// process of this machine that is gone, one by another instance long
	// ago.
	unfinished := func(id, owner string, at time.Time) {
		cl := consulkv.Claim{UpdateID: id + "-u1", Generation: 1, At: at.UTC().Format(time.RFC3339Nano), Owner: owner, Attempts: 0}
		if strings.HasPrefix(owner, host+"/") {
			// A process of this machine that is gone: the claim is
			// taken over at once, its lease notwithstanding.
			cl.Runner, cl.LeaseUntil = deadRunner(t), at.Add(time.Hour).UTC().Format(time.RFC3339Nano)
		}
		if _, err := consul.KV().Put(&api.KVPair{Key: consulkv.ClaimKey(id), Value: cl.JSON()}, nil); err != nil {
			t.Fatal(err)
		}
	}
	unfinished("crash-own", host+"/dead-run", time.Now())
	unfinished("crash-other", "elsewhere/dead-run", time.Now().Add(-time.Hour))

	stagetest.Run(t, stageOn(t, consulCfg, scripts), env)
	for _, id := range []string{"crash-own", "crash-other"} {
		cl, _ := waitClaim(t, consul, id, id+"-u1")
		if done, ok := cl.Finished(); !done || !ok || cl.Attempts != 1 || !strings.HasPrefix(cl.Owner, host+"/") || cl.Owner == host+"/dead-run" {
			t.Fatalf("claim of %s after the restart: %+v, want it finished ok by the new run", id, cl)
		}
	}
	// Barrier: a new update of the finished component is notified after
	// the recovery, which must not have run it again.
	holdGeneration(t, consul, 2, "crash-done")
	c.Produce(t, topology.ComponentApplied, "crash-done", update("crash-done", 2, target))
	waitClaim(t, consul, "crash-done", "crash-done-u2")
	calls := rec.calls(t)
	count := map[string]int{}
	for _, call := range calls {
		for _, id := range []string{"crash-own", "crash-other", "crash-done"} {
			if strings.Contains(call[1], `"component":"`+id+`"`) {
				count[id]++
			}
		}
	}
	if count["crash-own"] != 2 || count["crash-other"] != 2 || count["crash-done"] != 2 {
		t.Fatalf("script calls per component %v, want 2 each (the unfinished ones again, the finished one only for its update 2)", count)
	}
}

// A failing script runs again, up to --notify-attempts runs, then its
// claim says failed, with the attempts and the exit code.
func TestFailingScriptIsRetriedThenRecordedFailed(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	counter := t.TempDir()
	script := writeScript(t, scripts, "fails.sh", "date +%s%N >> "+counter+"/runs\necho broken >&2\nexit 3\n")
	stagetest.Run(t, stageOn(t, consulCfg, scripts), stagetest.Env(c.Kafka))
	holdGeneration(t, consul, 1, "always-fails")
	c.Produce(t, topology.ComponentApplied, "always-fails", update("always-fails", 1, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script}))
	cl, _ := waitClaim(t, consul, "always-fails", "always-fails-u1")
	if cl.Outcome != consulkv.OutcomeFailed || *cl.ExitCode != 3 || cl.Attempts != DefaultAttempts || !strings.Contains(cl.Stderr, "broken") {
		t.Fatalf("claim %+v, want failed with exit code 3 after %d attempts", cl, DefaultAttempts)
	}
	runs, err := os.ReadFile(counter + "/runs")
	if err != nil || strings.Count(string(runs), "\n") != DefaultAttempts {
		t.Fatalf("the script ran %d times (%v), want %d", strings.Count(string(runs), "\n"), err, DefaultAttempts)
	}
}
