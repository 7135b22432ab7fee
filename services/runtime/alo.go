package runtime

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// runAtLeastOnce handles records in order, producing each poll's outputs
// (and dead letters) before marking the poll's records; marked offsets are
// committed periodically, on revoke and at shutdown. Rebalances wait for
// the poll in hand (BlockRebalanceOnPoll).
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
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("stage %s: create client: %w", r.stage.Name, err)
	}
	defer func() {
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
	if r.stage.Assigned == nil {
		r.env.Health.Ready(r.stage.Name)
	}

	for {
		fetches := cl.PollRecords(ctx, r.env.PollRecords)
		if fetches.IsClientClosed() || ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		r.logFetchErrors(fetches)
		r.observeLag(fetches)
		var done []*kgo.Record
		var outs []*kgo.Record
		stopped := false
		if r.batch != nil {
			polled := fetches.Records()
			var n int
			outs, n = r.processBatch(ctx, polled)
			done, stopped = polled[:n], n < len(polled)
		} else {
			iter := fetches.RecordIter()
			for !iter.Done() {
				rec := iter.Next()
				recs, ok := r.process(ctx, rec)
				if !ok {
					stopped = true
					break
				}
				outs = append(outs, recs...)
				done = append(done, rec)
			}
		}
		if r.produceAll(ctx, cl, outs) {
			cl.MarkCommitRecords(done...)
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

// processBatch decodes a poll's records and hands them to the batch
// handler, retrying from the first transient failure with capped backoff
// until stop is done. It returns the records to produce (outputs and dead
// letters, in input order) and how many of recs, from the start, were
// processed: fewer than len(recs) only when stop ended the retries.
func (r *runner) processBatch(stop context.Context, recs []*kgo.Record) ([]*kgo.Record, int) {
	hctx := context.WithoutCancel(stop) // the poll in hand is finished (drained)
	type item struct {
		in        Input
		decodeErr error         // never handed to the handler
		dead      error         // the handler's permanent failure
		outs      []*kgo.Record // encoded outputs once handled
	}
	items := make([]item, len(recs))
	for i, rec := range recs {
		r.env.Metrics.RecordsIn.WithLabelValues(r.stage.Name, strings.TrimPrefix(rec.Topic, r.env.Kafka.Prefix)).Inc()
		items[i].in, items[i].decodeErr = r.decode(hctx, rec)
	}
	finished := len(items)
	for start, attempt := 0, 0; ; attempt++ {
		var idx []int
		var ins []Input
		for i := start; i < len(items); i++ {
			if items[i].decodeErr == nil {
				items[i].dead, items[i].outs = nil, nil
				idx = append(idx, i)
				ins = append(ins, items[i].in)
			}
		}
		if len(ins) == 0 {
			break
		}
		began := time.Now()
		outcomes := r.batch(hctx, ins)
		r.env.Metrics.Latency.WithLabelValues(r.stage.Name).Observe(time.Since(began).Seconds())
		if len(outcomes) != len(ins) {
			err := Permanentf("stage %s: batch handler returned %d outcomes for %d inputs", r.stage.Name, len(outcomes), len(ins))
			for _, i := range idx {
				items[i].dead = err
			}
			break
		}
		retry := -1
		for j, oc := range outcomes {
			i, err := idx[j], oc.Err
			if err == nil {
				var eerr error
				if items[i].outs, eerr = r.encode(oc.Outputs); eerr == nil {
					continue
				}
				err = Permanent(eerr)
			}
			if !IsPermanent(err) {
				retry = i
				r.env.Metrics.Retries.WithLabelValues(r.stage.Name).Inc()
				d := r.env.Retry.Next(attempt)
				r.log.Warn().Err(err).Str("topic", recs[i].Topic).Int32("partition", recs[i].Partition).Int64("offset", recs[i].Offset).
					Int("inputs_again", len(items)-i).Dur("retry_in", d).Msg("batch handler failed; retrying from this input")
				select {
				case <-stop.Done():
					finished = i
				case <-time.After(d):
				}
				break
			}
			items[i].dead = err
		}
		if retry < 0 || finished < len(items) {
			break
		}
		start = retry
	}
	var out []*kgo.Record
	for i, it := range items[:finished] {
		if err := cmp.Or(it.decodeErr, it.dead); err != nil {
			out = append(out, r.deadLetter(recs[i], err))
			continue
		}
		out = append(out, it.outs...)
	}
	return out, finished
}
