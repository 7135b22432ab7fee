package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
)

// TestLagCountsRecordsFetchedButNotDone runs an at-least-once stage whose
// effect keeps failing (its dependency is down): it has fetched every
// record, but done none, so its lag is every record, and it goes back to 0
// once the dependency answers and the records are done.
func TestLagCountsRecordsFetchedButNotDone(t *testing.T) {
	c := stagetest.NewCluster(t, 3, "in", "dlq.stuck")
	env := stagetest.Env(c.Kafka)
	env.LagInterval = 100 * time.Millisecond
	up := make(chan struct{})
	stage := runtime.Stage{
		Name: "stuck", Mode: runtime.AtLeastOnce, Inputs: []string{"in"},
		Setup: func(context.Context, runtime.Env) (runtime.Handler, func(), error) {
			return func(context.Context, runtime.Input) ([]runtime.Output, error) {
				select {
				case <-up:
					return nil, nil
				default:
					return nil, errors.New("the store does not answer")
				}
			}, nil, nil
		},
	}
	const n = 30
	produce(t, c, n, -1)
	stagetest.Run(t, stage, env)
	lag := func() float64 {
		total := 0.0
		for _, v := range series(t, env.Metrics, "policyflow_consumer_lag") {
			total += v
		}
		return total
	}
	describe := func() string { return fmt.Sprint(series(t, env.Metrics, "policyflow_consumer_lag")) }
	waitFor(t, fmt.Sprintf("a lag of %d while the stage is stuck", n), func() bool { return lag() == n }, describe)
	close(up)
	waitFor(t, "the lag back at 0 once the records are done", func() bool { return lag() == 0 }, describe)
}
