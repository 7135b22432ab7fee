// Command northapi runs policyflow's North API: the HTTP service that
// registers components, takes PDP notifications and pushed policies,
// requests catch-ups, and serves the latest policies, a component's Consul
// folder and its delivery status. It also serves /healthz, /readyz and
// /metrics on the same address.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/policyflow/policyflow/services/northapi/api"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() {
	fs := flag.NewFlagSet("northapi", flag.ContinueOnError)
	var o runtime.Options
	o.RegisterFlags(fs)
	reg := api.RegistrationFromEnv()
	reg.RegisterFlags(fs)
	// The API listens on its own address; the stages' PF_HTTP_ADDR is for
	// their health servers and would clash when both run on one host.
	o.HTTPAddr = runtime.EnvOr("PF_API_ADDR", api.DefaultAddr)
	if f := fs.Lookup("http-addr"); f != nil {
		f.DefValue = o.HTTPAddr
		f.Usage = "address of the North API, with /healthz, /readyz and /metrics (env PF_API_ADDR)"
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "northapi takes no arguments, got %q; see northapi -h\n", fs.Args())
		os.Exit(2)
	}
	log := runtime.NewLogger(os.Stderr, o.LogLevel, o.LogText)
	if err := o.Kafka.Validate(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	if _, err := reg.Rules(); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	ctx, cancel := runtime.SignalContext(context.Background())
	defer cancel()
	env := runtime.NewEnv(o.Kafka, o.Consul, log)
	go func() {
		if err := runtime.PublishSchemas(ctx, env); err != nil {
			log.Warn().Err(err).Msg("publish schemas")
		}
	}()
	if err := api.Serve(ctx, env, o.HTTPAddr, api.Options{Registration: reg}); err != nil {
		log.Error().Err(err).Msg("exiting")
		os.Exit(1)
	}
}
