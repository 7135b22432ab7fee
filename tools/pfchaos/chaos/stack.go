package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
	"github.com/policyflow/policyflow/topology"
)

// NorthAPI is the name of the North API's binary, a process of the stack
// like the stages.
const NorthAPI = "north-api"

// Stages are the processes of the policy flow, in pipeline order.
var Stages = []string{topology.StagePDPIngest, topology.StageMatcher, topology.StageSegmenter,
	topology.StageExecutor, topology.StageConsulWriter, topology.StageAgentNotifier}

// stack is the policy flow under test: the broker (in this process, on a
// data directory, so it can be restarted), a Consul agent (on a data
// directory), every stage and the North API as processes of their own
// from the binaries, the PDP simulator and the components' webhooks (in
// this process).
type stack struct {
	o   Options
	log zerolog.Logger

	brokerDir, brokerAddr string
	broker                *devstack.Broker
	consulDir, consulAddr string
	consulMu              sync.Mutex
	consul                *devstack.ConsulAgent
	cluster               *cluster // instead of consul, for the containers faults
	kafka                 runtime.Kafka
	kv                    *consulapi.Client

	procMu sync.Mutex
	procs  map[string]*devstack.StageProc
	opsOf  map[string]string // each process's ops address, kept across restarts
	// incarnation counts the replacements of each stage: its instance id
	// is <stage>-<incarnation>.
	incarnation map[string]int
	hooks       string // the component scripts' directory
	apiURL      string
	token       string

	sim     *pdp.Server
	base    string // the PDP simulator and the webhooks
	hsrv    *http.Server
	obs     *observer
	comps   []string          // component ids (= service_component_name)
	policy  map[string]string // component -> policy id
	latest  map[string]int    // policy id -> newest version accepted by the North API
	stopObs context.CancelFunc

	// compBase starts every component id: "chaos-", or on an external
	// cluster "chaos-<random>-", the run's own.
	compBase string

	// paused and pausedAt are the log of the notifier pause-agent-notifier
	// stopped and its size when it was let go on; pausedHow says which it
	// was and how it was stopped.
	paused, pausedHow string
	pausedAt          int64

	noteMu sync.Mutex
	note   string // what the running fault did (Row.Note)
}

func (s *stack) setNote(n string) {
	s.noteMu.Lock()
	s.note = n
	s.noteMu.Unlock()
}

// takeNote returns the running fault's note and clears it.
func (s *stack) takeNote() string {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	n := s.note
	s.note = ""
	return n
}

// policyID is the i-th policy of the run.
func policyID(i int) string { return "CHAOS.Config_p" + strconv.Itoa(i) }

// startStack starts the stack; withCluster, its Consul is a three-server
// cluster in containers (startCluster) instead of a local agent.
func startStack(ctx context.Context, o Options, withCluster bool) (s *stack, err error) {
	s = &stack{o: o, log: o.Log, procs: map[string]*devstack.StageProc{}, opsOf: map[string]string{},
		policy: map[string]string{}, latest: map[string]int{}, incarnation: map[string]int{}}
	defer func() {
		if err != nil {
			s.close()
			s = nil
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return s, err
	}
	s.compBase = "chaos-"
	s.brokerDir, s.consulDir = filepath.Join(o.Dir, "broker"), filepath.Join(o.Dir, "consul")
	listen := "127.0.0.1:0"
	if o.External != nil {
		if err := s.useExternal(); err != nil {
			return s, err
		}
	} else if withCluster {
		if s.cluster, err = startCluster(ctx, o.ConsulImage); err != nil {
			return s, err
		}
		s.consulAddr = s.cluster.addr
		// The broker listens where the stage containers reach it too.
		gw, err := s.cluster.gateway(ctx)
		if err != nil {
			return s, err
		}
		listen = net.JoinHostPort(gw, "0")
	}
	if o.External == nil {
		if err := s.startBroker(listen); err != nil {
			return s, err
		}
		// The addresses of every broker: broker-restart starts the
		// cluster again on the same ports.
		s.brokerAddr = strings.Join(s.broker.Addrs, ",")
		s.kafka = runtime.Kafka{Brokers: s.broker.Addrs, FetchMaxWait: 100 * time.Millisecond, MetadataMinAge: 250 * time.Millisecond}
	}
	if !withCluster && o.External == nil {
		if err := s.startConsul(ctx, "127.0.0.1:0"); err != nil {
			return s, err
		}
		s.consulAddr = s.consul.Addr
	}
	kvc := consulkv.Config{Addr: s.consulAddr}
	if o.External != nil {
		kvc = o.External.Consul
	}
	if s.kv, err = kvc.Client(); err != nil {
		return s, err
	}

	opts, err := s.kafka.ClientOpts()
	if err != nil {
		return s, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(runtime.Partitioner()), kgo.ClientID("pfchaos"))...)
	if err != nil {
		return s, err
	}
	defer cl.Close()
	if _, err := topology.Apply(ctx, kadm.NewClient(cl), topology.Default(), topology.Options{Prefix: s.kafka.Prefix, Partitions: int32(o.Partitions)}); err != nil {
		return s, fmt.Errorf("apply topology: %w", err)
	}

	// The components: each wants one policy; the even ones are notified
	// by a script that works ScriptRun, the odd ones by a webhook that
	// takes WebhookDelay, both writing the ledger of their runs.
	ledger := filepath.Join(o.Dir, "ledger")
	s.hooks = filepath.Join(o.Dir, "hooks")
	for _, d := range []string{ledger, s.hooks} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return s, err
		}
	}
	for i := 0; i < o.Components; i++ {
		c := fmt.Sprintf("%sc%02d", s.compBase, i)
		s.comps = append(s.comps, c)
		s.policy[c] = policyID(i % o.Policies)
		if i%2 == 0 {
			if err := os.WriteFile(filepath.Join(s.hooks, c+".sh"), []byte(script(ledger, c)), 0o755); err != nil {
				return s, err
			}
		}
	}
	s.obs = newObserver(s.policy, ledger)
	s.sim = pdp.NewServer()
	mux := http.NewServeMux()
	mux.HandleFunc("/hook/", s.obs.webhook)
	mux.Handle("/", s.sim.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return s, err
	}
	s.hsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.hsrv.Serve(ln) }()
	s.base = "http://" + ln.Addr().String()
	octx, stop := context.WithCancel(context.Background())
	s.stopObs = stop
	go s.obs.watchConsul(octx, s.kv)
	go s.obs.followLedgers(octx)

	codec := events.Default()
	var recs []*kgo.Record
	now := time.Now().UTC()
	for i, c := range s.comps {
		notify := events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: s.base + "/hook/" + c, TimeoutMs: 10000}
		if i%2 == 0 {
			notify = events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: filepath.Join(s.hooks, c+".sh"), TimeoutMs: 30000}
		}
		v, err := codec.Encode(&events.Component{ComponentID: c, DeploymentID: fmt.Sprintf("%sd%02d", s.compBase, i/2), ServiceComponentName: c,
			Tenant: "chaos", PolicyIDs: []string{s.policy[c]}, Config: "{}", Generation: 1, UpdatedAt: now, Notify: notify})
		if err != nil {
			return s, err
		}
		recs = append(recs, &kgo.Record{Topic: s.kafka.Topic(topology.DeployComponents), Key: []byte(c), Value: v})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return s, fmt.Errorf("register components: %w", err)
	}

	tok, err := devstack.EnsureDevToken(filepath.Join(o.Dir, "api"))
	if err != nil {
		return s, err
	}
	s.token = tok.Token
	apiAddr, err := devstack.FreeAddr()
	if err != nil {
		return s, err
	}
	s.apiURL = "http://" + apiAddr
	var procs []string
	for _, name := range append(append([]string(nil), Stages...), NorthAPI) {
		if withCluster && name == ContainerStage {
			if err := s.startContainer(ctx, name); err != nil {
				return s, err
			}
			continue
		}
		if _, err := s.start(name, ""); err != nil {
			return s, err
		}
		procs = append(procs, name)
	}
	for _, name := range procs {
		if err := s.ready(ctx, name); err != nil {
			return s, err
		}
	}
	return s, nil
}

// ContainerStage is the stage that runs in a container on the containers
// stack, the one network-disconnect cuts off: it needs both the broker and
// Consul.
const ContainerStage = topology.StageConsulWriter

// startContainer runs the stage's image (Options.StageImages with the
// stage's name) on the cluster's network and waits for its /readyz.
func (s *stack) startContainer(ctx context.Context, name string) error {
	image := fmt.Sprintf(s.o.StageImages, name)
	if _, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", image); err != nil {
		return fmt.Errorf("the image %s is not here (build it with deploy/build-images.sh %s, PF_IMAGE_TAG for its tag): %w", image, name, err)
	}
	ops, err := s.cluster.runStage(ctx, image, name, []string{"PF_TOPIC_PREFIX=" + s.kafka.Prefix, "PF_LOG_LEVEL=info"},
		append([]string{"--brokers", s.brokerAddr}, s.args(name, "")...))
	if err != nil {
		return err
	}
	if err := devstack.WaitHTTP(ctx, "http://"+ops+"/readyz", 2*time.Minute); err != nil {
		logs, _ := docker(ctx, "logs", "--tail", "40", s.cluster.name+"-"+name)
		return fmt.Errorf("%s container not ready: %w\n%s", name, err, logs)
	}
	return nil
}

func (s *stack) startBroker(listen string) error {
	b, err := devstack.StartBroker(devstack.BrokerOptions{Listen: listen, DataDir: s.brokerDir, Partitions: int32(s.o.Partitions),
		Logger: s.log.With().Str("component", "broker").Logger()})
	if err != nil {
		return err
	}
	s.broker = b
	return nil
}

func (s *stack) startConsul(ctx context.Context, httpAddr string) error {
	bin, err := devstack.ConsulBinary()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	a, err := devstack.StartConsul(cctx, devstack.ConsulOptions{Binary: bin, DataDir: s.consulDir, HTTPAddr: httpAddr, Logger: s.log})
	if err != nil {
		return err
	}
	s.consulMu.Lock()
	s.consul = a
	s.consulMu.Unlock()
	return nil
}

// args are the flags of a process of the stack. The base member of each
// stage is a static member (--instance-id <stage>-0), as a StatefulSet
// pod is, and so is its peer (peerMember, --instance-id <stage>-peer);
// member (another) names another, dynamic one.
func (s *stack) args(name, member string) []string {
	switch name {
	case NorthAPI:
		return []string{"--api-addr", s.apiURL[len("http://"):], "--tokens-file", filepath.Join(s.o.Dir, "api", devstack.TokensFileName)}
	}
	args := []string{"--session-timeout", s.o.SessionTimeout.String()}
	switch {
	case s.o.Dynamic:
	case member == "":
		s.procMu.Lock()
		n := s.incarnation[name]
		s.procMu.Unlock()
		args = append(args, "--instance-id", name+"-"+strconv.Itoa(n))
	case member == peerMember:
		// A second replica, static too, as a StatefulSet's second pod.
		args = append(args, "--instance-id", name+peerMember)
	}
	switch name {
	case topology.StagePDPIngest:
		args = append(args, "--pdp-url", s.base)
	case topology.StageAgentNotifier:
		args = append(args, "--webhook-allow", "127.0.0.1", "--script-dir", s.hooks)
	}
	return args
}

// start runs a process of the stack: the base one (member "") on the ops
// address it had before, or another member.
func (s *stack) start(name, member string) (*devstack.StageProc, error) {
	key := name + member
	s.procMu.Lock()
	ops := s.opsOf[key]
	s.procMu.Unlock()
	p, err := devstack.StartStage(devstack.StageOptions{BinDir: s.o.BinDir, Name: name, LogFile: filepath.Join(s.o.Dir, key+".log"),
		Kafka: s.kafka, ConsulAddr: s.consulAddr, HTTPAddr: ops, LogLevel: "info", Args: s.args(name, member)})
	if err != nil {
		return nil, err
	}
	s.procMu.Lock()
	s.procs[key], s.opsOf[key] = p, p.HTTPAddr
	s.procMu.Unlock()
	return p, nil
}

// ready waits for a process's /readyz (the North API: its /healthcheck).
func (s *stack) ready(ctx context.Context, key string) error {
	s.procMu.Lock()
	p := s.procs[key]
	s.procMu.Unlock()
	url := "http://" + p.HTTPAddr + "/readyz"
	if key == NorthAPI {
		url = s.apiURL + "/healthcheck"
	}
	if err := devstack.WaitHTTP(ctx, url, 2*time.Minute); err != nil {
		return errors.Join(fmt.Errorf("%s not ready: %w", key, err), p.Exited())
	}
	return nil
}

// alive reports the processes that exited on their own.
func (s *stack) alive() error {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	var errs []error
	for _, p := range s.procs {
		errs = append(errs, p.Exited())
	}
	return errors.Join(errs...)
}

// publish makes the PDP hold the next version of policy pid and tells the
// North API, again until it accepts (as a PDP does while the API is
// away). The version is the newest once accepted.
func (s *stack) publish(ctx context.Context, pid string) error {
	v := s.latest[pid] + 1
	lp, err := s.sim.Put(policy.Body{
		policy.FieldPolicyName: pid + "." + strconv.Itoa(v) + ".xml", policy.FieldPolicyVersion: strconv.Itoa(v),
		policy.FieldConfig:             `{"version":` + strconv.Itoa(v) + `}`,
		policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "chaos"},
	})
	if err != nil {
		return err
	}
	client := auth.Client(s.token)
	s.obs.published(pid, v) // from now on the newest (the PDP holds it)
	var last error
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = pdp.Notify(rctx, client, s.apiURL+"/v1/pdp/notifications", policy.Notification{LoadedPolicies: []policy.LoadedPolicy{lp}})
		cancel()
		if last == nil {
			s.latest[pid] = v
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("publish %s version %d: %w (last: %v)", pid, v, ctx.Err(), last)
}

// behind lists the components whose Consul item or latest notification
// is not at the newest version of their policy.
func (s *stack) behind(ctx context.Context) ([]string, error) {
	pairs, _, err := s.kv.KV().List(s.compBase, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	inConsul := map[string]int{}
	for _, p := range pairs {
		for _, c := range s.comps {
			if p.Key == consulkv.ItemKey(c, s.policy[c]) {
				inConsul[c] = versionOf(p.Value)
			}
		}
	}
	var out []string
	for _, c := range s.comps {
		want := s.latest[s.policy[c]]
		if got := inConsul[c]; got != want {
			out = append(out, fmt.Sprintf("%s: Consul holds version %d of %s, want %d", c, got, s.policy[c], want))
		}
		if got := s.obs.lastNotified(c); got != want {
			out = append(out, fmt.Sprintf("%s: last notified of version %d of %s, want %d", c, got, s.policy[c], want))
		}
	}
	return out, nil
}

// settle waits until no component is behind, up to the settle time, and
// returns those still behind then.
func (s *stack) settle(ctx context.Context) ([]string, error) {
	deadline := time.Now().Add(s.o.Settle)
	for {
		b, err := s.behind(ctx)
		if err == nil && len(b) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err != nil {
				return []string{"Consul not readable: " + err.Error()}, nil
			}
			return b, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *stack) close() {
	s.procMu.Lock()
	procs := make([]*devstack.StageProc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	s.procMu.Unlock()
	devstack.StopAll(procs)
	if s.stopObs != nil {
		s.stopObs()
	}
	if s.hsrv != nil {
		_ = s.hsrv.Close()
	}
	s.consulMu.Lock()
	if s.consul != nil {
		_ = s.consul.Stop()
	}
	s.consulMu.Unlock()
	if s.cluster != nil {
		s.cluster.remove(s.o.Dir)
	}
	if s.broker != nil {
		s.broker.Close()
	}
	if s.o.External != nil && s.kafka.Prefix != "" {
		s.removeExternal()
	}
}

// replace kills stage name and starts a replacement under a new instance
// id, as a new pod would be; the fault is over once it is ready.
func (s *stack) replace(ctx context.Context, name string, started func()) error {
	s.procMu.Lock()
	p := s.procs[name]
	s.incarnation[name]++
	s.procMu.Unlock()
	p.Kill()
	started()
	if _, err := s.start(name, ""); err != nil {
		return err
	}
	return s.ready(ctx, name)
}

// scriptsFail makes every component script fail for FailFor, then asks
// for a catch-up: the failed notifications must be run again (retried,
// or by the catch-up).
func (s *stack) scriptsFail(ctx context.Context, started func()) error {
	fail := filepath.Join(s.obs.ledgerDir, "fail")
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		return err
	}
	started()
	select {
	case <-ctx.Done():
	case <-time.After(s.o.FailFor):
	}
	if err := os.Remove(fail); err != nil {
		return err
	}
	return s.catchup(ctx)
}

// editConsul writes every component's item by hand, as an operator
// might, then asks for a catch-up: each item must be restored and each
// component notified again, since it may have read the edited value.
func (s *stack) editConsul(ctx context.Context, started func()) error {
	at := time.Now()
	for _, c := range s.comps {
		if _, err := s.kv.KV().Put(&consulapi.KVPair{Key: consulkv.ItemKey(c, s.policy[c]), Value: []byte(`{` + hand + `:true}`)},
			(&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("edit %s in Consul: %w", c, err)
		}
	}
	started()
	if err := s.catchup(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(s.o.Settle)
	for {
		var missing []string
		for _, c := range s.comps {
			if s.obs.runsSince(c, at) == 0 {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d components were not notified after the catch-up restored their edited items: %s",
				len(missing), strings.Join(missing, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// catchup asks the North API for a catch-up of everything.
func (s *stack) catchup(ctx context.Context) error {
	client := auth.Client(s.token)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL+"/v1/catchup", strings.NewReader(`{"reason":"chaos"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("ask for a catch-up: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("ask for a catch-up: %s %s", resp.Status, b)
	}
	return nil
}

// The readiness probe of a stage that needs Consul times out after a
// second and is cached for two: ReadyAfterDown is how long after Consul
// went down its /readyz may still say ready. The lag is read every five
// seconds: LagVisibleAfter is how long after records began to wait the
// lag must show them.
const (
	ReadyAfterDown  = 3 * time.Second
	LagVisibleAfter = 7 * time.Second
)

// watchTruth checks, until the end, what the stages that need Consul
// say while it is down: their /readyz must answer not ready once
// ReadyAfterDown has passed, and, when the outage lasts LagVisibleAfter,
// the consul-writer's committed lag must be above 0 at its end (updates
// were published when it began).
func (s *stack) watchTruth(ctx context.Context, end time.Time) {
	from := time.Now()
	client := &http.Client{Timeout: time.Second}
	for ctx.Err() == nil && time.Now().Before(end) {
		if time.Since(from) >= ReadyAfterDown {
			for _, name := range []string{topology.StageConsulWriter, topology.StageAgentNotifier} {
				s.procMu.Lock()
				p := s.procs[name]
				s.procMu.Unlock()
				if p == nil {
					continue
				}
				resp, err := client.Get("http://" + p.HTTPAddr + "/readyz")
				if err != nil {
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					s.obs.lied(fmt.Sprintf("%s /readyz answered 200 %s %.1fs after Consul went down", name, strings.TrimSpace(string(b)), time.Since(from).Seconds()))
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	if end.Sub(from) < LagVisibleAfter {
		return
	}
	s.procMu.Lock()
	p := s.procs[topology.StageConsulWriter]
	s.procMu.Unlock()
	if p == nil {
		return
	}
	lag, err := metricSum(client, "http://"+p.HTTPAddr+"/metrics", "policyflow_consumer_lag")
	if err != nil {
		s.obs.lagHidden(fmt.Sprintf("consul-writer's lag not readable at the end of the outage: %v", err))
	} else if lag == 0 {
		s.obs.lagHidden(fmt.Sprintf("consul-writer's policyflow_consumer_lag read 0 after %.1fs of Consul down, with updates waiting", time.Since(from).Seconds()))
	}
}

// metricSum adds up every series of a metric in a Prometheus text page.
func metricSum(client *http.Client, url, name string) (float64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	sum, seen := 0.0, false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sum, seen = sum+v, true
	}
	if !seen {
		return 0, fmt.Errorf("%s has no %s", url, name)
	}
	return sum, nil
}

// rewinds reads policyflow_consumer_rewinds_total of every stage running
// now; a stage that does not answer is left out.
func (s *stack) rewinds() map[string]float64 {
	client := &http.Client{Timeout: time.Second}
	out := map[string]float64{}
	for _, name := range Stages {
		s.procMu.Lock()
		p := s.procs[name]
		s.procMu.Unlock()
		if p == nil {
			continue
		}
		if v, err := metricSum(client, "http://"+p.HTTPAddr+"/metrics", "policyflow_consumer_rewinds_total"); err == nil {
			out[name] = v
		}
	}
	return out
}

// rewindsSince counts the rewinds between two readings of rewinds, with
// what each stage did; a stage restarted in between (its count lower
// than before) counts from 0.
func rewindsSince(before, after map[string]float64) (int, []string) {
	n := 0
	var details []string
	for _, name := range Stages {
		d := after[name] - before[name]
		if after[name] < before[name] {
			d = after[name]
		}
		if d > 0 {
			n += int(d)
			details = append(details, fmt.Sprintf("%s: its consumer went back over records it had read %d times (the broker reported them lost)", name, int(d)))
		}
	}
	return n, details
}

// peerMember names a stage's second static replica (pause-agent-notifier).
const peerMember = "-peer"

// startPeer starts a second replica of stage name under an instance id
// of its own and waits until it is ready.
func (s *stack) startPeer(ctx context.Context, name string) error {
	if _, err := s.start(name, peerMember); err != nil {
		return err
	}
	return s.ready(ctx, name+peerMember)
}

// stopPeer drains the second replica of stage name and forgets it. A
// static member does not leave its group when it stops: its partitions
// move to the other replica only once the session timeout has passed,
// which stopPeer waits out, so that the next fault does not begin with
// partitions nobody consumes.
func (s *stack) stopPeer(ctx context.Context, name string) {
	s.procMu.Lock()
	p := s.procs[name+peerMember]
	delete(s.procs, name+peerMember)
	s.procMu.Unlock()
	if p == nil {
		return
	}
	p.Stop()
	if !s.o.Dynamic {
		select {
		case <-ctx.Done():
		case <-time.After(s.o.SessionTimeout + 2*time.Second):
		}
	}
}

// pause stops an agent-notifier with SIGSTOP in the middle of a
// notification it holds, for PauseFor, and lets it go on with SIGCONT;
// the fault is over then. The next component script to run stops its own
// notifier (pauseMark) and fails, so the notifier, once let go on, would
// run it again after its backoff: without making sure of its claim, a
// generation older than the one the other notifier delivered meanwhile.
// When no script runs within PauseWait, the base replica is stopped from
// here instead. The paused notifier's log from its resumption on is read
// by pausedNote.
func (s *stack) pause(ctx context.Context, name string, started func()) error {
	mark, pidFile := filepath.Join(s.obs.ledgerDir, pauseMark), filepath.Join(s.obs.ledgerDir, pausedPID)
	_ = os.Remove(pidFile)
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		return err
	}
	// Left behind, the mark would stop a notifier in a later row.
	defer os.Remove(mark)
	find := func(pid int) *devstack.StageProc {
		s.procMu.Lock()
		defer s.procMu.Unlock()
		for _, key := range []string{name, name + peerMember} {
			if p := s.procs[key]; p != nil && p.Cmd.Process.Pid == pid {
				return p
			}
		}
		return nil
	}
	// wait waits up to d for the pid of the notifier a script stopped.
	wait := func(d time.Duration) (*devstack.StageProc, error) {
		for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(20 * time.Millisecond) {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				continue
			}
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if p := find(pid); p != nil {
				return p, nil
			}
			return nil, fmt.Errorf("a component script stopped process %q, not an agent-notifier", b)
		}
		return nil, nil
	}
	how := "by the script of a notification it held"
	p, err := wait(PauseWait)
	if err != nil {
		return err
	}
	if p == nil {
		if os.Remove(mark) != nil {
			// A script took the mark just now: it stops its notifier.
			if p, err = wait(5 * time.Second); err != nil || p == nil {
				return errors.Join(errors.New("a script took the pause mark and wrote no pid"), err)
			}
		} else {
			// No script ran: the base replica is stopped from here.
			s.procMu.Lock()
			p = s.procs[name]
			s.procMu.Unlock()
			if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				return fmt.Errorf("pause %s: %w", name, err)
			}
			how = "from outside, no script having run"
		}
	}
	started()
	select {
	case <-ctx.Done():
	case <-time.After(s.o.PauseFor):
	}
	if st, err := os.Stat(p.LogFile); err == nil {
		s.procMu.Lock()
		s.paused, s.pausedAt, s.pausedHow = p.LogFile, st.Size(), filepath.Base(strings.TrimSuffix(p.LogFile, ".log"))+" stopped "+how
		s.procMu.Unlock()
	}
	if err := p.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s: %w", p.Name, err)
	}
	return ctx.Err()
}

// PauseWait is how long pause-agent-notifier waits for a component script
// to run and stop its notifier.
const PauseWait = 5 * time.Second

// claimLost is what the agent-notifier logs when it finds, before a run,
// that a notification's claim is another notifier's.
const claimLost = "the claim is another notifier's now"

// pausedNote says how long the notifier was paused and how many of its
// notifications it found taken over once resumed (its log from then on).
func (s *stack) pausedNote() string {
	s.procMu.Lock()
	path, off, how := s.paused, s.pausedAt, s.pausedHow
	s.paused = ""
	s.procMu.Unlock()
	note := fmt.Sprintf("%s for %s", how, s.o.PauseFor)
	if path == "" {
		return note
	}
	f, err := os.Open(path)
	if err != nil {
		return note
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return note
	}
	b, _ := io.ReadAll(f)
	return fmt.Sprintf("%s; once resumed it logged %d notification claim(s) found to be another's", note, strings.Count(string(b), claimLost))
}
