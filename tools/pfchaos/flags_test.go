package main

import (
	"flag"
	"io"
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag pfchaos accepts reaches what it injects faults with.
func TestEveryFlagIsHonoured(t *testing.T) {
	// --external reads the cluster from the environment.
	t.Setenv("PF_BROKERS", "127.0.0.1:9092")
	t.Setenv("PF_CONSUL_ADDR", "127.0.0.1:8500")
	flagtest.Check(t, flagtest.Binary{
		Name: "pfchaos",
		Flags: func() *flag.FlagSet {
			var faults string
			return newFlags(&settings{}, &faults, io.Discard)
		},
		Parse:  func(args []string) (any, error) { return parse(args, io.Discard) },
		Values: map[string]string{"faults": "consul-down", "log-level": "debug"},
	})
}
