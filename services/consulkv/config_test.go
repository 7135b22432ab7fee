package consulkv_test

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/testkit"
)

func parse(t *testing.T, args ...string) consulkv.Config {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var c consulkv.Config
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return c
}

func TestConfigFlagsFallBackToEnvThenDefault(t *testing.T) {
	for _, name := range []string{"PF_CONSUL_ADDR", "CONSUL_HTTP_ADDR", "PF_CONSUL_TOKEN", "CONSUL_HTTP_TOKEN"} {
		t.Setenv(name, "")
	}
	if c := parse(t); c != (consulkv.Config{Addr: "127.0.0.1:8500"}) {
		t.Fatalf("no flags, no env: %+v, want the embedded stack's agent and no token", c)
	}
	t.Setenv("CONSUL_HTTP_ADDR", "consul-http:8500")
	t.Setenv("CONSUL_HTTP_TOKEN", "http-token")
	if c := parse(t); c != (consulkv.Config{Addr: "consul-http:8500", Token: "http-token"}) {
		t.Fatalf("Consul's own env: %+v", c)
	}
	t.Setenv("PF_CONSUL_ADDR", "consul-pf:8500")
	t.Setenv("PF_CONSUL_TOKEN", "pf-token")
	if c := parse(t); c != (consulkv.Config{Addr: "consul-pf:8500", Token: "pf-token"}) {
		t.Fatalf("PF_CONSUL_* over CONSUL_HTTP_*: %+v", c)
	}
	if c := parse(t, "--consul-addr", "flag:8500", "--consul-token", "flag-token"); c != (consulkv.Config{Addr: "flag:8500", Token: "flag-token"}) {
		t.Fatalf("flags over env: %+v", c)
	}
}

// TestClientGivesUpOnASilentAgent: an agent that takes the request and
// never answers (a connection that died without a reset looks the same)
// fails the request after consulkv.ResponseTimeout, not after the request's own
// context, which here outlives the test.
func TestClientGivesUpOnASilentAgent(t *testing.T) {
	addr := testkit.SilentListener(t)
	defer func(d time.Duration) { consulkv.ResponseTimeout = d }(consulkv.ResponseTimeout)
	consulkv.ResponseTimeout = 300 * time.Millisecond
	cl, err := consulkv.Config{Addr: addr}.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	_, _, err = cl.KV().List("scn:policies/", (&api.QueryOptions{}).WithContext(ctx))
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("a read from an agent that never answers: %v (context: %v); want it to fail awaiting the response", err, ctx.Err())
	}
}
