package runtime_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// Records that are neither an event nor a tombstone are dead-lettered as
// malformed, with what is wrong: an empty value, a truncated event.
func TestEmptyAndTruncatedValuesAreDeadLetteredAsMalformed(t *testing.T) {
	c := newCluster(t)
	whole := c.Record(t, "in", "k-truncated", req("r-truncated"))
	truncated := c.Record(t, "in", "k-truncated", nil)
	truncated.Value = whole.Value[:len(whole.Value)-3]
	empty := c.Record(t, "in", "k-empty", nil)
	empty.Value = []byte{}
	empty.Headers = []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}
	c.ProduceRecords(t, truncated, empty)
	var calls atomic.Int64
	stagetest.Run(t, echoStage(&calls), stagetest.Env(c.Kafka))

	dlq := c.Read(t, "dlq.echo", 2, 60*time.Second)
	reasons := map[string]string{}
	for _, d := range dlq {
		reasons[string(d.Key)] = stagetest.Header(d, runtime.HeaderError)
	}
	if len(dlq) != 2 {
		t.Fatalf("got %d dead letters %v, want 2", len(dlq), reasons)
	}
	if r := reasons["k-empty"]; !strings.HasPrefix(r, "malformed record: the value is empty") {
		t.Errorf("dead letter of the empty value says %q", r)
	}
	if r := reasons["k-truncated"]; !strings.HasPrefix(r, "malformed record: ") || !strings.Contains(r, events.SchemaCatchupRequest) {
		t.Errorf("dead letter of the truncated event says %q", r)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the handler was called %d times, want never", n)
	}
}

// syncBuffer is a log sink the stage writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A broker that refuses the SASL credentials closes the connection, which
// cannot be told from a broker that is down: the stage logs an error and
// is not ready, saying to check both, and keeps trying.
func TestRefusedSASLCredentialsSayWhatToCheck(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "stage", "right"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	k := runtime.Kafka{Brokers: kc.ListenAddrs(), Prefix: "t.", SASLMechanism: "SCRAM-SHA-512", SASLUser: "stage", SASLPassword: "wrong"}
	var logs syncBuffer
	env := stagetest.Env(k)
	env.Log = runtime.NewLogger(&logs, "info", false)
	var calls atomic.Int64
	stop := stagetest.Run(t, echoStage(&calls), env)
	defer stop()

	const want = `brokers not reachable or SASL credentials refused: check --brokers ` // then the brokers and the user
	testkit.Eventually(t, 30*time.Second, func() error {
		why := env.Health.Status()["echo"]
		if strings.HasPrefix(why, want) && strings.Contains(why, `user "stage" (SCRAM-SHA-512)`) &&
			strings.Contains(logs.String(), `"level":"error"`) && strings.Contains(logs.String(), want) {
			return nil
		}
		return fmt.Errorf("readiness says %q and the log %q; want both to say %q", why, logs.String(), want)
	})
}

func TestExplainSaysWhatToCheck(t *testing.T) {
	sasl := runtime.Kafka{Brokers: []string{"b1:9093", "b2:9093"}, Prefix: "prod.", SASLMechanism: "scram-sha-256", SASLUser: "writer"}
	plain := runtime.Kafka{Brokers: []string{"b1:9092"}}
	for _, c := range []struct {
		name string
		k    runtime.Kafka
		err  error
		says string // the start of the explained error
	}{
		{"SASL refused by Kafka", sasl, fmt.Errorf("ping: %w", kerr.SaslAuthenticationFailed),
			`Kafka refused the SASL credentials of user "writer" (SCRAM-SHA-256): check --sasl-mechanism, --sasl-user and --sasl-password`},
		{"connection closed with SASL", sasl, io.EOF,
			`brokers not reachable or SASL credentials refused: check --brokers b1:9093,b2:9093 and the SASL credentials of user "writer" (SCRAM-SHA-256)`},
		{"timeout with SASL", sasl, context.DeadlineExceeded, "brokers not reachable or SASL credentials refused"},
		{"connection closed without SASL", plain, io.ErrUnexpectedEOF, "brokers not reachable: check --brokers b1:9092 (and --tls, --sasl-mechanism"},
		{"unknown CA", sasl, &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
			"the TLS certificate of brokers b1:9093,b2:9093 was not accepted: check --tls-ca"},
		{"not TLS", plain, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"},
			"brokers b1:9092 do not speak TLS: drop --tls"},
		{"ACL", sasl, kerr.TopicAuthorizationFailed, `Kafka denied user "writer" (SCRAM-SHA-256): grant it ACLs on the topics, groups and transactional ids under prefix "prod."`},
	} {
		got := c.k.Explain(c.err)
		if !strings.HasPrefix(got.Error(), c.says) || !errors.Is(got, c.err) {
			t.Errorf("%s: %q, want it to start with %q and wrap %v", c.name, got, c.says, c.err)
		}
	}
	other := errors.New("unknown topic")
	if got := sasl.Explain(other); got != other {
		t.Errorf("an error that is not about the connection came back as %q", got)
	}
	if sasl.Explain(nil) != nil {
		t.Error("nil explained as an error")
	}
}
