package consulwrite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
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

// Stage is the consul-writer: it reads component.policies (at least once,
// in order) and writes each collection to Consul KV, then emits
// component.applied.
func Stage() runtime.Stage {
	w := &writer{}
	return runtime.Stage{
		Name:   topology.StageConsulWriter,
		Mode:   runtime.AtLeastOnce,
		Inputs: []string{topology.ComponentPolicies},
		Setup:  w.setup,
	}
}

type writer struct {
	kv  *api.KV
	txn *api.Txn
	log zerolog.Logger
}

func (w *writer) setup(_ context.Context, env runtime.Env) (runtime.Handler, func(), error) {
	cl, err := env.Consul.Client()
	if err != nil {
		return nil, nil, fmt.Errorf("consul-writer: %w", err)
	}
	w.kv, w.txn = cl.KV(), cl.Txn()
	w.log = env.Log.With().Str("stage", topology.StageConsulWriter).Logger()
	return w.handle, nil, nil
}

func (w *writer) handle(ctx context.Context, in runtime.Input) ([]runtime.Output, error) {
	if in.Tombstone() {
		return nil, nil
	}
	rec, ok := in.Value.(*events.ComponentPolicies)
	if !ok {
		return nil, runtime.Permanentf("consul-writer: record at %s[%d]@%d is %s, want %s",
			in.Topic, in.Partition, in.Offset, in.Value.SchemaName(), events.SchemaComponentPolicies)
	}
	if rec.ComponentID == "" {
		rec.ComponentID = string(in.Key)
	}
	log := w.log.With().Str("component_id", rec.ComponentID).Str("update_id", rec.UpdateID).Int64("generation", rec.Generation).Logger()
	if rec.ServiceComponentName == "" {
		return nil, runtime.Permanentf("consul-writer: component %s update %s has no service_component_name, so no Consul folder", rec.ComponentID, rec.UpdateID)
	}
	folder := Folder(rec.ServiceComponentName)
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	start := time.Now()
	pairs, _, err := w.kv.List(folder, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
	if err != nil {
		return nil, fmt.Errorf("consul-writer: read %s for component %s: %w", folder, rec.ComponentID, err)
	}
	plan, err := Plan(pairs, rec, time.Now())
	if err != nil {
		return nil, runtime.Permanent(fmt.Errorf("consul-writer: %w", err))
	}
	if plan.Skip {
		if !plan.Replay {
			log.Info().Int64("consul_generation", plan.Event.Generation).Msg("Consul holds a newer collection; record skipped")
			return nil, nil
		}
		at := time.Now().UTC()
		if t, err := time.Parse(time.RFC3339Nano, plan.Event.Timestamp); err == nil {
			at = t.UTC()
		}
		log.Info().Msg("update already in Consul; component.applied emitted again")
		return []runtime.Output{output(rec, plan, plan.EventIndex, 0, at)}, nil
	}
	index, err := w.write(cctx, rec.ServiceComponentName, plan)
	if err != nil {
		return nil, fmt.Errorf("consul-writer: write update %s of component %s to %s: %w", rec.UpdateID, rec.ComponentID, folder, err)
	}
	keys := plan.KeysChanged
	if !rec.Uninstalled {
		keys++ // the event key
	}
	log.Info().Str("action", plan.Action).Int("keys_written", keys).Int("transactions", len(plan.Steps)).
		Int("policies", len(rec.Policies)).Dur("took", time.Since(start)).Msg("collection written to Consul")
	return []runtime.Output{output(rec, plan, index, keys, time.Now().UTC())}, nil
}

// write carries out a plan's steps in order and returns the event key's
// ModifyIndex after the last one (for an uninstall: the index of the
// deletion, when Consul reports it).
func (w *writer) write(ctx context.Context, scn string, plan WritePlan) (uint64, error) {
	eventKey := EventKey(scn)
	index := plan.EventIndex
	var last uint64
	for i, st := range plan.Steps {
		if st.Put != nil {
			ok, _, err := w.kv.CAS(st.Put, (&api.WriteOptions{}).WithContext(ctx))
			if err != nil {
				return 0, fmt.Errorf("step %d/%d: put %s: %w", i+1, len(plan.Steps), st.Put.Key, err)
			}
			if !ok {
				return 0, fmt.Errorf("step %d/%d: put %s: %w", i+1, len(plan.Steps), st.Put.Key, ErrConflict)
			}
			continue
		}
		ops := make(api.TxnOps, 0, len(st.Ops)+2)
		if st.Guard {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: eventKey, Index: index}})
		}
		ops = append(ops, st.Ops...)
		if st.Event != nil {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: eventKey, Value: st.Event.JSON(), Index: index}})
		}
		ok, resp, meta, err := w.txn.Txn(ops, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return 0, fmt.Errorf("step %d/%d: transaction of %d operations: %w", i+1, len(plan.Steps), len(ops), err)
		}
		if !ok {
			var why []string
			if resp != nil {
				for _, e := range resp.Errors {
					why = append(why, e.What)
				}
			}
			return 0, fmt.Errorf("step %d/%d: %s: %w", i+1, len(plan.Steps), strings.Join(why, "; "), ErrConflict)
		}
		if meta != nil {
			last = meta.LastIndex
		}
		if st.Event != nil {
			found := false
			for _, r := range resp.Results {
				if r != nil && r.KV != nil && r.KV.Key == eventKey {
					index, found = r.KV.ModifyIndex, true
				}
			}
			if !found {
				return 0, fmt.Errorf("step %d/%d: Consul did not report the index of %s", i+1, len(plan.Steps), eventKey)
			}
			last = index
		}
	}
	return last, nil
}

// output is the component.applied record of a written (or replayed)
// collection.
func output(rec *events.ComponentPolicies, plan WritePlan, index uint64, keys int, at time.Time) runtime.Output {
	a := &events.ComponentApplied{
		ComponentID:          rec.ComponentID,
		ServiceComponentName: rec.ServiceComponentName,
		UpdateID:             rec.UpdateID,
		Action:               plan.Action,
		ConsulIndex:          int64(index),
		PoliciesCount:        int32(len(rec.Policies)),
		KeysWritten:          int32(keys),
		Generation:           rec.Generation,
		Policies:             orEmpty(rec.Policies),
		UpdatedPolicies:      orEmpty(rec.UpdatedPolicies),
		RemovedPolicies:      orEmpty(rec.RemovedPolicies),
		Notify:               rec.Notify,
		Uninstalled:          rec.Uninstalled,
		AppliedAt:            at,
	}
	if a.Notify.Kind == "" {
		a.Notify.Kind = events.NotifyNone
	}
	return runtime.Output{Topic: topology.ComponentApplied, Key: []byte(rec.ComponentID), Value: a}
}

func orEmpty(ps []events.Policy) []events.Policy {
	if ps == nil {
		return []events.Policy{}
	}
	return ps
}
