package consulwriter

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// writtenAt is what component.applied last said the consul-writer wrote of a
// component: the generation, the folder, and the Consul index of the
// write (the event key's ModifyIndex, written last in every write).
type writtenAt struct {
	generation int64
	scn        string
	index      uint64
}

// lastWritten reads a partition of component.applied (co-partitioned with
// component.policies: the same key on the same partition) into the last
// write of each component.
func (w *writer) lastWritten(ctx context.Context, partition int32) (map[string]writtenAt, error) {
	out := map[string]writtenAt{}
	err := runtime.ReadPartitions(ctx, w.env.Kafka, topology.ComponentApplied, []int32{partition},
		runtime.Rows(ctx, w.env, runtime.PassTombstones, func(r runtime.Msg[*events.ComponentApplied]) error {
			k := string(r.Key)
			if r.Value == nil || r.Value.Uninstalled || r.Value.ConsulIndex <= 0 {
				delete(out, k)
				return nil
			}
			out[k] = writtenAt{generation: r.Value.Generation, scn: r.Value.ServiceComponentName, index: uint64(r.Value.ConsulIndex)}
			return nil
		}))
	return out, err
}

// unchanged tells, for each job, whether its folder is for certain as the
// consul-writer last wrote it, without reading the policies' bodies:
//   - component.applied says the record's generation was written to the
//     same folder at index i;
//   - the event key's ModifyIndex is still i (a read-only transaction of
//     check-index operations, 128 folders at a time);
//   - the items are exactly the collection's policies, and none was
//     written or deleted after i (a keys-only listing of the items, whose
//     index is the greatest ModifyIndex, or deletion, under it).
//
// A folder that passes is in sync: an edit, a deletion or an added key
// would have moved an index or changed the keys. Any other folder (or any
// Consul error) is read whole and compared as before (PlanRepair): the
// check only saves reading what has not changed.
func (w *writer) unchanged(ctx context.Context, jobs []*job, last map[string]writtenAt) []bool {
	ok := make([]bool, len(jobs))
	var cand []int
	for i, j := range jobs {
		if at, found := last[j.rec.ComponentID]; found && at.generation == j.rec.Generation && at.scn == j.rec.ServiceComponentName {
			cand = append(cand, i)
		}
	}
	// The event keys, consulkv.MaxTxnOps at a time.
	eventOK := make([]bool, len(jobs))
	for start := 0; start < len(cand); start += consulkv.MaxTxnOps {
		group := cand[start:min(start+consulkv.MaxTxnOps, len(cand))]
		ops := make(api.TxnOps, len(group))
		for k, i := range group {
			j := jobs[i]
			ops[k] = &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: consulkv.EventKey(j.rec.ServiceComponentName), Index: last[j.rec.ComponentID].index}}
		}
		cctx, cancel := context.WithTimeout(ctx, consulTimeout)
		begin := time.Now()
		_, resp, _, err := w.txn.Txn(ops, (&api.QueryOptions{}).WithContext(cctx))
		w.consulTook("read", begin)
		cancel()
		if err != nil || resp == nil {
			continue // read whole
		}
		failed := map[int]bool{}
		for _, e := range resp.Errors {
			failed[e.OpIndex] = true
		}
		for k, i := range group {
			eventOK[i] = !failed[k]
		}
	}
	runtime.Each(len(cand), parallel*2, func(k int) {
		i := cand[k]
		if !eventOK[i] {
			return
		}
		j := jobs[i]
		scn := j.rec.ServiceComponentName
		cctx, cancel := context.WithTimeout(ctx, consulTimeout)
		defer cancel()
		begin := time.Now()
		keys, meta, err := w.kv.Keys(consulkv.ItemsPrefix(scn), "", (&api.QueryOptions{}).WithContext(cctx))
		w.consulTook("read", begin)
		if err != nil || meta == nil || meta.LastIndex > last[j.rec.ComponentID].index {
			return
		}
		want := make([]string, 0, len(j.rec.Policies))
		for _, p := range j.rec.Policies {
			want = append(want, consulkv.ItemKey(scn, p.PolicyID))
		}
		slices.Sort(want)
		slices.Sort(keys)
		ok[i] = slices.Equal(keys, want)
	})
	return ok
}
