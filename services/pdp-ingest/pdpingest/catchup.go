package pdpingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// catchups runs pdp-ingest's own catch-ups: one when the member starts
// leading (CatchupOnStart) and one every CatchupInterval (±10%) while it
// leads. The leader is the member holding partition 0 of
// pdp.notifications, so one member of the group runs them at a time. A
// catch-up first repairs the catalog from the PDP's full state (missed
// updates and removals, see Reconcile) and reports what it found on
// catchup.progress, then asks, under the same request id, for a catch-up
// of every deployment on catchup.requests, which the matcher answers by
// comparing every component with what it should have.
type catchups struct {
	g   *ingester
	cfg Config
	// emit writes pdp.notifications, catchup.progress and
	// catchup.requests.
	emit *runtime.Emitter
	adm  *kadm.Client
	log  zerolog.Logger
	// removals counts the removals catch-ups found, by outcome.
	removals *prometheus.CounterVec

	mu      sync.Mutex
	leading bool
	wake    chan struct{} // a lead change
	started bool          // the on-start catch-up ran
}

func newCatchups(g *ingester, cfg Config, emit *runtime.Emitter, adm *kadm.Client) *catchups {
	var reg *prometheus.Registry
	if g.env.Metrics != nil {
		reg = g.env.Metrics.Registry
	}
	return &catchups{g: g, cfg: cfg, emit: emit, adm: adm, log: g.log.With().Str("task", "catch-up").Logger(), wake: make(chan struct{}, 1),
		removals: removalsCounter(reg)}
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

// timer runs the catch-ups on the Emitter's clock: every next() while
// this member leads, and once when it starts leading (woken by setLead)
// when CatchupOnStart.
func (c *catchups) timer() runtime.Timer {
	return runtime.Timer{
		Name: "catch-up",
		Next: func() time.Duration {
			if c.cfg.CatchupInterval <= 0 {
				return math.MaxInt64 // on start only
			}
			return c.next()
		},
		Wake: c.wake,
		Run: func(ctx context.Context, t runtime.Tick) error {
			switch {
			case !c.isLeading():
			case t.Woken && c.cfg.CatchupOnStart && !c.started:
				c.started = true
				c.run(ctx, "catch-up on start of pdp-ingest")
			case !t.Woken:
				c.run(ctx, fmt.Sprintf("periodic catch-up (every %s)", c.cfg.CatchupInterval))
			}
			return nil
		},
	}
}

// run is one catch-up; a failure is logged and left to the next one.
func (c *catchups) run(ctx context.Context, reason string) {
	started := time.Now()
	id := fmt.Sprintf("pdp-ingest-%d", started.UnixNano())
	r, err := c.reconcile(ctx)
	if err != nil {
		c.log.Warn().Err(err).Str("request_id", id).Str("reason", reason).Msg("catch-up could not compare the catalog with the PDP; the components are compared anyway, and the next catch-up tries the PDP again")
	}
	for _, d := range r.Differences {
		msg := "catalog differs from the PDP; the policy is read again from the PDP"
		switch {
		case d.Remove && r.Withheld != "":
			msg = "the PDP no longer lists this policy; its removal is withheld"
		case d.Remove:
			msg = "the PDP no longer lists this policy; it is removed everywhere"
		}
		c.log.Info().Str("request_id", id).Str("policy_id", d.PolicyID).Str("pdp_version", d.PDP).Str("catalog_version", d.Catalog).Str("difference", d.Reason).Msg(msg)
	}
	if r.Withheld != "" {
		c.log.Error().Str("request_id", id).Int("removals_withheld", r.withheldRemovals()).Str("why", r.Withheld).
			Msg("catch-up removed no policy: check the PDP and --catchup-filter; remove policies the PDP really withdrew by notifying their removal")
	}
	c.removals.WithLabelValues(removalSent).Add(float64(r.Removed))
	c.removals.WithLabelValues(removalWithheld).Add(float64(r.withheldRemovals()))
	if n := len(r.Notifications); n > 0 {
		noun := "policies"
		if n == 1 {
			noun = "policy"
		}
		reason = fmt.Sprintf("%s: %d %s differed from the PDP", reason, n, noun)
		if r.Removed > 0 {
			reason += fmt.Sprintf(", %d of them no longer listed", r.Removed)
		}
	}
	if err == nil {
		if perr := c.progress(ctx, id, r); perr != nil {
			c.log.Warn().Err(perr).Str("request_id", id).Msg("catch-up could not report what it found in the catalog")
		}
	}
	if err := c.request(ctx, id, reason); err != nil {
		c.log.Error().Err(err).Str("reason", reason).Msg("catch-up of the components could not be requested; the next catch-up tries again")
		return
	}
	c.log.Info().Str("request_id", id).Str("reason", reason).Int("policies_repaired", r.updated()).
		Int("policies_removed", r.Removed).Dur("took", time.Since(started)).Msg("catch-up requested")
}

// Outcomes of a removal a catch-up found (the outcome label of
// policyflow_catchup_removals_total).
const (
	removalSent     = "removed"
	removalWithheld = "withheld"
)

// removalsCounter is policyflow_catchup_removals_total on reg (the one
// already there when another member of this process registered it).
func removalsCounter(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "policyflow_catchup_removals_total",
		Help: "Catalog policies from the PDP that a catch-up found no longer listed, by outcome: removed (sent to be removed everywhere), withheld (an empty listing, or more than --catchup-max-removal-share at once).",
	}, []string{"outcome"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if errors.As(err, &dup) {
				if existing, ok := dup.ExistingCollector.(*prometheus.CounterVec); ok {
					c = existing
				}
			}
		}
	}
	c.WithLabelValues(removalSent)
	c.WithLabelValues(removalWithheld)
	return c
}

// reconcile reads the PDP's full state and the whole catalog and produces
// a notification for every policy_id that differs.
func (c *catchups) reconcile(ctx context.Context) (Reconciliation, error) {
	filter, err := policy.CompileFilter(policy.Filter{PolicyName: c.cfg.CatchupFilter})
	if err != nil {
		return Reconciliation{}, fmt.Errorf("--catchup-filter: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, c.cfg.PDPTimeout)
	bodies, err := c.g.pdp.Latest(qctx, c.cfg.CatchupFilter)
	cancel()
	if err != nil {
		return Reconciliation{}, err
	}
	catalog, err := c.catalog(ctx)
	if err != nil {
		return Reconciliation{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	r := Reconcile(CatchupInput{
		Bodies: bodies, Catalog: catalog, Filter: filter, MaxRemovalShare: c.cfg.CatchupMaxRemovalShare,
		ID: "catch-up-" + now.Format("20060102T150405.000Z"), Now: now,
	})
	if len(r.Notifications) == 0 {
		return r, nil
	}
	outs := make([]runtime.Output, 0, len(r.Notifications))
	for _, k := range r.Notifications {
		outs = append(outs, runtime.Output{Topic: topology.PDPNotifications, Key: []byte(k.PolicyID), Value: k.Notification})
	}
	if err := c.emit.Emit(ctx, outs...); err != nil {
		return Reconciliation{}, fmt.Errorf("write %d catch-up notifications to %s: %w", len(outs), c.g.env.Kafka.Topic(topology.PDPNotifications), err)
	}
	return r, nil
}

// progress reports on catchup.progress what the catch-up id found in the
// catalog (GET /v1/catchup/{id} shows it).
func (c *catchups) progress(ctx context.Context, id string, r Reconciliation) error {
	p := &events.CatchupProgress{
		RequestID: id,
		Stage:     events.ProgressPDPIngest,
		Compared:  int64(r.Listed),
		Differed:  int64(r.updated()),
		Removed:   int64(r.Removed),
		DoneAt:    time.Now().UTC(),
	}
	if r.Withheld != "" {
		w := r.Withheld
		p.RemovalWithheld = &w
	}
	if err := c.emit.Emit(ctx, runtime.Output{Topic: topology.CatchupProgress, Key: []byte(id), Value: p}); err != nil {
		return fmt.Errorf("write catch-up progress to %s: %w", c.g.env.Kafka.Topic(topology.CatchupProgress), err)
	}
	return nil
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

// request asks every matcher partition for a catch-up of every deployment,
// under the request id.
func (c *catchups) request(ctx context.Context, id, reason string) error {
	topic := c.g.env.Kafka.Topic(topology.CatchupRequests)
	n, err := runtime.PartitionCount(ctx, c.adm, topic)
	if err != nil {
		return err
	}
	req := &events.CatchupRequest{
		RequestID:   id,
		Scope:       events.ScopeAll,
		Reason:      reason,
		RequestedAt: time.Now().UTC(),
	}
	b, err := c.g.env.Codec.Encode(req)
	if err != nil {
		return fmt.Errorf("encode catch-up request: %w", err)
	}
	if err := c.emit.Emit(ctx, runtime.Fanout(topology.CatchupRequests, n, []byte(events.ScopeAll), b)...); err != nil {
		return fmt.Errorf("write the catch-up request to %s: %w", topic, err)
	}
	return nil
}

func contains(ps []int32, p int32) bool { return slices.Contains(ps, p) }
