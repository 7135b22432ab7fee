// Package executor is the executor stage: it puts the pieces of each
// per-deployment update back together and applies the whole update to
// every affected component's policy collection, with revision fencing,
// writing one ComponentPolicies per component per update_id.
//
// Its state is deploy.components (every registration) and the latest
// collection of each component it may update: those of the deployments on
// the policy.segments partitions it holds, compacted (compact), so
// members of a group share the collections between them and the bodies
// of a policy are held once however many components hold it.
package executor

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Bounds of the read-back that restores incomplete updates (see Config).
const (
	// DefaultRebufferWindow is the default Config.RebufferWindow.
	DefaultRebufferWindow = 65536
	// firstRebufferWindow is how far back the read-back looks first; it
	// doubles while an incomplete update's first pieces lie further back.
	firstRebufferWindow = 64
	// componentWait bounds how long a record waits for deploy.components
	// to catch up before an unknown component is reported (and retried).
	componentWait = 10 * time.Second
)

// Config is the executor's own configuration.
type Config struct {
	// RebufferWindow bounds how many records of a policy.segments
	// partition are read back before the committed offset when the
	// partition is assigned (or rewound after an aborted transaction), to
	// restore the pieces of an update whose first pieces were committed
	// without its last one. Pieces of one update are contiguous, so an
	// update of n pieces needs at most n-1 records; the read starts at 64
	// records and doubles up to this bound. An update whose first piece
	// lies further back cannot be completed: it is logged as lost and a
	// later catch-up repairs the component.
	RebufferWindow int
}

// DefaultConfig reads PF_REBUFFER_WINDOW, falling back to
// DefaultRebufferWindow.
func DefaultConfig() Config {
	c := Config{RebufferWindow: DefaultRebufferWindow}
	if v, err := strconv.Atoi(runtime.EnvOr("PF_REBUFFER_WINDOW", "")); err == nil {
		c.RebufferWindow = v
	}
	return c
}

// RegisterFlags adds the executor's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.RebufferWindow, "rebuffer-window", c.RebufferWindow,
		"most policy.segments records read back before the committed offset to restore an update cut by a restart (env PF_REBUFFER_WINDOW)")
}

// Validate says what is wrong with the configuration.
func (c Config) Validate() error {
	if c.RebufferWindow < 1 {
		return fmt.Errorf("--rebuffer-window %d: want at least 1 record", c.RebufferWindow)
	}
	return nil
}

// Stage is the executor configured from the environment (and from flags
// when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is the executor with the given configuration: it reads
// policy.segments (transactionally) and writes component.policies. Every
// call returns a stage with state of its own.
func StageWith(cfg Config) runtime.Stage {
	e := &executor{cfg: cfg}
	s := runtime.Stage{
		Name:     topology.StageExecutor,
		Mode:     runtime.Transactional,
		Inputs:   []string{topology.PolicySegments},
		Outputs:  []string{topology.ComponentPolicies},
		Flags:    e.cfg.RegisterFlags,
		Settings: &e.cfg,
		Setup:    e.setup,
		Assigned: e.assigned,
		Revoked:  e.revoked,
		Rewound:  e.rewound,
	}
	e.self = s
	return s
}

// componentRow is what deploy.components says of one component.
type componentRow struct {
	comp    *events.Component // the registration in force
	deleted bool              // tombstoned
}

// overlayEntry is a collection this executor produced and has not yet
// seen come back committed; partition is the policy.segments partition
// whose update produced it.
type overlayEntry struct {
	cp        *events.ComponentPolicies
	raw       []byte // cp as produced
	partition int32
}

// partState tracks one policy.segments partition of this member.
type partState struct {
	synced       bool  // state restored for the position being read
	next         int64 // offset after the last record handled
	rebufferedAt int64 // the offset the assembler was restored for; -1 none
}

type executor struct {
	cfg  Config
	self runtime.Stage // for its consumer group
	env  runtime.Env
	log  zerolog.Logger

	// mu serialises the handler and the partition hooks; it guards asm
	// and parts.
	mu    sync.Mutex
	asm   *Assembler
	parts map[int32]*partState

	// comps is deploy.components; tables follows component.policies from
	// the first assignment on (nil before), and is started anew when the
	// member gains partitions (see follow). Both are replaced only under mu.
	comps  *runtime.Table[*events.Component]
	tables *runtime.Follower

	polsMu sync.Mutex
	// committed holds component.policies as read, compacted (see
	// compact): what Next needs of each component's latest collection,
	// with every string and body shared with the other components that
	// hold the same policy. The executor's own writes coming back are
	// recognised by their bytes as they are read.
	committed map[string]*events.ComponentPolicies
	overlay   map[string]overlayEntry // own writes not yet read back
	// owned are the policy.segments partitions this member holds, of
	// segParts; committed keeps only the collections of components whose
	// deployment (the collection's or the registration's) lives on one of
	// them (see keep). elsewhere are the components with a collection not
	// kept: one whose registration moves to an owned deployment is read
	// from component.policies when it is first needed (fetch).
	owned     map[int32]bool
	segParts  int
	elsewhere map[string]struct{}
}

func (e *executor) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	if err := e.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	e.env = env
	e.log = env.Log.With().Str("stage", topology.StageExecutor).Logger()
	e.asm = NewAssembler()
	e.parts = map[int32]*partState{}
	e.committed = map[string]*events.ComponentPolicies{}
	e.overlay = map[string]overlayEntry{}

	e.owned = map[int32]bool{}
	e.elsewhere = map[string]struct{}{}

	var err error
	if e.comps, err = runtime.FollowTable[*events.Component](env, topology.DeployComponents, nil); err != nil {
		return nil, nil, fmt.Errorf("executor: %w", err)
	}
	closeFn := func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.tables != nil {
			e.tables.Close()
		}
		e.comps.Close()
	}
	start := time.Now()
	if err := e.comps.WaitCaughtUp(ctx); err != nil {
		closeFn()
		return nil, nil, fmt.Errorf("executor: %w", err)
	}
	e.log.Info().Int("components", e.comps.Len()).Dur("took", time.Since(start)).Msg("read deploy.components")
	return runtime.Typed(runtime.RefuseTombstones, e.handle), closeFn, nil
}

// applyCollection keeps committed current with component.policies, for
// the components this member may update (keep).
func (e *executor) applyCollection(ctx context.Context, rec *kgo.Record) error {
	key := string(rec.Key)
	e.polsMu.Lock()
	defer e.polsMu.Unlock()
	if rec.Value == nil {
		delete(e.committed, key)
		delete(e.elsewhere, key)
		return nil
	}
	if o, ok := e.overlay[key]; ok && bytes.Equal(o.raw, rec.Value) {
		// Committed caught up with our own write: keep what we wrote.
		delete(e.overlay, key)
		e.store(key, o.cp)
		return nil
	}
	cp, err := e.decodeCollection(ctx, key, rec.Value)
	if err != nil {
		// Counted as none: the component gathers its whole collection
		// anew on its next update.
		delete(e.committed, key)
		delete(e.elsewhere, key)
		e.log.Error().Err(err).Str("component_id", key).Msg("committed collection unreadable; the component gathers anew")
		return nil
	}
	// Written by another member, or read back from an older run: compare
	// what it is.
	if o, ok := e.overlay[key]; ok && o.cp.Generation == cp.Generation && o.cp.UpdateID == cp.UpdateID {
		delete(e.overlay, key)
	}
	e.store(key, cp)
	return nil
}

// store keeps a component's latest collection compacted when this member
// may update the component, and otherwise notes that it has one
// elsewhere. Callers hold polsMu.
func (e *executor) store(key string, cp *events.ComponentPolicies) {
	if e.keep(key, cp) {
		e.committed[key] = compact(cp)
		delete(e.elsewhere, key)
		return
	}
	delete(e.committed, key)
	e.elsewhere[strings.Clone(key)] = struct{}{}
}

// keep says whether this member may update the component: its
// collection's deployment, or the one it is registered in now, lives on a
// policy.segments partition it holds. Callers hold polsMu.
func (e *executor) keep(key string, cp *events.ComponentPolicies) bool {
	if e.ownsDeployment(cp.DeploymentID) {
		return true
	}
	c, _ := e.comps.Get(key)
	return c != nil && e.ownsDeployment(c.DeploymentID)
}

// ownsDeployment says whether the deployment's updates come to this
// member: its key's partition of policy.segments is one it holds.
func (e *executor) ownsDeployment(dep string) bool {
	return dep != "" && e.segParts > 0 && e.owned[runtime.KeyPartition(dep, e.segParts)]
}

// follow (re)starts following component.policies from its start, keeping
// the collections of the partitions owned now, and waits until it has
// read what the topic held. Called when the member gains partitions:
// collections it skipped before are kept this time. Callers hold mu (the
// handler does not run meanwhile).
func (e *executor) follow(ctx context.Context) error {
	if e.tables != nil {
		e.tables.Close()
		e.tables = nil
	}
	start := time.Now()
	f, err := runtime.Follow(e.env.Kafka, e.log, map[string]runtime.ApplyFunc{topology.ComponentPolicies: e.applyCollection})
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.tables = f
	if err := f.WaitCaughtUp(ctx); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.polsMu.Lock()
	kept, other := len(e.committed), len(e.elsewhere)
	e.polsMu.Unlock()
	e.log.Info().Int("collections_kept", kept).Int("collections_of_other_members", other).Dur("took", time.Since(start)).
		Msg("read component.policies for the partitions held")
	return nil
}

// fetch reads a component's latest collection from component.policies:
// one whose collection was not kept (another member's deployment) and
// whose registration has since moved to a deployment of this member's.
// It reads the one partition the component's key lives on. Callers hold
// mu.
func (e *executor) fetch(ctx context.Context, id string) (*events.ComponentPolicies, error) {
	n, err := runtime.TopicPartitions(ctx, e.env.Kafka, topology.ComponentPolicies)
	if err != nil {
		return nil, fmt.Errorf("executor: read the collection of component %s: %w", id, err)
	}
	var latest []byte
	found := false
	p := runtime.KeyPartition(id, int(n))
	err = runtime.ReadPartitions(ctx, e.env.Kafka, topology.ComponentPolicies, []int32{p}, func(r *kgo.Record) error {
		if string(r.Key) == id {
			latest, found = bytes.Clone(r.Value), true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("executor: read the collection of component %s from %s[%d]: %w", id, topology.ComponentPolicies, p, err)
	}
	e.polsMu.Lock()
	defer e.polsMu.Unlock()
	if cp, ok := e.committed[id]; ok { // the follower got there first
		return cp, nil
	}
	delete(e.elsewhere, id)
	if !found || latest == nil {
		return nil, nil
	}
	cp, err := e.decodeCollection(ctx, id, latest)
	if err != nil {
		e.log.Error().Err(err).Str("component_id", id).Msg("committed collection unreadable; the component gathers anew")
		return nil, nil
	}
	e.committed[id] = compact(cp)
	e.log.Info().Str("component_id", id).Int64("generation", cp.Generation).
		Msg("read the collection of a component that moved to a deployment of this member's")
	return e.committed[id], nil
}

// decodeCollection decodes a component.policies value.
func (e *executor) decodeCollection(ctx context.Context, key string, raw []byte) (*events.ComponentPolicies, error) {
	cp, err := runtime.DecodeAs[*events.ComponentPolicies](ctx, e.env.Codec, raw)
	if err != nil {
		return nil, fmt.Errorf("decode component.policies of %s: %w", key, err)
	}
	return cp, nil
}

// current is the component's latest collection: our own latest write, or
// the committed one (compacted: its updated and removed policies are left
// out). A committed value that could not be decoded counts as none, so
// the component gathers its whole collection anew. The caller must not
// change what it returns.
func (e *executor) current(ctx context.Context, id string) (*events.ComponentPolicies, error) {
	e.polsMu.Lock()
	if o, ok := e.overlay[id]; ok {
		e.polsMu.Unlock()
		return o.cp, nil
	}
	cp := e.committed[id]
	_, other := e.elsewhere[id]
	e.polsMu.Unlock()
	if cp != nil || !other {
		return cp, nil
	}
	return e.fetch(ctx, id)
}

// component looks a component up in deploy.components, catching up with
// the topic once when it is not known yet; it is nil when the component
// is tombstoned.
func (e *executor) component(ctx context.Context, id string) (*events.Component, error) {
	row, ok := e.componentRow(id)
	if !ok {
		wctx, cancel := context.WithTimeout(ctx, componentWait)
		defer cancel()
		if err := e.comps.WaitCaughtUp(wctx); err != nil {
			return nil, err
		}
		if row, ok = e.componentRow(id); !ok {
			return nil, fmt.Errorf("%w yet", errUnknownComponent)
		}
	}
	if row.deleted {
		return nil, nil
	}
	return row.comp, nil
}

// componentRow is what the table says of a component, if anything.
func (e *executor) componentRow(id string) (componentRow, bool) {
	c, found := e.comps.Get(id)
	return componentRow{comp: c, deleted: found && c == nil}, found
}

// barrier makes the committed view authoritative for the components of a
// partition: it waits until every committed collection is read, then
// drops what this member wrote for that partition and may have been
// aborted.
func (e *executor) barrier(ctx context.Context, partition int32) error {
	if err := e.tables.WaitCaughtUp(ctx, topology.ComponentPolicies); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	e.dropOverlay(partition)
	return nil
}

// assigned restores, for each newly assigned policy.segments partition,
// the pieces of an update cut at the group's committed offset. The handler
// checks the offset again on the partition's first record (the committed
// offset may still move while the previous owner's transaction ends).
func (e *executor) assigned(ctx context.Context, env runtime.Env, assigned map[string][]int32) error {
	ps := assigned[topology.PolicySegments]
	if len(ps) == 0 {
		return nil
	}
	offsets, err := runtime.CommittedOffsets(ctx, env.Kafka, e.self.GroupIn(env.Kafka), topology.PolicySegments)
	if err != nil {
		return fmt.Errorf("executor: restore assigned partitions %v: %w", ps, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.hold(ctx, ps); err != nil {
		return fmt.Errorf("executor: restore assigned partitions %v: %w", ps, err)
	}
	for _, p := range ps {
		e.asm.Drop(p)
		st := &partState{rebufferedAt: -1}
		e.parts[p] = st
		if c, ok := offsets[p]; ok && c > 0 {
			if err := e.rebuffer(ctx, p, c); err != nil {
				delete(e.parts, p)
				return err
			}
			st.rebufferedAt = c
		}
	}
	return nil
}

// hold adds policy.segments partitions to those this member holds and,
// when it gained any, reads the collections of their components (follow).
// Callers hold mu.
func (e *executor) hold(ctx context.Context, ps []int32) error {
	n, err := runtime.TopicPartitions(ctx, e.env.Kafka, topology.PolicySegments)
	if err != nil {
		return err
	}
	e.polsMu.Lock()
	gained := e.tables == nil || int(n) != e.segParts
	e.segParts = int(n)
	for _, p := range ps {
		gained = gained || !e.owned[p]
		e.owned[p] = true
	}
	e.polsMu.Unlock()
	if !gained {
		return nil
	}
	return e.follow(ctx)
}

// revoked forgets the pieces and writes of partitions this member lost.
func (e *executor) revoked(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	lost := revoked[topology.PolicySegments]
	for _, p := range lost {
		e.asm.Drop(p)
		delete(e.parts, p)
		e.dropOverlay(p)
	}
	if len(lost) == 0 {
		return
	}
	// The collections of the components it may no longer update go.
	e.polsMu.Lock()
	defer e.polsMu.Unlock()
	for _, p := range lost {
		delete(e.owned, p)
	}
	for key, cp := range e.committed {
		if !e.keep(key, cp) {
			delete(e.committed, key)
			e.elsewhere[key] = struct{}{}
		}
	}
}

// rewound forgets what the records of an aborted transaction did: the
// pieces they added and the collections they wrote. Each partition's
// state is restored on its next record (see track), from the offset the
// records come again from.
func (e *executor) rewound(_ context.Context, _ runtime.Env, assigned map[string][]int32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range assigned[topology.PolicySegments] {
		e.asm.Drop(p)
		e.parts[p] = &partState{rebufferedAt: -1}
		e.dropOverlay(p)
	}
	return nil
}

// dropOverlay forgets the collections written for a partition's updates.
func (e *executor) dropOverlay(p int32) {
	e.polsMu.Lock()
	defer e.polsMu.Unlock()
	for id, o := range e.overlay {
		if o.partition == p {
			delete(e.overlay, id)
		}
	}
}

// rebuffer reads back the records before offset c of a partition and
// keeps the pieces of the update they leave incomplete. Callers hold mu.
func (e *executor) rebuffer(ctx context.Context, p int32, c int64) error {
	window := int64(min(firstRebufferWindow, e.cfg.RebufferWindow))
	for {
		start := max(0, c-window)
		e.asm.Drop(p)
		pieces := 0
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		// A record that is not a segment was dead-lettered when first read.
		err := runtime.ReadRange(rctx, e.env.Kafka, topology.PolicySegments, map[int32]int64{p: start}, map[int32]int64{p: c}, runtime.Rows(rctx, e.env, runtime.SkipTombstones, func(r runtime.Msg[*events.PolicySegment]) error {
			seg := r.Value
			if seg.DeploymentID == "" {
				seg.DeploymentID = string(r.Key)
			}
			pieces++
			if upd, _, err := e.asm.Add(p, seg); err == nil && upd != nil {
				e.asm.Done(upd.UpdateID) // complete before c: it was applied
			}
			return nil
		}))
		cancel()
		if err != nil {
			return fmt.Errorf("executor: read back %s[%d] from %d to %d: %w", topology.PolicySegments, p, start, c, err)
		}
		needMore := false
		var kept []PendingInfo
		for _, info := range e.asm.Pending() {
			if info.Partition != p {
				continue
			}
			if info.Have[len(info.Have)-1] == info.Count {
				// Its last piece lies before c: it was applied; only
				// its first pieces were cut off by the window.
				e.asm.Done(info.UpdateID)
				continue
			}
			if info.Have[0] > 1 && start > 0 {
				needMore = true
			}
			kept = append(kept, info)
		}
		if needMore && window < int64(e.cfg.RebufferWindow) {
			window = min(2*window, int64(e.cfg.RebufferWindow))
			continue
		}
		for _, info := range kept {
			if info.Have[0] > 1 {
				e.log.Error().Str("update_id", info.UpdateID).Str("deployment_id", info.Deployment).Int32("partition", p).
					Int("window", e.cfg.RebufferWindow).Msg("the first pieces of an update lie beyond the read-back window; the update is lost until a catch-up")
				e.asm.Done(info.UpdateID)
				continue
			}
			e.log.Info().Str("update_id", info.UpdateID).Str("deployment_id", info.Deployment).Int32("partition", p).
				Int64("offset", c).Int("pieces", len(info.Have)).Int32("count", info.Count).
				Msg("restored the pieces of an incomplete update")
		}
		e.log.Debug().Int32("partition", p).Int64("from", start).Int64("to", c).Int("pieces_read", pieces).Msg("read back policy segments")
		return nil
	}
}

// track restores a partition's state on its first record after an
// assignment, and again when a record comes before the last one handled
// (the transaction was aborted and the partition rewound).
func (e *executor) track(ctx context.Context, p int32, offset int64) error {
	st := e.parts[p]
	if st == nil {
		st = &partState{rebufferedAt: -1}
		e.parts[p] = st
	}
	switch {
	case !st.synced:
	case offset < st.next:
		e.log.Info().Int32("partition", p).Int64("offset", offset).Int64("expected", st.next).
			Msg("partition rewound (transaction aborted); restoring its state")
		st.rebufferedAt = -1
	default:
		return nil
	}
	if err := e.barrier(ctx, p); err != nil {
		return err
	}
	if st.rebufferedAt != offset {
		if err := e.rebuffer(ctx, p, offset); err != nil {
			return err
		}
		st.rebufferedAt = offset
	}
	st.synced = true
	st.next = offset
	return nil
}

func (e *executor) advance(p int32, offset int64) {
	if st := e.parts[p]; st != nil && offset+1 > st.next {
		st.next = offset + 1
	}
}

func (e *executor) handle(ctx context.Context, in runtime.Msg[*events.PolicySegment]) ([]runtime.Output, error) {
	seg := in.Value
	if seg.DeploymentID == "" {
		seg.DeploymentID = string(in.Key)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.track(ctx, in.Partition, in.Offset); err != nil {
		return nil, err
	}
	upd, abandoned, err := e.asm.Add(in.Partition, seg)
	for _, id := range abandoned {
		e.log.Warn().Str("update_id", id).Str("deployment_id", seg.DeploymentID).Str("next_update_id", seg.UpdateID).
			Msg("an incomplete update was followed by another update of its deployment; its missing pieces cannot come")
	}
	if err != nil {
		e.advance(in.Partition, in.Offset)
		return nil, runtime.Permanent(fmt.Errorf("executor: %w", err))
	}
	if upd == nil {
		e.advance(in.Partition, in.Offset)
		return nil, nil
	}
	outs, writes, err := e.apply(ctx, upd)
	if err != nil {
		if runtime.IsPermanent(err) {
			e.asm.Done(upd.UpdateID)
			e.advance(in.Partition, in.Offset)
		}
		return nil, err
	}
	e.polsMu.Lock()
	for _, w := range writes {
		e.overlay[w.cp.ComponentID] = overlayEntry{cp: w.cp, raw: w.raw, partition: in.Partition}
	}
	e.polsMu.Unlock()
	e.asm.Done(upd.UpdateID)
	e.advance(in.Partition, in.Offset)
	if len(outs) > 0 {
		e.log.Debug().Str("update_id", upd.UpdateID).Str("deployment_id", upd.DeploymentID).Int("components", len(outs)).Msg("update applied")
	}
	return outs, nil
}

// errUnknownComponent is wrapped by the transient error of an update for
// a component deploy.components does not hold (yet).
var errUnknownComponent = errors.New("component is not registered in deploy.components")

// apply computes the collections an update gives its components (see
// Next), without changing any state: it returns the records to produce
// and the collections they carry.
func (e *executor) apply(ctx context.Context, upd *Update) ([]runtime.Output, []written, error) {
	now := time.Now().UTC()
	var outs []runtime.Output
	var writes []written
	for _, cd := range upd.Components {
		d := Delta{ComponentDelta: cd, UpdateID: upd.UpdateID, DeploymentID: upd.DeploymentID, CatchUp: upd.CatchUp, At: now}
		if err := d.check(); err != nil { // before waiting for the component
			return nil, nil, runtime.Permanent(fmt.Errorf("executor: %w", err))
		}
		// The matcher marks the delta of a tombstone: the executor's own
		// view of deploy.components may not have read the tombstone yet.
		var comp *events.Component
		if !d.Uninstall {
			var err error
			if comp, err = e.component(ctx, d.ComponentID); err != nil {
				return nil, nil, fmt.Errorf("executor: apply update %s to component %s: %w", upd.UpdateID, d.ComponentID, err)
			}
		}
		cur, err := e.current(ctx, d.ComponentID)
		if err != nil {
			return nil, nil, err
		}
		next, err := Next(cur, comp, d)
		if err != nil {
			return nil, nil, runtime.Permanent(fmt.Errorf("executor: %w", err))
		}
		if next == nil {
			continue // nothing changes for this component
		}
		if cur != nil && !cur.Uninstalled && !next.Uninstalled && cur.ServiceComponentName != next.ServiceComponentName {
			e.log.Warn().Str("component_id", d.ComponentID).Str("old", cur.ServiceComponentName).Str("new", next.ServiceComponentName).
				Msg("the component's service_component_name changed; its old Consul folder is left as it is")
		}
		raw, err := e.env.Codec.Encode(next)
		if err != nil {
			return nil, nil, runtime.Permanent(fmt.Errorf("executor: encode the collection of component %s: %w", d.ComponentID, err))
		}
		writes = append(writes, written{cp: next, raw: raw})
		outs = append(outs, runtime.Output{Topic: topology.ComponentPolicies, Key: []byte(d.ComponentID), Raw: raw})
	}
	return outs, writes, nil
}

// written is a collection apply produced, decoded and encoded.
type written struct {
	cp  *events.ComponentPolicies
	raw []byte
}
