package runtime

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// DefaultBrokers works against the embedded stack (`make run`).
const DefaultBrokers = "127.0.0.1:9092"

// Kafka is how a process reaches the cluster: brokers, security and the
// topic prefix that lets several environments share one cluster.
type Kafka struct {
	Brokers       []string
	Prefix        string
	SASLMechanism string // "", PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	SASLUser      string
	SASLPassword  string
	TLS           bool
	TLSCAFile     string
	TLSSkipVerify bool
	// FetchMaxWait and MetadataMinAge are lowered by tests and the dev
	// stack so that rebalances and faults settle in milliseconds.
	// MetadataMinAge 0 is DefaultMetadataMinAge.
	FetchMaxWait   time.Duration
	MetadataMinAge time.Duration
	// Hooks go on every client made from this configuration (a stage's
	// group member, its followers, readers and lag reader): a
	// RequestCounter, for the tests that hold a stage to its budget of
	// Kafka requests per record.
	Hooks []kgo.Hook
}

// DefaultMetadataMinAge is how soon a client may read the cluster's
// metadata again, e.g. after a partition leader moved: one second, not
// franz-go's five, so that a leader moved during a rolling restart costs a
// partition about a second rather than up to five each time (the cluster
// faults of the chaos matrix move leaders six times in three seconds).
// It bounds the metadata requests of one client to one a second.
const DefaultMetadataMinAge = time.Second

// EnvOr returns the value of the environment variable or def.
func EnvOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// envDuration is the duration in the environment variable name (as
// time.ParseDuration reads it), or def when it is unset or unreadable.
func envDuration(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

func envBool(name string, def bool) bool {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def
	}
	return b
}

type listFlag struct{ dst *[]string }

func (l listFlag) String() string {
	if l.dst == nil {
		return ""
	}
	return strings.Join(*l.dst, ",")
}

func (l listFlag) Set(s string) error {
	*l.dst = SplitList(s)
	if len(*l.dst) == 0 {
		return errors.New("empty list")
	}
	return nil
}

// SplitList splits a comma separated list, dropping empty entries.
func SplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// RegisterFlags adds the Kafka flags to fs; each falls back to a PF_*
// environment variable, then to the embedded-stack default.
func (k *Kafka) RegisterFlags(fs *flag.FlagSet) {
	k.Brokers = SplitList(EnvOr("PF_BROKERS", DefaultBrokers))
	fs.Var(listFlag{&k.Brokers}, "brokers", "comma separated seed brokers (env PF_BROKERS)")
	fs.StringVar(&k.Prefix, "topic-prefix", EnvOr("PF_TOPIC_PREFIX", ""), "prefix for every topic name, e.g. \"staging.\" (env PF_TOPIC_PREFIX)")
	fs.StringVar(&k.SASLMechanism, "sasl-mechanism", EnvOr("PF_SASL_MECHANISM", ""), "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty disables SASL (env PF_SASL_MECHANISM)")
	fs.StringVar(&k.SASLUser, "sasl-user", EnvOr("PF_SASL_USER", ""), "SASL user (env PF_SASL_USER)")
	fs.StringVar(&k.SASLPassword, "sasl-password", EnvOr("PF_SASL_PASSWORD", ""), "SASL password (env PF_SASL_PASSWORD)")
	fs.BoolVar(&k.TLS, "tls", envBool("PF_TLS", false), "connect to the brokers with TLS (env PF_TLS)")
	fs.StringVar(&k.TLSCAFile, "tls-ca", EnvOr("PF_TLS_CA", ""), "PEM file with the CA that signed the brokers' certificates (env PF_TLS_CA)")
	fs.BoolVar(&k.TLSSkipVerify, "tls-insecure-skip-verify", envBool("PF_TLS_INSECURE_SKIP_VERIFY", false), "do not verify the brokers' certificates (env PF_TLS_INSECURE_SKIP_VERIFY)")
}

// Topic returns the full name of a topic of the topology under the prefix.
func (k Kafka) Topic(base string) string { return k.Prefix + base }

// Validate says what to fix in a configuration that cannot work.
func (k Kafka) Validate() error {
	if len(k.Brokers) == 0 {
		return errors.New("no brokers: set --brokers or PF_BROKERS, e.g. 127.0.0.1:9092")
	}
	switch strings.ToUpper(k.SASLMechanism) {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if k.SASLUser == "" {
			return fmt.Errorf("SASL mechanism %s needs --sasl-user (PF_SASL_USER)", k.SASLMechanism)
		}
	default:
		return fmt.Errorf("unknown SASL mechanism %q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", k.SASLMechanism)
	}
	return nil
}

// ClientOpts turns the configuration into franz-go options for connection
// and security; callers add their own consume/produce options.
func (k Kafka) ClientOpts() ([]kgo.Opt, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.FetchMaxWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(k.FetchMaxWait))
	}
	minAge := DefaultMetadataMinAge
	if k.MetadataMinAge > 0 {
		minAge = k.MetadataMinAge
	}
	opts = append(opts, kgo.MetadataMinAge(minAge))
	switch strings.ToUpper(k.SASLMechanism) {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsSha512Mechanism()))
	}
	if k.TLS || k.TLSCAFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: k.TLSSkipVerify} //nolint:gosec // opt-in by flag
		if k.TLSCAFile != "" {
			pool, err := CAPool(k.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("TLS %w", err)
			}
			tc.RootCAs = pool
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if len(k.Hooks) > 0 {
		opts = append(opts, kgo.WithHooks(k.Hooks...))
	}
	return opts, nil
}

// CAPool reads a PEM CA bundle, for a client that trusts only its
// certificates.
func CAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// Explain adds to an error of talking to the brokers what to check in this
// configuration: the SASL credentials when Kafka refused them, the CA when
// the brokers' certificate was not trusted, --tls when the brokers do not
// speak TLS, the ACLs when the user was denied, and the brokers and SASL
// credentials when the connection failed or was closed. A broker that
// refuses SASL credentials by closing the connection (as kfake does)
// cannot be told from one that is down, so both are named then. Other
// errors come back unchanged.
func (k Kafka) Explain(err error) error {
	if err == nil {
		return nil
	}
	brokers := strings.Join(k.Brokers, ",")
	var (
		unknownCA  x509.UnknownAuthorityError
		badHost    x509.HostnameError
		invalid    x509.CertificateInvalidError
		verify     *tls.CertificateVerificationError
		notTLS     tls.RecordHeaderError
		netErr     net.Error
		firstRead  *kgo.ErrFirstReadEOF
		saslDenied = errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState)
	)
	switch {
	case saslDenied:
		return fmt.Errorf("Kafka refused the SASL credentials of %s: check --sasl-mechanism, --sasl-user and --sasl-password (PF_SASL_MECHANISM, PF_SASL_USER, PF_SASL_PASSWORD): %w", k.principal(), err)
	case errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("the TLS certificate of brokers %s was not accepted: check --tls-ca (PF_TLS_CA) and that --brokers names hosts the certificate is for: %w", brokers, err)
	case errors.As(err, &notTLS):
		return fmt.Errorf("brokers %s do not speak TLS: drop --tls (PF_TLS) or name their TLS listener in --brokers: %w", brokers, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("Kafka denied %s: grant it ACLs on the topics, groups and transactional ids under prefix %q: %w", k.principal(), k.Prefix, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &firstRead), errors.As(err, &netErr),
		errors.Is(err, context.DeadlineExceeded):
		if k.SASLMechanism != "" {
			return fmt.Errorf("brokers not reachable or SASL credentials refused: check --brokers %s and the SASL credentials of %s (--sasl-user, --sasl-password): %w", brokers, k.principal(), err)
		}
		return fmt.Errorf("brokers not reachable: check --brokers %s (and --tls, --sasl-mechanism if they require TLS or SASL): %w", brokers, err)
	}
	return err
}

// principal names who the client is to the brokers, for error messages.
func (k Kafka) principal() string {
	if k.SASLMechanism == "" {
		return "the client without SASL"
	}
	return fmt.Sprintf("user %q (%s)", k.SASLUser, strings.ToUpper(k.SASLMechanism))
}
