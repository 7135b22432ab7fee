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
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

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
	// gcPercent is the executor's garbage collector target (see
	// runtime.Stage.GCPercent). Its live heap is mostly what it keeps
	// (every registration and the collections of its components) and,
	// with Go's default of 100, its process grew to about 2.4 times that
	// while catching 100,000 components up: above 256 MiB. The garbage it
	// makes (decoded records, encoded outputs) is short-lived. Measured
	// at 100,000 components (pfbench's catch-up): 70 peaked at 174 to
	// 195 MiB for about 1.2 times the CPU of 100 (205 to 224 MiB); 40
	// at 144 to 163 MiB for 1.5 times.
	gcPercent = 70
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
		Name:      topology.StageExecutor,
		Mode:      runtime.Transactional,
		Inputs:    []string{topology.PolicySegments},
		Outputs:   []string{topology.ComponentPolicies},
		GCPercent: gcPercent,
		Flags:     e.cfg.RegisterFlags,
		Settings:  &e.cfg,
		Setup:     e.setup,
		Assigned:  e.assigned,
		Revoked:   e.revoked,
		Rewound:   e.rewound,
	}
	e.self = s
	return s
}

// componentRow is what deploy.components says of one component.
type componentRow struct {
	comp    *events.Component // the registration in force
	deleted bool              // tombstoned
}

// executor is the stage's state. Two locks, each guarding one owner's
// fields, are taken in one order: mu (the handler and the partition hooks,
// one at a time, and the assembly of updates) before cols.mu (the
// collections, a leaf lock; see collectionStore for why it is its own).
type executor struct {
	cfg  Config
	self runtime.Stage // for its consumer group
	env  runtime.Env
	log  zerolog.Logger

	// mu serialises the handler and the partition hooks; it guards asm
	// and parts, and tables.
	mu    sync.Mutex
	asm   *Assembler
	parts map[int32]*partState

	// comps is deploy.components; tables follows component.policies from
	// the first assignment on (nil before), and is started anew when the
	// member gains partitions (see follow).
	comps  *runtime.TableOf[*events.Component, *registered]
	tables *runtime.Follower

	// cols holds the collections of the components this member may
	// update; the tables follower applies component.policies to it.
	cols *collectionStore
}

func (e *executor) setup(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	if err := e.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	e.env = env
	e.log = env.Log.With().Str("stage", topology.StageExecutor).Logger()
	e.asm = NewAssembler()
	e.parts = map[int32]*partState{}
	e.cols = newCollectionStore(e.log, env.Codec)

	var err error
	if e.comps, err = runtime.FollowTableOf(env, topology.DeployComponents, registration, nil); err != nil {
		return nil, nil, fmt.Errorf("executor: %w", err)
	}
	e.cols.comps = e.comps
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
	r, found := e.comps.Get(id)
	if r == nil {
		return componentRow{deleted: found}, found
	}
	return componentRow{comp: r.component(id)}, true
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
	e.cols.wrote(writes, in.Partition)
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
	outs := make([]runtime.Output, 0, len(upd.Components))
	writes := make([]written, 0, len(upd.Components))
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
