package consulwriter

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// consulTimeout bounds one Consul request (a folder read or one
// transaction); a request that times out is retried.
const consulTimeout = 2 * time.Minute

// ErrConflict is wrapped by the (transient) error of a write whose
// check-and-set failed: another writer changed the folder meanwhile. The
// record is planned again from a fresh read.
var ErrConflict = errors.New("the folder changed while it was written")

// Config is the consul-writer's own configuration.
type Config struct {
	// Consul is the agent the folders are written to.
	Consul consulkv.Config
}

// DefaultConfig reaches Consul as the environment says (consulkv.FromEnv).
func DefaultConfig() Config { return Config{Consul: consulkv.FromEnv()} }

// RegisterFlags adds the consul-writer's flags to fs: Consul's.
func (c *Config) RegisterFlags(fs *flag.FlagSet) { c.Consul.RegisterFlags(fs) }

// Stage is the consul-writer configured from the environment (and from
// flags when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is the consul-writer with the given configuration: it reads
// component.policies (at least once, in order) and writes each collection
// to Consul KV, then emits component.applied. A poll's records are
// written together: their folders read in shared transactions, their
// small collections written in shared transactions.
func StageWith(cfg Config) runtime.Stage {
	w := &writer{cfg: cfg}
	return runtime.Stage{
		Name:       topology.StageConsulWriter,
		Mode:       runtime.AtLeastOnce,
		Inputs:     []string{topology.ComponentPolicies, topology.CatchupRequests},
		Outputs:    []string{topology.ComponentApplied, topology.CatchupProgress},
		Flags:      w.cfg.RegisterFlags,
		Settings:   &w.cfg,
		SetupBatch: w.setup,
		// A catch-up request on partition p repairs the folders of the
		// components of component.policies partition p.
		CoPartitioned: true,
	}
}

type writer struct {
	cfg     Config
	env     runtime.Env
	kv      *api.KV
	txn     *api.Txn
	log     zerolog.Logger
	metrics *runtime.Metrics
}

func (w *writer) setup(ctx context.Context, env runtime.Env) (runtime.BatchHandler, func(), error) {
	w.log = env.Log.With().Str("stage", topology.StageConsulWriter).Logger()
	w.metrics = env.Metrics
	w.metrics.ConsulWriter(topology.StageConsulWriter)
	for _, o := range runtime.Origins {
		w.metrics.EndToEnd.WithLabelValues(runtime.MilestoneConsulWritten, o)
	}
	cl, err := w.cfg.Consul.Connect(ctx, w.log)
	if err != nil {
		return nil, nil, fmt.Errorf("consul-writer: %w", err)
	}
	w.kv, w.txn = cl.KV(), cl.Txn()
	env.Health.Depend(topology.StageConsulWriter, consulkv.Dependency(cl))
	w.env = env
	return w.handleInputs(runtime.TypedBatch(runtime.SkipTombstones, w.handleBatch), runtime.TypedBatch(runtime.RefuseTombstones, w.repair)), nil, nil
}

// job is one component.policies record on its way to Consul.
type job struct {
	i      int // the input's place in its batch
	rec    *events.ComponentPolicies
	folder string
	log    zerolog.Logger
	start  time.Time
	read   bool        // pairs holds the folder as read
	pairs  api.KVPairs // the folder, once read
	plan   WritePlan
	// repair plans with PlanRepair: a catch-up's drift repair.
	repair bool
	// origin is where and when the change the record carries entered
	// the pipeline (when known), for the end-to-end latency.
	origin    runtime.OriginInfo
	hasOrigin bool
}

// record is an input's collection, its component_id defaulted to the
// key; a collection without a service_component_name has no Consul folder.
func (w *writer) record(in runtime.Msg[*events.ComponentPolicies]) (*events.ComponentPolicies, error) {
	rec := in.Value
	if rec.ComponentID == "" {
		rec.ComponentID = string(in.Key)
	}
	if rec.ServiceComponentName == "" {
		return nil, runtime.Permanentf("consul-writer: component %s update %s has no service_component_name, so no Consul folder", rec.ComponentID, rec.UpdateID)
	}
	return rec, nil
}

func (w *writer) newJob(i int, rec *events.ComponentPolicies, start time.Time) *job {
	return &job{
		i: i, rec: rec, folder: consulkv.Folder(rec.ServiceComponentName), start: start,
		log: w.log.With().Str("component_id", rec.ComponentID).Str("update_id", rec.UpdateID).Int64("generation", rec.Generation).Logger(),
	}
}

// one writes one record on its own: a consistent read of its folder, the
// plan, its steps.
func (w *writer) one(ctx context.Context, j *job) ([]runtime.Output, error) {
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	begin := time.Now()
	pairs, _, err := w.kv.List(j.folder, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
	w.consulTook("read", begin)
	if err != nil {
		return nil, readError(j, err)
	}
	outs, done, err := w.planJob(j, pairs)
	if done || err != nil {
		return outs, err
	}
	index, indexes, err := w.write(cctx, j.rec.ServiceComponentName, j.plan)
	if err != nil {
		return nil, writeError(j, err)
	}
	return w.written(j, index, indexes, len(j.plan.Steps), 1), nil
}

func readError(j *job, err error) error {
	return fmt.Errorf("consul-writer: read %s for component %s: %w", j.folder, j.rec.ComponentID, consulkv.Explain(err))
}

func writeError(j *job, err error) error {
	return fmt.Errorf("consul-writer: write update %s of component %s to %s: %w", j.rec.UpdateID, j.rec.ComponentID, j.folder, consulkv.Explain(err))
}

// planJob plans j's write against its folder as read. done says that the
// record needs no write: outs (or err) is then its outcome.
func (w *writer) planJob(j *job, pairs api.KVPairs) (outs []runtime.Output, done bool, err error) {
	planner := Plan
	if j.repair {
		planner = PlanRepair
	}
	plan, err := planner(pairs, j.rec, time.Now())
	if err != nil {
		return nil, true, runtime.Permanent(fmt.Errorf("consul-writer: %w", err))
	}
	j.plan = plan
	if !plan.Skip {
		return nil, false, nil
	}
	if plan.InSync {
		return nil, true, nil
	}
	if !plan.Replay {
		j.log.Info().Int64("consul_generation", plan.Event.Generation).Msg("Consul holds a newer collection; record skipped")
		return nil, true, nil
	}
	at := time.Now().UTC()
	if t, err := time.Parse(time.RFC3339Nano, plan.Event.Timestamp); err == nil {
		at = t.UTC()
	}
	j.log.Info().Msg("update already in Consul; component.applied emitted again")
	return []runtime.Output{output(j.rec, plan, plan.EventIndex, nil, 0, at)}, true, nil
}

// written logs j's write and returns its component.applied; indexes are
// the ModifyIndexes the write's transactions reported by key, txns is the
// number of transactions the write took, shared the number of components
// whose writes shared them.
func (w *writer) written(j *job, index uint64, indexes map[string]uint64, txns, shared int) []runtime.Output {
	keys := j.plan.KeysChanged
	if !j.rec.Uninstalled {
		keys++ // the event key
	}
	msg := "collection written to Consul"
	if j.plan.Repaired {
		msg = "folder differed from its collection (edited by hand?); the keys that differed were written back"
	}
	j.log.Info().Str("action", j.plan.Action).Int("keys_written", keys).Int("transactions", txns).Int("components_in_transaction", shared).
		Int("policies", len(j.rec.Policies)).Dur("took", time.Since(j.start)).Msg(msg)
	if j.hasOrigin && w.metrics != nil {
		w.metrics.ReachedAt(runtime.MilestoneConsulWritten, j.origin)
	}
	return []runtime.Output{output(j.rec, j.plan, index, indexes, keys, time.Now().UTC())}
}

// consulTook records the time of one request to Consul.
func (w *writer) consulTook(op string, begin time.Time) {
	if w.metrics != nil {
		w.metrics.ObserveConsul(topology.StageConsulWriter, op, begin)
	}
}

// counted records the outcome of a record's write in the metrics: ok
// when it wrote Consul, conflict when a check-and-set lost, error when
// it failed otherwise. A record that needed no write, or was not tried
// because an earlier one failed, is not a write.
func (w *writer) counted(outs []runtime.Output, err error) {
	if w.metrics == nil {
		return
	}
	outcome := runtime.OutcomeOK
	switch {
	case errors.Is(err, errNotWritten):
		return
	case errors.Is(err, ErrConflict):
		outcome = runtime.OutcomeConflict
	case err != nil:
		outcome = runtime.OutcomeError
	default:
		written := false
		for _, o := range outs {
			if a, ok := o.Value.(*events.ComponentApplied); ok && a.KeysWritten > 0 {
				written = true
			}
		}
		if !written {
			return
		}
	}
	w.metrics.ConsulWrites.WithLabelValues(topology.StageConsulWriter, outcome).Inc()
}

// write carries out a plan's steps in order and returns the event key's
// ModifyIndex after the last one (for an uninstall: the index of the
// deletion, when Consul reports it) and the ModifyIndex of every key its
// transactions wrote, as Consul reports them (a Put's is not reported).
//
// A write Consul denies because the token lacks the right to the folder
// fails permanently (the record is dead-lettered with the right to grant):
// retrying could not succeed before an operator changes the token's
// policy, and would hold up every other component of the partition
// meanwhile; the component's next collection, which carries its full
// state, writes the folder once the right is granted. A token Consul does
// not know at all (deleted after the start) fails every write alike, so
// that is retried until the token is fixed rather than dead-lettering
// everything.
func (w *writer) write(ctx context.Context, scn string, plan WritePlan) (uint64, map[string]uint64, error) {
	eventKey := consulkv.EventKey(scn)
	index := plan.EventIndex
	var last uint64
	indexes := map[string]uint64{}
	for i, st := range plan.Steps {
		if st.Put != nil {
			begin := time.Now()
			ok, _, err := w.kv.CAS(st.Put, (&api.WriteOptions{}).WithContext(ctx))
			w.consulTook("write", begin)
			if consulkv.Denied(err) {
				err = runtime.Permanent(consulkv.DeniedError(consulkv.Folder(scn), err.Error()))
			}
			if err != nil {
				return 0, nil, fmt.Errorf("step %d/%d: put %s: %w", i+1, len(plan.Steps), st.Put.Key, err)
			}
			if !ok {
				return 0, nil, fmt.Errorf("step %d/%d: put %s: %w", i+1, len(plan.Steps), st.Put.Key, ErrConflict)
			}
			continue
		}
		ops := stepOps(eventKey, index, st)
		begin := time.Now()
		ok, resp, meta, err := w.txn.Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
		w.consulTook("write", begin)
		if err != nil {
			return 0, nil, fmt.Errorf("step %d/%d: transaction of %d operations: %w", i+1, len(plan.Steps), len(ops), err)
		}
		if !ok && consulkv.TxnDenied(resp) {
			return 0, nil, runtime.Permanent(fmt.Errorf("step %d/%d: %w", i+1, len(plan.Steps), consulkv.DeniedError(consulkv.Folder(scn), consulkv.TxnReasons(resp))))
		}
		if !ok {
			return 0, nil, fmt.Errorf("step %d/%d: %s: %w", i+1, len(plan.Steps), consulkv.TxnReasons(resp), ErrConflict)
		}
		if meta != nil {
			last = meta.LastIndex
		}
		got := consulkv.TxnIndexes(resp)
		maps.Copy(indexes, got)
		if st.Event != nil {
			var found bool
			if index, found = got[eventKey]; !found {
				return 0, nil, fmt.Errorf("step %d/%d: Consul did not report the index of %s", i+1, len(plan.Steps), eventKey)
			}
			last = index
		}
	}
	return last, indexes, nil
}

// stepOps are the operations of a transaction step: the guard, the item
// writes, the event's check-and-set on index (the event key's ModifyIndex
// seen last).
func stepOps(eventKey string, index uint64, st Step) api.TxnOps {
	ops := make(api.TxnOps, 0, len(st.Ops)+2)
	if st.Guard {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: eventKey, Index: index}})
	}
	ops = append(ops, st.Ops...)
	if st.Event != nil {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: eventKey, Value: st.Event.JSON(), Index: index}})
	}
	return ops
}

// output is the component.applied record of a written (or replayed)
// collection: what changed by reference, as Consul now holds the bodies;
// removed policies with the last bodies the record carries, as Consul no
// longer does; the item keys' ModifyIndexes, those the write reported
// (written) or else those read (plan.HeldIndexes).
func output(rec *events.ComponentPolicies, plan WritePlan, index uint64, written map[string]uint64, keys int, at time.Time) runtime.Output {
	a := &events.ComponentApplied{
		ComponentID:          rec.ComponentID,
		ServiceComponentName: rec.ServiceComponentName,
		UpdateID:             rec.UpdateID,
		Action:               plan.Action,
		CatchUp:              rec.CatchUp || plan.Repaired,
		ConsulIndex:          int64(index),
		PoliciesCount:        int32(len(rec.Policies)),
		PoliciesBytes:        int64(collectionBytes(rec)),
		KeysWritten:          int32(keys),
		Generation:           rec.Generation,
		PolicyRefs:           events.Refs(rec.Policies),
		UpdatedRefs:          events.Refs(rec.UpdatedPolicies),
		RemovedPolicies:      orEmpty(rec.RemovedPolicies),
		Notify:               rec.Notify,
		ItemIndexes:          itemIndexes(rec, written, plan.HeldIndexes),
		Uninstalled:          rec.Uninstalled,
		AppliedAt:            at,
	}
	if a.Notify.Kind == "" {
		a.Notify.Kind = events.NotifyNone
	}
	return runtime.Output{Topic: topology.ComponentApplied, Key: []byte(rec.ComponentID), Value: a}
}

// itemIndexes is the ModifyIndex of each item key of rec's collection:
// the write's (written) or, for a key the write left as it was, the one
// read (held). A key known to neither (written alone, outside a
// transaction, whose index Consul does not report) is left out, and so is
// every key of an uninstall.
func itemIndexes(rec *events.ComponentPolicies, written, held map[string]uint64) []events.ItemIndex {
	out := make([]events.ItemIndex, 0, len(rec.Policies))
	if rec.Uninstalled {
		return out
	}
	for _, p := range rec.Policies {
		k := consulkv.ItemKey(rec.ServiceComponentName, p.PolicyID)
		i, ok := written[k]
		if !ok {
			i, ok = held[k]
		}
		if ok && i > 0 {
			out = append(out, events.ItemIndex{PolicyID: p.PolicyID, ModifyIndex: int64(i)})
		}
	}
	return out
}

func orEmpty(ps []events.Policy) []events.Policy {
	if ps == nil {
		return []events.Policy{}
	}
	return ps
}
