// Package backend starts the Kafka and Consul that policyflow's integration
// suites run against, once per test binary: in-process (PF_BACKEND=embedded,
// the default), in containers (PF_BACKEND=containers), or connects to a
// running cluster the environment names (PF_BACKEND=external), and gives
// every test its own topic prefix and ready clients.
package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The backend kinds PF_BACKEND selects.
const (
	KindEmbedded   = "embedded"
	KindContainers = "containers"
	// KindExternal is a Kafka cluster and a Consul already running,
	// named by the environment (startExternal): Apache Kafka, Redpanda,
	// a managed Kafka, or a devbroker started apart.
	KindExternal = "external"
)

// Client settings every test client gets, so that group rebalances and
// metadata changes settle in well under a second.
const (
	FetchMaxWait   = 100 * time.Millisecond
	MetadataMinAge = 250 * time.Millisecond
)

// Backend is a running Kafka-protocol cluster and Consul agent shared by the
// tests of one test binary.
type Backend struct {
	Kind       string   // KindEmbedded or KindContainers
	Brokers    []string // seed brokers, host:port, reachable from the test process
	ConsulAddr string   // Consul HTTP address, host:port
	// Cluster is the in-process kfake cluster of the embedded backend,
	// for tests that move leaders or coordinators or inject errors; nil
	// on the other backends.
	Cluster *kfake.Cluster

	stop func(ctx context.Context) error
	// kafka and consul, when set, are the connection settings of an
	// external backend (SASL, TLS, the Consul token), copied into every
	// Kafka and Consul configuration the backend hands out.
	kafka  *runtime.Kafka
	consul *consulkv.Config
}

var (
	mu         sync.Mutex
	mainActive bool
	started    bool
	shared     *Backend
	startErr   error

	// startCtx is cancelled by an interrupt, so that a start in progress
	// gives up and cleans up after itself.
	startCtx, cancelStart = context.WithCancel(context.Background())

	log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}).
		Level(logLevel()).With().Timestamp().Str("component", "integration-backend").Logger()
)

// logLevel is the harness's log level: PF_LOG_LEVEL (debug shows every
// container operation), info by default.
func logLevel() zerolog.Level {
	l, err := zerolog.ParseLevel(runtime.EnvOr("PF_LOG_LEVEL", "info"))
	if err != nil || l == zerolog.NoLevel {
		return zerolog.InfoLevel
	}
	return l
}

// startTimeout bounds starting a backend, including building container
// images the first time (Consul alone can take minutes on a slow machine).
const startTimeout = 20 * time.Minute

// stopTimeout bounds stopping a backend after the tests.
const stopTimeout = 2 * time.Minute

// Main runs the tests of a package and then stops the backend they shared.
// Call it from TestMain:
//
//	func TestMain(m *testing.M) { backend.Main(m) }
//
// It exits the process with the tests' status, or 1 if the backend could not
// be stopped. SIGINT and SIGTERM also stop the backend before exiting, so an
// interrupted run leaves no containers or processes behind.
func Main(m *testing.M) {
	mu.Lock()
	mainActive = true
	mu.Unlock()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		log.Warn().Str("signal", sig.String()).Msg("stopping the backend before exiting")
		cancelStart()
		if err := stopShared(); err != nil {
			log.Error().Err(err).Msg("stop backend")
		}
		os.Exit(130)
	}()

	code := m.Run()
	signal.Stop(sigs)
	cancelStart()
	if err := stopShared(); err != nil {
		fmt.Fprintf(os.Stderr, "backend: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Get returns the backend of this test binary, starting it on first use:
// the kind PF_BACKEND names (embedded when unset). The test fails with the
// reason if the backend cannot start; every later Get fails the same way
// without trying again.
func Get(t testing.TB) *Backend {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !mainActive {
		t.Fatal("backend: the package has no TestMain calling backend.Main(m); without it the shared backend is never stopped")
	}
	if !started {
		started = true
		shared, startErr = start()
	}
	if startErr != nil {
		t.Fatalf("backend: %v", startErr)
	}
	return shared
}

// start starts the backend PF_BACKEND names.
func start() (*Backend, error) {
	kind := runtime.EnvOr("PF_BACKEND", KindEmbedded)
	ctx, cancel := context.WithTimeout(startCtx, startTimeout)
	defer cancel()

	began := time.Now()
	var (
		b   *Backend
		err error
	)
	switch kind {
	case KindEmbedded:
		b, err = startEmbedded(ctx)
	case KindContainers:
		b, err = startContainers(ctx)
	case KindExternal:
		b, err = startExternal(ctx)
	default:
		return nil, fmt.Errorf("PF_BACKEND=%q: want %q, %q or %q", kind, KindEmbedded, KindContainers, KindExternal)
	}
	if err != nil {
		return nil, fmt.Errorf("start %s backend: %w", kind, err)
	}
	if err := b.waitReady(ctx); err != nil {
		if stopErr := b.stop(context.Background()); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, fmt.Errorf("start %s backend: %w", kind, err)
	}
	log.Info().Str("kind", kind).Strs("brokers", b.Brokers).Str("consul", b.ConsulAddr).
		Str("took", time.Since(began).Round(time.Millisecond).String()).Msg("backend ready")
	return b, nil
}

// stopShared stops the shared backend if one was started.
func stopShared() error {
	mu.Lock()
	defer mu.Unlock()
	b := shared
	shared = nil
	if started && startErr == nil {
		startErr = errors.New("the backend was already stopped")
	}
	if b == nil || b.stop == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := b.stop(ctx); err != nil {
		return fmt.Errorf("stop %s backend: %w", b.Kind, err)
	}
	return nil
}

// waitReady polls until the brokers answer a metadata request and Consul
// serves a KV read, so that the first test does not race a backend that is
// still electing its leader.
func (b *Backend) waitReady(ctx context.Context) error {
	opts, err := b.Kafka("").ClientOpts()
	if err != nil {
		return fmt.Errorf("Kafka client options for %v: %w", b.Brokers, err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("create Kafka client for %v: %w", b.Brokers, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if err := poll(ctx, func(ctx context.Context) error {
		brokers, err := adm.ListBrokers(ctx)
		if err == nil && len(brokers) == 0 {
			err = errors.New("no brokers in the metadata")
		}
		return err
	}); err != nil {
		return fmt.Errorf("wait for Kafka at %v: %w", b.Brokers, err)
	}

	cc, err := b.Consul().Client()
	if err != nil {
		return fmt.Errorf("create Consul client for %s: %w", b.ConsulAddr, err)
	}
	if err := poll(ctx, func(ctx context.Context) error {
		_, _, err := cc.KV().Get("policyflow-integration/ready", (&api.QueryOptions{}).WithContext(ctx))
		return err
	}); err != nil {
		return fmt.Errorf("wait for Consul at %s: %w", b.ConsulAddr, err)
	}
	return nil
}

// poll calls try until it succeeds or ctx ends, giving each attempt up to
// ten seconds and pausing between attempts.
func poll(ctx context.Context, try func(context.Context) error) error {
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		last = try(actx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Prefix returns a topic prefix no other test uses, made from the test's
// name and random characters, e.g. "t-testsmoke-3f9a1c.". Use it for topic
// names, and with a suffix for consumer groups and transactional ids.
func (b *Backend) Prefix(t testing.TB) string {
	t.Helper()
	var r [3]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatalf("backend: make a topic prefix for %s: %v", t.Name(), err)
	}
	p := "t-" + sanitize(t.Name(), 40) + "-" + hex.EncodeToString(r[:]) + "."
	if b.Kind == KindExternal {
		b.cleanupExternal(t, p)
	}
	return p
}

// sanitize turns a test name into characters Kafka accepts in a topic name
// and Consul in a key: lower-case letters, digits and '-', at most max long.
func sanitize(name string, max int) string {
	var sb strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			sb.WriteRune(c)
			dash = false
		} else if !dash && sb.Len() > 0 {
			sb.WriteByte('-')
			dash = true
		}
		if sb.Len() >= max {
			break
		}
	}
	s := strings.Trim(sb.String(), "-")
	if s == "" {
		s = "test"
	}
	return s
}

// Kafka returns the connection settings of the backend's brokers under the
// topic prefix, with the short fetch wait and metadata age tests need.
func (b *Backend) Kafka(prefix string) runtime.Kafka {
	var k runtime.Kafka
	if b.kafka != nil {
		k = *b.kafka
	}
	k.Brokers = append([]string(nil), b.Brokers...)
	k.Prefix, k.FetchMaxWait, k.MetadataMinAge = prefix, FetchMaxWait, MetadataMinAge
	return k
}

// Consul returns the connection settings of the backend's Consul agent
// (with the external backend's ACL token).
func (b *Backend) Consul() consulkv.Config {
	if b.consul != nil {
		return *b.consul
	}
	return consulkv.Config{Addr: b.ConsulAddr}
}

// Admin returns a Kafka admin client for the backend, closed when the test
// ends.
func (b *Backend) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	opts, err := b.Kafka("").ClientOpts()
	if err != nil {
		t.Fatalf("backend: Kafka client options for %v: %v", b.Brokers, err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("backend: create Kafka admin client for %v: %v", b.Brokers, err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// ApplyTopology creates the starting topology (topology.Default) under the
// prefix, every topic with the given number of partitions (0 keeps each
// topic's own count), and fails the test if any topic cannot be made to
// match its specification.
func (b *Backend) ApplyTopology(t testing.TB, prefix string, partitions int32) {
	t.Helper()
	applyTopology(t, b.Admin(t), prefix, partitions)
}
