package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// runTransactional is exactly-once consume-transform-produce: every poll
// is one transaction holding the poll's outputs, dead letters and input
// offsets (kgo.GroupTransactSession, read committed).
func (r *runner) runTransactional(ctx context.Context) error {
	sess, err := r.transactSession()
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := r.waitBrokers(ctx, sess.Client()); err != nil {
		return err
	}
	// Initialise the producer id before joining the group: with a stable
	// transactional id (--instance-id) this fences the previous run and
	// aborts the transaction it left open, at once. Otherwise the broker
	// keeps that transaction until its timeout, and the committed offsets
	// the stage reads when it is assigned partitions stay unstable
	// (UNSTABLE_OFFSET_COMMIT) for as long: a restart after kill -9 took
	// 33 s instead of a fraction of a second.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		return fmt.Errorf("stage %s: initialise the transactional producer %s: %w", r.stage.Name, r.transactionalID(), err)
	}
	r.joining()

	for {
		fetches := sess.PollRecords(ctx, r.pollCap())
		r.polled = time.Now()
		if fetches.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
		r.logFetchErrors(fetches)
		data, markers := dataRecords(fetches)
		if len(data) == 0 && len(markers) == 0 {
			continue
		}
		// A poll of transaction markers only (the marker of an aborted
		// transaction, whose records read_committed skips) still ends in
		// a transaction, of their offsets alone, as a poll whose records
		// were all filtered does: the group's committed lag then reads 0
		// once the partition is read, not the aborted records and marker
		// until the next record comes.
		stop, err := r.transactPoll(ctx, sess, data)
		if stop || err != nil {
			return err
		}
	}
}

// transactSession creates the stage's transactional group session.
func (r *runner) transactSession() (*kgo.GroupTransactSession, error) {
	opts, err := r.consumeOpts()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.TransactionalID(r.transactionalID()),
		kgo.TransactionTimeout(r.env.TransactionTimeout),
		kgo.RequireStableFetchOffsets(),
		kgo.RecordPartitioner(Partitioner()),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, fmt.Errorf("stage %s: create transactional session: %w", r.stage.Name, err)
	}
	return sess, nil
}

// transactPoll handles one poll's data records in one transaction. stop
// says the stage is stopping (a record was not handled: its batch is
// aborted and left to the next run); an error, that the transaction could
// not be ended and the stage stops to be restarted clean. When the
// transaction does not commit, the state its records moved forward is
// rebuilt before the session, rewound, hands them again.
func (r *runner) transactPoll(ctx context.Context, sess *kgo.GroupTransactSession, data []*kgo.Record) (stop bool, err error) {
	if err := sess.Begin(); err != nil {
		return false, fmt.Errorf("stage %s: begin transaction: %w", r.stage.Name, err)
	}
	// The first produce error, if any; a failure aborts what is still
	// buffered, so the batch is given up quickly.
	promise := kgo.AbortingFirstErrPromise(sess.Client())
	began := time.Now()
	outs, handled, complete, overran := r.produceBatch(ctx, sess, data, promise)
	committed, err := r.endTransaction(ctx, sess, promise, complete, outs)
	if err != nil {
		return false, err
	}
	if overran {
		// The poll's records cost more than the budget: the transaction
		// is aborted (the session rewinds to the committed offsets) and
		// the next polls are smaller, so that none approaches the
		// transaction timeout.
		r.capped = max(1, handled/2)
		r.log.Warn().Int("records", len(data)).Int("handled", handled).Dur("budget", r.pollBudget()).Int("next_poll_records", r.capped).
			Msg("a poll's records took longer than the stage's budget; transaction aborted, polls made smaller")
		r.rewound(ctx)
		return false, nil
	}
	if !complete {
		return true, nil
	}
	if !committed {
		// The session rewinds to the committed offsets; state the
		// aborted records moved forward is rebuilt before they come
		// again.
		r.rewound(ctx)
		return false, nil
	}
	if r.capped > 0 && time.Since(began) < r.pollBudget()/4 {
		if r.capped *= 2; r.capped >= r.pollRecords() && r.pollRecords() > 0 {
			r.capped = 0
		}
	}
	return false, nil
}

// produceBatch handles data in decode windows and produces each record's
// outputs into the open transaction. It returns the outputs' counts by
// topic (not the outputs, which kgo frees once acknowledged), how many
// records were handled, and whether every record was: not when the stage
// is stopping, nor when (overran) the stage's PollBudget was spent before
// the last record (checked before each record but the first).
func (r *runner) produceBatch(ctx context.Context, sess *kgo.GroupTransactSession, data []*kgo.Record, promise *kgo.FirstErrPromise) (outs outCounts, handled int, complete, overran bool) {
	outs = outCounts{}
	budget, began := r.pollBudget(), time.Now()
	// The batch in hand is finished on shutdown too: its outputs are
	// produced without the stage's context, which a signal cancels.
	pctx := context.WithoutCancel(ctx)
	for start := 0; start < len(data); start += decodeWindow {
		window := data[start:min(start+decodeWindow, len(data))]
		ins := r.inputsAhead(pctx, window)
		for i, rec := range window {
			if budget > 0 && handled > 0 && time.Since(began) > budget {
				return outs, handled, false, true
			}
			recs, ok := r.process(ctx, rec, ins[i])
			ins[i] = Input{} // its decoded value is no longer needed
			if !ok {
				return outs, handled, false, false
			}
			for _, out := range recs {
				sess.Produce(pctx, out, promise.Promise())
			}
			outs.add(recs)
			handled++
		}
	}
	return outs, handled, true, false
}

// endTransaction flushes the transaction's records and ends it: it
// commits when the batch is complete and every record was produced, and
// aborts otherwise. committed is false on an abort and on an End that
// failed; an error means the transaction End left open could not be
// aborted either.
func (r *runner) endTransaction(ctx context.Context, sess *kgo.GroupTransactSession, promise *kgo.FirstErrPromise, complete bool, outs outCounts) (committed bool, err error) {
	// End flushes the produced records first. It gets its own deadline
	// so a shutdown still commits (or aborts) the batch in hand.
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.env.TransactionTimeout)
	// Flush before deciding: a record that fails only while being
	// flushed must abort the transaction, or its input's offset would
	// commit without it (End flushes too, then commits regardless).
	// Once flushed, every record's promise has run; records a flush
	// could not confirm in time may yet fail, so they abort too.
	var failed error
	if err := sess.Client().Flush(endCtx); err != nil {
		r.log.Warn().Err(err).Msg("flush the transaction's records")
		failed = fmt.Errorf("flush the transaction's records: %w", err)
	} else {
		failed = promise.Err()
	}
	commit := kgo.TryCommit
	if !complete || failed != nil {
		commit = kgo.TryAbort
	}
	committed, err = sess.End(endCtx, commit)
	cancel()
	switch {
	case err != nil:
		r.env.Metrics.Txns.WithLabelValues(r.stage.Name, "error").Inc()
		r.log.Error().Err(err).Msg("end transaction; the batch will be processed again")
		// End gives up without ending the transaction when its flush
		// runs out of time (a slow or overloaded broker): abort it, or
		// the next Begin finds it still open and the stage stops.
		if aerr := r.abortOpen(ctx, sess); aerr != nil {
			return false, fmt.Errorf("stage %s: abort the transaction End left open: %w", r.stage.Name, aerr)
		}
		return false, nil
	case committed:
		r.env.Metrics.Txns.WithLabelValues(r.stage.Name, "committed").Inc()
		r.countOutBy(outs)
	default:
		r.env.Metrics.Txns.WithLabelValues(r.stage.Name, "aborted").Inc()
		if failed != nil {
			r.log.Warn().Err(failed).Msg("produce failed; transaction aborted, the batch will be processed again")
		} else if complete {
			r.log.Info().Msg("transaction aborted by a rebalance; the new owner processes the batch")
		}
	}
	return committed, nil
}

// waitBrokers blocks until the brokers answer cl, so readiness means it. A
// failure is logged, and is the stage's reason not to be ready, with what
// to check (Kafka.Explain): an error the first time, then a warning per
// retry. It keeps trying: brokers that are down may come back, and SASL
// users may be created after the stage started.
func (r *runner) waitBrokers(ctx context.Context, cl *kgo.Client) error {
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := cl.Ping(pctx)
		cancel()
		if err == nil {
			if attempt > 0 {
				r.log.Info().Strs("brokers", r.env.Kafka.Brokers).Msg("brokers reachable")
			}
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		err = r.env.Kafka.Explain(err)
		r.notReadyUnlessAssigned(err.Error())
		ev := r.log.Warn()
		if attempt == 0 {
			ev = r.log.Error()
		}
		ev.Err(err).Strs("brokers", r.env.Kafka.Brokers).Msg("cannot reach the brokers; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.env.Retry.Next(attempt)):
		}
	}
}

// transactionalID is the stage's group and its instance id (see
// Env.InstanceID), so that a restarted member fences its previous run's
// open transaction; without one, a random id (members then never fence
// each other, and a dead member's transaction blocks its partitions
// until TransactionTimeout).
func (r *runner) transactionalID() string {
	if r.env.InstanceID != "" {
		return r.stage.GroupIn(r.env.Kafka) + "-" + r.env.InstanceID
	}
	return fmt.Sprintf("%s-%s", r.stage.GroupIn(r.env.Kafka), randomID())
}

// abortOpen aborts the transaction a failed End may have left open,
// retrying with backoff while the brokers are slow; it gives up (and the
// stage stops, to be restarted clean) only after several tries.
func (r *runner) abortOpen(ctx context.Context, sess *kgo.GroupTransactSession) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.env.TransactionTimeout)
		_, err = sess.End(actx, kgo.TryAbort)
		cancel()
		if err == nil {
			r.log.Warn().Msg("the transaction End left open is aborted; its batch will be processed again")
			return nil
		}
		r.log.Warn().Err(err).Int("attempt", attempt+1).Msg("abort the transaction End left open; retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.env.Retry.Next(attempt)):
		}
	}
	return err
}
