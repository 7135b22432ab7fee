package executor

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// BenchmarkCompact keeps 10,000 collections of 5 policies of about 1 KiB
// out of 50 distinct, each decoded on its own (every string a copy of its
// own), as the executor keeps component.policies: the time per collection
// and the live heap they take once kept.
func BenchmarkCompact(b *testing.B) {
	const comps, distinct, each = 10_000, 50, 5
	body := func(id string) string {
		return fmt.Sprintf(`{"policyName":"%s.1.xml","config":{"blob":"%0950d"}}`, id, 0)
	}
	recs := make([]*events.ComponentPolicies, comps)
	for i := range recs {
		ps := make([]events.Policy, each)
		for j := range ps {
			id := fmt.Sprintf("P%02d", (i/10+j*7)%distinct) // a deployment's ten components hold the same
			ps[j] = events.Policy{PolicyID: id, PolicyName: id + ".1.xml", PolicyVersion: "1", Body: string([]byte(body(id))), BodyHash: "h-" + id, Revision: 1}
		}
		recs[i] = &events.ComponentPolicies{ComponentID: fmt.Sprintf("c%05d", i), DeploymentID: fmt.Sprintf("d%04d", i/10),
			ServiceComponentName: fmt.Sprintf("scn-%05d", i), UpdateID: "u1", Generation: 1, Policies: ps}
	}
	kept := make([]*kept, comps)
	var heap float64
	var cpu time.Duration // see BenchmarkHandle
	for b.Loop() {
		cpuFrom := cpuTime()
		for i, rec := range recs {
			kept[i] = compact(rec.ComponentID, rec, nil)
		}
		cpu += cpuTime() - cpuFrom
		b.StopTimer()
		var before, after goruntime.MemStats
		clear(kept)
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		for i, rec := range recs {
			kept[i] = compact(rec.ComponentID, rec, nil)
		}
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc-before.HeapAlloc) / comps
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*comps), "ns/collection")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*comps), "cpu-ns/collection")
	b.ReportMetric(heap, "kept-B/collection")
	goruntime.KeepAlive(kept)
}

// BenchmarkHandle is the executor's work per policy.segments record, as
// the stage does it with Kafka left out: the record decoded (as the
// runtime does before the handler), the update applied to each of its
// deployment's components from the kept registrations and collections
// (handle: Next, the collections encoded, the writes kept), and each
// output read back from component.policies as its own write (the
// follower's collectionStore.apply). Like pfbench's stage-alone run, a
// deployment has ten components that hold the same policies of about
// 1 KiB, and each record brings all ten a new version of one of them
// (held: how many they hold). It reports the time per component written
// and the live heap kept per component (the collections, and the shared
// policies and lists; not the registrations).
func BenchmarkHandle(b *testing.B) {
	for _, held := range []int{1, 5} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) { benchHandle(b, held) })
	}
}

func benchHandle(b *testing.B, held int) {
	const deployments, perDep, parts = 1000, 10, 3
	ctx := context.Background()
	c := stagetest.NewCluster(b, parts)
	c.CreateTopics(b, map[string]string{"max.message.bytes": topology.MaxMessageBytes}, topology.DeployComponents)
	env := testEnv(c)
	depID := func(d int) string { return fmt.Sprintf("d-%05d", d) }
	compID := func(d, i int) string { return fmt.Sprintf("c-%06d", d*perDep+i) }
	var regs []*kgo.Record
	for d := range deployments {
		for i := range perDep {
			comp := component(compID(d, i), "scn-"+compID(d, i))
			comp.DeploymentID = depID(d)
			regs = append(regs, c.Record(b, topology.DeployComponents, comp.ComponentID, comp))
		}
	}
	c.ProduceRecords(b, regs...)
	regs = nil

	e := &executor{cfg: DefaultConfig(), env: env, log: zerolog.Nop(), asm: NewAssembler(), parts: map[int32]*partState{}}
	e.cols = newCollectionStore(e.log, env.Codec)
	comps, err := runtime.FollowTableOf(env, topology.DeployComponents, registration, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(comps.Close)
	if err := comps.WaitCaughtUp(ctx); err != nil {
		b.Fatal(err)
	}
	e.comps, e.cols.comps = comps, comps
	e.cols.own(parts, []int32{0, 1, 2})
	offsets := map[int32]int64{}
	for p := range int32(parts) {
		e.parts[p] = &partState{synced: true, rebufferedAt: -1}
	}

	// Update u: deployment u mod deployments, its policy (u/deployments)
	// mod held at version u/deployments+1, revision the same; the first
	// held rounds bring each deployment its policies.
	policyOf := func(d, j int) string { return fmt.Sprintf("BENCH.Config_d%05d_%d", d, j) }
	update := func(u int) []byte {
		d, round := u%deployments, u/deployments
		id, v := policyOf(d, round%held), strconv.Itoa(round+1)
		p := events.Policy{PolicyID: id, PolicyName: id + "." + v + ".xml", PolicyVersion: v, Revision: int64(round + 1),
			Body: fmt.Sprintf(`{"policyName":"%s.%s.xml","policyVersion":"%s","config":{"pad":"%0900d"}}`, id, v, v, 0)}
		p = hashed(p)
		s := &events.PolicySegment{UpdateID: fmt.Sprintf("u-%d", u), DeploymentID: depID(d), Index: 1, Count: 1, CreatedAt: time.UnixMilli(2000).UTC()}
		for i := range perDep {
			s.Components = append(s.Components, events.ComponentDelta{ComponentID: compID(d, i), UpdatedPolicies: []events.Policy{p}})
		}
		raw, err := env.Codec.Encode(s)
		if err != nil {
			b.Fatal(err)
		}
		return raw
	}
	written := 0
	handle := func(raw []byte) {
		seg, err := runtime.DecodeAs[*events.PolicySegment](ctx, env.Codec, raw)
		if err != nil {
			b.Fatal(err)
		}
		p := runtime.KeyPartition(seg.DeploymentID, parts)
		in := runtime.Msg[*events.PolicySegment]{Input: runtime.Input{Topic: topology.PolicySegments, Partition: p, Offset: offsets[p],
			Key: []byte(seg.DeploymentID), Raw: raw}, Value: seg}
		offsets[p]++
		outs, err := e.handle(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range outs {
			if err := e.cols.apply(ctx, &kgo.Record{Topic: o.Topic, Key: o.Key, Value: o.Raw}); err != nil {
				b.Fatal(err)
			}
		}
		written += len(outs)
	}

	// Every component holds its policies before the clock starts.
	u := 0
	for ; u < held*deployments; u++ {
		handle(update(u))
	}
	const batch = 256
	var recs [][]byte
	written = 0
	b.ReportAllocs()
	// The process's CPU time is counted beside the clock's: on a shared
	// machine it moves less with what else runs.
	var cpu time.Duration
	cpuFrom := cpuTime()
	for b.Loop() {
		if len(recs) == 0 {
			cpu += cpuTime() - cpuFrom
			b.StopTimer()
			for range batch {
				recs = append(recs, update(u))
				u++
			}
			b.StartTimer()
			cpuFrom = cpuTime()
		}
		handle(recs[0])
		recs = recs[1:]
	}
	cpu += cpuTime() - cpuFrom
	b.StopTimer()
	if len(e.cols.overlay) != 0 || written != b.N*perDep {
		b.Fatalf("%d collections written for %d records, %d not read back; want %d each read back", written, b.N, len(e.cols.overlay), perDep)
	}
	recs = nil
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(written), "ns/collection")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(written), "cpu-ns/collection")
	b.ReportMetric(keptBytes(e.cols)/float64(deployments*perDep), "kept-B/component")
}

// keptBytes is the live heap the store's collections hold: the heap with
// them less the heap once they are dropped (their shared policies and
// lists with them, when nothing else holds those).
func keptBytes(s *collectionStore) float64 {
	var with, without goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&with)
	s.mu.Lock()
	clear(s.committed)
	clear(s.overlay)
	s.mu.Unlock()
	goruntime.GC()
	goruntime.ReadMemStats(&without)
	return float64(with.HeapAlloc) - float64(without.HeapAlloc)
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
