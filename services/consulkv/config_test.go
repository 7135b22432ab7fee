package consulkv_test

import (
	"flag"
	"testing"

	"github.com/policyflow/policyflow/services/consulkv"
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
