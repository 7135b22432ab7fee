package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// runAtLeastOnce handles records in order, producing each poll's outputs
// (and dead letters) before marking the poll's records, except those whose
// effect goes on (Input.Hold) until it ends; marked offsets are committed
// periodically, on revoke and at shutdown. Rebalances wait for the poll
// in hand (BlockRebalanceOnPoll).
func (r *runner) runAtLeastOnce(ctx context.Context) error {
	opts, err := r.consumeOpts()
	if err != nil {
		return err
	}
	opts = append(opts,
		kgo.BlockRebalanceOnPoll(),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.RecordPartitioner(Partitioner()),
	)
	r.holds = newHolds(r.env.Kafka)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("stage %s: create client: %w", r.stage.Name, err)
	}
	r.holds.use(cl)
	defer func() {
		// Effects still running (Input.Hold) keep their offsets: they
		// are not committed, so the next owner handles them again.
		r.holds.close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := cl.CommitMarkedOffsets(cctx); err != nil {
			r.log.Warn().Err(err).Msg("commit marked offsets at shutdown")
		}
		cancel()
		cl.Close() // leaves the group
	}()
	if err := r.waitBrokers(ctx, cl); err != nil {
		return err
	}
	r.joining()

	for {
		fetches := cl.PollRecords(ctx, r.pollRecords())
		r.polled = time.Now()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		r.logFetchErrors(fetches)
		polled, markers := dataRecords(fetches)
		outs, n := r.handle(ctx, polled)
		done, stopped := polled[:n], n < len(polled)
		if r.produceAll(ctx, cl, outs) {
			r.holds.handled(done)
			if !stopped {
				// Every record of the poll is done: the markers
				// between them may commit too.
				r.holds.handled(markers)
			}
			r.countOut(outs)
		}
		cl.AllowRebalance()
		if stopped {
			return nil
		}
	}
}

// produceAll produces recs, retrying failures until they succeed or stop
// is done; it reports whether every record was produced.
func (r *runner) produceAll(stop context.Context, cl *kgo.Client, recs []*kgo.Record) bool {
	for attempt := 0; len(recs) > 0; attempt++ {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(stop), 30*time.Second)
		res := cl.ProduceSync(pctx, recs...)
		cancel()
		var failed []*kgo.Record
		for _, pr := range res {
			if pr.Err != nil {
				failed = append(failed, pr.Record)
			}
		}
		if len(failed) == 0 {
			return true
		}
		r.log.Warn().Err(res.FirstErr()).Int("records", len(failed)).Msg("produce outputs failed; retrying")
		select {
		case <-stop.Done():
			return false
		case <-time.After(r.env.Retry.Next(attempt)):
		}
		recs = failed
	}
	return true
}
