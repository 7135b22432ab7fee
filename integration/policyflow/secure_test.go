package policyflow_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/stages"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
)

// kafkaFlags parses the Kafka flags every stage binary takes, as an
// operator gives them.
func kafkaFlags(t *testing.T, args ...string) runtime.Kafka {
	t.Helper()
	fs := flag.NewFlagSet("stage", flag.ContinueOnError)
	var k runtime.Kafka
	k.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	k.FetchMaxWait, k.MetadataMinAge = backend.FetchMaxWait, backend.MetadataMinAge
	return k
}

// The whole flow runs on a broker that requires TLS and SASL/SCRAM and
// checks ACLs, the stages and the North API signed in as a user that may
// do only what backend.StageACLs grants: a pushed policy reaches Consul.
func TestPolicyFlowOnKafkaWithTLSSASLAndACLs(t *testing.T) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	user := devstack.User{Mechanism: "SCRAM-SHA-512", Name: "policyflow", Password: backend.Secret(t), ACLs: backend.StageACLs(prefix)}
	sk := backend.StartSecureKafka(t, user)
	sk.ApplyTopology(t, prefix, 3)
	k := kafkaFlags(t, "--brokers", strings.Join(sk.Brokers, ","), "--topic-prefix", prefix,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", user.Name, "--sasl-password", user.Password,
		"--tls", "--tls-ca", sk.CAFile)

	p := startOn(t, b, k)
	scn := scnFor(p, "secured")
	p.register("comp-sec", map[string]any{
		"deployment_id": "dep-sec", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_SECURED"},
	})
	p.publish("DCAE.Config_SECURED.3.xml", "3", `{"tls": true}`, map[string]any{"ONAPName": "DCAE"})
	p.waitItems(scn, map[string]string{"DCAE.Config_SECURED": `{"tls":true}`})

	// The ACLs hold: the same user may not create a topic, nor read or
	// write one outside its prefix.
	opts, err := k.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outside := "elsewhere." + strings.TrimSuffix(prefix, ".")
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, prefix+"made-by-a-stage")
	if err == nil {
		err = resp.Err
	}
	if !isDenied(err) {
		t.Errorf("the stages' user created a topic: %v, want an authorization error", err)
	}
	if _, err := sk.AdminClient(t).CreateTopic(ctx, 1, -1, nil, outside); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: outside, Value: []byte("x")}).FirstErr(); !isDenied(err) {
		t.Errorf("the stages' user wrote to %s, outside its prefix: %v, want an authorization error", outside, err)
	}
}

// isDenied reports whether err is Kafka refusing an operation for lack of
// ACLs.
func isDenied(err error) bool {
	for _, e := range []error{kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.TransactionalIDAuthorizationFailed} {
		if err != nil && strings.Contains(err.Error(), e.Error()) {
			return true
		}
	}
	return false
}

// lockedLog is a log the stages write while the test reads it.
type lockedLog struct {
	mu sync.Mutex
	sb strings.Builder
}

func (l *lockedLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sb.Write(b)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sb.String()
}

// With a wrong SASL password the broker closes the connection, which
// cannot be told from a broker that is down: every stage stays not ready,
// saying to check the brokers and the SASL credentials, and logs it as an
// error.
func TestWrongSASLPasswordSaysToCheckTheCredentials(t *testing.T) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	user := devstack.User{Mechanism: "SCRAM-SHA-256", Name: "policyflow", Password: backend.Secret(t), ACLs: backend.StageACLs(prefix)}
	sk := backend.StartSecureKafka(t, user)
	sk.ApplyTopology(t, prefix, 1)
	wrong := user
	wrong.Password = "not-" + user.Password
	k := sk.As(wrong, prefix)

	var logs lockedLog
	env := runtime.NewEnv(k, runtime.NewLogger(&logs, "info", false))
	env.Retry = runtime.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}
	ops := httptest.NewServer(env.Handler(nil))
	defer ops.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	all := stages.With(stages.Config{Consul: b.Consul()})
	go func() { done <- runtime.RunStages(ctx, env, all...) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stages: %v", err)
		}
	}()

	const hint = "brokers not reachable or SASL credentials refused: check --brokers "
	testkit.Eventually(t, time.Minute, testkit.Named("every stage not ready, saying to check the SASL credentials", func() error {
		ready, err := readinessOf(ops.URL)
		if err != nil {
			return err
		}
		for _, s := range all {
			if why := ready.Stages[s.Name]; !strings.HasPrefix(why, hint) || !strings.Contains(why, `user "policyflow" (SCRAM-SHA-256)`) {
				return fmt.Errorf("stage %s: %q", s.Name, why)
			}
		}
		if got := logs.String(); strings.Count(got, hint) < len(all) || !strings.Contains(got, `"level":"error"`) {
			return fmt.Errorf("the log does not say it for every stage:\n%s", got)
		}
		return nil
	}))
}

// readiness is the answer of /readyz.
type readiness struct {
	Status string            `json:"status"`
	Stages map[string]string `json:"stages"`
}

func readinessOf(base string) (readiness, error) {
	var r readiness
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r, err
}
