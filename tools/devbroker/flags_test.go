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
		Parse:  func(args []string) (any, error) { return parse(args, io.Discard) },
		Values: map[string]string{"log-level": "debug", "broker-config": "log.cleaner.backoff.ms=1000"},
	})
}
