package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consul-writer/consulwriter"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/executor/executor"
	"github.com/policyflow/policyflow/services/matcher/matcher"
	pfruntime "github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/segmenter/segmenter"
	"github.com/policyflow/policyflow/topology"
)

// Spread is a time measured on every partition: a group of as many
// members as partitions gives each member one, so the slowest partition
// is the group's time with a core per member, and the sum is the time of
// one member (one core) holding every partition.
type Spread struct {
	// SumS is the sum over the partitions (median of the rounds, per
	// partition).
	SumS float64 `json:"sum_s"`
	// MaxS is the slowest partition: the group's time, a member per
	// partition.
	MaxS float64 `json:"max_member_s"`
	// PerComponentUS is SumS per component, in microseconds.
	PerComponentUS float64 `json:"per_component_us"`
	// CPUS is the process's CPU seconds over the phase (every round),
	// the garbage collector's included: above the wall time, the
	// collector worked on the other core.
	CPUS float64 `json:"cpu_s"`
	// WallS is the phase's wall time (every round).
	WallS float64 `json:"wall_s"`
}

// Records are the records a step writes to one topic.
type Records struct {
	Topic   string `json:"topic"`
	Records int    `json:"records"`
	Bytes   int64  `json:"bytes"`
	// PerComponent is Bytes per component of the fleet.
	PerComponent float64 `json:"bytes_per_component"`
}

// Result is one run: a fleet of components split over partitions, one
// member each.
type Result struct {
	Components  int    `json:"components"`
	Partitions  int    `json:"partitions"`
	Deployments int    `json:"deployments"`
	BodyBytes   int    `json:"policy_body_bytes"`
	Rounds      int    `json:"rounds"`
	LoadBefore  string `json:"loadavg_before"`
	LoadAfter   string `json:"loadavg_after"`
	Seconds     float64
	Matcher     MatcherResult   `json:"matcher"`
	Segmenter   SegmenterResult `json:"segmenter"`
	Executor    ExecutorResult  `json:"executor"`
	Consul      ConsulResult    `json:"consul"`
	// Update is what one fleet-wide policy change writes, topic by topic.
	Update []Records `json:"fleet_update_records"`
	// Record sizes of the typical component and of one policy.
	Sizes Sizes `json:"record_bytes"`
}

// MatcherResult is the matcher's state and decisions.
type MatcherResult struct {
	// HeapBytes is the live heap the partitions' state takes (the
	// garbage collected before and after building it).
	HeapBytes         uint64  `json:"heap_bytes"`
	HeapPerComponent  float64 `json:"heap_bytes_per_component"`
	LargestPartition  int     `json:"largest_partition_components"`
	HeapLargestMember uint64  `json:"heap_bytes_largest_member"`
	// RestoreS is building the state from records already decoded
	// (Restore, RestoreHas): a member's restore without Kafka.
	RestoreS float64 `json:"restore_s"`
	// Catchup is a catch-up of every component with nothing changed
	// (OnCatchupCounted).
	Catchup         Spread `json:"catchup_nothing_changed"`
	CatchupCompared int    `json:"catchup_compared"`
	CatchupDiffered int    `json:"catchup_differed"`
	// Change is one policy change that reaches every component
	// (OnChange), decided on every partition; Encode is the encoding of
	// its policy.matches and matcher.holdings records.
	Change       Spread `json:"fleet_change_decide"`
	ChangeEncode Spread `json:"fleet_change_encode"`
	Deltas       int    `json:"fleet_change_component_deltas"`
}

// SegmenterResult is the segmenter's work on the fleet change.
type SegmenterResult struct {
	// Fill puts the bodies in (Fill) and cuts and encodes the pieces
	// (Outputs), by policy.matches partition.
	Fill Spread `json:"fill_and_cut"`
}

// ExecutorResult is the executor's state and decisions.
type ExecutorResult struct {
	// RegistrationsHeap is every registration, which every member keeps
	// (it follows all of deploy.components).
	RegistrationsHeap         uint64  `json:"registrations_heap_bytes"`
	RegistrationsPerComponent float64 `json:"registrations_heap_bytes_per_component"`
	// CollectionsHeap is every committed collection; a member keeps
	// those of its policy.segments partitions.
	CollectionsHeap         uint64  `json:"collections_heap_bytes"`
	CollectionsPerComponent float64 `json:"collections_heap_bytes_per_component"`
	LargestPartition        int     `json:"largest_partition_components"`
	// HeapLargestMember is every registration and the collections of
	// the largest partition.
	HeapLargestMember uint64 `json:"heap_bytes_largest_member"`
	// Decode is reading the policy.segments records and assembling the
	// updates; Decide is Next on every component (Model.Apply); Encode
	// the component.policies records; Keep compacting what it wrote
	// (Model.Wrote), as it stays once read back.
	Decode Spread `json:"fleet_change_decode"`
	Decide Spread `json:"fleet_change_decide"`
	Encode Spread `json:"fleet_change_encode"`
	Keep   Spread `json:"fleet_change_keep"`
}

// ConsulResult is what the consul-writer would write for the fleet
// change, planned (Plan) on a sample of components against the folders
// they have.
type ConsulResult struct {
	Sampled          int     `json:"sampled_components"`
	OpsPerComponent  float64 `json:"txn_ops_per_component"`
	KeysPerComponent float64 `json:"keys_written_per_component"`
	// KeysHeld is the keys of a folder: items, the event, the
	// notifier's claim.
	KeysHeld      int   `json:"keys_per_component"`
	FolderBytes   int64 `json:"folder_value_bytes_per_component"`
	WriteTxns     int   `json:"write_txns"`
	ReadTxns      int   `json:"read_txns"`
	WriteTxnsEach int   `json:"components_per_write_txn"`
}

// Sizes are encoded record sizes.
type Sizes struct {
	Component     int `json:"deploy_components"`
	CatalogEntry  int `json:"policy_catalog_entry"`
	Change        int `json:"policy_change"`
	Collection    int `json:"component_policies"`
	Holding       int `json:"matcher_holdings"`
	Applied       int `json:"component_applied"`
	CatchupReq    int `json:"catchup_request"`
	MatchPerComp  int `json:"policy_matches_per_component"`
	SegmentPerCmp int `json:"policy_segments_per_component"`
}

// cpuSeconds is the process's user and system CPU so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// liveHeap is the heap left after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// timer collects a phase's time per partition over rounds.
type timer struct {
	per      [][]float64 // [partition][round]
	cpu0     float64
	wall0    time.Time
	cpu, wal float64
}

func newTimer(parts int) *timer { return &timer{per: make([][]float64, parts)} }

func (t *timer) start() { t.cpu0, t.wall0 = cpuSeconds(), time.Now() }
func (t *timer) stop() {
	t.cpu += cpuSeconds() - t.cpu0
	t.wal += time.Since(t.wall0).Seconds()
}

// add adds d to partition p's time of round r.
func (t *timer) add(p, r int, d time.Duration) {
	for len(t.per[p]) <= r {
		t.per[p] = append(t.per[p], 0)
	}
	t.per[p][r] += d.Seconds()
}

func (t *timer) spread(components int) Spread {
	var s Spread
	for _, rounds := range t.per {
		if len(rounds) == 0 {
			continue
		}
		m := median(rounds)
		s.SumS += m
		s.MaxS = max(s.MaxS, m)
	}
	s.PerComponentUS = s.SumS / float64(components) * 1e6
	s.CPUS, s.WallS = t.cpu, t.wal
	return s
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// catalog is policy.catalog at the fleet change's last version, for Fill.
type catalog map[string]*events.PolicyCatalogEntry

func (c catalog) Get(id string) (*events.PolicyCatalogEntry, bool) { e, ok := c[id]; return e, ok }
func (c catalog) WaitCaughtUp(context.Context) error               { return nil }

// sim is one run's settings.
type sim struct {
	n, parts, bodyBytes, rounds, sample int
	codec                               *events.Codec
	progress                            func(string, ...any)
}

// bodies are every policy's version 1, and the fleet policy's later
// versions (one a round).
type bodies struct {
	v1    map[string]body
	fleet []body // fleet[r] is version r+2
}

func (s *sim) bodies() (bodies, error) {
	b := bodies{v1: map[string]body{}}
	for _, id := range catalogIDs() {
		bd, err := makeBody(id, 1, s.bodyBytes)
		if err != nil {
			return b, err
		}
		b.v1[id] = bd
	}
	for r := range s.rounds {
		bd, err := makeBody(fleetPolicy, int64(r+2), s.bodyBytes)
		if err != nil {
			return b, err
		}
		b.fleet = append(b.fleet, bd)
	}
	return b, nil
}

func entry(id string, v int64, bd body) *events.PolicyCatalogEntry {
	return &events.PolicyCatalogEntry{PolicyID: id, PolicyName: bd.header.PolicyName, PolicyVersion: strconv.FormatInt(v, 10),
		Body: bd.json, BodyHash: bd.header.BodyHash, Status: events.StatusValid, Revision: v, Source: events.SourcePDP, UpdatedAt: t0}
}

func ref(id string, bd body, rev int64, withBody bool) events.Policy {
	p := events.Policy{PolicyID: id, PolicyName: bd.header.PolicyName, PolicyVersion: bd.header.PolicyVersion, BodyHash: bd.header.BodyHash, Revision: rev}
	if withBody {
		p.Body = bd.json
	}
	return p
}

// collection is component i's collection at version 1 of every policy:
// by reference as matcher.holdings holds it, with bodies as
// component.policies does.
func collection(i int, b bodies, withBodies bool) *events.ComponentPolicies {
	ids := holds(i)
	cp := &events.ComponentPolicies{ComponentID: componentID(i), DeploymentID: deploymentID(i), ServiceComponentName: componentID(i),
		UpdateID: fmt.Sprintf("%032x", i), Generation: 1, Policies: make([]events.Policy, len(ids)),
		UpdatedPolicies: []events.Policy{}, RemovedPolicies: []events.Policy{}, UpdatedAt: t0,
		Notify: events.NotifyTarget{Kind: events.NotifyNone}}
	for k, id := range ids {
		cp.Policies[k] = ref(id, b.v1[id], 1, withBodies)
	}
	if withBodies {
		cp.Notify = component(i, t0).Notify
	}
	return cp
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// run builds the state, decides, counts.
func (s *sim) run(ctx context.Context) (*Result, error) {
	res := &Result{Components: s.n, Partitions: s.parts, Deployments: (s.n + deployment - 1) / deployment, BodyBytes: s.bodyBytes, Rounds: s.rounds,
		LoadBefore: loadavg()}
	start := time.Now()
	b, err := s.bodies()
	if err != nil {
		return nil, err
	}
	if err := s.sizes(res, b); err != nil {
		return nil, err
	}
	matches, err := s.matcher(res, b)
	if err != nil {
		return nil, err
	}
	if err := s.downstream(ctx, res, b, matches); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.LoadAfter = loadavg()
	return res, nil
}

// sizes encodes the typical records once.
func (s *sim) sizes(res *Result, b bodies) error {
	size := func(v events.Event) (int, error) {
		raw, err := s.codec.Encode(v)
		return len(raw), err
	}
	var err error
	var errs []error
	must := func(n int, e error) int {
		if e != nil {
			errs = append(errs, e)
		}
		return n
	}
	res.Sizes.Component = must(size(component(12345, t0)))
	res.Sizes.CatalogEntry = must(size(entry(fleetPolicy, 2, b.fleet[0])))
	res.Sizes.Change = must(size(s.change(0, b)))
	res.Sizes.Collection = must(size(collection(12345, b, true)))
	res.Sizes.CatchupReq = must(size(&events.CatchupRequest{RequestID: fmt.Sprintf("%032x", 1), Scope: events.ScopeAll, Reason: "periodic", RequestedAt: t0}))
	if len(errs) > 0 {
		err = errs[0]
	}
	return err
}

// change is round r's change of the fleet policy, as pdp-ingest writes it.
func (s *sim) change(r int, b bodies) *events.PolicyChange {
	bd := b.fleet[r]
	old, v := strconv.Itoa(r+1), strconv.Itoa(r+2)
	return &events.PolicyChange{ChangeID: fmt.Sprintf("%032x", r+1), PolicyID: fleetPolicy, Action: events.ActionUpdated,
		OldVersion: &old, NewVersion: &v, PolicyName: bd.header.PolicyName, MatchingConditions: bd.header.MatchingConditions,
		BodyHash: bd.header.BodyHash, ChangedAt: t0.Add(time.Duration(r+1) * time.Minute), Revision: int64(r + 2)}
}

// matcher builds the matcher's partitions, runs the catch-up and the
// fleet change, and returns the last round's matches.
func (s *sim) matcher(res *Result, b bodies) ([]events.PolicyMatch, error) {
	m := matcher.New()
	seq := 0
	m.NewID = func() string { seq++; return fmt.Sprintf("%032x", seq) }
	m.Now = func() time.Time { return t0 }
	for _, id := range catalogIDs() {
		if err := m.ApplyCatalog(id, entry(id, 1, b.v1[id]), t0); err != nil {
			return nil, err
		}
	}
	counts := make([]int, s.parts)
	before := liveHeap()
	t := time.Now()
	parts := make([]*matcher.Partition, s.parts)
	for p := range parts {
		parts[p] = matcher.NewPartition()
	}
	for i := range s.n {
		c := component(i, t0)
		p := pfruntime.KeyPartition(c.ComponentID, s.parts)
		counts[p]++
		if err := parts[p].Restore(c.ComponentID, c); err != nil {
			return nil, err
		}
		parts[p].RestoreHas(c.ComponentID, collection(i, b, false))
		if i > 0 && i%1_000_000 == 0 {
			s.progress("matcher: %d components restored", i)
		}
	}
	res.Matcher.RestoreS = time.Since(t).Seconds()
	for p, part := range parts {
		m.Assign(int32(p), part)
	}
	parts = nil
	after := liveHeap()
	mr := &res.Matcher
	mr.HeapBytes = after - before
	mr.HeapPerComponent = float64(mr.HeapBytes) / float64(s.n)
	mr.LargestPartition = slices.Max(counts)
	mr.HeapLargestMember = uint64(mr.HeapPerComponent * float64(mr.LargestPartition))
	s.progress("matcher: %d components on %d partitions, %.0f B each, restored in %.1f s", s.n, s.parts, mr.HeapPerComponent, mr.RestoreS)

	// A catch-up with nothing changed.
	cu := newTimer(s.parts)
	req := &events.CatchupRequest{RequestID: "cu", Scope: events.ScopeAll, Reason: "capsim", RequestedAt: t0}
	cu.start()
	for r := range s.rounds {
		compared, differed := 0, 0
		for p := range s.parts {
			t := time.Now()
			ms, count, err := m.OnCatchupCounted(int32(p), req)
			cu.add(p, r, time.Since(t))
			if err != nil {
				return nil, err
			}
			if len(ms) != 0 {
				return nil, fmt.Errorf("catch-up with nothing changed: partition %d sent %d matches", p, len(ms))
			}
			compared += count.Compared
			differed += count.Differed
		}
		mr.CatchupCompared, mr.CatchupDiffered = compared, differed
	}
	cu.stop()
	mr.Catchup = cu.spread(s.n)
	s.progress("matcher: catch-up with nothing changed, %d compared: %.2f s over the partitions, %.2f s the slowest", mr.CatchupCompared, mr.Catchup.SumS, mr.Catchup.MaxS)

	// The fleet change, one version a round; the last round's matches go on.
	dec, enc := newTimer(s.parts), newTimer(s.parts)
	var last []events.PolicyMatch
	var matchRecs, holdRecs Records
	for r := range s.rounds {
		ch := s.change(r, b)
		deltas := 0
		last = nil
		matchRecs, holdRecs = Records{Topic: topology.PolicyMatches}, Records{Topic: topology.MatcherHoldings}
		for p := range s.parts {
			dec.start()
			t := time.Now()
			ms, err := m.OnChange(int32(p), ch)
			dec.add(p, r, time.Since(t))
			dec.stop()
			if err != nil {
				return nil, err
			}
			enc.start()
			t = time.Now()
			for k := range ms {
				raw, err := s.codec.Encode(&ms[k])
				if err != nil {
					return nil, err
				}
				matchRecs.Records++
				matchRecs.Bytes += int64(len(raw))
				for _, d := range ms[k].Components {
					raw, err := s.codec.Encode(m.Holding(int32(p), d.ComponentID))
					if err != nil {
						return nil, err
					}
					holdRecs.Records++
					holdRecs.Bytes += int64(len(raw))
				}
				deltas += len(ms[k].Components)
			}
			enc.add(p, r, time.Since(t))
			enc.stop()
			last = append(last, ms...)
		}
		if deltas != s.n {
			return nil, fmt.Errorf("fleet change %d: %d component deltas for %d components", r, deltas, s.n)
		}
		mr.Deltas = deltas
	}
	mr.Change, mr.ChangeEncode = dec.spread(s.n), enc.spread(s.n)
	matchRecs, holdRecs = perComponent(matchRecs, s.n), perComponent(holdRecs, s.n)
	res.Update = append(res.Update, matchRecs, holdRecs)
	res.Sizes.Holding = int(math.Round(holdRecs.PerComponent))
	s.progress("matcher: fleet change to %d components: decided in %.2f s over the partitions (%.2f s the slowest), encoded in %.2f s",
		s.n, mr.Change.SumS, mr.Change.MaxS, mr.ChangeEncode.SumS)
	return last, nil
}

func perComponent(r Records, n int) Records {
	r.PerComponent = float64(r.Bytes) / float64(n)
	return r
}

// downstream runs the segmenter, the executor and the consul-writer's
// planning on the last fleet change's matches.
func (s *sim) downstream(ctx context.Context, res *Result, b bodies, matches []events.PolicyMatch) error {
	cat := catalog{}
	for _, id := range catalogIDs() {
		cat[id] = entry(id, 1, b.v1[id])
	}
	lastV := int64(s.rounds + 1)
	cat[fleetPolicy] = entry(fleetPolicy, lastV, b.fleet[s.rounds-1])

	// The executor's state before the change: every registration, and
	// every component's collection at version 1.
	model := executor.NewModel()
	before := liveHeap()
	for i := range s.n {
		if err := model.Register(componentID(i), component(i, t0)); err != nil {
			return err
		}
	}
	regs := liveHeap()
	counts := make([]int, s.parts)
	for i := range s.n {
		model.Commit(collection(i, b, true))
		counts[pfruntime.KeyPartition(deploymentID(i), s.parts)]++
	}
	colls := liveHeap()
	er := &res.Executor
	er.RegistrationsHeap, er.CollectionsHeap = regs-before, colls-regs
	er.RegistrationsPerComponent = float64(er.RegistrationsHeap) / float64(s.n)
	er.CollectionsPerComponent = float64(er.CollectionsHeap) / float64(s.n)
	er.LargestPartition = slices.Max(counts)
	er.HeapLargestMember = er.RegistrationsHeap + uint64(er.CollectionsPerComponent*float64(er.LargestPartition))
	s.progress("executor: %d registrations (%.0f B each), %d collections (%.0f B each)", model.Registrations(), er.RegistrationsPerComponent,
		model.Collections(), er.CollectionsPerComponent)

	fill, decode, decide, encode, keep := newTimer(s.parts), newTimer(s.parts), newTimer(s.parts), newTimer(s.parts), newTimer(s.parts)
	segRecs := Records{Topic: topology.PolicySegments}
	collRecs := Records{Topic: topology.ComponentPolicies}
	applRecs := Records{Topic: topology.ComponentApplied}
	asm := executor.NewAssembler()
	at := t0.Add(time.Hour)
	cr := &res.Consul
	var ops, keys int
	for k := range matches {
		pm := &matches[k]
		sp := int(pfruntime.KeyPartition(pm.DeploymentID, s.parts))
		fill.start()
		t := time.Now()
		if _, err := segmenter.Fill(ctx, cat, pm); err != nil {
			return err
		}
		outs, err := segmenter.Outputs(s.codec, pm, nil, topology.MaxRecordBytes)
		if err != nil {
			return err
		}
		fill.add(sp, 0, time.Since(t))
		fill.stop()
		matches[k] = events.PolicyMatch{} // its pieces carry it on

		decode.start()
		t = time.Now()
		var upd *executor.Update
		for _, o := range outs {
			segRecs.Records++
			segRecs.Bytes += int64(len(o.Raw))
			var seg events.PolicySegment
			if err := s.codec.DecodeInto(ctx, o.Raw, &seg); err != nil {
				return err
			}
			u, _, err := asm.Add(int32(sp), &seg)
			if err != nil {
				return err
			}
			if u != nil {
				upd = u
			}
		}
		decode.add(sp, 0, time.Since(t))
		decode.stop()
		if upd == nil {
			return fmt.Errorf("update of deployment %s was not assembled from its %d pieces", pm.DeploymentID, len(outs))
		}

		decide.start()
		t = time.Now()
		nexts, err := model.Apply(upd, at)
		decide.add(sp, 0, time.Since(t))
		decide.stop()
		asm.Done(upd.UpdateID)
		if err != nil {
			return err
		}

		encode.start()
		t = time.Now()
		for _, next := range nexts {
			raw, err := s.codec.Encode(next)
			if err != nil {
				return err
			}
			collRecs.Records++
			collRecs.Bytes += int64(len(raw))
		}
		encode.add(sp, 0, time.Since(t))
		encode.stop()

		// What the consul-writer writes and reports, before the
		// collections are kept (the folder is planned against the
		// collection it holds).
		for _, next := range nexts {
			if cr.Sampled < s.sample {
				o, kw, err := planConsul(model, next, at)
				if err != nil {
					return err
				}
				cr.Sampled++
				ops += o
				keys += kw
			}
			raw, err := s.codec.Encode(applied(next, at))
			if err != nil {
				return err
			}
			applRecs.Records++
			applRecs.Bytes += int64(len(raw))
		}

		keep.start()
		t = time.Now()
		model.Wrote(nexts)
		keep.add(sp, 0, time.Since(t))
		keep.stop()
	}
	res.Segmenter.Fill = fill.spread(s.n)
	er.Decode, er.Decide, er.Encode, er.Keep = decode.spread(s.n), decide.spread(s.n), encode.spread(s.n), keep.spread(s.n)
	if collRecs.Records != s.n {
		return fmt.Errorf("fleet change: the executor wrote %d collections for %d components", collRecs.Records, s.n)
	}
	segRecs, collRecs, applRecs = perComponent(segRecs, s.n), perComponent(collRecs, s.n), perComponent(applRecs, s.n)
	res.Update = append(res.Update, segRecs, collRecs, applRecs)
	res.Sizes.MatchPerComp = int(math.Round(res.Update[0].PerComponent))
	res.Sizes.SegmentPerCmp = int(math.Round(segRecs.PerComponent))
	res.Sizes.Collection = int(math.Round(collRecs.PerComponent))
	res.Sizes.Applied = int(math.Round(applRecs.PerComponent))

	cr.OpsPerComponent = float64(ops) / float64(cr.Sampled)
	cr.KeysPerComponent = float64(keys) / float64(cr.Sampled)
	cr.KeysHeld = perComp + 2
	cr.FolderBytes = folderBytes(collection(0, b, true))
	per := int(math.Ceil(cr.OpsPerComponent))
	cr.WriteTxnsEach = consulkv.MaxTxnOps / per
	cr.WriteTxns = (s.n + cr.WriteTxnsEach - 1) / cr.WriteTxnsEach
	cr.ReadTxns = (s.n + readChunk - 1) / readChunk
	s.progress("executor: fleet change decided in %.2f s over the partitions (%.2f s the slowest), %d collections, %.0f B each",
		er.Decide.SumS, er.Decide.MaxS, collRecs.Records, collRecs.PerComponent)
	return nil
}

// readChunk is how many folders the consul-writer reads in one get-tree
// transaction when its chunks are full (services/consul-writer README,
// cost budget).
const readChunk = 64

// planConsul is the consul-writer's plan for next against the folder the
// component has (its kept collection as the consul-writer wrote it): the
// transaction operations it takes in a shared transaction and the item
// keys it changes.
func planConsul(model *executor.Model, next *events.ComponentPolicies, at time.Time) (ops, keys int, err error) {
	cur := folder(next, model)
	plan, err := consulwriter.Plan(cur, next, at)
	if err != nil {
		return 0, 0, err
	}
	if len(plan.Steps) != 1 {
		return 0, 0, fmt.Errorf("component %s: the consul-writer plans %d steps, want one transaction", next.ComponentID, len(plan.Steps))
	}
	st := plan.Steps[0]
	ops = len(st.Ops)
	if st.Guard {
		ops++
	}
	if st.Event != nil {
		ops++
	}
	return ops, plan.KeysChanged, nil
}

// folder is the Consul folder of the component as the consul-writer left
// it at the collection before next: its items and its event.
func folder(next *events.ComponentPolicies, model *executor.Model) api.KVPairs {
	scn := next.ServiceComponentName
	var pairs api.KVPairs
	prev := model.Kept(next.ComponentID)
	for _, p := range prev.Policies {
		pairs = append(pairs, &api.KVPair{Key: consulkv.ItemKey(scn, p.PolicyID), Value: []byte(p.Body), ModifyIndex: 10})
	}
	ev := consulkv.Event{Action: consulkv.ActionGathered, Timestamp: t0.Format(consulkv.TimestampFormat), UpdateID: prev.UpdateID,
		PoliciesCount: len(prev.Policies), Generation: prev.Generation}
	return append(pairs, &api.KVPair{Key: consulkv.EventKey(scn), Value: ev.JSON(), ModifyIndex: 10})
}

// folderBytes is the size of a folder's values: its items and its event.
func folderBytes(cp *events.ComponentPolicies) int64 {
	n := int64(0)
	for _, p := range cp.Policies {
		n += int64(len(p.Body))
	}
	ev := consulkv.Event{Action: consulkv.ActionUpdated, Timestamp: t0.Format(consulkv.TimestampFormat), UpdateID: cp.UpdateID,
		PoliciesCount: len(cp.Policies), Generation: cp.Generation}
	return n + int64(len(ev.JSON()))
}

// applied is the component.applied record the consul-writer writes for a
// collection it wrote (consulwriter's output).
func applied(rec *events.ComponentPolicies, at time.Time) *events.ComponentApplied {
	n := 0
	for _, p := range rec.Policies {
		n += len(p.Body)
	}
	removed := rec.RemovedPolicies
	if removed == nil {
		removed = []events.Policy{}
	}
	return &events.ComponentApplied{ComponentID: rec.ComponentID, ServiceComponentName: rec.ServiceComponentName, UpdateID: rec.UpdateID,
		Action: consulkv.ActionUpdated, CatchUp: rec.CatchUp, ConsulIndex: 123456789, PoliciesCount: int32(len(rec.Policies)),
		PoliciesBytes: int64(n), KeysWritten: 1, Generation: rec.Generation, PolicyRefs: events.Refs(rec.Policies),
		UpdatedRefs: events.Refs(rec.UpdatedPolicies), RemovedPolicies: removed, Notify: rec.Notify, AppliedAt: at}
}
