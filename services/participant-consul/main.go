// Command participant-consul is the reference automation-composition
// participant: one replica of participant --participant-id that writes the
// properties of the elements it deploys into Consul under --prefix. Run
// as many replicas as wanted; they share the operations and hold the same
// state (see services/acm/participant).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/participant-consul/consulparticipant"
	"github.com/policyflow/policyflow/services/runtime"
)

// settings are what participant-consul's flags (and their environment
// variables) set.
type settings struct {
	runtime.Options
	consul      consulkv.Config
	participant participant.Config
	prefix      string
}

// registered, when set (by a test), is shown the flags before parsing.
var registered func(*flag.FlagSet)

// parse reads the flags; every flag it accepts reaches settings (a test
// sets each one and checks it does).
func parse(args []string) (*settings, error) {
	fs := flag.NewFlagSet("participant-consul", flag.ContinueOnError)
	st := &settings{}
	st.Options.RegisterFlags(fs)
	st.consul.RegisterFlags(fs)
	c := &st.participant
	fs.StringVar(&c.ParticipantID, "participant-id", runtime.EnvOr("PF_PARTICIPANT_ID", "participant-consul"), "the participant every replica of it names (env PF_PARTICIPANT_ID)")
	fs.StringVar(&c.ReplicaID, "replica-id", runtime.EnvOr("PF_REPLICA_ID", ""), "this replica's id, unique per process; a random UUID when empty (env PF_REPLICA_ID)")
	fs.StringVar(&st.prefix, "prefix", runtime.EnvOr("PF_PARTICIPANT_PREFIX", consulkv.DefaultParticipantPrefix), "Consul key prefix the elements are written under (env PF_PARTICIPANT_PREFIX)")
	fs.DurationVar(&c.Heartbeat, "heartbeat", participant.DefaultHeartbeat, "how often the replica heartbeats")
	fs.DurationVar(&c.OperationTimeout, "operation-timeout", participant.DefaultOperationTimeout, "timeout of an operation that names none")
	if registered != nil {
		registered(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("participant-consul takes no arguments, got %q", fs.Args())
	}
	if err := st.Options.Check(); err != nil {
		return nil, err
	}
	if st.Options.Tracing.OTLPEndpoint != "" {
		return nil, errors.New("--otlp-endpoint: participant-consul exports no traces; leave it (and PF_OTLP_ENDPOINT) empty")
	}
	// The Kafka and group settings of runtime.Options are the replica's:
	// its operations' group waits --session-timeout for a silent replica,
	// and --instance-id makes it a static member. They move there, so
	// that what is left in Options is what main reads of it.
	c.Kafka, c.SessionTimeout, c.InstanceID = st.Options.Kafka, st.Options.SessionTimeout, st.Options.InstanceID
	st.Options.Kafka, st.Options.SessionTimeout, st.Options.InstanceID = runtime.Kafka{}, 0, ""
	return st, nil
}

func main() {
	st, err := parse(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "participant-consul: %v\n", err)
		os.Exit(2)
	}
	o := st.Options
	log := runtime.NewLogger(os.Stderr, o.LogLevel, o.Text()).With().Str("service", "participant-consul").Logger()
	if err := o.SetMemoryLimit(log); err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	ctx, cancel := runtime.SignalContext(context.Background())
	defer cancel()
	env := runtime.NewEnv(st.participant.Kafka, log)
	env.Health.NotReady("participant", "rebuilding the state from acm.sync")
	client, err := st.consul.Connect(ctx, log)
	if err != nil {
		log.Error().Err(err).Msg("reach Consul")
		os.Exit(1)
	}
	cfg := st.participant
	cfg.Types, cfg.Log, cfg.Codec = consulparticipant.Callbacks(client.KV(), st.prefix), log, env.Codec
	p, err := participant.New(cfg)
	if err != nil {
		log.Error().Err(err).Msg("invalid configuration")
		os.Exit(2)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return runtime.Serve(gctx, o.HTTPAddr, env, o.OpsRoutes()) })
	g.Go(func() error {
		select {
		case <-p.Ready():
			env.Health.Ready("participant")
		case <-gctx.Done():
		}
		return nil
	})
	g.Go(func() error {
		defer cancel()
		pctx, pcancel := context.WithTimeout(gctx, 30*time.Second)
		if err := runtime.PublishSchemas(pctx, env); err != nil {
			log.Warn().Err(err).Msg("publish schemas")
		}
		pcancel()
		return p.Run(gctx)
	})
	if err := g.Wait(); err != nil {
		log.Error().Err(err).Msg("exiting")
		os.Exit(1)
	}
}
