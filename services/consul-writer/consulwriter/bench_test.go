package consulwriter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
)

// BenchmarkWriteBatch writes batches of 64 components with 2 policies of
// about 1 KB each, every batch a new generation of both policies (3 keys
// per component), and reports keys/s. "batch" is the stage's batch
// handler, "one-by-one" the same records written each on its own (read,
// plan, write). The ceilings are bare transactions of 64 sets of 1 KB
// values, one after another from the same client ("txn-64-ops").
func BenchmarkWriteBatch(b *testing.B) {
	consulCfg, _ := stagetest.Consul(b)
	w := newWriter(b, consulCfg)
	const comps, keysPer = 64, 3
	batch := func(prefix string, gen int64) []*events.ComponentPolicies {
		recs := make([]*events.ComponentPolicies, comps)
		v := fmt.Sprint(gen)
		for i := range recs {
			recs[i] = component(fmt.Sprintf("%s%02d", prefix, i), fmt.Sprintf("bench-%s-%02d", prefix, i), "u"+v, gen,
				kilobytePolicy("P0", v), kilobytePolicy("P1", v))
		}
		return recs
	}
	keysPerSecond := func(b *testing.B, keys int) {
		b.ReportMetric(float64(keys)/b.Elapsed().Seconds(), "keys/s")
	}

	var gen int64
	b.Run("batch", func(b *testing.B) {
		keys := 0
		for b.Loop() {
			gen++
			for i, oc := range w.handleBatch(context.Background(), inputs(batch("b", gen)...)) {
				if oc.Err != nil || len(oc.Outputs) != 1 {
					b.Fatalf("record %d: outcome %+v", i, oc)
				}
				keys += int(oc.Outputs[0].Value.(*events.ComponentApplied).KeysWritten)
			}
		}
		keysPerSecond(b, keys)
	})
	b.Run("one-by-one", func(b *testing.B) {
		keys := 0
		for b.Loop() {
			gen++
			for _, rec := range batch("o", gen) {
				outs, err := w.one(context.Background(), w.newJob(0, rec, time.Now()))
				if err != nil || len(outs) != 1 {
					b.Fatalf("%s: %d outputs, %v", rec.ComponentID, len(outs), err)
				}
				keys += int(outs[0].Value.(*events.ComponentApplied).KeysWritten)
			}
		}
		keysPerSecond(b, keys)
	})
	raw := func(cl *api.Client) func(b *testing.B) {
		return func(b *testing.B) {
			value := []byte(strings.Repeat("v", 1000))
			keys := 0
			for b.Loop() {
				ops := make(api.TxnOps, 64)
				for i := range ops {
					ops[i] = &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: fmt.Sprintf("bench-raw/%02d", i), Value: value}}
				}
				ok, _, _, err := cl.Txn().Txn(ops, nil)
				if err != nil || !ok {
					b.Fatalf("transaction: ok %v, %v", ok, err)
				}
				keys += len(ops)
			}
			keysPerSecond(b, keys)
		}
	}
	cl, err := consulCfg.Client()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("txn-64-ops", raw(cl))
}

// BenchmarkPlan plans the first gather of 1,000 components holding 5
// policies of about 1 KB each, out of 50 distinct policies, as decoded
// records bring them (every body a copy of its own): what the stage
// computes per record before it writes, with nothing in Consul yet.
func BenchmarkPlan(b *testing.B) {
	const comps, distinct, each = 1000, 50, 5
	recs := make([]*events.ComponentPolicies, comps)
	for i := range recs {
		ps := make([]events.Policy, each)
		for j := range ps {
			p := kilobytePolicy(fmt.Sprintf("P%02d", (i+j*7)%distinct), "1")
			p.Body = string([]byte(p.Body))
			ps[j] = p
		}
		recs[i] = component(fmt.Sprintf("c%04d", i), fmt.Sprintf("scn-%04d", i), "u1", 1, ps...)
	}
	now := time.UnixMilli(2000).UTC()
	for b.Loop() {
		for _, rec := range recs {
			if _, err := Plan(nil, rec, now); err != nil {
				b.Fatal(err)
			}
		}
	}
}
