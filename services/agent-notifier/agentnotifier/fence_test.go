package agentnotifier

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// aheadClock is a notifier's clock that runs ahead of the real one by
// what jump added: the clock of a notifier that was paused (its monotonic
// clock went on while it ran nothing), or of a machine whose clock says a
// lease ended.
type aheadClock struct{ ahead atomic.Int64 }

func (c *aheadClock) now() time.Time       { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *aheadClock) jump(d time.Duration) { c.ahead.Add(int64(d)) }

// notifierOn is a notifier on the Consul agent at consulCfg with the clock
// clk, set up as the stage sets it up, and its batch handler.
func notifierOn(t *testing.T, consulCfg consulkv.Config, clk *aheadClock) (*notifier, runtime.BatchHandler) {
	t.Helper()
	return notifierWith(t, consulCfg, clk, nil)
}

// notifierWith is notifierOn with its configuration changed by set first.
func notifierWith(t *testing.T, consulCfg consulkv.Config, clk *aheadClock, set func(*Config)) (*notifier, runtime.BatchHandler) {
	t.Helper()
	n := &notifier{cfg: testConfig(t), clock: clk.now}
	n.cfg.Consul = consulCfg
	if set != nil {
		set(&n.cfg)
	}
	h, closeFn, err := n.setup(context.Background(), stagetest.Env(runtime.Kafka{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return n, h
}

// receiver is a webhook endpoint that writes down, per component (the
// request's path), the generation of each request (HeaderGeneration) in
// the order they came, as a receiver that drops older generations would
// see them. hold, when not nil, runs inside each request once it is
// written down, with how many requests of that component and generation
// came before it.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string][]int64
}

func newReceiver(t *testing.T, hold func(r *http.Request, w http.ResponseWriter, id string, gen int64, before int)) *receiver {
	t.Helper()
	rc := &receiver{got: map[string][]int64{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read to its end, so that the request's context ends when the
		// notifier gives up.
		_, _ = io.Copy(io.Discard, r.Body)
		id := strings.TrimPrefix(r.URL.Path, "/")
		gen, err := strconv.ParseInt(r.Header.Get(HeaderGeneration), 10, 64)
		if err != nil {
			t.Errorf("a notification of %s with %s %q", id, HeaderGeneration, r.Header.Get(HeaderGeneration))
		}
		rc.mu.Lock()
		before := 0
		for _, g := range rc.got[id] {
			if g == gen {
				before++
			}
		}
		rc.got[id] = append(rc.got[id], gen)
		rc.mu.Unlock()
		if hold != nil {
			hold(r, w, id, gen, before)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

// hook is the webhook of component id on the receiver, with timeout.
func (rc *receiver) hook(id string, timeout time.Duration) events.NotifyTarget {
	return events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: rc.URL + "/" + id, TimeoutMs: int32(timeout / time.Millisecond)}
}

// of is what component id was sent: its generations in the order they
// came. It fails the test when an older generation came after a newer
// one.
func (rc *receiver) of(t *testing.T, id string) []int64 {
	t.Helper()
	rc.mu.Lock()
	got := append([]int64(nil), rc.got[id]...)
	rc.mu.Unlock()
	for k := 1; k < len(got); k++ {
		if got[k] < got[k-1] {
			t.Errorf("component %s was sent generation %d after generation %d (all it was sent, in order: %v)", id, got[k], got[k-1], got)
		}
	}
	return got
}

func sameGenerations(got []int64, want ...int64) bool {
	if len(got) != len(want) {
		return false
	}
	for k := range got {
		if got[k] != want[k] {
			return false
		}
	}
	return true
}

// One notifier calls a component's webhook for generation 1; the
// webhook takes longer than its timeout (it answers only once the
// notifier gave up). Meanwhile another notifier, whose clock says the
// first one's lease ended (as when the first was paused), claims
// generation 2 and notifies it. The first notifier's run again of
// generation 1 is not sent: the check of its claim before the run finds
// it changed. The component is sent 1, then 2, and nothing after.
func TestTimedOutDeliveryIsNotRunAgainOverANewerClaim(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	const id, timeout = "paused-hook", 5 * time.Second
	inFlight := make(chan time.Time, 1)
	rc := newReceiver(t, func(r *http.Request, _ http.ResponseWriter, _ string, gen int64, before int) {
		if gen == 1 && before == 0 {
			inFlight <- time.Now()
			<-r.Context().Done() // the notifier gave up: it timed out
		}
	})
	a, handleA := notifierOn(t, consulCfg, &aheadClock{})
	later := &aheadClock{}
	later.jump(time.Hour)
	_, handleB := notifierOn(t, consulCfg, later)

	holdGeneration(t, consul, 1, id)
	if out := handleA(context.Background(), []runtime.Input{input(update(id, 1, rc.hook(id, timeout)))}); out[0].Err != nil {
		t.Fatalf("generation 1: %v", out[0].Err)
	}
	sent := <-inFlight
	holdGeneration(t, consul, 2, id)
	if out := handleB(context.Background(), []runtime.Input{input(update(id, 2, rc.hook(id, timeout)))}); out[0].Err != nil {
		t.Fatalf("generation 2 by the other notifier: %v", out[0].Err)
	}
	cl, _ := waitClaim(t, consul, id, id+"-u2")
	if took := time.Since(sent); took > timeout {
		t.Fatalf("generation 2 was claimed and notified %s after generation 1 was sent, after its timeout of %s: this machine is too slow for the test", took, timeout)
	}
	a.drain() // the first notifier's run of generation 1 timed out, and it is done with it
	if got := rc.of(t, id); !sameGenerations(got, 1, 2) {
		t.Fatalf("component sent generations %v, want 1 then 2", got)
	}
	if got, _ := waitClaim(t, consul, id, id+"-u2"); got.Generation != 2 || got.Outcome != consulkv.OutcomeOK || got.Owner != cl.Owner || got.Owner == a.owner {
		t.Fatalf("claim %+v, want the other notifier's of generation 2, finished ok", got)
	}
}

// A notifier whose lease ended by its own monotonic clock (it was paused
// between its claim and its run, or in the middle of a run) makes sure of
// its claim, renewing the lease with check-and-set, before the next run:
// it stops when the claim is another's, and goes on with the renewed
// lease when it is still its own.
func TestNotifierPastItsLeaseMakesSureOfItsClaimBeforeARun(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	ctx := context.Background()
	clk := &aheadClock{}
	// claimed is the lease of the claim of the component named in the
	// request as Consul held it when the request came.
	var mu sync.Mutex
	claimed := map[string]consulkv.Claim{}
	rc := newReceiver(t, func(r *http.Request, w http.ResponseWriter, id string, gen int64, before int) {
		p, _, err := consul.KV().Get(consulkv.ClaimKey(id), nil)
		if err != nil || p == nil {
			t.Errorf("claim of %s: %v %v", id, p, err)
			return
		}
		cl, err := consulkv.ParseClaim(p.Value)
		if err != nil {
			t.Errorf("claim of %s: %v", id, err)
		}
		mu.Lock()
		claimed[id] = cl
		mu.Unlock()
		if id == "renewed" && before == 0 {
			// The notifier is paused for an hour in the middle of its
			// first run, which fails.
			clk.jump(time.Hour)
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	n, _ := notifierOn(t, consulCfg, clk)
	later := &aheadClock{}
	later.jump(time.Hour)
	_, handleOther := notifierOn(t, consulCfg, later)
	claim := func(id string) *job {
		t.Helper()
		holdGeneration(t, consul, 1, id)
		todo, err := n.read(ctx, jobsOf(t, n, update(id, 1, rc.hook(id, 5*time.Second))), func(j *job, err error) { t.Fatalf("read %s: %v", j.key, err) })
		if err != nil || len(todo) != 1 {
			t.Fatalf("read: %d jobs, %v", len(todo), err)
		}
		if claimed := n.claimAll(ctx, todo, func(j *job, err error) { t.Fatalf("claim %s: %v", j.key, err) }); len(claimed) != 1 {
			t.Fatalf("%d claimed", len(claimed))
		}
		return todo[0]
	}

	t.Run("lost before its first run", func(t *testing.T) {
		const id = "lost"
		j := claim(id)
		// Paused for an hour between its claim and its run; meanwhile
		// another notifier took generation 2 over from the lease it saw
		// end.
		clk.jump(time.Hour)
		holdGeneration(t, consul, 2, id)
		if out := handleOther(ctx, []runtime.Input{input(update(id, 2, rc.hook(id, 5*time.Second)))}); out[0].Err != nil {
			t.Fatalf("generation 2 by the other notifier: %v", out[0].Err)
		}
		waitClaim(t, consul, id, id+"-u2")
		if n.notify(ctx, j) || !j.lost {
			t.Fatalf("the notification went on (lost %v, unrecorded %v), want it stopped with its claim lost", j.lost, j.unrecorded)
		}
		if got := rc.of(t, id); !sameGenerations(got, 2) {
			t.Fatalf("component sent generations %v, want only 2", got)
		}
	})

	t.Run("renewed before a run again", func(t *testing.T) {
		const id = "renewed"
		j := claim(id)
		index := j.index
		firstUntil, _ := leaseEnd(&j.claim)
		if !n.notify(ctx, j) || j.claim.Outcome != consulkv.OutcomeOK || j.claim.Attempts != 2 {
			t.Fatalf("notification: outcome %q after %d attempts (lost %v, unrecorded %v), want ok on the second", j.claim.Outcome, j.claim.Attempts, j.lost, j.unrecorded)
		}
		if got := rc.of(t, id); !sameGenerations(got, 1, 1) {
			t.Fatalf("component sent generations %v, want 1 and 1 again", got)
		}
		mu.Lock()
		cl := claimed[id]
		mu.Unlock()
		// The lease the second run saw in Consul was written after the
		// notifier's clock jumped an hour.
		until, ok := leaseEnd(&cl)
		if !ok || until.Sub(firstUntil) < 59*time.Minute || j.index == index || cl.Owner != n.owner {
			t.Fatalf("when the run again came, Consul held the claim %+v (its index now %d, claimed at %d with a lease until %s); want it this notifier's, its lease renewed an hour later",
				cl, j.index, index, firstUntil.Format(time.RFC3339Nano))
		}
	})
}

// A notifier does not claim a newer generation of a component while the
// lease of another notifier's unfinished run of an older one is live: the
// record fails transiently and is tried again, and is notified once the
// older run finished. The component is never sent both at once.
func TestNewerGenerationWaitsForTheLiveLeaseOfAnOlderRun(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	const id = "leased"
	inFlight, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	var running atomic.Int32
	rc := newReceiver(t, func(_ *http.Request, _ http.ResponseWriter, _ string, gen int64, _ int) {
		if running.Add(1) > 1 {
			t.Errorf("component %s was sent generation %d while another notification of it ran", id, gen)
		}
		defer running.Add(-1)
		if gen == 1 {
			select {
			case inFlight <- struct{}{}:
			default:
			}
			<-release
		}
	})
	a, handleA := notifierOn(t, consulCfg, &aheadClock{})
	_, handleB := notifierOn(t, consulCfg, &aheadClock{})
	t.Cleanup(free) // when the test fails: before the notifiers and the receiver close

	holdGeneration(t, consul, 1, id)
	if out := handleA(context.Background(), []runtime.Input{input(update(id, 1, rc.hook(id, 30*time.Second)))}); out[0].Err != nil {
		t.Fatalf("generation 1: %v", out[0].Err)
	}
	<-inFlight
	holdGeneration(t, consul, 2, id)
	second := []runtime.Input{input(update(id, 2, rc.hook(id, 30*time.Second)))}
	out := handleB(context.Background(), second)
	if err := out[0].Err; err == nil || runtime.IsPermanent(err) || !errors.Is(err, ErrClaimTaken) || !strings.Contains(err.Error(), "its lease ends at") {
		t.Fatalf("generation 2 while generation 1 runs under a live lease: %v, want a transient ErrClaimTaken naming the lease", err)
	}
	p, _, err := consul.KV().Get(consulkv.ClaimKey(id), nil)
	if err != nil || p == nil {
		t.Fatalf("claim: %v %v", p, err)
	}
	if cl, err := consulkv.ParseClaim(p.Value); err != nil || cl.Generation != 1 || cl.Owner != a.owner {
		t.Fatalf("claim %+v (%v), want generation 1's, held by the first notifier", cl, err)
	}
	free()
	waitClaim(t, consul, id, id+"-u1")
	// Tried again, as the runtime hands it in again.
	if out := handleB(context.Background(), second); out[0].Err != nil {
		t.Fatalf("generation 2 after generation 1 finished: %v", out[0].Err)
	}
	if cl, _ := waitClaim(t, consul, id, id+"-u2"); cl.Outcome != consulkv.OutcomeOK {
		t.Fatalf("claim of generation 2 %+v", cl)
	}
	if got := rc.of(t, id); !sameGenerations(got, 1, 2) {
		t.Fatalf("component sent generations %v, want 1 then 2", got)
	}
}

// The first run right after a claim is covered by the lease the claim
// wrote, whatever the attempts and the timeout: it costs no request to
// Consul. A run the lease no longer covers, by the notifier's own clock,
// with room for two renewals before its guard, is proved first. The
// lease and its guard do not depend on the timeout.
func TestLeaseCoversTheFirstRunAfterTheClaim(t *testing.T) {
	for _, lease := range []time.Duration{time.Second, DefaultLease, 10 * time.Minute} {
		for _, attempts := range []int{1, 3, 100} {
			for _, timeout := range []time.Duration{100 * time.Millisecond, time.Second, DefaultTimeout, 10 * time.Minute} {
				clk := &aheadClock{}
				n := &notifier{cfg: Config{Attempts: attempts, Timeout: timeout, Lease: lease}, clock: clk.now}
				j := &job{a: update("c", 1, events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://127.0.0.1:1/"}), leased: n.now()}
				if !n.covers(j) {
					t.Errorf("lease %s, %d attempts, timeout %s: the lease just written does not cover the first run", lease, attempts, timeout)
				}
				if got, want := n.guardAt(j).Sub(j.leased), lease*4/5; got != want {
					t.Errorf("lease %s, timeout %s: a run is stopped %s after its lease was written, want %s", lease, timeout, got, want)
				}
				// Past the lease less its margin and two renewals.
				clk.jump(lease - n.fenceMargin() - 2*n.renewEvery())
				if n.covers(j) {
					t.Errorf("lease %s, %d attempts, timeout %s: a run with less than two renewals before its guard is covered", lease, attempts, timeout)
				}
			}
		}
	}
}
