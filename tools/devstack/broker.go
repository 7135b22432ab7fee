package devstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Broker settings the embedded stack uses unless BrokerOptions.BrokerConfigs
// says otherwise.
const (
	// DefaultCleanerBackoffMs makes compaction of compacted topics run
	// every minute instead of kfake's default of once an hour. Not more
	// often: kfake compacts past transactions still open (Kafka never
	// cleans past the first unstable offset), so a record of a
	// transaction that is then aborted (its producer killed, and fenced
	// when it restarts) can take the place of the committed value of its
	// key, which is gone once the transaction aborts. Compacting every
	// second did that to an executor killed mid-batch in about one test
	// run in ten; once a minute leaves an open transaction few chances.
	DefaultCleanerBackoffMs = "60000"
	// DefaultOffsetsRetentionMinutes keeps committed group offsets for a
	// year, so a dev stack left stopped for a while resumes where it was.
	DefaultOffsetsRetentionMinutes = "525600"

	// groupMinSessionTimeout and groupMaxSessionTimeout bound the session
	// timeouts classic consumer groups may ask for; wide enough for tests
	// that want members to expire quickly and for slow debugging sessions.
	groupMinSessionTimeout = 100 * time.Millisecond
	groupMaxSessionTimeout = 30 * time.Minute

	// DefaultBrokers is the number of brokers of the embedded cluster:
	// three, as the smallest production cluster, so that partition
	// leaders, the group and the transaction coordinators are spread
	// over brokers and every client routes by leader. Topics created with
	// the broker's default replication factor get three replicas.
	DefaultBrokers = 3
	// MaxBrokers bounds BrokerOptions.Brokers.
	MaxBrokers = 16
)

// BrokerOptions configures StartBroker.
type BrokerOptions struct {
	// Brokers is the number of brokers of the cluster; 0 means
	// DefaultBrokers.
	Brokers int
	// Listen is where to accept Kafka connections: host:port, the first
	// broker on port and each next one on the next port (9092, 9093,
	// 9094), or a comma-separated host:port per broker (as Broker.Addrs
	// lists them, to start a cluster again on the same ports). Port 0
	// picks a free port for each broker; "127.0.0.1:0" is the default.
	Listen string
	// Advertise is the host or host:port the brokers tell clients to
	// connect to (metadata and coordinator responses). Empty advertises
	// the listening address, with 127.0.0.1 in place of an unspecified
	// host such as 0.0.0.0. A host without a port keeps each broker's
	// listening port; a port is the first broker's, the next ones
	// advertise the next ports.
	Advertise string
	// DataDir keeps topics, records, groups, committed offsets and
	// transactions across restarts; "" keeps everything in memory only.
	DataDir string
	// Sync makes the broker fsync every batch it writes to DataDir before
	// it answers the produce (kfake.SyncWrites): what was acknowledged
	// then survives a power loss or a crash of the machine. Without it
	// batches reach the disk at segment roll and at shutdown, and the
	// operating system's cache holds them meanwhile: they survive a kill
	// of the process (even kill -9), not a power loss. See DataDir.
	Sync bool
	// Partitions is the partition count of topics created without one
	// (CreateTopics with -1 partitions); 0 keeps kfake's default of 10.
	Partitions int32
	// BrokerConfigs are broker-level configs such as
	// log.cleaner.backoff.ms or message.max.bytes; they override the
	// defaults of this package and anything persisted in DataDir. An
	// empty value resets a config to kfake's default.
	BrokerConfigs map[string]string
	// Logger receives the broker's log lines; its level filters them.
	// The zero value logs nothing.
	Logger zerolog.Logger
	// TLS, when set, makes the broker accept TLS connections only, with
	// this configuration (its certificate).
	TLS *tls.Config
	// Users, when not empty, makes the broker require SASL
	// authentication as one of them.
	Users []User
	// ACLs turns Kafka ACL checks on: a superuser may do anything, any
	// other user only what its ACLs allow. It needs a superuser.
	ACLs bool
}

// User is a SASL user of the broker.
type User struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string
	Name      string
	Password  string
	// Superuser bypasses the ACLs.
	Superuser bool
	// ACLs are the user's rights when BrokerOptions.ACLs is on; the
	// principal of each is User:<Name> whatever it says.
	ACLs []kfake.ACL
}

// Broker is a running in-process Kafka-protocol cluster of one or more
// brokers.
type Broker struct {
	// Cluster is the kfake cluster, for tests that inject faults or
	// inspect groups.
	Cluster *kfake.Cluster
	// Addrs are the addresses clients use as seed brokers, one per
	// broker, in node id order.
	Addrs []string

	ports []int // the listening port of each broker, by node id
}

// Restart takes broker node out of the cluster, as a broker stopped in a
// rolling restart: it stops listening, its connections are closed and its
// partitions get new leaders among the others (kfake's RemoveNode). After
// down it comes back under the same node id on the same port (AddNode),
// and partitions are spread over every broker again.
func (b *Broker) Restart(ctx context.Context, node int32, down time.Duration) error {
	if node < 0 || int(node) >= len(b.ports) {
		return fmt.Errorf("restart broker %d: the cluster has brokers 0 to %d", node, len(b.ports)-1)
	}
	if err := b.Cluster.RemoveNode(node); err != nil {
		return fmt.Errorf("stop broker %d: %w", node, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(down):
	}
	// The port was just released; another process may hold it for a
	// moment (a connection in TIME_WAIT does not stop a listener).
	var err error
	for try := 0; try < 50; try++ {
		if _, _, err = b.Cluster.AddNode(node, b.ports[node]); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("start broker %d again on port %d: %w", node, b.ports[node], err)
}

// BrokersFromEnv is the number of brokers PF_BROKER_COUNT asks for,
// DefaultBrokers when it is unset.
func BrokersFromEnv() (int, error) {
	v := os.Getenv("PF_BROKER_COUNT")
	if v == "" {
		return DefaultBrokers, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > MaxBrokers {
		return 0, fmt.Errorf("PF_BROKER_COUNT=%q: want a number of brokers between 1 and %d", v, MaxBrokers)
	}
	return n, nil
}

// listenPlan is where each broker of a cluster listens.
type listenPlan struct {
	host  string
	ports []int // one per broker; 0 picks a free one
}

// planListen resolves BrokerOptions.Listen and Brokers.
func planListen(listen string, brokers int) (listenPlan, error) {
	if brokers < 0 || brokers > MaxBrokers {
		return listenPlan{}, fmt.Errorf("%d brokers: want between 1 and %d", brokers, MaxBrokers)
	}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	var p listenPlan
	if strings.Contains(listen, ",") {
		for _, a := range strings.Split(listen, ",") {
			host, port, err := splitHostPort(strings.TrimSpace(a))
			if err != nil {
				return listenPlan{}, err
			}
			if len(p.ports) > 0 && host != p.host {
				return listenPlan{}, fmt.Errorf("listen addresses %q: every broker must listen on the same host (%s, not %s)", listen, p.host, host)
			}
			p.host = host
			p.ports = append(p.ports, port)
		}
		if brokers != 0 && brokers != len(p.ports) {
			return listenPlan{}, fmt.Errorf("listen addresses %q name %d brokers, but %d were asked for", listen, len(p.ports), brokers)
		}
		return p, nil
	}
	if brokers == 0 {
		brokers = DefaultBrokers
	}
	host, port, err := splitHostPort(listen)
	if err != nil {
		return listenPlan{}, err
	}
	if port != 0 && port+brokers-1 > 65535 {
		return listenPlan{}, fmt.Errorf("listen address %q: %d brokers need ports %d to %d, beyond 65535", listen, brokers, port, port+brokers-1)
	}
	p.host = host
	for i := 0; i < brokers; i++ {
		if port == 0 {
			p.ports = append(p.ports, 0)
		} else {
			p.ports = append(p.ports, port+i)
		}
	}
	return p, nil
}

// StartBroker starts a cluster of o.Brokers brokers (three by default) in
// this process. With a DataDir it reloads what a previous cluster on the
// same directory persisted (whatever its number of brokers); close it with
// Close so that the last writes and committed offsets reach the disk.
func StartBroker(o BrokerOptions) (*Broker, error) {
	plan, err := planListen(o.Listen, o.Brokers)
	if err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	host := plan.host
	advHost, advPort, err := advertised(o.Advertise, host)
	if err != nil {
		return nil, fmt.Errorf("start broker on %s: %w", listen, err)
	}
	// A broker's advertised port: with an advertised port, the first
	// broker advertises it and the next ones the next ports, matched by
	// the listening port's place in the plan (also for a broker added
	// back later on its old port), else by the order kfake creates the
	// listeners in (node 0 first). 0 advertises the listening port.
	var created int
	var bound []int // the listening port of each broker started first, by node id
	advPortOf := func(listenPort int) int {
		n := created
		created++
		if n < len(plan.ports) {
			bound = append(bound, listenPort)
		}
		if advPort == 0 {
			return 0
		}
		for i, p := range plan.ports {
			if p == listenPort && p != 0 {
				return advPort + i
			}
		}
		if n < len(plan.ports) {
			return advPort + n
		}
		for i, p := range bound {
			if p == listenPort {
				return advPort + i // a broker back on its port
			}
		}
		return 0
	}

	cfgs := map[string]string{
		"log.cleaner.backoff.ms":    DefaultCleanerBackoffMs,
		"offsets.retention.minutes": DefaultOffsetsRetentionMinutes,
	}
	for k, v := range o.BrokerConfigs {
		cfgs[k] = v
	}

	opts := []kfake.Opt{
		// One port per broker; ListenFn binds each on the host we were
		// asked for (kfake itself always binds 127.0.0.1).
		kfake.Ports(plan.ports...),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			port := ln.Addr().(*net.TCPAddr).Port
			return &advertisingListener{Listener: ln, host: advHost, port: advPortOf(port), conns: map[net.Conn]struct{}{}}, nil
		}),
		kfake.WithLogger(kfakeLogger{o.Logger}),
		kfake.ClusterID("policyflow"),
		kfake.GroupMinSessionTimeout(groupMinSessionTimeout),
		kfake.GroupMaxSessionTimeout(groupMaxSessionTimeout),
		kfake.BrokerConfigs(cfgs),
	}
	if o.Partitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(int(o.Partitions)))
	}
	sec, err := o.security()
	if err != nil {
		return nil, fmt.Errorf("start broker on %s: %w", listen, err)
	}
	opts = append(opts, sec...)
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("start broker: create data dir %s: %w", o.DataDir, err)
		}
		opts = append(opts, kfake.DataDir(o.DataDir))
		if o.Sync {
			opts = append(opts, kfake.SyncWrites())
		}
	}

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		if o.DataDir != "" {
			return nil, fmt.Errorf("start broker on %s with data dir %s: %w", listen, o.DataDir, err)
		}
		return nil, fmt.Errorf("start broker on %s: %w", listen, err)
	}
	b := &Broker{Cluster: c, Addrs: c.ListenAddrs(), ports: bound}
	answerEpochsAsKafka(c)
	readCommittedAsKafka(c)

	if o.DataDir != "" {
		if err := b.restartCompaction(o.adminOpts(), cfgs["log.cleaner.backoff.ms"]); err != nil {
			b.Close()
			return nil, fmt.Errorf("start broker with data dir %s: %w", o.DataDir, err)
		}
	}
	o.Logger.Debug().Strs("addrs", b.Addrs).Str("data_dir", o.DataDir).Msg("broker started")
	return b, nil
}

// answerEpochsAsKafka makes the cluster answer a consumer's check of its
// position after a leader change (OffsetForLeaderEpoch, KIP-320) as Kafka
// does. kfake knows an epoch only from the batches written in it: once a
// partition's leader moved (ShufflePartitionLeaders, a broker stopped in a
// rolling restart) and nothing was written since, it answers "epoch
// unknown" for the epoch every caught-up consumer last read at, and
// franz-go then resets the consumer to its reset offset, the start of the
// partition for every stage: each leader move replayed whole topics
// through the pipeline (a fault matrix saw a partition still replaying two
// minutes on). Kafka answers with that epoch's end offset, the log end
// when no later epoch wrote. Asking about the partition's current epoch
// gets that answer from kfake (its high watermark), so a question about
// an older epoch of a client that knows the current one is asked about
// the current one. That end is never before the older epoch's, so no
// loss is reported that did not happen, and a log that really lost
// records (a restart after a crash, before they reached the disk) still
// reads as loss, from where the log now ends instead of from offset 0.
func answerEpochsAsKafka(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r, ok := req.(*kmsg.OffsetForLeaderEpochRequest)
		if !ok || r.ReplicaID >= 0 {
			return nil, nil, false
		}
		for i := range r.Topics {
			for j := range r.Topics[i].Partitions {
				p := &r.Topics[i].Partitions[j]
				if p.CurrentLeaderEpoch >= 0 && p.LeaderEpoch < p.CurrentLeaderEpoch {
					p.LeaderEpoch = p.CurrentLeaderEpoch
				}
			}
		}
		return nil, nil, false // kfake answers the question as rewritten
	})
}

// readCommittedAsKafka makes the cluster keep aborted records from
// read_committed consumers as Kafka does, whatever the fetch's size.
// kfake stops filling a fetch response once it reaches the request's
// MaxBytes, and then leaves out the aborted transactions of the
// partition it was filling (the list a consumer skips aborted records
// by): that partition's aborted records reach the consumer as committed.
// The stages fetch at most runtime.DefaultFetchMaxBytes a request and a
// partition alike, so every fetch a partition fills was cut that way: a
// stage handled the records of its input's aborted transactions (the
// segmenter wrote segments of matches a rebalance had aborted), restored
// state from them, and pfbench's digests of a run's outputs counted them
// (more records with two members than with one, every scaling run that
// aborted a transaction). A read_committed fetch is asked with no
// request-wide bound: each partition's own bound (PartitionMaxBytes),
// which kfake applies without that fault, still bounds what it returns.
// services/internal/stagetest does the same to the tests' cluster.
func readCommittedAsKafka(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if r, ok := req.(*kmsg.FetchRequest); ok && r.IsolationLevel == 1 {
			r.MaxBytes = math.MaxInt32
		}
		return nil, nil, false // kfake answers the fetch as rewritten
	})
}

// Close stops the broker and, with a DataDir, writes its state to disk. It
// is safe to call more than once.
func (b *Broker) Close() {
	if b == nil || b.Cluster == nil {
		return
	}
	b.Cluster.Close()
}

// restartCompaction makes a broker that reloaded its state compact again.
// kfake starts its compaction timer only when a topic is created or a
// config is altered, not when topics are loaded from the data dir; a
// validate-only broker config change (which alters nothing) makes it
// look at the topics again.
func (b *Broker) restartCompaction(admin []kgo.Opt, backoffMs string) error {
	if backoffMs == "" {
		backoffMs = "3600000"
	}
	cl, err := kgo.NewClient(append(admin, kgo.SeedBrokers(b.Addrs...))...)
	if err != nil {
		return fmt.Errorf("restart compaction: create client: %w", err)
	}
	defer cl.Close()

	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	req.ValidateOnly = true
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = "log.cleaner.backoff.ms"
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	cfg.Value = &backoffMs
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("restart compaction: validate broker config: %w", err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return fmt.Errorf("restart compaction: validate log.cleaner.backoff.ms=%s: %w", backoffMs, err)
		}
	}
	return nil
}

// security turns TLS, Users and ACLs into kfake options.
func (o BrokerOptions) security() ([]kfake.Opt, error) {
	var opts []kfake.Opt
	if o.TLS != nil {
		opts = append(opts, kfake.TLS(o.TLS))
	}
	superuser := false
	for _, u := range o.Users {
		switch u.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			return nil, fmt.Errorf("SASL user %q: unknown mechanism %q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", u.Name, u.Mechanism)
		}
		if u.Name == "" {
			return nil, fmt.Errorf("a SASL user (%s) has no name", u.Mechanism)
		}
		if u.Superuser {
			superuser = true
			opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, u.Password))
		} else {
			opts = append(opts, kfake.User(u.Mechanism, u.Name, u.Password, u.ACLs...))
		}
	}
	if len(o.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
	}
	if o.ACLs {
		if !superuser {
			return nil, errors.New("ACLs need a superuser among the SASL users: without one nobody could create a topic")
		}
		opts = append(opts, kfake.EnableACLs())
	}
	return opts, nil
}

// adminOpts are the options of a client of the broker's own that may do
// anything: the first superuser (else the first user) and, with TLS, a
// configuration that trusts the broker's own certificate.
func (o BrokerOptions) adminOpts() []kgo.Opt {
	var opts []kgo.Opt
	var admin *User
	for i := range o.Users {
		if u := &o.Users[i]; admin == nil || u.Superuser && !admin.Superuser {
			admin = u
		}
	}
	if admin != nil {
		switch admin.Mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: admin.Name, Pass: admin.Password}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(scram.Auth{User: admin.Name, Pass: admin.Password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(scram.Auth{User: admin.Name, Pass: admin.Password}.AsSha512Mechanism()))
		}
	}
	if o.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(trustOwn(o.TLS)))
	}
	return opts
}

// trustOwn is a client configuration that trusts the certificates of a
// server configuration: each served leaf is a root, so the broker's own
// client verifies it without knowing the CA that signed it.
func trustOwn(server *tls.Config) *tls.Config {
	pool := x509.NewCertPool()
	for _, c := range server.Certificates {
		if len(c.Certificate) == 0 {
			continue
		}
		if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
			pool.AddCert(leaf)
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
}

// advertised resolves BrokerOptions.Advertise; port 0 means "the port the
// listener got".
func advertised(adv, listenHost string) (string, int, error) {
	if adv == "" {
		if isUnspecified(listenHost) {
			return "127.0.0.1", 0, nil
		}
		return listenHost, 0, nil
	}
	host, p, splitErr := net.SplitHostPort(adv)
	if splitErr != nil {
		// Not host:port: a bare host, which keeps the listening port.
		return adv, 0, nil
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("advertised address %q: port %q is not a number between 0 and 65535", adv, p)
	}
	if host == "" {
		return "", 0, fmt.Errorf("advertised address %q has no host", adv)
	}
	return host, port, nil
}

// advertisingListener reports the advertised address as its own; kfake puts
// the listener's address in the metadata it returns to clients. Closing it
// also closes the connections it accepted, as a broker that stops does:
// kfake's RemoveNode closes only the listener, and a removed broker whose
// clients stayed connected would be no rolling restart.
type advertisingListener struct {
	net.Listener
	host string
	port int

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (l *advertisingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *advertisingListener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		_ = c.(*trackedConn).Conn.Close()
	}
	return err
}

func (l *advertisingListener) Addr() net.Addr {
	port := l.port
	if port == 0 {
		if ta, ok := l.Listener.Addr().(*net.TCPAddr); ok {
			port = ta.Port
		}
	}
	return hostPortAddr(net.JoinHostPort(l.host, strconv.Itoa(port)))
}

// trackedConn leaves its listener's set when it closes.
type trackedConn struct {
	net.Conn
	l *advertisingListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

type hostPortAddr string

func (a hostPortAddr) Network() string { return "tcp" }
func (a hostPortAddr) String() string  { return string(a) }
