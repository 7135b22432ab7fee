package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	wire "github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
	"github.com/policyflow/policyflow/topology"
)

// The catch-up run's workload: component i wants three policies by id
// (of catchupByID) and two by filter (of catchupFilters families), so a
// component holds five policies, and a policy is held by many components.
const (
	catchupByID     = 40
	catchupFilters  = 10
	catchupPolicies = 5
)

// CatchupRun is a catch-up of every component at scale: the whole
// pipeline (every stage its own process) loaded with the components and
// their policies, then a catch-up with nothing changed and one with a
// share of the components' Consul folders edited by hand.
type CatchupRun struct {
	Components       int `json:"components"`
	PoliciesEach     int `json:"policies_per_component"`
	DistinctPolicies int `json:"distinct_policies"`
	BodyBytes        int `json:"policy_body_bytes"`
	// LoadSeconds is the first gather: every component written to Consul
	// and notified (by webhook), from the PDP's notification on.
	LoadSeconds float64 `json:"load_s"`
	// Unchanged is a catch-up when every component holds what it should.
	Unchanged CatchupPass `json:"nothing_changed"`
	// Drifted is a catch-up after one item of DriftedComponents
	// components was edited in Consul by hand.
	DriftedComponents int         `json:"drifted_components"`
	Drifted           CatchupPass `json:"drifted"`
	// Goals of the issue, for the table.
	GoalUnchangedS float64 `json:"goal_nothing_changed_s"`
	GoalRSSMiB     float64 `json:"goal_matcher_executor_rss_mib"`
	// MemoryLimit is every stage's --memory-limit.
	MemoryLimit string             `json:"memory_limit"`
	PeakRSSMiB  map[string]float64 `json:"peak_rss_mib"`
}

// CatchupPass is one catch-up: how long until GET /v1/catchup/{id} said
// done, what the stages reported, and what a user would check after the
// pipeline went quiet: Consul writes (the KV index; the notifier's claims
// are Consul writes too) and notifications received.
type CatchupPass struct {
	Seconds       float64            `json:"seconds"`
	Status        wire.CatchupStatus `json:"status"`
	ConsulChanged bool               `json:"consul_kv_index_moved"`
	Notifications int                `json:"notifications"`
	// Restored is how many of the edited items hold their policy again.
	Restored int `json:"restored,omitempty"`
}

// catchupComponent is component i of the catch-up workload, notified by
// webhook at base.
func catchupComponent(i int, base string, now time.Time) *events.Component {
	id := fmt.Sprintf("cu-%07d", i)
	c := &events.Component{ComponentID: id, DeploymentID: fmt.Sprintf("cud-%06d", i/10), ServiceComponentName: id,
		Tenant: "bench", Config: "{}", Generation: 1, UpdatedAt: now,
		Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: base + "/hook/" + id, TimeoutMs: 10000}}
	for _, k := range []int{i % catchupByID, (i + 13) % catchupByID, (i + 27) % catchupByID} {
		c.PolicyIDs = append(c.PolicyIDs, fmt.Sprintf("CU.Config_p%02d", k))
	}
	for _, k := range []int{i % catchupFilters, (i + 5) % catchupFilters} {
		c.PolicyFilters = append(c.PolicyFilters, events.PolicyFilter{FilterID: fmt.Sprintf("f%d", k),
			PolicyName: fmt.Sprintf(`CU\.Filt_f%d\..*`, k), OnapName: "DCAE"})
	}
	return c
}

// counter counts webhook notifications per component.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	c.mu.Lock()
	c.n[strings.TrimPrefix(r.URL.Path, "/hook/")]++
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// total is the notifications received and the components notified.
func (c *counter) total() (calls, components int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.n {
		calls += n
	}
	return calls, len(c.n)
}

func (b *bench) catchUp(ctx context.Context, n int, memoryLimit string, progress func(string, ...any)) (CatchupRun, error) {
	res := CatchupRun{Components: n, MemoryLimit: memoryLimit, PoliciesEach: catchupPolicies, DistinctPolicies: catchupByID + catchupFilters,
		BodyBytes: b.bodyBytes, GoalUnchangedS: 5, GoalRSSMiB: 256, PeakRSSMiB: map[string]float64{}}
	hooks := &counter{n: map[string]int{}}
	sim, base, stopSim, err := serveSimAndHooks(hooks)
	if err != nil {
		return res, err
	}
	defer stopSim()
	api, err := b.startNorthAPI(ctx)
	if err != nil {
		return res, err
	}
	defer api.stop()

	now := time.Now().UTC()
	recs := make([]*kgo.Record, 0, n)
	for i := 0; i < n; i++ {
		c := catchupComponent(i, base, now)
		v, err := b.codec.Encode(c)
		if err != nil {
			return res, err
		}
		recs = append(recs, &kgo.Record{Topic: b.kafka.Topic(topology.DeployComponents), Key: []byte(c.ComponentID), Value: v})
	}
	if err := produceAll(ctx, b.prod, recs); err != nil {
		return res, fmt.Errorf("register components: %w", err)
	}
	recs = nil

	var procs []*stageProc
	for _, name := range e2eStages {
		// --pprof: each stage's heap is saved at the end.
		// --log-level info: the stages log what each catch-up compared
		// and how long it took.
		extra := []string{"--pprof", "--log-level", "info", "--memory-limit", memoryLimit}
		switch name {
		case topology.StagePDPIngest:
			extra = append(extra, "--pdp-url", base, "--catchup-on-start=false")
		case topology.StageAgentNotifier:
			extra = append(extra, "--webhook-allow", "127.0.0.1")
		}
		p, err := startStage(ctx, b.binDir, b.logDir, name, b.kafka, b.consulAddr, extra...)
		if err != nil {
			return res, err
		}
		p.name = name
		procs = append(procs, p)
	}
	defer func() { stopAll(procs) }()
	// The matcher's and the executor's heap as their memory peaks: the
	// profile at the end shows what they keep, this one what they held
	// at their worst.
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		b.watchPeaks(wctx, procs, topology.StageMatcher, topology.StageExecutor)
	}()
	defer func() { stopWatch(); <-watched }()
	alive := func() error {
		for _, p := range procs {
			if err := p.exited(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range procs {
		if err := waitReady(ctx, p, b.timeout); err != nil {
			return res, err
		}
	}
	if err := api.ready(ctx); err != nil {
		return res, err
	}

	// The first gather: every policy loaded at once.
	progress("catch-up: %d components x %d policies, first gather", n, catchupPolicies)
	var loaded []policy.LoadedPolicy
	put := func(id string) error {
		lp, err := sim.Put(policy.Body{
			policy.FieldPolicyName: id + ".1.xml", policy.FieldPolicyVersion: "1",
			policy.FieldConfig:             `{"pad":"` + strings.Repeat("x", max(b.bodyBytes-300, 0)) + `"}`,
			policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "bench"},
		})
		loaded = append(loaded, lp)
		return err
	}
	for k := 0; k < catchupByID; k++ {
		if err := put(fmt.Sprintf("CU.Config_p%02d", k)); err != nil {
			return res, err
		}
	}
	for k := 0; k < catchupFilters; k++ {
		if err := put(fmt.Sprintf("CU.Filt_f%d", k)); err != nil {
			return res, err
		}
	}
	t0 := time.Now()
	if err := pdp.Notify(ctx, api.client, api.url+"/v1/pdp/notifications", policy.Notification{LoadedPolicies: loaded}); err != nil {
		return res, err
	}
	deadline := time.Now().Add(4 * b.timeout)
	for {
		if _, comps := hooks.total(); comps == n {
			break
		}
		if err := alive(); err != nil {
			return res, err
		}
		if time.Now().After(deadline) {
			_, comps := hooks.total()
			return res, fmt.Errorf("first gather: %d of %d components notified within %s", comps, n, 4*b.timeout)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return res, err
		}
	}
	if err := b.quiet(ctx, b.timeout); err != nil {
		return res, errors.Join(err, alive())
	}
	res.LoadSeconds = time.Since(t0).Seconds()
	progress("catch-up: first gather took %.1f s; catch-up with nothing changed", res.LoadSeconds)

	kv := b.consul.KV()
	pass := func(p *CatchupPass) error {
		idx0, err := kvIndex(ctx, kv)
		if err != nil {
			return err
		}
		calls0, _ := hooks.total()
		t0 := time.Now()
		st, err := runCatchup(ctx, api, b.timeout)
		if err != nil {
			return errors.Join(err, alive())
		}
		p.Seconds, p.Status = time.Since(t0).Seconds(), st
		if err := b.quiet(ctx, b.timeout); err != nil {
			return errors.Join(err, alive())
		}
		idx1, err := kvIndex(ctx, kv)
		if err != nil {
			return err
		}
		calls1, _ := hooks.total()
		p.ConsulChanged, p.Notifications = idx1 != idx0, calls1-calls0
		return nil
	}
	if err := pass(&res.Unchanged); err != nil {
		return res, fmt.Errorf("catch-up with nothing changed: %w", err)
	}

	// Drift: one item of 1 % of the components edited by hand.
	var edited []string
	for i := 0; i < n; i += 100 {
		c := catchupComponent(i, base, now)
		edited = append(edited, consulkv.ItemKey(c.ServiceComponentName, c.PolicyIDs[0]))
	}
	res.DriftedComponents = len(edited)
	progress("catch-up: %d items edited by hand in Consul; catch-up", len(edited))
	for start := 0; start < len(edited); start += 64 {
		var ops consulapi.KVTxnOps
		for _, k := range edited[start:min(start+64, len(edited))] {
			ops = append(ops, &consulapi.KVTxnOp{Verb: consulapi.KVSet, Key: k, Value: []byte(`{"edited":"by hand"}`)})
		}
		ok, resp, _, err := kv.Txn(ops, (&consulapi.QueryOptions{}).WithContext(ctx))
		if err != nil || !ok {
			return res, fmt.Errorf("edit items by hand: %v %v", err, resp)
		}
	}
	if err := pass(&res.Drifted); err != nil {
		return res, fmt.Errorf("catch-up after drift: %w", err)
	}
	for _, k := range edited {
		p, _, err := kv.Get(k, (&consulapi.QueryOptions{}).WithContext(ctx))
		if err == nil && p != nil && !bytes.Contains(p.Value, []byte("by hand")) {
			res.Drifted.Restored++
		}
	}
	stopWatch()
	<-watched
	for _, p := range procs {
		if rss, err := p.peakRSS(); err == nil {
			res.PeakRSSMiB[p.name] = float64(rss) / (1 << 20)
		}
		// What each stage holds after the run, for `go tool pprof`.
		path := filepath.Join(b.logDir, p.name+".catchup.heap.pprof")
		if err := saveProfile(ctx, "http://"+p.http+"/debug/pprof/heap", path); err != nil {
			b.log.Warn().Err(err).Str("stage", p.name).Msg("heap profile not saved")
		}
	}
	return res, nil
}

// waitReady waits for a stage's /readyz.
func waitReady(ctx context.Context, p *stageProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := scrapeClient.Get("http://" + p.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if err := p.exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s; see %s", p.name, timeout, p.logFile)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// kvIndex is Consul's KV index: it moves with every write to the KV
// store, the notifier's claims included. A key that does not exist
// answers with the index of the whole table.
func kvIndex(ctx context.Context, kv *consulapi.KV) (uint64, error) {
	_, meta, err := kv.Get("pfbench/index-probe", (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("read Consul's KV index: %w", err)
	}
	return meta.LastIndex, nil
}

// runCatchup asks the North API for a catch-up of every deployment and
// waits until it says done.
func runCatchup(ctx context.Context, api *northAPI, timeout time.Duration) (wire.CatchupStatus, error) {
	var st wire.CatchupStatus
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.url+"/v1/catchup", strings.NewReader(`{"reason":"pfbench"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := api.client.Do(req)
	if err != nil {
		return st, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var acc wire.CatchupAccepted
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &acc) != nil {
		return st, fmt.Errorf("POST /v1/catchup: %d %s", resp.StatusCode, body)
	}
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.url+"/v1/catchup/"+acc.RequestID, nil)
		resp, err := api.client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &st) == nil && st.Done {
				return st, nil
			}
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("catch-up %s not done within %s: %+v", acc.RequestID, timeout, st)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return st, err
		}
	}
}

// quiet waits until every stage of the policy flow has committed all of
// its inputs and nothing moved for two looks a second apart. A
// transactional partition ends in a commit marker no consumer commits
// past, so a group one record short of the end counts as done; the second
// look tells a marker from a record not handled yet.
func (b *bench) quiet(ctx context.Context, timeout time.Duration) error {
	inputs := map[string][]string{
		topology.StagePDPIngest:     {topology.PDPNotifications},
		topology.StageMatcher:       {topology.PolicyChanges, topology.DeployComponents, topology.CatchupRequests},
		topology.StageSegmenter:     {topology.PolicyMatches},
		topology.StageExecutor:      {topology.PolicySegments},
		topology.StageConsulWriter:  {topology.ComponentPolicies, topology.CatchupRequests},
		topology.StageAgentNotifier: {topology.ComponentApplied, topology.CatchupRequests},
	}
	look := func() (string, error) {
		var state []string
		for _, stage := range e2eStages {
			group := b.kafka.Prefix + runtime.Stage{Name: stage}.GroupID()
			topics := make([]string, 0, len(inputs[stage]))
			for _, t := range inputs[stage] {
				topics = append(topics, b.kafka.Topic(t))
			}
			ends, err := b.adm.ListEndOffsets(ctx, topics...)
			if err != nil {
				return "", err
			}
			committed, err := b.adm.FetchOffsets(ctx, group)
			if err != nil {
				return "", err
			}
			var behind error
			ends.Each(func(e kadm.ListedOffset) {
				at := int64(0)
				if o, ok := committed.Lookup(e.Topic, e.Partition); ok {
					at = o.At
				}
				if e.Offset-at > 1 && behind == nil {
					behind = fmt.Errorf("%s is at %d of %d in %s[%d]", stage, at, e.Offset, e.Topic, e.Partition)
				}
				state = append(state, fmt.Sprintf("%s/%s/%d:%d/%d", stage, e.Topic, e.Partition, at, e.Offset))
			})
			if behind != nil {
				return "", behind
			}
		}
		slices.Sort(state)
		return strings.Join(state, " "), nil
	}
	deadline := time.Now().Add(timeout)
	var last string
	var lastErr error
	for time.Now().Before(deadline) {
		s, err := look()
		if err == nil && s == last {
			return nil
		}
		last, lastErr = s, err
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	return fmt.Errorf("the pipeline did not go quiet within %s: %v", timeout, lastErr)
}

func (c CatchupRun) table(w io.Writer) {
	fmt.Fprintf(w, "catch-up (%d components x %d policies of %d B, %d distinct; every stage its own process; first gather %.1f s)\n",
		c.Components, c.PoliciesEach, c.BodyBytes, c.DistinctPolicies, c.LoadSeconds)
	line := func(name string, p CatchupPass, goal string) {
		fmt.Fprintf(w, "  %s: done in %.2f s%s; matcher compared %d differed %d; consul-writer compared %d folders, wrote back %d (%d keys); Consul KV index moved: %v; notifications %d\n",
			name, p.Seconds, goal, p.Status.Matcher.Compared, p.Status.Matcher.Differed, p.Status.ConsulWriter.Compared,
			p.Status.ConsulWriter.Differed, p.Status.ConsulWriter.KeysWritten, p.ConsulChanged, p.Notifications)
	}
	line("nothing changed", c.Unchanged, fmt.Sprintf("%s (goal <= %.0f s, 0 writes, 0 notifications)",
		miss(c.Unchanged.Seconds <= c.GoalUnchangedS && !c.Unchanged.ConsulChanged && c.Unchanged.Notifications == 0), c.GoalUnchangedS))
	line(fmt.Sprintf("%d items edited by hand", c.DriftedComponents), c.Drifted, fmt.Sprintf("; %d of %d restored%s",
		c.Drifted.Restored, c.DriftedComponents, miss(c.Drifted.Restored == c.DriftedComponents)))
	var parts []string
	for _, name := range e2eStages {
		if v, ok := c.PeakRSSMiB[name]; ok {
			goal := ""
			if name == topology.StageMatcher || name == topology.StageExecutor {
				goal = miss(v <= c.GoalRSSMiB)
			}
			parts = append(parts, fmt.Sprintf("%s %.0f%s", name, v, goal))
		}
	}
	fmt.Fprintf(w, "  peak RSS MiB: %s (goal: matcher and executor <= %.0f; every stage with --memory-limit %s)\n", strings.Join(parts, ", "), c.GoalRSSMiB, c.MemoryLimit)
}

// watchPeaks saves a heap profile of each named stage whenever its
// resident memory has grown 16 MiB past the most it had before, as
// <stage>.catchup.peak.heap.pprof (the last one written is from nearest
// its peak), until ctx ends.
func (b *bench) watchPeaks(ctx context.Context, procs []*stageProc, names ...string) {
	top := map[*stageProc]int64{}
	for {
		for _, p := range procs {
			if !slices.Contains(names, p.name) {
				continue
			}
			rss, err := p.rss()
			if err != nil || rss < top[p]+16<<20 {
				continue
			}
			top[p] = rss
			path := filepath.Join(b.logDir, p.name+".catchup.peak.heap.pprof")
			if err := saveProfile(ctx, "http://"+p.http+"/debug/pprof/heap", path); err != nil && ctx.Err() == nil {
				b.log.Warn().Err(err).Str("stage", p.name).Msg("peak heap profile not saved")
			}
		}
		if sleep(ctx, 500*time.Millisecond) != nil {
			return
		}
	}
}
