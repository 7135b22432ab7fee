// Command fleetsim measures node management with a simulated fleet, in one
// process: an in-process kfake broker, the nmp-hub stage and the North API.
// It registers --nodes nodes on agent.nodes, publishes an agent package and
// enables an NMP, and reports:
//
//   - how long the hub takes to write every node's directive after the NMP
//     is enabled (the goal: 100,000 nodes within 5 s);
//   - the rollout of a --duration window on a compressed clock: the start
//     times the hub gave, as a histogram of download starts per second,
//     its flatness, and the peak of downloads running at once when each
//     takes --download-time;
//   - the cost of --idle-agents agents parked on the directive long poll:
//     memory and goroutines per agent, and CPU over --idle-time.
//
// It prints a table and, with --json, writes the report as JSON.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/nmp-hub/nmphub"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	pfruntime "github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

type options struct {
	nodes        int
	duration     int64
	downloadTime time.Duration
	idleAgents   int
	idleTime     time.Duration
	partitions   int
	jsonOut      string
	timeout      time.Duration
}

// Report is what fleetsim measured.
type Report struct {
	Nodes int `json:"nodes"`
	// DirectivesSeconds is from the NMP enabled to the last node's
	// upgrade directive read back from agent.directives.
	DirectivesSeconds float64 `json:"directives_seconds"`
	DirectivesGoal    float64 `json:"directives_goal_seconds"`
	RegisterSeconds   float64 `json:"register_seconds"`
	// Rollout on the compressed clock.
	WindowSeconds      int64   `json:"window_seconds"`
	StartsPerSecond    []int   `json:"starts_per_second"`
	StartsMean         float64 `json:"starts_mean_per_second"`
	StartsMin          int     `json:"starts_min_per_second"`
	StartsMax          int     `json:"starts_max_per_second"`
	StartsCV           float64 `json:"starts_coefficient_of_variation"`
	UniformCV          float64 `json:"uniform_expected_cv"`
	DownloadSeconds    float64 `json:"download_seconds"`
	PeakConcurrent     int     `json:"peak_concurrent_downloads"`
	ExpectedConcurrent float64 `json:"expected_concurrent_downloads"`
	// Idle long polls.
	IdleAgents             int     `json:"idle_agents"`
	IdleBytesPerAgent      float64 `json:"idle_heap_bytes_per_agent"`
	IdleGoroutinesPerAgent float64 `json:"idle_goroutines_per_agent"`
	IdleCPUPerAgentMicros  float64 `json:"idle_cpu_microseconds_per_agent_per_minute"`
	IdleSeconds            float64 `json:"idle_seconds"`
}

// newFlags is fleetsim's command line, filled into o on Parse.
func newFlags(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	fs.IntVar(&o.nodes, "nodes", 100_000, "simulated nodes")
	fs.Int64Var(&o.duration, "duration", 600, "the NMP's start window in seconds (compressed: no one waits for it)")
	fs.DurationVar(&o.downloadTime, "download-time", 5*time.Second, "how long one simulated download takes, for the peak of concurrent downloads")
	fs.IntVar(&o.idleAgents, "idle-agents", 2000, "agents parked on the directive long poll")
	fs.DurationVar(&o.idleTime, "idle-time", 5*time.Second, "how long the idle agents are measured")
	fs.IntVar(&o.partitions, "partitions", 6, "partitions of every topic")
	fs.StringVar(&o.jsonOut, "json", "", "also write the report as JSON to this file")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	return fs
}

// parse reads the command line and checks it: what main runs with (a test
// sets each flag and checks it reaches the options).
func parse(args []string) (options, error) {
	var o options
	fs := newFlags(&o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("fleetsim takes no arguments, got %q; every setting is a flag (see -h)", fs.Args())
	}
	if o.nodes < 1 || o.duration < 1 || o.idleAgents < 0 || o.partitions < 1 {
		return o, errors.New("--nodes, --duration and --partitions must be at least 1, --idle-agents at least 0")
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "fleetsim: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleetsim: %v\n", err)
		os.Exit(1)
	}
	print(os.Stdout, rep)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "fleetsim: %v\n", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, o options) (*Report, error) {
	rep := &Report{Nodes: o.nodes, DirectivesGoal: 5, WindowSeconds: o.duration, DownloadSeconds: o.downloadTime.Seconds(), IdleAgents: o.idleAgents}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(o.partitions))
	if err != nil {
		return nil, fmt.Errorf("start an in-process Kafka: %w", err)
	}
	defer kc.Close()
	k := pfruntime.Kafka{Brokers: kc.ListenAddrs(), Prefix: "sim.", FetchMaxWait: 50 * time.Millisecond, MetadataMinAge: 100 * time.Millisecond}
	env := pfruntime.NewEnv(k, pfruntime.NewLogger(io.Discard, "error", false))
	env.TransactionTimeout = time.Minute
	opts, err := k.ClientOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(pfruntime.Partitioner()), kgo.ProducerBatchMaxBytes(16<<20))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := createTopics(ctx, cl, k, int32(o.partitions)); err != nil {
		return nil, err
	}
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = pfruntime.RunStages(runCtx, env, nmphub.Stage()) }()
	defer wg.Wait()
	defer stopAll()

	// The fleet: nodes registered on agent.nodes, a package.
	// The parked agents' own bearer tokens: a node's routes take only
	// its node's token.
	tokens := make([]string, min(o.idleAgents, o.nodes))
	for i := range tokens {
		if tokens[i], err = auth.NewNodeToken(); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	var recs []*kgo.Record
	for i := range o.nodes {
		n := &events.AgentNode{Org: "sim", Node: "node-" + strconv.Itoa(i), Properties: `[{"name":"arch","value":"amd64"}]`, SoftwareVersion: "1.0.0", UpdatedAt: time.Now().UTC()}
		if i < len(tokens) {
			n.TokenSHA256 = auth.Hash(tokens[i])
		}
		v, err := env.Codec.Encode(n)
		if err != nil {
			return nil, err
		}
		recs = append(recs, &kgo.Record{Topic: k.Topic(topology.AgentNodes), Key: []byte("sim/" + n.Node), Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return nil, fmt.Errorf("register the fleet: %w", err)
	}
	pkg := &events.AgentPackage{Version: "1.1.0", SHA256: fmt.Sprintf("%064x", 1), Size: 1, Manifest: `{"version":"1.1.0"}`, UploadedAt: time.Now().UTC()}
	if err := produce(ctx, env, cl, topology.AgentPackages, "1.1.0", pkg); err != nil {
		return nil, err
	}
	// Every node has its first directive (none) once the hub read the fleet.
	dirs := newDirectiveReader(env, k, opts)
	defer dirs.close()
	if err := dirs.until(ctx, func(m map[string]*events.AgentDirective) bool { return len(m) == o.nodes }); err != nil {
		return nil, fmt.Errorf("wait for the fleet's first directives: %w", err)
	}
	rep.RegisterSeconds = time.Since(t0).Seconds()

	// Enable an NMP and time the directives.
	doc := &nmp.Document{Enabled: true, Constraints: []string{"arch == amd64"}, AgentUpgradePolicy: &nmp.UpgradePolicy{AtLeastVersion: "current", Start: "now", Duration: &o.duration}}
	p, err := nmp.Build("sim", "fleet", doc, time.Now())
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := produce(ctx, env, cl, topology.NMPPolicies, "sim/fleet", p); err != nil {
		return nil, err
	}
	upgraded := func(m map[string]*events.AgentDirective) int {
		n := 0
		for _, d := range m {
			if d.Action == nmp.ActionUpgrade {
				n++
			}
		}
		return n
	}
	if err := dirs.until(ctx, func(m map[string]*events.AgentDirective) bool { return upgraded(m) == o.nodes }); err != nil {
		return nil, fmt.Errorf("wait for the upgrade directives: %w", err)
	}
	rep.DirectivesSeconds = time.Since(start).Seconds()

	// The rollout on a compressed clock: the start times the hub gave.
	hist := make([]int, o.duration+1)
	var starts []float64
	for _, d := range dirs.snapshot() {
		off := d.StartAt.Sub(p.LastUpdated).Seconds()
		if off < 0 || off > float64(o.duration) {
			return nil, fmt.Errorf("node %s starts at %v, outside the window", d.Node, d.StartAt)
		}
		hist[int(off)]++
		starts = append(starts, off)
	}
	hist = hist[:o.duration] // the last second holds only its first instant
	if last := int(o.duration); len(starts) > 0 {
		for _, s := range starts {
			if int(s) == last {
				hist[last-1]++
			}
		}
	}
	rep.StartsPerSecond = hist
	rep.StartsMin, rep.StartsMax = math.MaxInt, 0
	sum, sq := 0.0, 0.0
	for _, c := range hist {
		rep.StartsMin, rep.StartsMax = min(rep.StartsMin, c), max(rep.StartsMax, c)
		sum += float64(c)
	}
	rep.StartsMean = sum / float64(len(hist))
	for _, c := range hist {
		sq += (float64(c) - rep.StartsMean) * (float64(c) - rep.StartsMean)
	}
	rep.StartsCV = math.Sqrt(sq/float64(len(hist))) / rep.StartsMean
	rep.UniformCV = 1 / math.Sqrt(rep.StartsMean) // Poisson counts per bin
	sort.Float64s(starts)
	dl := o.downloadTime.Seconds()
	for i, j := 0, 0; i < len(starts); i++ {
		for starts[i]-starts[j] >= dl {
			j++
		}
		rep.PeakConcurrent = max(rep.PeakConcurrent, i-j+1)
	}
	rep.ExpectedConcurrent = float64(o.nodes) * dl / float64(o.duration)

	// Idle agents parked on the long poll.
	if o.idleAgents > 0 {
		if err := idle(ctx, env, o, rep, tokens); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func createTopics(ctx context.Context, cl *kgo.Client, k pfruntime.Kafka, partitions int32) error {
	spec := topology.Default()
	adm := newAdmin(cl)
	_, err := topology.Apply(ctx, adm, spec, topology.Options{Prefix: k.Prefix, Partitions: partitions})
	return err
}

func produce(ctx context.Context, env pfruntime.Env, cl *kgo.Client, base, key string, ev events.Event) error {
	v, err := env.Codec.Encode(ev)
	if err != nil {
		return err
	}
	return cl.ProduceSync(ctx, &kgo.Record{Topic: env.Kafka.Topic(base), Key: []byte(key), Value: v}).FirstErr()
}

// directiveReader follows agent.directives into a map.
type directiveReader struct {
	mu   sync.Mutex
	m    map[string]*events.AgentDirective
	cond chan struct{}
	cl   *kgo.Client
	stop context.CancelFunc
	done chan struct{}
}

func newDirectiveReader(env pfruntime.Env, k pfruntime.Kafka, opts []kgo.Opt) *directiveReader {
	r := &directiveReader{m: map[string]*events.AgentDirective{}, cond: make(chan struct{}), done: make(chan struct{})}
	cl, _ := kgo.NewClient(append(opts, kgo.ConsumeTopics(k.Topic(topology.AgentDirectives)), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))...)
	r.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			fetches := cl.PollFetches(ctx)
			var batch []*kgo.Record
			fetches.EachRecord(func(rec *kgo.Record) { batch = append(batch, rec) })
			r.mu.Lock()
			for _, rec := range batch {
				if rec.Value == nil {
					delete(r.m, string(rec.Key))
					continue
				}
				var d events.AgentDirective
				if err := env.Codec.DecodeInto(ctx, rec.Value, &d); err == nil {
					r.m[string(rec.Key)] = &d
				}
			}
			close(r.cond)
			r.cond = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *directiveReader) until(ctx context.Context, done func(map[string]*events.AgentDirective) bool) error {
	for {
		r.mu.Lock()
		ok, ch := done(r.m), r.cond
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *directiveReader) snapshot() []*events.AgentDirective {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*events.AgentDirective, 0, len(r.m))
	for _, d := range r.m {
		out = append(out, d)
	}
	return out
}

func (r *directiveReader) close() { r.stop(); <-r.done; r.cl.Close() }

// idle parks agents on the North API's directive long poll and measures
// what they cost while nothing changes.
// Each agent calls with its node's own token (tokens[i] is node-i's).
func idle(ctx context.Context, env pfruntime.Env, o options, rep *Report, tokens []string) error {
	// The API wants a tokens file; the agents' node tokens are on their
	// node records (agent.nodes).
	operator, _ := auth.NewToken()
	set, err := auth.File{Tokens: []auth.Entry{{Name: "sim", Role: auth.RoleOperator, SHA256: auth.Hash(operator)}}}.Set()
	if err != nil {
		return err
	}
	srv, err := northapi.New(env, northapi.Options{Consul: consulkv.Config{Addr: "127.0.0.1:1"}, Tokens: set,
		RateLimit: northapi.RateLimit{Off: true}})
	if err != nil {
		return err
	}
	defer srv.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go func() { _ = srv.Run(sctx) }()
	for !srv.Ready() {
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.idleAgents + 10, MaxConnsPerHost: 0}}
	// The index each node's directive has, from a first GET.
	index := func(i int) (string, error) {
		node := "node-" + strconv.Itoa(i)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/orgs/sim/nodes/"+node+"/directive", nil)
		auth.SetBearer(req, tokens[i])
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var d struct {
			Index uint64 `json:"index"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != 200 {
			return "", fmt.Errorf("directive of %s: %d %v", node, resp.StatusCode, err)
		}
		return strconv.FormatUint(d.Index, 10), nil
	}
	idx := make([]string, len(tokens))
	for i := range idx {
		if idx[i], err = index(i); err != nil {
			return err
		}
	}
	// The process's own idle CPU (broker, hub, views), to subtract.
	base0 := cpuNow()
	_ = sleep(ctx, o.idleTime)
	baseline := cpuNow() - base0
	before := memNow()
	wait := o.idleTime + 30*time.Second
	pctx, pcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(pctx, http.MethodGet, base+"/v1/orgs/sim/nodes/node-"+strconv.Itoa(i)+"/directive?index="+idx[i]+"&wait="+wait.String(), nil)
			auth.SetBearer(req, tokens[i])
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	_ = sleep(ctx, time.Second) // every poll parked
	parked := memNow()
	cpu0 := cpuNow()
	t := time.Now()
	_ = sleep(ctx, o.idleTime)
	rep.IdleSeconds = time.Since(t).Seconds()
	cpu := cpuNow() - cpu0 - baseline
	pcancel()
	wg.Wait()
	n := float64(len(tokens))
	rep.IdleBytesPerAgent = float64(parked.heap-before.heap) / n
	rep.IdleGoroutinesPerAgent = float64(parked.goroutines-before.goroutines) / n
	rep.IdleCPUPerAgentMicros = max(cpu.Seconds(), 0) * 1e6 / n * (60 / rep.IdleSeconds)
	return nil
}

type mem struct {
	heap       uint64
	goroutines int
}

func memNow() mem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{heap: ms.HeapInuse + ms.StackInuse, goroutines: runtime.NumGoroutine()}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func print(w io.Writer, r *Report) {
	fmt.Fprintf(w, "fleetsim: %d nodes\n", r.Nodes)
	fmt.Fprintf(w, "  register the fleet (first directives)  %8.2f s\n", r.RegisterSeconds)
	fmt.Fprintf(w, "  directives after the NMP is enabled     %8.2f s  (goal %.0f s: %.2f of it)\n", r.DirectivesSeconds, r.DirectivesGoal, r.DirectivesSeconds/r.DirectivesGoal)
	fmt.Fprintf(w, "  download starts per second over %d s   mean %.1f, min %d, max %d, CV %.3f (a uniform draw: %.3f)\n",
		r.WindowSeconds, r.StartsMean, r.StartsMin, r.StartsMax, r.StartsCV, r.UniformCV)
	fmt.Fprintf(w, "  peak concurrent downloads (%.0f s each)  %d  (flat rate: %.1f)\n", r.DownloadSeconds, r.PeakConcurrent, r.ExpectedConcurrent)
	if r.IdleAgents > 0 {
		fmt.Fprintf(w, "  idle long polls: %d agents for %.0f s: %.0f bytes, %.1f goroutines, %.1f µs CPU per minute per agent (both ends in one process; CPU net of the idle process)\n",
			r.IdleAgents, r.IdleSeconds, r.IdleBytesPerAgent, r.IdleGoroutinesPerAgent, r.IdleCPUPerAgentMicros)
	}
	fmt.Fprintln(w, "  starts per 10 s (compressed clock):")
	for i := 0; i < len(r.StartsPerSecond); i += 10 {
		s := 0
		for _, c := range r.StartsPerSecond[i:min(i+10, len(r.StartsPerSecond))] {
			s += c
		}
		if i%60 == 0 {
			fmt.Fprintf(w, "   %4ds", i)
		}
		fmt.Fprintf(w, " %5d", s)
		if i%60 == 50 || i+10 >= len(r.StartsPerSecond) {
			fmt.Fprintln(w)
		}
	}
}
