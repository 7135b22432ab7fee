package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/rs/zerolog"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Default images of the containers backend: built locally FROM scratch by
// deploy/build-images.sh, which the harness runs when they are missing.
const (
	DefaultKafkaImage  = "policyflow/devbroker:dev"
	DefaultConsulImage = "policyflow/consul:dev"
)

// Image families PF_KAFKA_IMAGE may name; each needs its own command,
// environment and readiness check.
const (
	FamilyDevbroker   = "devbroker"    // policyflow/devbroker: kfake behind devbroker's flags
	FamilyApacheKafka = "apache-kafka" // apache/kafka or apache/kafka-native, KRaft single node
)

// Labels on every container the harness starts. Containers whose test
// process died without stopping them (a -timeout panic, a kill -9) are
// removed by the next containers run on the same host, or by hand with
// `docker rm -f $(docker ps -aq --filter label=policyflow.integration=true)`.
const (
	labelOwned = "policyflow.integration"
	labelPID   = "policyflow.integration.pid"
	labelHost  = "policyflow.integration.host"
)

// consulContainerPort is Consul's HTTP port inside its container.
const consulContainerPort = "8500/tcp"

// containerStartTimeout bounds the wait for one container to be ready.
const containerStartTimeout = 3 * time.Minute

// KafkaFamily says which family of Kafka image the image name belongs to,
// from the last element of its repository path: "devbroker", or "kafka" /
// "kafka-native" for Apache Kafka (including mirrors such as
// registry.example.com/apache/kafka:4.1.0).
func KafkaFamily(image string) (string, error) {
	switch last := repoName(image); last {
	case "devbroker":
		return FamilyDevbroker, nil
	case "kafka", "kafka-native":
		return FamilyApacheKafka, nil
	default:
		return "", fmt.Errorf("PF_KAFKA_IMAGE=%q: unknown image family %q, want a policyflow/devbroker or an apache/kafka(-native) image", image, last)
	}
}

// repoName returns the last path element of an image reference, without its
// tag or digest: "apache/kafka:4.1.0" -> "kafka".
func repoName(image string) string {
	ref := image
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ref = ref[i+1:]
	}
	if i := strings.IndexByte(ref, ':'); i >= 0 {
		ref = ref[:i]
	}
	return ref
}

// tclogger sends testcontainers' progress lines to the harness log at debug
// level.
type tclogger struct{ l zerolog.Logger }

func (t tclogger) Printf(format string, v ...any) {
	t.l.Debug().Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// startContainers starts Consul and a Kafka-protocol broker as Docker
// containers from PF_CONSUL_IMAGE and PF_KAFKA_IMAGE, building the local
// default images first when they are missing.
func startContainers(ctx context.Context) (*Backend, error) {
	tclog.SetDefault(tclogger{log})
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
		// Ryuk is a reaper container pulled from Docker Hub; the harness
		// removes its own containers instead (see labelOwned).
		if err := os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true"); err != nil {
			return nil, fmt.Errorf("disable the testcontainers reaper: %w", err)
		}
	}
	kafkaImage := runtime.EnvOr("PF_KAFKA_IMAGE", DefaultKafkaImage)
	consulImage := runtime.EnvOr("PF_CONSUL_IMAGE", DefaultConsulImage)
	family, err := KafkaFamily(kafkaImage)
	if err != nil {
		return nil, err
	}

	dc, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the Docker engine: %w", err)
	}
	defer dc.Close()
	reapOrphans(ctx, dc.Client)
	if err := ensureImages(ctx, dc.Client, kafkaImage, consulImage); err != nil {
		return nil, err
	}
	consul, dockerHost, consulAddr, err := startConsulContainer(ctx, consulImage)
	if err != nil {
		return nil, err
	}
	var (
		kafka   *testcontainers.DockerContainer
		brokers []string
	)
	switch family {
	case FamilyDevbroker:
		kafka, brokers, err = startKafkaContainer(ctx, kafkaImage, dockerHost, devbrokerRequest)
	case FamilyApacheKafka:
		kafka, brokers, err = startKafkaContainer(ctx, kafkaImage, dockerHost, apacheKafkaRequest)
	}
	if err != nil {
		return nil, errors.Join(err, terminate(context.Background(), consul, consulImage))
	}
	return &Backend{
		Kind:       KindContainers,
		Brokers:    brokers,
		ConsulAddr: consulAddr,
		stop: func(ctx context.Context) error {
			return errors.Join(terminate(ctx, kafka, kafkaImage), terminate(ctx, consul, consulImage))
		},
	}, nil
}

// ownerLabels mark a container as started by this test process.
func ownerLabels() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{
		labelOwned: "true",
		labelPID:   strconv.Itoa(os.Getpid()),
		labelHost:  host,
	}
}

// reapOrphans removes containers that an earlier test process on this host
// started and could not stop because it died. A container whose process
// still runs, or that another host started, is left alone. Failing to reap
// is logged, not fatal: the orphans only cost memory.
func reapOrphans(ctx context.Context, dc *client.Client) {
	host, _ := os.Hostname()
	res, err := dc.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", labelOwned+"=true", labelHost+"="+host),
	})
	if err != nil {
		log.Warn().Err(err).Msg("list containers left by earlier test runs")
		return
	}
	for _, c := range res.Items {
		pid, err := strconv.Atoi(c.Labels[labelPID])
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if _, err := dc.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
			log.Warn().Err(err).Str("container", short(c.ID)).Msg("remove container left by an earlier test run")
			continue
		}
		log.Info().Str("container", short(c.ID)).Str("image", c.Image).Int("pid", pid).Msg("removed container left by a test run that died")
	}
}

// processAlive reports whether a process with the pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// isLoopback reports whether host names this machine's loopback interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// bindIP is the host address published ports bind to: loopback only when
// the Docker engine runs on this machine.
func bindIP(dockerHost string) netip.Addr {
	if isLoopback(dockerHost) {
		return netip.MustParseAddr("127.0.0.1")
	}
	return netip.IPv4Unspecified()
}

// short abbreviates a container id the way docker ps does.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// startConsulContainer starts a dev Consul agent and finds the host on which
// this process reaches the ports Docker publishes (see dockerHostCandidates).
// The same command works for policyflow/consul (entrypoint consul) and
// hashicorp/consul (whose entrypoint script passes "agent ..." on to consul).
// It is ready when its HTTP API names a raft leader, checked from outside
// since the image has no shell.
func startConsulContainer(ctx context.Context, image string) (c *testcontainers.DockerContainer, dockerHost, addr string, err error) {
	override := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE")
	bind := netip.IPv4Unspecified()
	if override != "" && isLoopback(override) {
		bind = netip.MustParseAddr("127.0.0.1")
	}
	port := network.MustParsePort(consulContainerPort)
	c, err = testcontainers.Run(ctx, image,
		testcontainers.WithCmd("agent", "-dev", "-client", "0.0.0.0", "-log-level", "warn", "-hcl", "disable_update_check = true"),
		testcontainers.WithExposedPorts(consulContainerPort),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{port: {{HostIP: bind, HostPort: "0"}}}
		}),
		testcontainers.WithLabels(ownerLabels()),
	)
	if err != nil {
		return nil, "", "", startFailed(c, image, err)
	}
	mapped, err := c.MappedPort(ctx, consulContainerPort)
	if err != nil {
		return nil, "", "", startFailed(c, image, fmt.Errorf("find the host port of Consul's %s: %w", consulContainerPort, err))
	}
	wctx, cancel := context.WithTimeout(ctx, containerStartTimeout)
	defer cancel()
	dockerHost, err = waitConsulLeader(wctx, override, strconv.Itoa(int(mapped.Num())))
	if err != nil {
		return nil, "", "", startFailed(c, image, err)
	}
	// testcontainers guesses the Docker host from /.dockerenv and the default
	// route, which is wrong when the engine runs in this very container;
	// make it use the host that answered.
	if override == "" {
		if err := os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", dockerHost); err != nil {
			return nil, "", "", startFailed(c, image, fmt.Errorf("set TESTCONTAINERS_HOST_OVERRIDE: %w", err))
		}
	}
	addr = net.JoinHostPort(dockerHost, strconv.Itoa(int(mapped.Num())))
	log.Info().Str("image", image).Str("addr", addr).Str("container", short(c.GetContainerID())).Msg("Consul container ready")
	return c, dockerHost, addr, nil
}

// waitConsulLeader polls GET /v1/status/leader on the published port until
// Consul names a leader, and returns the host that answered. The candidates
// are TESTCONTAINERS_HOST_OVERRIDE when set; else 127.0.0.1, which works
// whenever the Docker engine shares this process's network (a local engine,
// or one running inside the same container), and, once 127.0.0.1 refuses
// the connection, the host testcontainers infers (the default gateway when
// this process runs in a container beside the engine).
func waitConsulLeader(ctx context.Context, override, port string) (string, error) {
	candidates := []string{"127.0.0.1"}
	if override != "" {
		candidates = []string{override}
	}
	inferred := override != ""
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}
	var last error
	for {
		for _, host := range candidates {
			ok, err := consulHasLeader(ctx, hc, net.JoinHostPort(host, port))
			if ok {
				return host, nil
			}
			last = err
			if !inferred && errors.Is(err, syscall.ECONNREFUSED) {
				inferred = true
				if h, err := inferredDockerHost(ctx); err == nil && !isLoopback(h) {
					candidates = append(candidates, h)
				}
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for Consul to elect a leader on port %s of %v: %w (last error: %v)", port, candidates, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// consulHasLeader asks one address whether Consul has a leader.
func consulHasLeader(ctx context.Context, hc *http.Client, addr string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status/leader", nil)
	if err != nil {
		return false, fmt.Errorf("make leader request for %s: %w", addr, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("GET %s/v1/status/leader: %s", addr, resp.Status)
	}
	if !hasLeader(resp.Body) {
		return false, fmt.Errorf("GET %s/v1/status/leader: no leader yet", addr)
	}
	return true, nil
}

// inferredDockerHost is the host testcontainers infers for published ports.
func inferredDockerHost(ctx context.Context) (string, error) {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", fmt.Errorf("connect to the Docker engine: %w", err)
	}
	defer p.Close()
	host, err := p.DaemonHost(ctx)
	if err != nil {
		return "", fmt.Errorf("find the Docker host: %w", err)
	}
	return host, nil
}

// hasLeader reports whether a /v1/status/leader body names a leader: it is
// `""` until one is elected.
func hasLeader(body io.Reader) bool {
	b, err := io.ReadAll(body)
	if err != nil {
		return false
	}
	b = bytes.TrimSpace(b)
	return len(b) > 2 && b[0] == '"'
}

// kafkaRequest returns the options of a broker container whose clients
// connect to advertised (host:port per broker, port being the matching
// hostPorts' entry) and the container ports that Docker publishes on
// hostPorts, one each.
type kafkaRequest struct {
	brokers int // how many host ports the container needs
	opts    func(hostPorts []int, advertised []string) (opts []testcontainers.ContainerCustomizer, containerPorts []string)
}

// devbrokerRequest runs policyflow's devbroker: kfake's brokers (its
// default of three) listening on every interface of the container and
// advertising the published host ports, so that the test process's
// clients, which connect through the published ports, are sent back to
// them. Each broker listens on the same port number inside the container,
// so the advertised addresses also reach them from within (the broker
// dials itself). Records stay in memory. Ready when devbroker logs that
// it listens.
var devbrokerRequest = kafkaRequest{brokers: 3, opts: func(hostPorts []int, advertised []string) ([]testcontainers.ContainerCustomizer, []string) {
	var ports []string
	for _, p := range hostPorts {
		ports = append(ports, strconv.Itoa(p)+"/tcp")
	}
	return []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd("--listen", "0.0.0.0:"+strconv.Itoa(hostPorts[0]), "--advertise", advertised[0],
			"--broker-count", strconv.Itoa(len(hostPorts))),
		testcontainers.WithWaitStrategyAndDeadline(containerStartTimeout,
			wait.ForLog("devbroker listening on").WithStartupTimeout(containerStartTimeout)),
	}, ports
}}

// apacheKafkaRequest runs the apache/kafka image as one KRaft node that is
// both broker and controller. Clients use the PLAINTEXT listener on
// container port 9092, advertised as the published host port; the broker
// talks to itself over the BROKER listener and to its controller over
// CONTROLLER, both inside the container. Replication factors are 1 so that
// transactions and groups work on one node. Ready when the server logs that
// it started.
var apacheKafkaRequest = kafkaRequest{brokers: 1, opts: func(_ []int, adv []string) ([]testcontainers.ContainerCustomizer, []string) {
	advertised := adv[0]
	return []testcontainers.ContainerCustomizer{
		testcontainers.WithEnv(map[string]string{
			"CLUSTER_ID":                                     "cG9saWN5Zmxvdy1pdGVzdA", // base64url of the 16 bytes "policyflow-itest"
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9093,CONTROLLER://0.0.0.0:9094",
			"KAFKA_ADVERTISED_LISTENERS":                     "PLAINTEXT://" + advertised + ",BROKER://localhost:9093",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_INTER_BROKER_LISTENER_NAME":               "BROKER",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9094",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS":             "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS":     "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			"KAFKA_LOG_CLEANER_BACKOFF_MS":                   "1000",
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                "false",
			"KAFKA_HEAP_OPTS":                                "-Xms256m -Xmx512m",
		}),
		testcontainers.WithWaitStrategyAndDeadline(containerStartTimeout,
			wait.ForLog("Kafka Server started").WithStartupTimeout(containerStartTimeout)),
	}, []string{"9092/tcp"}
}}

// startKafkaContainer starts a broker container published on a host port
// chosen beforehand, because the broker must know the address it advertises
// before it starts. Another process may take that port in between; the
// start is then tried again with another one.
func startKafkaContainer(ctx context.Context, image, dockerHost string, req kafkaRequest) (*testcontainers.DockerContainer, []string, error) {
	const attempts = 3
	var lastErr error
	for attempt := 1; attempt <= attempts; attempt++ {
		hostPorts, err := freeHostPorts(req.brokers)
		if err != nil {
			return nil, nil, err
		}
		var advertised []string
		for _, p := range hostPorts {
			advertised = append(advertised, net.JoinHostPort(dockerHost, strconv.Itoa(p)))
		}
		opts, containerPorts := req.opts(hostPorts, advertised)
		bindings := network.PortMap{}
		for i, cp := range containerPorts {
			bindings[network.MustParsePort(cp)] = []network.PortBinding{{HostIP: bindIP(dockerHost), HostPort: strconv.Itoa(hostPorts[i])}}
		}
		opts = append(opts,
			testcontainers.WithExposedPorts(containerPorts...),
			testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
				hc.PortBindings = bindings
			}),
			testcontainers.WithLabels(ownerLabels()),
		)
		c, err := testcontainers.Run(ctx, image, opts...)
		if err == nil {
			log.Info().Str("image", image).Strs("addrs", advertised).Str("container", short(c.GetContainerID())).Msg("Kafka container ready")
			return c, advertised, nil
		}
		lastErr = startFailed(c, image, err)
		if !portTaken(err) || ctx.Err() != nil {
			break
		}
		log.Debug().Err(err).Ints("ports", hostPorts).Int("attempt", attempt).Msg("host port taken; trying another")
	}
	return nil, nil, lastErr
}

// freeHostPort returns a TCP port that is free on the loopback interface.
func freeHostPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free host port for the broker: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("release free host port %d: %w", port, err)
	}
	return port, nil
}

// freeHostPorts returns n consecutive TCP ports that are free on the
// loopback interface (the brokers of one devbroker container listen on
// consecutive ports).
func freeHostPorts(n int) ([]int, error) {
	var last error
	for try := 0; try < 50; try++ {
		first, err := freeHostPort()
		if err != nil {
			return nil, err
		}
		ports := []int{first}
		for p := first + 1; p < first+n && p <= 65535; p++ {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				last = err
				break
			}
			_ = ln.Close()
			ports = append(ports, p)
		}
		if len(ports) == n {
			return ports, nil
		}
	}
	return nil, fmt.Errorf("find %d consecutive free host ports for the brokers: %v", n, last)
}

// portTaken reports whether Docker refused to publish a port because it is
// in use.
func portTaken(err error) bool {
	s := err.Error()
	return strings.Contains(s, "port is already allocated") || strings.Contains(s, "address already in use")
}

// startFailed describes a container that did not become ready, with the end
// of its log, and removes it.
func startFailed(c *testcontainers.DockerContainer, image string, err error) error {
	err = fmt.Errorf("start container from %s: %w", image, err)
	if c == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if tail := logTail(ctx, c, 30); tail != "" {
		err = fmt.Errorf("%w\n--- last lines of its log ---\n%s", err, tail)
	}
	return errors.Join(err, terminate(ctx, c, image))
}

// logTail returns the last n lines of a container's log, or "".
func logTail(ctx context.Context, c *testcontainers.DockerContainer, n int) string {
	rc, err := c.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil && len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// terminate stops and removes a container with its anonymous volumes.
func terminate(ctx context.Context, c *testcontainers.DockerContainer, image string) error {
	if c == nil {
		return nil
	}
	id := c.GetContainerID()
	if err := c.Terminate(ctx); err != nil {
		return fmt.Errorf("remove container %s (%s): %w", short(id), image, err)
	}
	return nil
}
