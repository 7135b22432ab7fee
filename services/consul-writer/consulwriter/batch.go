package consulwriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// A wave is cut into chunks of components, up to parallel of them read
// and written at once: Consul serves overlapping requests much faster than
// the same requests one after another (reads run beside writes, and raft
// applies concurrent writes together). A chunk holds a poll's share of
// components, at least minChunk (small transactions cost as much as full
// ones) and at most maxChunk (one read transaction).
const (
	parallel = 4
	minChunk = 8
	maxChunk = 64
)

// errNotWritten is the outcome of the records after a failed one: the
// runtime hands them in again with it, so they are not written now.
var errNotWritten = errors.New("consul-writer: not written yet: an earlier record of the batch failed")

// handleBatch writes a poll's records. They are cut into waves in which
// each folder appears at most once, waves in order, so that a component's
// second record is planned against what its first wrote. A wave is cut
// into chunks handled several at once; in a chunk, the folders are read in
// a shared consistent transaction, every record is planned as on its own,
// and the single-transaction plans are packed into shared transactions;
// plans of several steps are written alone. A shared transaction that
// fails is rolled back whole by Consul: its components are then written
// one by one (read again, planned again), so that one component's conflict
// is its own record's outcome only.
func (w *writer) handleBatch(ctx context.Context, ins []runtime.Msg[*events.ComponentPolicies]) []runtime.Outcome {
	b := &batch{w: w, out: make([]runtime.Outcome, len(ins)), failed: len(ins)}
	start := time.Now()
	var jobs []*job
	for i, in := range ins {
		rec, err := w.record(in)
		if err != nil {
			b.out[i].Err = err
			continue
		}
		j := w.newJob(i, rec, start)
		j.origin, j.hasOrigin = runtime.InputOrigin(in.Input)
		jobs = append(jobs, j)
	}
	for _, wave := range waves(jobs) {
		b.wave(ctx, wave)
	}
	return b.out
}

// batch is the state of one handleBatch.
type batch struct {
	w *writer

	mu  sync.Mutex
	out []runtime.Outcome
	// failed is the first input whose write failed and will be retried:
	// the runtime hands it and every later input in again, so the later
	// ones are not worked on now.
	failed int
}

// set records j's outcome.
func (b *batch) set(j *job, outs []runtime.Output, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.out[j.i] = runtime.Outcome{Outputs: outs, Err: err}
	b.w.counted(outs, err)
	if err != nil && !runtime.IsPermanent(err) && j.i < b.failed {
		b.failed = j.i
	}
}

// skip reports whether j comes after a failed input, recording that it
// was not written.
func (b *batch) skip(j *job) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if j.i <= b.failed {
		return false
	}
	b.out[j.i] = runtime.Outcome{Err: errNotWritten}
	return true
}

// waves cuts jobs into waves in which no two jobs write the same folder,
// nor folders one inside the other (a name can hold another's folder:
// "a:policies/" holds "a:policies/b:policies/"), keeping the records of
// each folder in order.
func waves(jobs []*job) [][]*job {
	folders := make([]string, 0, len(jobs))
	for _, j := range jobs {
		folders = append(folders, j.folder)
	}
	slices.Sort(folders)
	folders = slices.Compact(folders)
	// In sorted order a folder follows the folders that hold it, and a
	// folder that does not hold one holds none after it either.
	root := make(map[string]string, len(folders))
	var chain []string // the folders holding the current one, outermost first
	for _, f := range folders {
		for len(chain) > 0 && !strings.HasPrefix(f, chain[len(chain)-1]) {
			chain = chain[:len(chain)-1]
		}
		root[f] = f
		if len(chain) > 0 {
			root[f] = chain[0]
		}
		chain = append(chain, f)
	}
	return runtime.Waves(jobs, func(j *job) string { return root[j.folder] })
}

// wave reads, plans and writes jobs whose folders are distinct and none
// inside another, in chunks, several at once.
func (b *batch) wave(ctx context.Context, jobs []*job) {
	size := min(max((len(jobs)+parallel-1)/parallel, minChunk), maxChunk)
	runtime.Each((len(jobs)+size-1)/size, parallel, func(k int) {
		b.chunk(ctx, jobs[k*size:min((k+1)*size, len(jobs))])
	})
}

// chunk reads, plans and writes jobs, in input order.
func (b *batch) chunk(ctx context.Context, jobs []*job) {
	b.read(ctx, jobs)
	var p pack
	for _, j := range jobs {
		if !j.read || b.skip(j) {
			continue
		}
		outs, done, err := b.w.planJob(j, j.pairs)
		if done || err != nil {
			b.set(j, outs, err)
			continue
		}
		if !shareable(j.plan) {
			b.alone(ctx, j)
			continue
		}
		ops := stepOps(consulkv.EventKey(j.rec.ServiceComponentName), j.plan.EventIndex, j.plan.Steps[0])
		size := 0
		for _, op := range ops {
			size += opSize(op) + 1
		}
		if len(p.jobs) > 0 && (p.ops+len(ops) > consulkv.MaxTxnOps || p.bytes+size > consulkv.MaxTxnBytes) {
			b.commit(ctx, &p)
		}
		p.add(j, ops, size)
	}
	b.commit(ctx, &p)
}

// read reads the folders of jobs into their pairs: consistent read-only
// transactions of one get-tree operation per folder, budgeted by
// consulkv.ReadTxnBytes with the sizes of their records' collections (a
// folder mostly holds the previous, similar collection), and List for a
// folder whose record is over consulkv.MaxTxnBytes (a write of several
// steps).
func (b *batch) read(ctx context.Context, jobs []*job) {
	var group []*job
	bytes := 0
	for _, j := range jobs {
		if b.skip(j) {
			continue
		}
		size := collectionBytes(j.rec)
		if size > consulkv.MaxTxnBytes {
			cctx, cancel := context.WithTimeout(ctx, consulTimeout)
			pairs, _, err := b.w.kv.List(j.folder, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
			cancel()
			if err != nil {
				b.set(j, nil, readError(j, err))
				continue
			}
			j.pairs, j.read = pairs, true
			continue
		}
		if len(group) == consulkv.MaxTxnOps || len(group) > 0 && bytes+size > consulkv.ReadTxnBytes {
			b.readTxn(ctx, group)
			group, bytes = nil, 0
		}
		group = append(group, j)
		bytes += size
	}
	if len(group) > 0 {
		b.readTxn(ctx, group)
	}
}

// readTxn reads the folders of group in one transaction.
func (b *batch) readTxn(ctx context.Context, group []*job) {
	ops := make(api.TxnOps, 0, len(group))
	for _, j := range group {
		if !b.skip(j) {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: j.folder}})
		}
	}
	group = group[:len(ops)] // the skipped ones, after a failed input, are the last
	if len(ops) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	begin := time.Now()
	ok, resp, _, err := b.w.txn.Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
	b.w.consulTook("read", begin)
	if err == nil && !ok {
		err = fmt.Errorf("read transaction of %d folders failed: %s", len(ops), consulkv.TxnReasons(resp))
	}
	if err == nil {
		err = assign(group, resp.Results)
	}
	if err != nil {
		for _, j := range group {
			j.pairs = nil
			b.set(j, nil, readError(j, err))
		}
		return
	}
	for _, j := range group {
		j.read = true
	}
}

// assign hands the results of a get-tree transaction to the jobs whose
// folders it read. Results come operation after operation, each folder's
// keys in a row; as no folder of a wave holds another, a key belongs to
// the first folder, from the current one on, that is its prefix.
func assign(group []*job, results api.TxnResults) error {
	k := 0
	for _, r := range results {
		if r == nil || r.KV == nil {
			continue
		}
		for k < len(group) && !strings.HasPrefix(r.KV.Key, group[k].folder) {
			k++
		}
		if k == len(group) {
			return fmt.Errorf("read transaction returned key %s, outside the folders read", r.KV.Key)
		}
		group[k].pairs = append(group[k].pairs, r.KV)
	}
	return nil
}

// shareable reports whether a plan is one transaction that can share a
// request with other components' plans.
func shareable(p WritePlan) bool {
	return len(p.Steps) == 1 && p.Steps[0].Put == nil
}

// alone writes a plan of several steps by itself.
func (b *batch) alone(ctx context.Context, j *job) {
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	index, indexes, err := b.w.write(cctx, j.rec.ServiceComponentName, j.plan)
	if err != nil {
		b.set(j, nil, writeError(j, err))
		return
	}
	b.set(j, b.w.written(j, index, indexes, len(j.plan.Steps), 1), nil)
}

// pack is a shared transaction being filled: the single steps of several
// components, each check-and-set on its own event key.
type pack struct {
	jobs  []*job
	opsOf []api.TxnOps
	ops   int
	bytes int // of the request body, as the client encodes it
}

func (p *pack) add(j *job, ops api.TxnOps, size int) {
	if len(p.jobs) == 0 {
		p.bytes = txnBase
	}
	p.jobs = append(p.jobs, j)
	p.opsOf = append(p.opsOf, ops)
	p.ops += len(ops)
	p.bytes += size
}

// commit writes a pack in one transaction and empties it.
func (b *batch) commit(ctx context.Context, p *pack) {
	var jobs []*job
	var ops api.TxnOps
	var first []int // where each job's operations begin
	for k, j := range p.jobs {
		if !b.skip(j) {
			jobs = append(jobs, j)
			first = append(first, len(ops))
			ops = append(ops, p.opsOf[k]...)
		}
	}
	*p = pack{}
	if len(jobs) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	begin := time.Now()
	ok, resp, meta, err := b.w.txn.Txn(ops, (&api.QueryOptions{}).WithContext(cctx))
	b.w.consulTook("write", begin)
	cancel()
	if err == nil && ok {
		index := consulkv.TxnIndexes(resp)
		for _, j := range jobs {
			at := meta.LastIndex // an uninstall: the index of the deletion
			if j.plan.Steps[0].Event != nil {
				eventKey := consulkv.EventKey(j.rec.ServiceComponentName)
				var found bool
				if at, found = index[eventKey]; !found {
					b.set(j, nil, writeError(j, fmt.Errorf("Consul did not report the index of %s", eventKey)))
					continue
				}
			}
			b.set(j, b.w.written(j, at, index, 1, len(jobs)), nil)
		}
		return
	}
	ev := b.w.log.Warn().Int("components", len(jobs)).Int("operations", len(ops))
	if err != nil {
		ev = ev.Err(err) // maybe applied: reading again tells
	} else {
		for _, e := range resp.Errors {
			k, _ := slices.BinarySearch(first, e.OpIndex+1)
			if k > 0 {
				ev = ev.Str("component_id", jobs[k-1].rec.ComponentID)
			}
			ev = ev.Str("reason", e.What)
		}
	}
	ev.Msg("shared transaction failed; its components are written one by one")
	for _, j := range jobs {
		if b.skip(j) {
			continue
		}
		outs, err := b.w.one(ctx, j)
		b.set(j, outs, err)
	}
}

// collectionBytes is the size of a record's policy bodies.
func collectionBytes(rec *events.ComponentPolicies) int {
	n := 0
	for _, p := range rec.Policies {
		n += len(p.Body)
	}
	return n
}
