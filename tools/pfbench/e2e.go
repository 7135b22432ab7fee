package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
	"github.com/policyflow/policyflow/topology"
)

// EndToEnd is a policy update travelling the whole pipeline: PDP
// notification to the North API, pdp-ingest (fetching the body from the
// PDP), matcher, segmenter, executor, consul-writer, agent-notifier.
type EndToEnd struct {
	// One component notified by script, one update after another.
	Reps         int       `json:"reps"`
	Failed       int       `json:"failed"`
	ScriptMs     Latencies `json:"script_run_ms"`
	ConsulMs     Latencies `json:"consul_written_ms"`
	TargetP99Ms  float64   `json:"target_p99_ms"`
	ScriptPath   string    `json:"script"`
	FleetSize    int       `json:"fleet_components"`
	FleetNotify  string    `json:"fleet_notify"`
	FleetWritten float64   `json:"fleet_all_written_s"`
	FleetDone    float64   `json:"fleet_all_notified_s"`
	// FleetFirst is the first registration of the fleet (every component
	// gathers its policy, is written and notified); not a target.
	FleetFirst     float64            `json:"fleet_first_gather_s"`
	TargetFleetS   float64            `json:"target_fleet_s"`
	PeakRSSMiB     map[string]float64 `json:"peak_rss_mib"`
	ConsulVerified int                `json:"consul_keys_verified"`
}

// Latencies summarises repeated measurements in milliseconds.
type Latencies struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func summarize(d []time.Duration) Latencies {
	if len(d) == 0 {
		return Latencies{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	q := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1 // nearest rank
		return ms(s[min(max(i, 0), len(s)-1)])
	}
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return Latencies{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: ms(s[len(s)-1]), Mean: ms(sum / time.Duration(len(s)))}
}

var markerRE = regexp.MustCompile(`\\?"marker\\?":\s*\\?"([a-z]+-[0-9]+)\\?"`)

// arrivals records when each marker reached each receiver.
type arrivals struct {
	mu    sync.Mutex
	seen  map[string]map[string]time.Time // marker -> receiver -> first arrival
	dup   int
	wake  chan struct{}
	extra map[string]int
}

func newArrivals() *arrivals {
	return &arrivals{seen: map[string]map[string]time.Time{}, wake: make(chan struct{}, 1), extra: map[string]int{}}
}

func (a *arrivals) add(marker, who string, at time.Time) {
	a.mu.Lock()
	m := a.seen[marker]
	if m == nil {
		m = map[string]time.Time{}
		a.seen[marker] = m
	}
	if _, ok := m[who]; ok {
		a.dup++
	} else {
		m[who] = at
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// wait returns the latest arrival once n receivers have seen marker.
func (a *arrivals) wait(ctx context.Context, marker string, n int, timeout time.Duration) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		m := a.seen[marker]
		if len(m) >= n {
			var last time.Time
			for _, t := range m {
				if t.After(last) {
					last = t
				}
			}
			a.mu.Unlock()
			return last, nil
		}
		got := len(m)
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("%d of %d notified of %s within %s", got, n, marker, timeout)
		case <-a.wake:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// webhook receives the fleet's notifications: POST /hook/<component>.
func (a *arrivals) webhook(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	at := time.Now()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m := markerRE.FindSubmatch(b)
	if m == nil {
		http.Error(w, "no marker in the notification", http.StatusBadRequest)
		return
	}
	a.add(string(m[1]), strings.TrimPrefix(r.URL.Path, "/hook/"), at)
	w.WriteHeader(http.StatusNoContent)
}

// fifoReader records the lines the component script writes to a FIFO.
func (a *arrivals) readFIFO(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0) // O_RDWR: no EOF when a writer closes
	if err != nil {
		return err
	}
	go func() {
		defer f.Close()
		br := bufio.NewReaderSize(f, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			at := time.Now()
			if m := markerRE.FindSubmatch(line); m != nil {
				a.add(string(m[1]), "script", at)
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// e2eStages are every stage of the policy flow, in pipeline order.
var e2eStages = []string{topology.StagePDPIngest, topology.StageMatcher, topology.StageSegmenter,
	topology.StageExecutor, topology.StageConsulWriter, topology.StageAgentNotifier}

func (b *bench) endToEnd(ctx context.Context, reps, fleet int) (EndToEnd, error) {
	res := EndToEnd{Reps: reps, FleetSize: fleet, FleetNotify: events.NotifyWebhook, TargetP99Ms: 25, TargetFleetS: 1,
		PeakRSSMiB: map[string]float64{}}
	arr := newArrivals()

	dir := filepath.Join(b.logDir, "e2e")
	script, err := e2eScript(dir, arr)
	res.ScriptPath = script
	if err != nil {
		return res, err
	}

	// PDP simulator, webhook receiver and North API, in this process.
	sim, base, stopSim, err := serveSimAndHooks(http.HandlerFunc(arr.webhook))
	if err != nil {
		return res, err
	}
	defer stopSim()
	api, err := b.startNorthAPI(ctx)
	if err != nil {
		return res, err
	}
	defer api.stop()

	if err := b.registerE2E(ctx, script, base, fleet); err != nil {
		return res, err
	}
	procs, err := b.startE2EStages(ctx, base, dir)
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	if err != nil {
		return res, err
	}
	run := &e2eRun{b: b, arr: arr, sim: sim, procs: procs, notifyURL: api.url + "/v1/pdp/notifications", client: api.client}
	if err := api.ready(ctx); err != nil {
		return res, err
	}

	// First gather of the fleet and of the script component.
	start := time.Now()
	if err := run.publish(ctx, "E2E.Config_fleet", "1", "fleet-00001"); err != nil {
		return res, err
	}
	if err := run.publish(ctx, "E2E.Config_one", "1", "one-00001"); err != nil {
		return res, err
	}
	if _, err := arr.wait(ctx, "one-00001", 1, b.timeout); err != nil {
		return res, errors.Join(fmt.Errorf("first notification of the script component: %w", err), run.alive())
	}
	last, err := arr.wait(ctx, "fleet-00001", fleet, b.timeout)
	if err != nil {
		return res, errors.Join(fmt.Errorf("first gather of the fleet: %w", err), run.alive())
	}
	res.FleetFirst = last.Sub(start).Seconds()

	// One component, one update after another.
	ran, written, failed, err := run.oneComponent(ctx, reps)
	res.Failed += failed
	if err != nil {
		return res, err
	}
	res.ScriptMs, res.ConsulMs = summarize(ran), summarize(written)

	// The fleet: one update reaching 10,000 components.
	if err := run.fleetUpdate(ctx, fleet, &res); err != nil {
		return res, err
	}

	// What a user would check: the values in Consul.
	if err := b.verifyFleet(fleet, &res); err != nil {
		return res, err
	}
	arr.mu.Lock()
	dups := arr.dup
	arr.mu.Unlock()
	if dups > 0 {
		return res, fmt.Errorf("%d notifications were received twice for the same update", dups)
	}
	for _, p := range procs {
		if rss, err := p.peakRSS(); err == nil {
			res.PeakRSSMiB[p.name] = float64(rss) / (1 << 20)
		}
	}
	return res, nil
}

// e2eScript makes, under dir, the component's script: it writes its
// argv[2] (the JSON) to a FIFO that arr reads. It returns the script's
// path ("" when the FIFO could not be made).
func e2eScript(dir string, arr *arrivals) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fifo := filepath.Join(dir, "notifications.fifo")
	_ = os.Remove(fifo)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return "", fmt.Errorf("make FIFO %s: %w", fifo, err)
	}
	if err := arr.readFIFO(fifo); err != nil {
		return "", err
	}
	script := filepath.Join(dir, "reconfigure.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$2\" > '"+fifo+"'\n"), 0o755); err != nil {
		return script, err
	}
	return script, nil
}

// registerE2E registers the components: one notified by script, the
// fleet by webhook (to base).
func (b *bench) registerE2E(ctx context.Context, script, base string, fleet int) error {
	now := time.Now().UTC()
	var recs []*kgo.Record
	add := func(c *events.Component) error {
		v, err := b.codec.Encode(c)
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: b.kafka.Topic(topology.DeployComponents), Key: []byte(c.ComponentID), Value: v})
		return nil
	}
	one := &events.Component{ComponentID: "e2e-one", DeploymentID: "e2e-one", ServiceComponentName: "e2e-one", Tenant: "bench",
		PolicyIDs: []string{"E2E.Config_one"}, Config: "{}", Generation: 1, UpdatedAt: now,
		Notify: events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: script, TimeoutMs: 10000}}
	if err := add(one); err != nil {
		return err
	}
	for i := 0; i < fleet; i++ {
		id := fmt.Sprintf("f-%05d", i)
		if err := add(&events.Component{ComponentID: id, DeploymentID: fmt.Sprintf("fd-%03d", i/100), ServiceComponentName: id,
			Tenant: "bench", PolicyIDs: []string{"E2E.Config_fleet"}, Config: "{}", Generation: 1, UpdatedAt: now,
			Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: base + "/hook/" + id, TimeoutMs: 10000}}); err != nil {
			return err
		}
	}
	if err := produceAll(ctx, b.prod, recs); err != nil {
		return fmt.Errorf("register components: %w", err)
	}
	return nil
}

// startE2EStages starts every stage, each its own process. It returns
// those it started, also with an error, for the caller to stop.
func (b *bench) startE2EStages(ctx context.Context, base, dir string) ([]*stageProc, error) {
	var procs []*stageProc
	for _, name := range e2eStages {
		var extra []string
		switch name {
		case topology.StagePDPIngest:
			extra = []string{"--pdp-url", base}
		case topology.StageAgentNotifier:
			// The script and the webhook receiver are this process's.
			extra = []string{"--script-dir", dir, "--webhook-allow", "127.0.0.1"}
		}
		p, err := startStage(ctx, b.binDir, b.logDir, name, b.kafka, b.consulAddr, extra...)
		if err != nil {
			return procs, err
		}
		p.name = name
		procs = append(procs, p)
	}
	return procs, nil
}

// e2eRun is the running end-to-end stack: what publishes a policy, and
// what notices its arrivals and its stages' exits.
type e2eRun struct {
	b         *bench
	arr       *arrivals
	sim       *pdp.Server
	procs     []*stageProc
	notifyURL string
	client    *http.Client
}

// alive returns the exit of a stage process, if one exited.
func (r *e2eRun) alive() error {
	for _, p := range r.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// publish puts a version of a policy on the PDP simulator, its config
// carrying marker, and notifies the North API of it.
func (r *e2eRun) publish(ctx context.Context, id, version, marker string) error {
	lp, err := r.sim.Put(policy.Body{
		policy.FieldPolicyName: id + "." + version + ".xml", policy.FieldPolicyVersion: version,
		policy.FieldConfig:             `{"marker":"` + marker + `","pad":"` + strings.Repeat("x", max(r.b.bodyBytes-400, 0)) + `"}`,
		policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "bench"},
	})
	if err != nil {
		return err
	}
	return pdp.Notify(ctx, r.client, r.notifyURL, policy.Notification{LoadedPolicies: []policy.LoadedPolicy{lp}})
}

// oneComponent updates the script component reps times, one update after
// another, timing each until its script ran and until Consul held it.
// failed counts the updates whose script did not run within 30 s.
func (r *e2eRun) oneComponent(ctx context.Context, reps int) (ran, written []time.Duration, failed int, err error) {
	kv := r.b.consul.KV()
	key := consulkv.ItemKey("e2e-one", "E2E.Config_one")
	for rep := 2; rep < reps+2; rep++ {
		marker := fmt.Sprintf("one-%05d", rep)
		pair, meta, err := kv.Get(key, nil)
		if err != nil || pair == nil {
			return ran, written, failed, fmt.Errorf("read %s: %v (pair %v)", key, err, pair)
		}
		wrote := make(chan time.Time, 1)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		go func(index uint64) {
			for wctx.Err() == nil {
				p, m, err := kv.Get(key, (&consulapi.QueryOptions{WaitIndex: index, WaitTime: 10 * time.Second}).WithContext(wctx))
				if err != nil {
					return
				}
				if p != nil && bytes.Contains(p.Value, []byte(marker)) {
					wrote <- time.Now()
					return
				}
				index = m.LastIndex
			}
		}(meta.LastIndex)
		t0 := time.Now()
		if err := r.publish(ctx, "E2E.Config_one", fmt.Sprint(rep), marker); err != nil {
			cancel()
			return ran, written, failed, err
		}
		at, err := r.arr.wait(ctx, marker, 1, 30*time.Second)
		if err != nil {
			failed++
			cancel()
			if aerr := r.alive(); aerr != nil {
				return ran, written, failed, aerr
			}
			continue
		}
		ran = append(ran, at.Sub(t0))
		select {
		case w := <-wrote:
			written = append(written, w.Sub(t0))
		case <-wctx.Done():
		}
		cancel()
	}
	return ran, written, failed, nil
}

// fleetUpdate publishes one update for the whole fleet and times it until
// every component was notified (res.FleetDone) and until component.applied
// showed every one written (res.FleetWritten).
func (r *e2eRun) fleetUpdate(ctx context.Context, fleet int, res *EndToEnd) error {
	b := r.b
	appliedSeen := make(chan time.Time, 1)
	var count atomic.Int64
	f, err := runtime.Follow(b.kafka, b.log, map[string]runtime.ApplyFunc{
		topology.ComponentApplied: func(ctx context.Context, rec *kgo.Record) error {
			if rec.Value == nil {
				return nil
			}
			var a events.ComponentApplied
			if err := b.codec.DecodeInto(ctx, rec.Value, &a); err != nil {
				return fmt.Errorf("component.applied of %s: %w", rec.Key, err)
			}
			if !slices.ContainsFunc(a.UpdatedRefs, func(p events.PolicyRef) bool {
				return p.PolicyID == "E2E.Config_fleet" && p.PolicyVersion == "2"
			}) {
				return nil
			}
			if count.Add(1) == int64(fleet) {
				appliedSeen <- time.Now()
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.WaitCaughtUp(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	if err := r.publish(ctx, "E2E.Config_fleet", "2", "fleet-00002"); err != nil {
		return err
	}
	last, err := r.arr.wait(ctx, "fleet-00002", fleet, b.timeout)
	if err != nil {
		return errors.Join(fmt.Errorf("fleet update: %w", err), r.alive())
	}
	res.FleetDone = last.Sub(t0).Seconds()
	select {
	case w := <-appliedSeen:
		res.FleetWritten = w.Sub(t0).Seconds()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("component.applied shows %d of %d fleet components written", count.Load(), fleet)
	}
	return nil
}

// verifyFleet checks, as a user would, that Consul holds version 2 for
// about fifty of the fleet's components, counting them in
// res.ConsulVerified.
func (b *bench) verifyFleet(fleet int, res *EndToEnd) error {
	kv := b.consul.KV()
	for i := 0; i < fleet; i += max(fleet/50, 1) {
		id := fmt.Sprintf("f-%05d", i)
		k := consulkv.ItemKey(id, "E2E.Config_fleet")
		p, _, err := kv.Get(k, nil)
		if err != nil || p == nil || !bytes.Contains(p.Value, []byte("fleet-00002")) {
			return fmt.Errorf("Consul %s does not hold version 2 after the fleet was notified (err %v)", k, err)
		}
		res.ConsulVerified++
	}
	return nil
}

// northAPI is the North API run in the bench's own process (its memory is
// not a stage's), with an operator token and no rate limit: the runs time
// the pipeline, and a client's default rate would be the bottleneck.
type northAPI struct {
	url    string       // http://host:port of the API
	ops    string       // http://host:port of its /readyz
	client *http.Client // carries the operator token
	stop   context.CancelFunc
}

func (b *bench) startNorthAPI(ctx context.Context) (*northAPI, error) {
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	opsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	token, err := auth.NewToken()
	if err != nil {
		return nil, err
	}
	tokens, err := auth.File{Tokens: []auth.Entry{{Name: "pfbench", Role: auth.RoleOperator, SHA256: auth.Hash(token)}}}.Set()
	if err != nil {
		return nil, err
	}
	actx, stop := context.WithCancel(ctx)
	env := runtime.NewEnv(b.kafka, b.log)
	go func() {
		_ = northapi.ServeListener(actx, env, apiLn, northapi.Options{Consul: consulkv.Config{Addr: b.consulAddr}, Tokens: tokens, RateLimit: northapi.RateLimit{Off: true}})
	}()
	go func() { _ = runtime.ServeListener(actx, opsLn, env, nil) }()
	return &northAPI{url: "http://" + apiLn.Addr().String(), ops: "http://" + opsLn.Addr().String(), client: auth.Client(token), stop: stop}, nil
}

// ready waits for the North API's /readyz.
func (a *northAPI) ready(ctx context.Context) error {
	if err := devstack.WaitHTTP(ctx, a.ops+"/readyz", time.Minute); err != nil {
		return fmt.Errorf("North API not ready: %w", err)
	}
	return nil
}

// serveSimAndHooks serves a PDP simulator and, under /hook/, the
// components' webhooks, on a port of its own; base is its URL.
func serveSimAndHooks(hooks http.Handler) (sim *pdp.Server, base string, stop func(), err error) {
	sim = pdp.NewServer()
	mux := http.NewServeMux()
	mux.Handle("/hook/", hooks)
	mux.Handle("/", sim.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hsrv.Serve(ln) }()
	return sim, "http://" + ln.Addr().String(), func() { hsrv.Close() }, nil
}
