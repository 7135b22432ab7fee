package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// A stage waiting for the topic it fans out to is not ready, says which
// topic it waits for, and gets the partition count once the topic exists.
func TestWaitPartitionsWaitsForTheTopic(t *testing.T) {
	c := newCluster(t)
	env := stagetest.Env(c.Kafka)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan int32, 1)
	errs := make(chan error, 1)
	go func() {
		n, err := runtime.WaitPartitions(ctx, env, "fan", c.Admin, "later")
		errs <- err
		got <- n
	}()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(env.Health.Status()["fan"], "waiting for topic t.later"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the stage's readiness says %q while the topic is missing", env.Health.Status()["fan"])
		}
	}
	c.CreateTopics(t, nil, "later")
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 3 {
		t.Errorf("partitions %d, want 3", n)
	}

	// A stage stopped while it waits says so.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if _, err := runtime.WaitPartitions(stopped, env, "fan", c.Admin, "never"); err == nil || !strings.Contains(err.Error(), "t.never") {
		t.Errorf("stopped while waiting: %v, want an error naming t.never", err)
	}
}
