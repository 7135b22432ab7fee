package main

import (
	"flag"
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagdoc"
	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag pdpsim accepts reaches the configuration it runs with.
func TestEveryFlagIsHonoured(t *testing.T) {
	flagdoc.CleanEnv(t)
	flagtest.Check(t, flagtest.Binary{
		Name: "pdpsim",
		Flags: func() *flag.FlagSet {
			var c config
			fs, err := newFlags(&c)
			if err != nil {
				t.Fatal(err)
			}
			return fs
		},
		Parse: func(args []string) (any, error) { return parseFlags(args) },
	})
}
