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
	n := &notifier{cfg: testConfig(t), clock: clk.now}
	n.cfg.Consul = consulCfg
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
