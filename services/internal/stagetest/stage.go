package stagetest

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/runtime"
)

// Env is a stage environment for tests on k: errors-only logs to
// nowhere, retries within milliseconds, polls of at most 50 records, and
// transaction and session timeouts short enough that a dead member's
// partitions move on in seconds yet long enough for a slow machine.
func Env(k runtime.Kafka) runtime.Env {
	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	env.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	env.TransactionTimeout = 10 * time.Second
	env.SessionTimeout = 10 * time.Second
	env.PollRecords = 50
	return env
}

// stopTimeout is how long Run's stop waits for the stage to end.
const stopTimeout = 60 * time.Second

// Run runs the stage in the background until stop is called or the test
// ends. Stopping fails the test when the stage ended with an error or did
// not end within a minute; stop may be called more than once and from
// any goroutine.
func Run(t testing.TB, s runtime.Stage, env runtime.Env) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, env) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("stage %s: %v", s.Name, err)
				}
			case <-time.After(stopTimeout):
				t.Errorf("stage %s did not stop within %s", s.Name, stopTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
