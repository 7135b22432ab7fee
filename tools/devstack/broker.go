package devstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
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
)

// BrokerOptions configures StartBroker.
type BrokerOptions struct {
	// Listen is the host:port to accept Kafka connections on;
	// "127.0.0.1:0" (also the default when empty) picks a free port.
	Listen string
	// Advertise is the host or host:port the broker tells clients to
	// connect to (metadata and coordinator responses). Empty advertises
	// the listening address, with 127.0.0.1 in place of an unspecified
	// host such as 0.0.0.0. A host without a port keeps the listening port.
	Advertise string
	// DataDir keeps topics, records, groups, committed offsets and
	// transactions across restarts; "" keeps everything in memory only.
	DataDir string
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

// Broker is a running in-process Kafka-protocol broker.
type Broker struct {
	// Cluster is the kfake cluster, for tests that inject faults or
	// inspect groups.
	Cluster *kfake.Cluster
	// Addrs are the addresses clients use as seed brokers.
	Addrs []string
}

// StartBroker starts a single-node broker. With a DataDir it reloads what a
// previous broker on the same directory persisted; close the broker with
// Close so that the last writes and committed offsets reach the disk.
func StartBroker(o BrokerOptions) (*Broker, error) {
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	host, port, err := splitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("start broker: %w", err)
	}
	advHost, advPort, err := advertised(o.Advertise, host)
	if err != nil {
		return nil, fmt.Errorf("start broker on %s: %w", listen, err)
	}

	cfgs := map[string]string{
		"log.cleaner.backoff.ms":    DefaultCleanerBackoffMs,
		"offsets.retention.minutes": DefaultOffsetsRetentionMinutes,
	}
	for k, v := range o.BrokerConfigs {
		cfgs[k] = v
	}

	opts := []kfake.Opt{
		// One port means one broker; ListenFn binds it on the host we
		// were asked for (kfake itself always binds 127.0.0.1).
		kfake.Ports(port),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			return advertisingListener{Listener: ln, host: advHost, port: advPort}, nil
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
	}

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		if o.DataDir != "" {
			return nil, fmt.Errorf("start broker on %s with data dir %s: %w", listen, o.DataDir, err)
		}
		return nil, fmt.Errorf("start broker on %s: %w", listen, err)
	}
	b := &Broker{Cluster: c, Addrs: c.ListenAddrs()}

	if o.DataDir != "" {
		if err := b.restartCompaction(o.adminOpts(), cfgs["log.cleaner.backoff.ms"]); err != nil {
			b.Close()
			return nil, fmt.Errorf("start broker with data dir %s: %w", o.DataDir, err)
		}
	}
	o.Logger.Debug().Strs("addrs", b.Addrs).Str("data_dir", o.DataDir).Msg("broker started")
	return b, nil
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
// the listener's address in the metadata it returns to clients.
type advertisingListener struct {
	net.Listener
	host string
	port int
}

func (l advertisingListener) Addr() net.Addr {
	port := l.port
	if port == 0 {
		if ta, ok := l.Listener.Addr().(*net.TCPAddr); ok {
			port = ta.Port
		}
	}
	return hostPortAddr(net.JoinHostPort(l.host, strconv.Itoa(port)))
}

type hostPortAddr string

func (a hostPortAddr) Network() string { return "tcp" }
func (a hostPortAddr) String() string  { return string(a) }
