package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consulkv"
)

func notification(v int) string {
	return `{"policies":[{"policyName":"P.` + strconv.Itoa(v) + `.xml","policyVersion":"` + strconv.Itoa(v) + `"}],"updated_policies":[],"removed_policies":[]}`
}

// notify delivers to o's webhook what the agent-notifier would: component
// c's generation gen holding version v of policy P.
func notify(t *testing.T, o *observer, c string, gen, v int) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/hook/"+c, strings.NewReader(notification(v)))
	req.Header.Set(agentnotifier.HeaderGeneration, strconv.Itoa(gen))
	w := httptest.NewRecorder()
	o.webhook(w, req)
	if w.Code != http.StatusNoContent {
		t.Fatalf("webhook answered %d %s", w.Code, w.Body)
	}
}

func init() { WebhookDelay = time.Millisecond }

// The observer counts what the matrix promises to count: a finished
// generation run again, a generation or a version older than one run
// before, and a Consul item going back to an older version; a newer
// generation holding the same version (the notifier builds it from
// Consul when it delivers) is neither.
func TestObserverCounts(t *testing.T) {
	o := newObserver(map[string]string{"a": "P", "b": "P"}, "")
	notify(t, o, "a", 1, 1)
	notify(t, o, "a", 2, 3)
	notify(t, o, "a", 3, 3) // generation 2 was delivered with 3 already
	if c := o.c; c.Repeated != 0 || c.Backwards != 0 || c.Runs != 3 || c.Finished != 3 {
		t.Fatalf("in-order deliveries: %+v %v", c, o.events)
	}
	notify(t, o, "a", 3, 3)
	if c := o.c; c.Repeated != 1 || c.Backwards != 0 {
		t.Fatalf("generation 3 again: %+v, want 1 repeated", c)
	}
	notify(t, o, "b", 5, 4)
	notify(t, o, "b", 4, 4)
	notify(t, o, "b", 6, 2)
	if c := o.c; c.Repeated != 1 || c.Backwards != 2 {
		t.Fatalf("generation 4 after 5, version 2 after 4: %+v, want 2 backwards", c)
	}
	if got := o.lastNotified("b"); got != 2 {
		t.Fatalf("last notified version of b: %d, want 2", got)
	}

	o.reset()
	item := func(c string, v int) *consulapi.KVPair {
		return &consulapi.KVPair{Key: consulkv.ItemKey(c, "P"), Value: []byte(`{"policyVersion":"` + strconv.Itoa(v) + `"}`)}
	}
	o.sawConsul(consulapi.KVPairs{item("a", 3), item("b", 4), {Key: "other:policies/items/P", Value: []byte(`{"policyVersion":"1"}`)}})
	o.sawConsul(consulapi.KVPairs{item("a", 3), item("b", 5)})
	if o.c.Backwards != 0 {
		t.Fatalf("Consul values going forward counted %d backwards: %v", o.c.Backwards, o.events)
	}
	o.sawConsul(consulapi.KVPairs{item("a", 2), item("b", 5), {Key: consulkv.ItemKey("b", "P"), Value: []byte(`{` + hand + `:true}`)}})
	if o.c.Backwards != 1 {
		t.Fatalf("Consul item of a from 3 to 2 (and b edited by hand): %d backwards, want 1", o.c.Backwards)
	}
}

func TestMatrixFailed(t *testing.T) {
	ok := Matrix{{Fault: "kill-matcher", Bound: time.Second}, {Fault: "consul-down", Bound: time.Second, Counters: Counters{Redelivered: 3}}}
	if ok.Failed() {
		t.Fatal("a matrix of zeros failed")
	}
	for _, r := range []Row{{Counters: Counters{Lost: 1}}, {Counters: Counters{Late: 1}}, {Counters: Counters{Repeated: 1}}, {Counters: Counters{Overlapping: 1}},
		{Counters: Counters{Backwards: 1}}, {Counters: Counters{ReadyLied: 1}}, {Counters: Counters{LagHidden: 1}}, {Behind: 1}, {Stall: 2 * time.Second, Bound: time.Second}, {Err: "not run"}} {
		if !append(ok, r).Failed() {
			t.Errorf("a matrix with %+v did not fail", r)
		}
	}
	var b strings.Builder
	append(ok, Row{Fault: "broker-restart", Counters: Counters{Repeated: 2}, Details: []string{"a: generation 3 run again"}}).Print(&b)
	out := b.String()
	for _, want := range []string{"broker-restart", "a: generation 3 run again", "redelivered", "overlapping", "ready-lied", "lag-hidden", "stall/bound"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the printed matrix does not show %q:\n%s", want, out)
		}
	}
}

// A generation run again because the fault cut the notifier off between
// the end of its run and the record of its outcome is at least once, as
// promised, and not a repeat; run again with no fault in between, it is.
func TestObserverExcusesRedeliveryAcrossTheFault(t *testing.T) {
	o := newObserver(map[string]string{"a": "P"}, "")
	notify(t, o, "a", 1, 1)
	o.mu.Lock()
	o.runs["a"][0].end = time.Now().Add(-time.Minute) // long before the fault
	o.mu.Unlock()
	notify(t, o, "a", 2, 2) // just before the fault
	o.faultStarts()
	o.faultEnds()
	notify(t, o, "a", 2, 2) // run again after the kill
	if o.c.Repeated != 0 || o.c.Redelivered != 1 {
		t.Fatalf("redelivery across the fault: %+v %v", o.c, o.events)
	}
	notify(t, o, "a", 1, 2) // finished long before the fault: a repeat
	if o.c.Repeated != 1 {
		t.Fatalf("generation 1 again: %+v, want 1 repeated", o.c)
	}
}

// A webhook call that arrives while another of the same component is
// open overlaps it.
func TestObserverCountsOverlappingWebhookCalls(t *testing.T) {
	defer func(d time.Duration) { WebhookDelay = d }(WebhookDelay)
	WebhookDelay = 300 * time.Millisecond
	o := newObserver(map[string]string{"a": "P"}, "")
	done := make(chan struct{})
	go func() { notify(t, o, "a", 1, 1); close(done) }()
	for o.runsSince("a", time.Time{}) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	notify(t, o, "a", 2, 2)
	<-done
	if o.c.Overlapping != 1 {
		t.Fatalf("two calls at once: %+v, want 1 overlapping", o.c)
	}
}

// The component script writes the ledger the observer reads: a run's
// start with the notifier's update id, generation and notification, its
// end with the exit status; a run started while an earlier run of the
// component is alive writes an overlap line; a run while the fail file
// exists exits 3.
func TestScriptLedger(t *testing.T) {
	defer func(d time.Duration) { ScriptRun = d }(ScriptRun)
	ScriptRun = 400 * time.Millisecond
	dir := t.TempDir()
	path, long := filepath.Join(dir, "c.sh"), filepath.Join(dir, "c-long.sh")
	if err := os.WriteFile(path, []byte(script(dir, "c")), 0o755); err != nil {
		t.Fatal(err)
	}
	ScriptRun = 5 * time.Second
	if err := os.WriteFile(long, []byte(script(dir, "c")), 0o755); err != nil {
		t.Fatal(err)
	}
	ScriptRun = 400 * time.Millisecond
	o := newObserver(map[string]string{"c": "P"}, dir)
	o.published("P", 1)
	start := func(gen, v int, path string) *exec.Cmd {
		cmd := exec.CommandContext(context.Background(), path, "policies", notification(v))
		cmd.Env = []string{"PATH=/usr/bin:/bin", "POLICYFLOW_UPDATE_ID=u" + strconv.Itoa(gen), "POLICYFLOW_GENERATION=" + strconv.Itoa(gen)}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	if err := start(1, 1, path).Wait(); err != nil {
		t.Fatal(err)
	}
	o.readLedgers()
	if o.c.Runs != 1 || o.c.Finished != 1 || o.c.Overlapping != 0 || o.lastNotified("c") != 1 {
		t.Fatalf("one run: %+v %v", o.c, o.events)
	}
	first := start(2, 2, long)
	for o.runsSince("c", time.Time{}) < 2 { // its start line is written
		time.Sleep(10 * time.Millisecond)
	}
	second := start(2, 2, path)
	_, _ = first.Process.Wait()
	_ = second.Wait()
	o.readLedgers()
	if o.c.Overlapping != 1 || o.c.Runs != 3 {
		t.Fatalf("a run while another is alive: %+v %v", o.c, o.events)
	}
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := start(3, 3, path).Wait(); err == nil {
		t.Fatal("the script succeeded while the fail file exists")
	}
	o.readLedgers()
	if o.c.FailedRuns != 1 || o.c.Repeated != 0 {
		t.Fatalf("after a failed run: %+v, want 1 failed and no repeat", o.c)
	}
	if err := start(3, 3, path).Wait(); err == nil {
		t.Fatal("the script succeeded while the fail file exists")
	}
	if err := os.Remove(filepath.Join(dir, "fail")); err != nil {
		t.Fatal(err)
	}
	if err := start(3, 3, path).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := start(3, 3, path).Wait(); err != nil {
		t.Fatal(err)
	}
	o.readLedgers()
	if o.c.FailedRuns != 2 || o.c.Repeated != 1 || o.c.Finished != 5 {
		t.Fatalf("generation 3 failed twice, then ran twice: %+v, want the last run a repeat", o.c)
	}
}

// A version that stayed the newest for OwedAfter or more is owed to every
// component, and so is the newest one; a version superseded sooner may
// be skipped for the newer one.
func TestVerdictCountsOwedVersionsNeverRun(t *testing.T) {
	o := newObserver(map[string]string{"a": "P"}, "")
	from := time.Now()
	t0 := from.Add(time.Second)
	o.pubs["P"] = []publication{{1, t0}, {2, t0.Add(10 * time.Millisecond)}, {3, t0.Add(20 * time.Millisecond)},
		{4, t0.Add(5 * time.Second)}}
	o.runs["a"] = []*run{{gen: 1, version: 1, start: t0.Add(time.Millisecond), ok: true, ended: true}}
	c, _, ev := o.verdict(from, 2*time.Second, time.Second, t0.Add(10*time.Second))
	if c.Lost != 2 { // 3 stayed latest 5 s, 4 is the newest
		t.Fatalf("lost %d, want 2: %v", c.Lost, ev)
	}
	// Version 4 run 1 s after version 3 was superseded, the bound being
	// 1 s: version 3 reached it (a newer version holds it), late, not lost.
	o.runs["a"] = append(o.runs["a"], &run{gen: 2, version: 4, start: t0.Add(6 * time.Second), ok: true, ended: true})
	if c, _, ev := o.verdict(from, 2*time.Second, time.Second, t0.Add(10*time.Second)); c.Lost != 0 || c.Late != 1 {
		t.Fatalf("with version 4 run past the bound: lost %d, late %d, want 0 and 1: %v", c.Lost, c.Late, ev)
	}
	// Within the bound, it is on time.
	o.runs["a"][1].start = t0.Add(5500 * time.Millisecond)
	if c, _, ev := o.verdict(from, 2*time.Second, time.Second, t0.Add(10*time.Second)); c.Lost != 0 || c.Late != 0 {
		t.Fatalf("with version 4 run within the bound: lost %d, late %d, want 0 and 0: %v", c.Lost, c.Late, ev)
	}
}

// A notification holding a value written by hand into Consul (consul-edit)
// tells what Consul held, not a version: it is not a step backwards, and
// not the component's version.
func TestObserverTakesHandEditsForNoVersion(t *testing.T) {
	o := newObserver(map[string]string{"a": "P"}, "")
	notify(t, o, "a", 1, 49)
	req := httptest.NewRequest(http.MethodPost, "/hook/a", strings.NewReader(`{"policies":[{`+hand+`:true}]}`))
	req.Header.Set(agentnotifier.HeaderGeneration, "2")
	o.webhook(httptest.NewRecorder(), req)
	if o.c.Backwards != 0 || o.c.Runs != 2 {
		t.Fatalf("a hand-edited value told: %+v %v, want no step backwards", o.c, o.events)
	}
	notify(t, o, "a", 3, 50)
	if o.c.Backwards != 0 || o.lastNotified("a") != 50 {
		t.Fatalf("after the repair: %+v, last %d", o.c, o.lastNotified("a"))
	}
}
