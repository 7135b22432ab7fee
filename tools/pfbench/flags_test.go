package main

import (
	"flag"
	"io"
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag pfbench accepts reaches the options it measures with.
func TestEveryFlagIsHonoured(t *testing.T) {
	flagtest.Check(t, flagtest.Binary{
		Name: "pfbench",
		Flags: func() *flag.FlagSet {
			fs := flag.NewFlagSet("pfbench", flag.ContinueOnError)
			var o options
			o.register(fs)
			return fs
		},
		Parse: func(args []string) (any, error) { return parse(args, io.Discard) },
		Values: map[string]string{"acm-changes": "200", "body-bytes": "300", "consul-ops": "32", "consul-clients": "4",
			"members": "1", "until": "matcher", "log-level": "debug", "policies": "20000"},
	})
}
