package runtime

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultLagInterval is how often a stage reads its group's lag.
const DefaultLagInterval = 5 * time.Second

// watchLag sets the stage's lag series (Metrics.Lag) from its consumer
// group's committed offsets every Env.LagInterval until ctx is done: for
// each partition of its inputs, the records between the group's committed
// offset and the partition's end. Unlike a member's own position, this
// counts what was fetched but not yet done (a poll stuck on a dependency)
// and the partitions of a member that died and has not been replaced.
// Every member reports the whole group's lag, so series of several
// members of one stage are the same numbers: aggregate them with max by
// partition, not sum.
func (r *runner) watchLag(ctx context.Context) {
	every := r.env.LagInterval
	if every <= 0 {
		every = DefaultLagInterval
	}
	opts, err := r.env.Kafka.ClientOpts()
	if err != nil {
		return // the stage itself reports this
	}
	cl, err := kgo.NewClient(append(opts, kgo.WithLogger(KgoLogger(r.log)), kgo.ClientID("policyflow-"+r.stage.Name+"-lag"))...)
	if err != nil {
		r.log.Warn().Err(err).Msg("create the client that reads the group's lag")
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, max(every, 5*time.Second))
		r.readLag(lctx, adm)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readLag reads the group's committed lag once and sets the lag series.
func (r *runner) readLag(ctx context.Context, adm *kadm.Client) {
	group := r.stage.GroupIn(r.env.Kafka)
	lags, err := adm.Lag(ctx, group)
	if err == nil {
		l := lags[group]
		err = l.Error()
	}
	if err != nil {
		if ctx.Err() == nil {
			r.log.Debug().Err(err).Str("group", group).Msg("read the group's lag")
		}
		return
	}
	inputs := map[string]bool{}
	for _, t := range r.stage.Inputs {
		inputs[r.env.Kafka.Topic(t)] = true
	}
	for topic, ps := range lags[group].Lag {
		if !inputs[topic] {
			continue
		}
		base := strings.TrimPrefix(topic, r.env.Kafka.Prefix)
		for p, l := range ps {
			if l.Err != nil || l.Lag < 0 {
				continue
			}
			r.env.Metrics.Lag.WithLabelValues(r.stage.Name, base, strconv.Itoa(int(p))).Set(float64(l.Lag))
		}
	}
}
