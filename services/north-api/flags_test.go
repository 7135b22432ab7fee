package main

import (
	"flag"
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagdoc"
	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag the North API accepts reaches what it runs with; it takes no
// --session-timeout or --instance-id, since it joins no consumer group
// (it once accepted both and did nothing with them).
func TestEveryFlagIsHonoured(t *testing.T) {
	flagdoc.CleanEnv(t)
	flagtest.Check(t, flagtest.Binary{
		Name:  "north-api",
		Flags: func() *flag.FlagSet { fs, _ := flags(); return fs },
		// It does not start without tokens.
		Parse: func(args []string) (any, error) {
			return parse(append([]string{"--tokens-file=/etc/policyflow/tokens"}, args...))
		},
		Values: map[string]string{"script-dir": t.TempDir(), "webhook-allow": "probe.example:8443", "admission-hook-allow": "engine.example:8443",
			"stage-ops": "matcher=127.0.0.1:9092"},
		With: map[string][]string{
			"tls-cert":      {"--tls-key=/etc/policyflow/key.pem"},
			"tls-key":       {"--tls-cert=/etc/policyflow/cert.pem"},
			"tls-client-ca": {"--tls-cert=/etc/policyflow/cert.pem", "--tls-key=/etc/policyflow/key.pem"},
		},
		Skip: map[string]string{"insecure-no-auth": "contradicts the --tokens-file every other check gives; checked below"},
	})
	if st, err := parse([]string{"--insecure-no-auth"}); err != nil || !st.c.InsecureNoAuth {
		t.Errorf("--insecure-no-auth: %v, InsecureNoAuth %v", err, st != nil && st.c.InsecureNoAuth)
	}
	fs, _ := flags()
	for _, name := range []string{"session-timeout", "instance-id"} {
		if fs.Lookup(name) != nil {
			t.Errorf("north-api accepts --%s, which it does nothing with", name)
		}
	}
}
