package main

import (
	"flag"
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag fleetsim accepts reaches the options it runs with.
func TestEveryFlagIsHonoured(t *testing.T) {
	flagtest.Check(t, flagtest.Binary{
		Name:  "fleetsim",
		Flags: func() *flag.FlagSet { return newFlags(&options{}) },
		Parse: func(args []string) (any, error) { return parse(args) },
	})
}
