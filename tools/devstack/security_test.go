package devstack

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/policyflow/policyflow/services/runtime"
)

// A broker with TLS, SASL users and ACLs lets in only clients that trust
// its CA and know a password, and a user only where its ACLs allow; it
// keeps all of it across a restart on its data directory.
func TestBrokerWithTLSSASLAndACLs(t *testing.T) {
	server, caPEM, err := LoopbackTLS()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	o := BrokerOptions{
		DataDir: t.TempDir(),
		TLS:     server,
		ACLs:    true,
		Users: []User{
			{Mechanism: "SCRAM-SHA-256", Name: "admin", Password: "admin-pw", Superuser: true},
			{Mechanism: "SCRAM-SHA-512", Name: "app", Password: "app-pw", ACLs: []kfake.ACL{
				{Resource: kmsg.ACLResourceTypeTopic, Name: "app.", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationRead, Allow: true},
				{Resource: kmsg.ACLResourceTypeTopic, Name: "app.", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationWrite, Allow: true},
			}},
		},
	}
	b := startBroker(t, o)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	client := func(k runtime.Kafka, extra ...kgo.Opt) *kgo.Client {
		t.Helper()
		k.Brokers = b.Addrs
		opts, err := k.ClientOpts()
		if err != nil {
			t.Fatal(err)
		}
		return testClient(t, b, append(opts, extra...)...)
	}
	admin := client(runtime.Kafka{TLS: true, TLSCAFile: caFile, SASLMechanism: "SCRAM-SHA-256", SASLUser: "admin", SASLPassword: "admin-pw"})
	defer admin.Close()
	for _, topic := range []string{"app.in", "other"} {
		resp, err := kadm.NewClient(admin).CreateTopic(ctx, 1, -1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatalf("the superuser creates %s: %v", topic, err)
		}
	}
	app := client(runtime.Kafka{TLS: true, TLSCAFile: caFile, SASLMechanism: "SCRAM-SHA-512", SASLUser: "app", SASLPassword: "app-pw"})
	defer app.Close()
	produce(ctx, t, app, "app.in", "k", "v")
	if err := app.ProduceSync(ctx, &kgo.Record{Topic: "other", Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("app writes to a topic outside its ACLs: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	for name, k := range map[string]runtime.Kafka{
		"wrong password": {TLS: true, TLSCAFile: caFile, SASLMechanism: "SCRAM-SHA-512", SASLUser: "app", SASLPassword: "nope"},
		"no SASL":        {TLS: true, TLSCAFile: caFile},
		"no TLS":         {SASLMechanism: "SCRAM-SHA-512", SASLUser: "app", SASLPassword: "app-pw"},
		"another CA":     {TLS: true, SASLMechanism: "SCRAM-SHA-512", SASLUser: "app", SASLPassword: "app-pw"},
	} {
		cl := client(k)
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		err := cl.Ping(pctx)
		pcancel()
		cl.Close()
		if err == nil {
			t.Errorf("%s: the broker answered", name)
		}
	}

	// The broker's own client (compaction on a reloaded data dir) gets
	// through TLS and SASL after a restart; users and ACLs are kept.
	b.Close()
	b = startBroker(t, o)
	defer b.Close()
	again := client(runtime.Kafka{TLS: true, TLSCAFile: caFile, SASLMechanism: "SCRAM-SHA-512", SASLUser: "app", SASLPassword: "app-pw"},
		kgo.ConsumeTopics("app.in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer again.Close()
	if got := consumeN(ctx, t, again, 1); len(got) != 1 || string(got[0].Key) != "k" || string(got[0].Value) != "v" {
		t.Fatalf("app reads %d records from app.in after the restart, want k=v", len(got))
	}
}

// An agent started with a management token denies what no token allows.
func TestConsulWithACLsDeniesWithoutToken(t *testing.T) {
	bin := consulBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const mgmt = "5c2f9a0e-8d1b-4e7a-b3c6-0f9e8d7c6b5a"
	a, err := StartConsul(ctx, ConsulOptions{Binary: bin, ManagementToken: mgmt})
	if err != nil {
		t.Fatalf("StartConsul: %v", err)
	}
	defer a.Stop()
	if strings.Contains(readFile(t, a.LogFile), mgmt) {
		t.Error("the management token is in the agent's log (its command line)")
	}
	with := func(token string) *consulapi.KV {
		c, err := consulapi.NewClient(&consulapi.Config{Address: a.Addr, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return c.KV()
	}
	_, err = with("").Put(&consulapi.KVPair{Key: "svc:policies/event", Value: []byte("{}")}, nil)
	var se consulapi.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusForbidden || !strings.Contains(se.Body, "Permission denied") {
		t.Errorf("a write without a token: %v, want 403 Permission denied", err)
	}
	if _, err := with(mgmt).Put(&consulapi.KVPair{Key: "svc:policies/event", Value: []byte("{}")}, nil); err != nil {
		t.Errorf("a write with the management token: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
