package pdpingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// DefaultPDPURL is the PDP of the embedded stack (the simulator).
const DefaultPDPURL = "http://127.0.0.1:8181"

// Config is pdp-ingest's own configuration.
type Config struct {
	// PDPURL is the PDP API base; /getConfig is appended.
	PDPURL string
	// PDPTimeout bounds one /getConfig request.
	PDPTimeout time.Duration
	// PDPHeaders are "Name=value" pairs, comma separated, sent to the PDP.
	PDPHeaders string
	// PartitionsRefresh is how often the partition count of
	// policy.changes is read again (changes are copied to every
	// partition).
	PartitionsRefresh time.Duration
	// CatchupInterval is the time between two periodic catch-ups, each
	// drawn within ±10% of it; 0 turns them off.
	CatchupInterval time.Duration
	// CatchupOnStart runs a catch-up as soon as this member leads (holds
	// partition 0 of pdp.notifications) after it starts.
	CatchupOnStart bool
	// CatchupFilter is the policyName regular expression of the full
	// /getConfig query a catch-up asks the PDP.
	CatchupFilter string
	// CatchupMaxRemovalShare is the greatest share (0 to 1) of the
	// catalog's policies from the PDP, within CatchupFilter, that one
	// catch-up removes because the PDP no longer lists them; a catch-up
	// that would remove more removes none (see Reconcile). 0 turns
	// catch-up removals off.
	CatchupMaxRemovalShare float64
}

// DefaultConfig reads PF_PDP_URL, PF_PDP_TIMEOUT and PF_PDP_HEADERS,
// falling back to the embedded stack's PDP.
func DefaultConfig() Config {
	c := Config{
		PDPURL:                 runtime.EnvOr("PF_PDP_URL", DefaultPDPURL),
		PDPTimeout:             30 * time.Second,
		PDPHeaders:             runtime.EnvOr("PF_PDP_HEADERS", ""),
		PartitionsRefresh:      time.Minute,
		CatchupInterval:        15 * time.Minute,
		CatchupOnStart:         runtime.EnvOr("PF_CATCHUP_ON_START", "true") != "false",
		CatchupFilter:          runtime.EnvOr("PF_CATCHUP_FILTER", ".*"),
		CatchupMaxRemovalShare: 0.5,
	}
	if f, err := strconv.ParseFloat(runtime.EnvOr("PF_CATCHUP_MAX_REMOVAL_SHARE", ""), 64); err == nil {
		c.CatchupMaxRemovalShare = f
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_CATCHUP_INTERVAL", "")); err == nil {
		c.CatchupInterval = d
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_PDP_TIMEOUT", "")); err == nil {
		c.PDPTimeout = d
	}
	return c
}

// RegisterFlags adds pdp-ingest's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.PDPURL, "pdp-url", c.PDPURL, "PDP API base URL; POST <url>/getConfig is called for every version of a policy (env PF_PDP_URL)")
	fs.DurationVar(&c.PDPTimeout, "pdp-timeout", c.PDPTimeout, "timeout of one PDP request (env PF_PDP_TIMEOUT)")
	fs.StringVar(&c.PDPHeaders, "pdp-headers", c.PDPHeaders, "headers sent to the PDP as Name=value pairs, comma separated, e.g. ClientAuth=Basic ...,Environment=TEST (env PF_PDP_HEADERS)")
	fs.DurationVar(&c.CatchupInterval, "catchup-interval", c.CatchupInterval, "time between periodic catch-ups (each within ±10%): the PDP's full state is compared with the catalog, then every component with what it should have; 0 turns them off (env PF_CATCHUP_INTERVAL)")
	fs.BoolVar(&c.CatchupOnStart, "catchup-on-start", c.CatchupOnStart, "run a catch-up when this member starts leading the group (env PF_CATCHUP_ON_START)")
	fs.StringVar(&c.CatchupFilter, "catchup-filter", c.CatchupFilter, "policyName regular expression of the full /getConfig query of a catch-up, e.g. DCAE\\.Config_.* (env PF_CATCHUP_FILTER)")
	fs.Float64Var(&c.CatchupMaxRemovalShare, "catchup-max-removal-share", c.CatchupMaxRemovalShare, "greatest share, 0 to 1, of the catalog's policies from the PDP (within --catchup-filter) that one catch-up removes because the PDP no longer lists them; a catch-up that would remove more, or that got an empty listing, removes none and says so; 0 turns catch-up removals off (env PF_CATCHUP_MAX_REMOVAL_SHARE)")
}

// Validate says what is wrong with the configuration.
func (c Config) Validate() error {
	if c.PDPURL == "" {
		return errors.New("--pdp-url is empty")
	}
	if c.PDPTimeout <= 0 {
		return fmt.Errorf("--pdp-timeout %s is not positive", c.PDPTimeout)
	}
	if _, err := ParseHeaders(c.PDPHeaders); err != nil {
		return fmt.Errorf("--pdp-headers: %w", err)
	}
	if c.CatchupInterval < 0 {
		return fmt.Errorf("--catchup-interval %s is negative; use 0 to turn periodic catch-ups off", c.CatchupInterval)
	}
	if c.CatchupInterval > 0 && c.CatchupInterval < time.Second {
		return fmt.Errorf("--catchup-interval %s is under a second; every catch-up reads the PDP's full state and the whole catalog", c.CatchupInterval)
	}
	if _, err := regexp.Compile(c.CatchupFilter); err != nil || c.CatchupFilter == "" {
		return fmt.Errorf("--catchup-filter %q is not a regular expression of policy names: %v", c.CatchupFilter, err)
	}
	if !(c.CatchupMaxRemovalShare >= 0 && c.CatchupMaxRemovalShare <= 1) {
		return fmt.Errorf("--catchup-max-removal-share %g: want a share from 0 (catch-ups remove nothing) to 1", c.CatchupMaxRemovalShare)
	}
	return nil
}

// Stage is pdp-ingest configured from the environment (and from flags when
// run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is pdp-ingest with the given configuration. It reads
// pdp.notifications; per policy_id it keeps the catalog entries of the
// policy.catalog partitions numbered like its assigned pdp.notifications
// partitions, and writes policy.catalog plus one copy of each change to
// every partition of policy.changes. One Stage value runs once at a time;
// build another with StageWith to run a second member in one process.
func StageWith(cfg Config) runtime.Stage {
	c := &cfg
	h := &holder{}
	return runtime.Stage{
		Name:     topology.StagePDPIngest,
		Mode:     runtime.Transactional,
		Inputs:   []string{topology.PDPNotifications},
		Outputs:  []string{topology.PolicyCatalog, topology.PolicyChanges},
		Flags:    c.RegisterFlags,
		Settings: c,
		Setup: func(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
			g, err := newIngester(ctx, *c, env)
			if err != nil {
				return nil, nil, err
			}
			if err := h.set(g); err != nil {
				g.close()
				return nil, nil, err
			}
			return runtime.Typed(runtime.RefuseTombstones, g.handle), func() { h.set(nil); g.close() }, nil
		},
		Assigned: func(ctx context.Context, _ runtime.Env, assigned map[string][]int32) error {
			g := h.get()
			if g == nil {
				return errors.New("pdp-ingest: partitions assigned before setup")
			}
			if contains(assigned[topology.PDPNotifications], 0) {
				g.lead(true)
			}
			return g.load(ctx, assigned[topology.PDPNotifications])
		},
		Revoked: func(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
			if g := h.get(); g != nil {
				if contains(revoked[topology.PDPNotifications], 0) {
					g.lead(false)
				}
				g.drop(revoked[topology.PDPNotifications])
			}
		},
	}
}

// holder links a Stage's partition hooks to the ingester of its run.
type holder struct {
	mu sync.Mutex
	g  *ingester
}

func (h *holder) set(g *ingester) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g != nil && h.g != nil {
		return errors.New("pdp-ingest: this Stage value is already running; build another member with ingest.Stage()")
	}
	h.g = g
	return nil
}

func (h *holder) get() *ingester {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.g
}

// ingester is one running pdp-ingest member.
type ingester struct {
	env    runtime.Env
	log    zerolog.Logger
	pdp    *PDP
	fanout atomic.Int32 // partitions of policy.changes
	stop   context.CancelFunc
	done   chan struct{}
	// catchups runs the periodic and on-start catch-ups until
	// stopCatchups.
	catchups     *catchups
	stopCatchups func()

	mu sync.Mutex
	// catalog holds, per owned partition, the catalog entries by policy_id.
	catalog map[int32]map[string]*events.PolicyCatalogEntry
	// last is, per partition, the offset of the last input handled to the
	// end (see rewound).
	last map[int32]int64
}

func newIngester(ctx context.Context, cfg Config, env runtime.Env) (*ingester, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	header, _ := ParseHeaders(cfg.PDPHeaders)
	g := &ingester{
		env:     env,
		log:     env.Log.With().Str("stage", topology.StagePDPIngest).Logger(),
		pdp:     NewPDP(cfg.PDPURL, cfg.PDPTimeout, header),
		catalog: map[int32]map[string]*events.PolicyCatalogEntry{},
		last:    map[int32]int64{},
		done:    make(chan struct{}),
	}
	opts, err := env.Kafka.ClientOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.WithLogger(runtime.KgoLogger(env.Log)), kgo.RecordPartitioner(runtime.Partitioner()))...)
	if err != nil {
		return nil, fmt.Errorf("pdp-ingest: create admin client: %w", err)
	}
	adm := kadm.NewClient(cl)
	topic := env.Kafka.Topic(topology.PolicyChanges)
	n, err := runtime.WaitPartitions(ctx, env, topology.StagePDPIngest, adm, topology.PolicyChanges)
	if err != nil {
		cl.Close()
		return nil, err
	}
	g.fanout.Store(n)
	emit, err := runtime.NewEmitter(env, topology.StagePDPIngest)
	if err != nil {
		cl.Close()
		return nil, err
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	g.stop = stop
	go func() {
		defer close(g.done)
		defer cl.Close()
		refresh := cfg.PartitionsRefresh
		if refresh <= 0 {
			refresh = time.Minute
		}
		t := time.NewTicker(refresh)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				lctx, cancel := context.WithTimeout(rctx, 10*time.Second)
				n, err := runtime.PartitionCount(lctx, adm, topic)
				cancel()
				if err != nil {
					g.log.Warn().Err(err).Str("topic", topic).Msg("re-read the partition count of the change topic")
					continue
				}
				if old := g.fanout.Load(); n > old {
					g.log.Info().Str("topic", topic).Int32("from", old).Int32("to", n).Msg("change topic grew; changes now go to every new partition too")
					g.fanout.Store(n)
				}
			}
		}
	}()
	g.catchups = newCatchups(g, cfg, emit, adm)
	stopCatchups := emit.Every(rctx, g.catchups.timer())
	g.stopCatchups = func() { stopCatchups(); emit.Close() }
	g.log.Info().Str("pdp", cfg.PDPURL).Int32("change_partitions", g.fanout.Load()).Msg("pdp-ingest ready")
	return g, nil
}

func (g *ingester) close() {
	if g.stop != nil {
		g.stop()
		if g.stopCatchups != nil {
			g.stopCatchups()
		}
		<-g.done
	}
}

// lead records whether this member holds partition 0 of
// pdp.notifications, which makes it the one that runs catch-ups.
func (g *ingester) lead(on bool) {
	if g.catchups != nil {
		g.catchups.setLead(on)
	}
}

// load reads the catalog partitions numbered like the given input
// partitions (read committed) and makes them the state of those partitions.
func (g *ingester) load(ctx context.Context, partitions []int32) error {
	if len(partitions) == 0 {
		return nil
	}
	fresh := make(map[int32]map[string]*events.PolicyCatalogEntry, len(partitions))
	for _, p := range partitions {
		fresh[p] = map[string]*events.PolicyCatalogEntry{}
	}
	err := runtime.ReadPartitions(ctx, g.env.Kafka, topology.PolicyCatalog, partitions, runtime.Rows(ctx, g.env, runtime.PassTombstones, func(r runtime.Msg[*events.PolicyCatalogEntry]) error {
		m := fresh[r.Partition]
		switch {
		case m == nil:
		case r.Value == nil:
			delete(m, string(r.Key))
		default:
			m[string(r.Key)] = r.Value
		}
		return nil
	}))
	if err != nil {
		return fmt.Errorf("pdp-ingest: restore catalog partitions %v: %w", partitions, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for p, m := range fresh {
		g.catalog[p] = m
		delete(g.last, p)
		n += len(m)
	}
	g.log.Info().Ints32("partitions", partitions).Int("entries", n).Msg("catalog state restored")
	return nil
}

func (g *ingester) drop(partitions []int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range partitions {
		delete(g.catalog, p)
		delete(g.last, p)
	}
}

// rewound notices an input at or before the last one handled in its
// partition: the consumer was rewound after an aborted transaction, so
// the entries changed since were never committed. The partition's state
// is dropped, to be read again before it is used.
func (g *ingester) rewound(p int32, offset int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if last, seen := g.last[p]; seen && offset <= last {
		g.log.Info().Int32("partition", p).Int64("offset", offset).Int64("last_handled", last).
			Msg("input rewound after an aborted transaction; the catalog partition will be restored")
		delete(g.catalog, p)
		delete(g.last, p)
	}
}

// ensure loads the catalog state of partition p when it is not loaded.
func (g *ingester) ensure(ctx context.Context, p int32) error {
	g.mu.Lock()
	_, loaded := g.catalog[p]
	g.mu.Unlock()
	if loaded {
		return nil
	}
	return g.load(ctx, []int32{p})
}

func (g *ingester) entry(p int32, id string) *events.PolicyCatalogEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.catalog[p][id]
}

func (g *ingester) handled(p int32, offset int64) {
	g.mu.Lock()
	g.last[p] = offset
	g.mu.Unlock()
}

// changeID names the change decided from one input, the same every time
// that input is handled.
func changeID(in runtime.Input, policyID string) string {
	sum := sha256.Sum256([]byte(in.Topic + "\x00" + strconv.Itoa(int(in.Partition)) + "\x00" +
		strconv.FormatInt(in.Offset, 10) + "\x00" + policyID))
	return hex.EncodeToString(sum[:16])
}

func (g *ingester) handle(ctx context.Context, in runtime.Msg[*events.PdpNotification]) (outs []runtime.Output, err error) {
	g.rewound(in.Partition, in.Offset)
	defer func() {
		if err == nil || runtime.IsPermanent(err) {
			g.handled(in.Partition, in.Offset)
		}
	}()
	n := in.Value
	route, err := RouteNotification(in.Key, n)
	if err != nil {
		return nil, runtime.Permanent(fmt.Errorf("pdp-ingest: %w", err))
	}
	if len(route.Resend) > 0 {
		for _, k := range route.Resend {
			outs = append(outs, runtime.Output{Topic: topology.PDPNotifications, Key: []byte(k.PolicyID), Value: k.Notification})
		}
		g.log.Info().Str("notification_id", n.NotificationID).Int("parts", len(route.Resend)).Msg("notification re-keyed by policy_id")
		return outs, nil
	}
	if route.PolicyID == "" {
		g.log.Info().Str("notification_id", n.NotificationID).Msg("notification names no policy; nothing to do")
		return nil, nil
	}
	id := route.PolicyID
	if err := g.ensure(ctx, in.Partition); err != nil {
		return nil, err
	}
	req := Request{
		Route:    route,
		Current:  g.entry(in.Partition, id),
		Now:      time.Now().UTC().Truncate(time.Millisecond),
		ChangeID: changeID(in.Input, id),
	}
	if route.AskPDP {
		if req.PDPBodies, err = g.pdp.AllVersions(ctx, id); err != nil {
			return nil, fmt.Errorf("pdp-ingest: %w", err)
		}
	}
	d, err := Decide(req)
	if err != nil {
		return nil, runtime.Permanent(fmt.Errorf("pdp-ingest: notification %s: %w", n.NotificationID, err))
	}
	for _, note := range d.Notes {
		g.log.Info().Str("notification_id", n.NotificationID).Str("policy_id", id).Msg(note)
	}
	if outs, err = g.outputs(id, d); err != nil {
		return nil, runtime.Permanent(fmt.Errorf("pdp-ingest: notification %s: %w", n.NotificationID, err))
	}
	g.mu.Lock()
	if m := g.catalog[in.Partition]; m != nil {
		switch {
		case d.Catalog != nil:
			m[id] = d.Catalog
		case d.Remove:
			delete(m, id)
		}
	}
	g.mu.Unlock()
	if d.Change != nil {
		g.log.Info().Str("notification_id", n.NotificationID).Str("policy_id", id).Str("action", d.Change.Action).
			Str("old_version", versionOf(req.Current)).Str("new_version", deref(d.Change.NewVersion)).
			Str("change_id", d.Change.ChangeID).Msg("policy changed")
	}
	return outs, nil
}

// outputs are the records of a decision: the catalog write, then the
// change copied to every partition of policy.changes.
func (g *ingester) outputs(id string, d Decision) ([]runtime.Output, error) {
	var outs []runtime.Output
	switch {
	case d.Catalog != nil:
		b, err := g.env.Codec.Encode(d.Catalog)
		if err != nil {
			return nil, fmt.Errorf("encode catalog entry of %s: %w", id, err)
		}
		outs = append(outs, runtime.Output{Topic: topology.PolicyCatalog, Key: []byte(id), Raw: b})
	case d.Remove:
		outs = append(outs, runtime.Output{Topic: topology.PolicyCatalog, Key: []byte(id)})
	}
	if d.Change != nil {
		b, err := g.env.Codec.Encode(d.Change)
		if err != nil {
			return nil, fmt.Errorf("encode change of %s: %w", id, err)
		}
		for p := int32(0); p < g.fanout.Load(); p++ {
			outs = append(outs, runtime.Output{Topic: topology.PolicyChanges, Key: []byte(id), Raw: b, Partition: p, Explicit: true})
		}
	}
	return outs, nil
}
