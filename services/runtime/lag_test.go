package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
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
	testkit.Eventually(t, time.Minute, testkit.Holds(fmt.Sprintf("a lag of %d while the stage is stuck", n), func() bool { return lag() == n }, describe))
	close(up)
	testkit.Eventually(t, time.Minute, testkit.Holds("the lag back at 0 once the records are done", func() bool { return lag() == 0 }, describe))
}

// TestLagAfterAnAbortedTransactionReadsZero: a transactional stage whose
// input ends in an aborted transaction (records read_committed skips, then
// the abort marker) commits past it, so its group's lag reads 0 rather
// than the aborted records until the next record comes.
func TestLagAfterAnAbortedTransactionReadsZero(t *testing.T) {
	c := stagetest.NewCluster(t, 1, topology.CatchupRequests, "out", "dlq.forward")
	opts, err := c.Kafka.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.TransactionalID("aborting"), kgo.DefaultProduceTopic(c.Kafka.Topic(topology.CatchupRequests)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := cl.ProduceSync(ctx, c.Record(t, topology.CatchupRequests, fmt.Sprint("k", i), req(fmt.Sprint("r", i)))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	env := stagetest.Env(c.Kafka)
	env.LagInterval = 100 * time.Millisecond
	stagetest.Run(t, forwardStage(), env)
	lag := func() (float64, bool) {
		v, ok := series(t, env.Metrics, "policyflow_consumer_lag")["partition=0,stage=forward,topic="+topology.CatchupRequests]
		return v, ok
	}
	testkit.Eventually(t, time.Minute, testkit.Holds("the lag at 0 past the aborted transaction", func() bool { v, ok := lag(); return ok && v == 0 },
		func() string { return fmt.Sprint(series(t, env.Metrics, "policyflow_consumer_lag")) }))
}
