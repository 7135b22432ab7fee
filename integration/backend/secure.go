package backend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// SecureKafka is an in-process broker secured as a production cluster is:
// TLS only, with a certificate made for the test, SASL/SCRAM users, and
// Kafka ACLs checked. It is started per test, whatever PF_BACKEND says.
type SecureKafka struct {
	// Brokers are the seed brokers (TLS).
	Brokers []string
	// CAFile is the PEM file of the CA that signed the broker's
	// certificate, for --tls-ca.
	CAFile string
	// Admin is a superuser (SCRAM-SHA-256), for setting up and looking.
	Admin runtime.Kafka
}

// StartSecureKafka starts a broker with TLS, SASL and ACLs on, a
// superuser for the test and the given users, and stops it when the test
// ends.
func StartSecureKafka(t testing.TB, users ...devstack.User) *SecureKafka {
	t.Helper()
	server, caPEM, err := devstack.LoopbackTLS()
	if err != nil {
		t.Fatalf("backend: make a TLS certificate: %v", err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatalf("backend: write %s: %v", caFile, err)
	}
	admin := devstack.User{Mechanism: "SCRAM-SHA-256", Name: "admin", Password: Secret(t), Superuser: true}
	br, err := devstack.StartBroker(devstack.BrokerOptions{
		Listen: "127.0.0.1:0",
		TLS:    server,
		Users:  append([]devstack.User{admin}, users...),
		ACLs:   true,
		Logger: log.Level(zerolog.WarnLevel),
	})
	if err != nil {
		t.Fatalf("backend: start a broker with TLS, SASL and ACLs: %v", err)
	}
	t.Cleanup(br.Close)
	s := &SecureKafka{Brokers: br.Addrs, CAFile: caFile}
	s.Admin = s.As(admin, "")
	return s
}

// As returns the settings of a client signed in as u, under prefix, with
// TLS verified against the broker's CA and the short fetch wait and
// metadata age of every test client.
func (s *SecureKafka) As(u devstack.User, prefix string) runtime.Kafka {
	return runtime.Kafka{
		Brokers:        append([]string(nil), s.Brokers...),
		Prefix:         prefix,
		SASLMechanism:  u.Mechanism,
		SASLUser:       u.Name,
		SASLPassword:   u.Password,
		TLS:            true,
		TLSCAFile:      s.CAFile,
		FetchMaxWait:   FetchMaxWait,
		MetadataMinAge: MetadataMinAge,
	}
}

// AdminClient returns a superuser's admin client, closed when the test
// ends.
func (s *SecureKafka) AdminClient(t testing.TB) *kadm.Client {
	t.Helper()
	opts, err := s.Admin.ClientOpts()
	if err != nil {
		t.Fatalf("backend: Kafka client options of the superuser: %v", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("backend: create Kafka admin client for %v: %v", s.Brokers, err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// ApplyTopology creates the topology under prefix as the superuser (see
// Backend.ApplyTopology).
func (s *SecureKafka) ApplyTopology(t testing.TB, prefix string, partitions int32) {
	t.Helper()
	applyTopology(t, s.AdminClient(t), prefix, partitions)
}

// StageACLs are the rights policyflow's stages and North API need under a
// topic prefix, and no more: read and write the topics under the prefix,
// join (read) the consumer groups and write with the transactional ids
// under it (both start with <prefix>policyflow-). Describe comes with
// read and write. Nothing on the cluster: the topics are created by an
// administrator (the topology job), and kfake, like Kafka since KIP-679,
// lets a principal that may write a topic use an idempotent producer.
func StageACLs(prefix string) []kfake.ACL {
	prefixed := func(r kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: r, Name: name, Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: op, Allow: true}
	}
	return []kfake.ACL{
		prefixed(kmsg.ACLResourceTypeTopic, prefix, kmsg.ACLOperationRead),
		prefixed(kmsg.ACLResourceTypeTopic, prefix, kmsg.ACLOperationWrite),
		prefixed(kmsg.ACLResourceTypeGroup, prefix+"policyflow-", kmsg.ACLOperationRead),
		prefixed(kmsg.ACLResourceTypeTransactionalId, prefix+"policyflow-", kmsg.ACLOperationWrite),
	}
}

// Secret returns a random password or token for a test.
func Secret(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("backend: make a secret: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// applyTopology creates the starting topology under prefix with adm and
// fails the test if a topic cannot be made to match its specification.
func applyTopology(t testing.TB, adm *kadm.Client, prefix string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := topology.Apply(ctx, adm, topology.Default(), topology.Options{Prefix: prefix, Partitions: partitions})
	if err != nil {
		t.Fatalf("backend: apply the topology under prefix %q: %v", prefix, err)
	}
	if len(rep.Left) > 0 {
		t.Fatalf("backend: the topology under prefix %q differs from its specification after apply: %v", prefix, rep.Left)
	}
	t.Logf("topology under %q: %v", prefix, rep)
}
