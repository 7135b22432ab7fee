package main

import (
	"flag"
	"io"
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagdoc"
	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag devbroker accepts reaches what it starts the broker with.
func TestEveryFlagIsHonoured(t *testing.T) {
	flagdoc.CleanEnv(t)
	flagtest.Check(t, flagtest.Binary{
		Name: "devbroker",
		Flags: func() *flag.FlagSet {
			fs, err := newFlags(&settings{}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			return fs
		},
		Parse: func(args []string) (any, error) { return parse(args, io.Discard) },
		Values: map[string]string{"log-level": "debug", "broker-config": "log.cleaner.backoff.ms=1000", "broker-count": "2",
			"admin-addr": "127.0.0.1:7070", "admin-token-file": "/nonexistent/devbroker-token"},
		With: map[string][]string{
			"admin-addr":       {"--admin-token-file=/nonexistent/devbroker-token"},
			"admin-token-file": {"--admin-addr=127.0.0.1:7070"},
		},
	})
}
