package consulwriter

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// writtenAt is what component.applied last said the consul-writer wrote of a
// component: the generation, the folder, the Consul index of the write
// (the event key's ModifyIndex, written last in every write) and the
// ModifyIndex of each item key (none in records written before they were
// kept).
type writtenAt struct {
	generation int64
	scn        string
	index      uint64
	items      []events.ItemIndex
}

// lastWritten reads partitions of component.applied (co-partitioned with
// component.policies: the same key on the same partition) into the last
// write of each component.
func (w *writer) lastWritten(ctx context.Context, partitions []int32) (map[string]writtenAt, error) {
	out := map[string]writtenAt{}
	err := runtime.ReadPartitions(ctx, w.env.Kafka, topology.ComponentApplied, partitions,
		runtime.Rows(ctx, w.env, runtime.PassTombstones, func(r runtime.Msg[*events.ComponentApplied]) error {
			k := string(r.Key)
			if r.Value == nil || r.Value.Uninstalled || r.Value.ConsulIndex <= 0 {
				delete(out, k)
				return nil
			}
			out[k] = writtenAt{generation: r.Value.Generation, scn: r.Value.ServiceComponentName, index: uint64(r.Value.ConsulIndex), items: r.Value.ItemIndexes}
			return nil
		}))
	return out, err
}

// checked is a folder unchanged checks: its job, the event key's index as
// last written and, when component.applied names them all, the index of
// each of the collection's item keys, in the collection's order.
type checked struct {
	job   int
	event uint64
	items []uint64 // nil: not known (written before they were kept)
}

// ops is the number of check-index operations of c.
func (c checked) ops() int { return 1 + len(c.items) }

// op is c's k-th check-index: the event key, then the items.
func (c checked) op(j *job, k int) *api.TxnOp {
	scn := j.rec.ServiceComponentName
	if k == 0 {
		return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: consulkv.EventKey(scn), Index: c.event}}
	}
	return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: consulkv.ItemKey(scn, j.rec.Policies[k-1].PolicyID), Index: c.items[k-1]}}
}

// checkStats is what unchanged asked of Consul: check-index transactions,
// shared listings (ranges) and listings of one component's items (alone).
type checkStats struct {
	txns, ranges, alone int
}

// unchanged tells, for each job, whether its folder is for certain as the
// consul-writer last wrote it, without reading it. component.applied must
// say the record's generation was written to the same folder; then
//   - every key the write left is as it left it: the event key's and each
//     item key's ModifyIndex (a read-only transaction of check-index
//     operations, consulkv.MaxTxnOps at a time, components side by side),
//     and
//   - no other key lies under the items prefix: one keys listing of a
//     prefix shared by many components (keyRanges, rangeKeys keys
//     expected each, spread the number of the topic's partitions a
//     catch-up's components stand for) tells the keys added by hand.
//
// A component whose record names no item indexes (written before they
// were kept) is checked as it was before: the event key's index, then a
// keys listing of its items, whose index is the greatest ModifyIndex, or
// deletion, under it; so is one whose shared listing failed. A folder
// that passes is in sync: an edit, a deletion or an added key would have
// moved an index or added a key. Any other folder (or any Consul error)
// is read whole and compared as before (PlanRepair): the check only saves
// reading what has not changed.
func (w *writer) unchanged(ctx context.Context, jobs []*job, last map[string]writtenAt, spread int) ([]bool, checkStats) {
	var cand []checked
	for i, j := range jobs {
		at, found := last[j.rec.ComponentID]
		if !found || at.generation != j.rec.Generation || at.scn != j.rec.ServiceComponentName {
			continue
		}
		cand = append(cand, checked{job: i, event: at.index, items: itemIndexesOf(j.rec, at.items)})
	}
	passed, txns := w.checkIndexes(ctx, jobs, cand)
	stats := checkStats{txns: txns}

	ok := make([]bool, len(jobs))
	var members []rangeMember
	var alone []checked
	for k, c := range cand {
		switch {
		case !passed[k]:
		case c.items == nil:
			alone = append(alone, c)
		default:
			j := jobs[c.job]
			members = append(members, rangeMember{
				itemsPrefix: consulkv.ItemsPrefix(j.rec.ServiceComponentName),
				weight:      (len(j.rec.Policies) + keysPerComponent) * spread,
				refs:        []int{k},
			})
		}
	}
	ranges := keyRanges(members, rangeKeys)
	stats.ranges = len(ranges)
	var mu sync.Mutex
	runtime.Each(len(ranges), parallel, func(r int) {
		extra, err := w.listRange(ctx, ranges[r], jobs, cand)
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ranges[r].members {
			for _, k := range m.refs {
				switch {
				case err != nil:
					alone = append(alone, cand[k])
				case !extra[cand[k].job]:
					ok[cand[k].job] = true
				}
			}
		}
	})
	stats.alone = len(alone)
	runtime.Each(len(alone), parallel*2, func(k int) {
		c := alone[k]
		if w.listAlone(ctx, jobs[c.job], c.event) {
			ok[c.job] = true // distinct jobs: no two goroutines write one place
		}
	})
	return ok, stats
}

// itemIndexesOf is the index of each of rec's item keys, in its
// collection's order, as items names them; nil unless items names them
// all.
func itemIndexesOf(rec *events.ComponentPolicies, items []events.ItemIndex) []uint64 {
	if len(items) < len(rec.Policies) {
		return nil
	}
	byID := make(map[string]uint64, len(items))
	for _, ix := range items {
		byID[ix.PolicyID] = uint64(ix.ModifyIndex)
	}
	out := make([]uint64, len(rec.Policies))
	for i, p := range rec.Policies {
		index, found := byID[p.PolicyID]
		if !found || index == 0 {
			return nil
		}
		out[i] = index
	}
	return out
}

// checkIndexes checks the keys of cand with read-only transactions of
// check-index operations, consulkv.MaxTxnOps each, the operations of
// every component one after another (a component's may span two
// transactions). passed says which components had every check hold; a
// transaction that fails as a whole fails its components.
func (w *writer) checkIndexes(ctx context.Context, jobs []*job, cand []checked) (passed []bool, txns int) {
	// first[k] is where cand[k]'s operations begin among all.
	first := make([]int, len(cand)+1)
	for k, c := range cand {
		first[k+1] = first[k] + c.ops()
	}
	total := first[len(cand)]
	txns = (total + consulkv.MaxTxnOps - 1) / consulkv.MaxTxnOps
	passed = make([]bool, len(cand))
	failed := make([][]int, txns) // the components each transaction failed
	runtime.Each(txns, parallel, func(t int) {
		from, to := t*consulkv.MaxTxnOps, min((t+1)*consulkv.MaxTxnOps, total)
		// owner[o] is the component of operation from+o.
		owner := make([]int, 0, to-from)
		ops := make(api.TxnOps, 0, to-from)
		for k := sort.SearchInts(first, from+1) - 1; k < len(cand) && first[k] < to; k++ {
			for o := max(from, first[k]); o < min(to, first[k+1]); o++ {
				ops = append(ops, cand[k].op(jobs[cand[k].job], o-first[k]))
				owner = append(owner, k)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, consulTimeout)
		defer cancel()
		begin := time.Now()
		_, resp, _, err := w.txn.Txn(ops, (&api.QueryOptions{}).WithContext(cctx))
		w.consulTook("read", begin)
		if err != nil || resp == nil {
			failed[t] = slices.Compact(slices.Clone(owner)) // read whole
			return
		}
		for _, e := range resp.Errors {
			if e != nil && e.OpIndex >= 0 && e.OpIndex < len(owner) {
				failed[t] = append(failed[t], owner[e.OpIndex])
			}
		}
	})
	for k := range passed {
		passed[k] = true
	}
	for _, ks := range failed {
		for _, k := range ks {
			passed[k] = false
		}
	}
	return passed, txns
}

// listRange lists the keys under r's prefix and says which jobs of its
// members have a key under their items prefix that is not one of their
// collection's (added by hand).
func (w *writer) listRange(ctx context.Context, r keyRange, jobs []*job, cand []checked) (extra map[int]bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	begin := time.Now()
	keys, _, err := w.kv.Keys(r.prefix, "", (&api.QueryOptions{}).WithContext(cctx))
	w.consulTook("read", begin)
	if err != nil {
		return nil, err
	}
	// The jobs of each name, and the policies they expect.
	owners := map[string][]int{}
	for _, m := range r.members {
		for _, k := range m.refs {
			scn := jobs[cand[k].job].rec.ServiceComponentName
			owners[scn] = append(owners[scn], cand[k].job)
		}
	}
	expected := map[int]map[string]bool{}
	expects := func(i int, policyID string) bool {
		ids, found := expected[i]
		if !found {
			ids = make(map[string]bool, len(jobs[i].rec.Policies))
			for _, p := range jobs[i].rec.Policies {
				ids[p.PolicyID] = true
			}
			expected[i] = ids
		}
		return ids[policyID]
	}
	extra = map[int]bool{}
	for _, key := range keys {
		// A key is every owner's item, as a read of its folder finds it.
		for _, scn := range consulkv.ItemsOwners(key) {
			for _, i := range owners[scn] {
				if !expects(i, key[len(consulkv.ItemsPrefix(scn)):]) {
					extra[i] = true
				}
			}
		}
	}
	return extra, nil
}

// listAlone is the check of one folder by a keys listing of its items:
// they are exactly the collection's, and none was written or deleted after
// index, the event key's ModifyIndex as last written (the listing's index
// is the greatest ModifyIndex, or deletion, under the items prefix).
func (w *writer) listAlone(ctx context.Context, j *job, index uint64) bool {
	scn := j.rec.ServiceComponentName
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	begin := time.Now()
	keys, meta, err := w.kv.Keys(consulkv.ItemsPrefix(scn), "", (&api.QueryOptions{}).WithContext(cctx))
	w.consulTook("read", begin)
	if err != nil || meta == nil || meta.LastIndex > index {
		return false
	}
	want := make([]string, 0, len(j.rec.Policies))
	for _, p := range j.rec.Policies {
		want = append(want, consulkv.ItemKey(scn, p.PolicyID))
	}
	slices.Sort(want)
	slices.Sort(keys)
	return slices.Equal(keys, want)
}
