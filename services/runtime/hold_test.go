package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// holdingStage is an at-least-once stage whose effects go on after the
// handler returned: every input is held; the one named stuck is never
// released, the others are released at once from another goroutine.
func holdingStage(stuck string, handled func(id string), kept func(release func())) runtime.Stage {
	return runtime.Stage{
		Name:   "sink",
		Mode:   runtime.AtLeastOnce,
		Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return runtime.Typed(runtime.RefuseTombstones, func(_ context.Context, m runtime.Msg[*events.CatchupRequest]) ([]runtime.Output, error) {
				release := m.Hold()
				handled(m.Value.RequestID)
				if m.Value.RequestID == stuck {
					kept(release)
					return nil, nil
				}
				go release()
				return nil, nil
			}), nil, nil
		},
	}
}

// An effect that has not ended keeps its offset from being committed: a
// member that stops (or dies) before it ended leaves the input, and the
// later ones of its partition, to the next member, which handles them
// again; once every effect ended, everything is committed.
func TestHeldInputIsNotCommittedAndComesAgain(t *testing.T) {
	c := newCluster(t)
	k := c.Kafka
	const n = 30
	produce(t, c, n, -1)
	var mu sync.Mutex
	counts := map[string]int{}
	handled := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		counts[id]++
	}
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		s := 0
		for _, c := range counts {
			s += c
		}
		return s
	}
	var held []func()
	keep := func(release func()) { mu.Lock(); held = append(held, release); mu.Unlock() }

	stopA := stagetest.Run(t, holdingStage("r5", handled, keep), stagetest.Env(k))
	for deadline := time.Now().Add(time.Minute); total() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("member A handled %d of %d inputs", total(), n)
		}
	}
	stopA()
	stage := holdingStage("", nil, nil)
	lag := func() int64 {
		t.Helper()
		lags, err := c.Admin.Lag(context.Background(), stage.GroupIn(k))
		if err != nil {
			t.Fatal(err)
		}
		return lags[stage.GroupIn(k)].Lag.Total()
	}
	behind := lag()
	if behind == 0 {
		t.Fatal("every offset was committed although r5's effect never ended")
	}
	// A release after the member stopped commits nothing.
	mu.Lock()
	for _, release := range held {
		release()
	}
	mu.Unlock()
	if got := lag(); got != behind {
		t.Fatalf("lag %d after a release by a stopped member, want %d still", got, behind)
	}

	// Member B is handed r5 again, with what came after it on its
	// partition, and commits everything once it released them.
	stopB := stagetest.Run(t, holdingStage("", handled, nil), stagetest.Env(k))
	for deadline := time.Now().Add(time.Minute); total() < n+int(behind); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("member B handled %d inputs again, want the %d not committed", total()-n, behind)
		}
	}
	for deadline := time.Now().Add(time.Minute); lag() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lag %d after every effect ended, want 0", lag())
		}
	}
	stopB()
	mu.Lock()
	defer mu.Unlock()
	if counts["r5"] != 2 {
		t.Errorf("r5 handled %d times, want twice (its first effect never ended)", counts["r5"])
	}
	for id, c := range counts {
		if c < 1 || c > 2 {
			t.Errorf("%s handled %d times", id, c)
		}
	}
}
