package pdpingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// catchups runs pdp-ingest's own catch-ups: one when the member starts
// leading (CatchupOnStart) and one every CatchupInterval (±10%) while it
// leads. The leader is the member holding partition 0 of
// pdp.notifications, so one member of the group runs them at a time. A
// catch-up first repairs the catalog from the PDP's full state (missed
// notifications, see Reconcile), then asks for a catch-up of every
// deployment on catchup.requests, which the matcher answers by comparing
// every component with what it should have.
type catchups struct {
	g   *ingester
	cfg Config
	cl  *kgo.Client
	adm *kadm.Client
	log zerolog.Logger

	mu      sync.Mutex
	leading bool
	wake    chan struct{} // a lead change
	started bool          // the on-start catch-up ran
}

func newCatchups(g *ingester, cfg Config, cl *kgo.Client, adm *kadm.Client) *catchups {
	return &catchups{g: g, cfg: cfg, cl: cl, adm: adm, log: g.log.With().Str("task", "catch-up").Logger(), wake: make(chan struct{}, 1)}
}

func (c *catchups) setLead(on bool) {
	c.mu.Lock()
	changed := c.leading != on
	c.leading = on
	c.mu.Unlock()
	if changed {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

func (c *catchups) isLeading() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading
}

// next is the wait before the next periodic catch-up: the interval within
// ±10%, so that deployments restarted together do not ask the PDP at once.
func (c *catchups) next() time.Duration {
	d := c.cfg.CatchupInterval
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

func (c *catchups) loop(ctx context.Context) {
	var tick <-chan time.Time
	var timer *time.Timer
	arm := func() {
		if c.cfg.CatchupInterval <= 0 {
			return
		}
		if timer != nil {
			timer.Stop()
		}
		timer = time.NewTimer(c.next())
		tick = timer.C
	}
	arm()
	for {
		if c.isLeading() && c.cfg.CatchupOnStart && !c.started {
			c.started = true
			c.run(ctx, "catch-up on start of pdp-ingest")
			arm()
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return
		case <-c.wake:
		case <-tick:
			if c.isLeading() {
				c.run(ctx, fmt.Sprintf("periodic catch-up (every %s)", c.cfg.CatchupInterval))
			}
			arm()
		}
	}
}

// run is one catch-up; a failure is logged and left to the next one.
func (c *catchups) run(ctx context.Context, reason string) {
	started := time.Now()
	diffs, err := c.reconcile(ctx)
	if err != nil {
		c.log.Warn().Err(err).Str("reason", reason).Msg("catch-up could not compare the catalog with the PDP; the components are compared anyway, and the next catch-up tries the PDP again")
	}
	for _, d := range diffs {
		c.log.Info().Str("policy_id", d.PolicyID).Str("pdp_version", d.PDP).Str("catalog_version", d.Catalog).Str("difference", d.Reason).
			Msg("catalog differs from the PDP; the policy is read again from the PDP")
	}
	if len(diffs) > 0 {
		noun := "policies"
		if len(diffs) == 1 {
			noun = "policy"
		}
		reason = fmt.Sprintf("%s: %d %s differed from the PDP", reason, len(diffs), noun)
	}
	id, err := c.request(ctx, reason)
	if err != nil {
		c.log.Error().Err(err).Str("reason", reason).Msg("catch-up of the components could not be requested; the next catch-up tries again")
		return
	}
	c.log.Info().Str("request_id", id).Str("reason", reason).Int("policies_repaired", len(diffs)).Dur("took", time.Since(started)).Msg("catch-up requested")
}

// reconcile reads the PDP's full state and the whole catalog and produces
// a notification for every policy_id that differs.
func (c *catchups) reconcile(ctx context.Context) ([]Difference, error) {
	qctx, cancel := context.WithTimeout(ctx, c.cfg.PDPTimeout)
	bodies, err := c.g.pdp.Latest(qctx, c.cfg.CatchupFilter)
	cancel()
	if err != nil {
		return nil, err
	}
	catalog, err := c.catalog(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	keyed, diffs := Reconcile(bodies, catalog, "catch-up-"+now.Format("20060102T150405.000Z"), now)
	if len(keyed) == 0 {
		return nil, nil
	}
	topic := c.g.env.Kafka.Topic(topology.PDPNotifications)
	recs := make([]*kgo.Record, 0, len(keyed))
	for _, k := range keyed {
		b, err := c.g.env.Codec.Encode(k.Notification)
		if err != nil {
			return nil, fmt.Errorf("encode the catch-up notification of %s: %w", k.PolicyID, err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(k.PolicyID), Value: b})
	}
	if err := c.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("write %d catch-up notifications to %s: %w", len(recs), topic, c.g.env.Kafka.Explain(err))
	}
	return diffs, nil
}

// catalog reads every partition of policy.catalog (read committed).
func (c *catchups) catalog(ctx context.Context) (map[string]*events.PolicyCatalogEntry, error) {
	n, err := runtime.PartitionCount(ctx, c.adm, c.g.env.Kafka.Topic(topology.PolicyCatalog))
	if err != nil {
		return nil, err
	}
	parts := make([]int32, n)
	for i := range parts {
		parts[i] = int32(i)
	}
	out := map[string]*events.PolicyCatalogEntry{}
	err = runtime.ReadPartitions(ctx, c.g.env.Kafka, topology.PolicyCatalog, parts, runtime.Rows(ctx, c.g.env, runtime.PassTombstones, func(r runtime.Msg[*events.PolicyCatalogEntry]) error {
		if r.Value == nil {
			delete(out, string(r.Key))
		} else {
			out[string(r.Key)] = r.Value
		}
		return nil
	}))
	if err != nil {
		return nil, fmt.Errorf("read the catalog: %w", err)
	}
	return out, nil
}

// request asks every matcher partition for a catch-up of every deployment.
func (c *catchups) request(ctx context.Context, reason string) (string, error) {
	topic := c.g.env.Kafka.Topic(topology.CatchupRequests)
	n, err := runtime.PartitionCount(ctx, c.adm, topic)
	if err != nil {
		return "", err
	}
	req := &events.CatchupRequest{
		RequestID:   fmt.Sprintf("pdp-ingest-%d", time.Now().UnixNano()),
		Scope:       events.ScopeAll,
		Reason:      reason,
		RequestedAt: time.Now().UTC(),
	}
	b, err := c.g.env.Codec.Encode(req)
	if err != nil {
		return "", fmt.Errorf("encode catch-up request: %w", err)
	}
	if err := c.cl.ProduceSync(ctx, runtime.EveryPartition(ctx, topic, n, []byte(events.ScopeAll), b)...).FirstErr(); err != nil {
		return "", fmt.Errorf("write the catch-up request to %s: %w", topic, c.g.env.Kafka.Explain(err))
	}
	return req.RequestID, nil
}

func contains(ps []int32, p int32) bool { return slices.Contains(ps, p) }
