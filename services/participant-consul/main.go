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

func main() {
	fs := flag.NewFlagSet("participant-consul", flag.ContinueOnError)
	var o runtime.Options
	o.RegisterFlags(fs)
	var cc consulkv.Config
	cc.RegisterFlags(fs)
	id := fs.String("participant-id", runtime.EnvOr("PF_PARTICIPANT_ID", "participant-consul"), "the participant every replica of it names (env PF_PARTICIPANT_ID)")
	replica := fs.String("replica-id", runtime.EnvOr("PF_REPLICA_ID", ""), "this replica's id, unique per process; a random UUID when empty (env PF_REPLICA_ID)")
	prefix := fs.String("prefix", runtime.EnvOr("PF_PARTICIPANT_PREFIX", consulkv.DefaultParticipantPrefix), "Consul key prefix the elements are written under (env PF_PARTICIPANT_PREFIX)")
	heartbeat := fs.Duration("heartbeat", participant.DefaultHeartbeat, "how often the replica heartbeats")
	opTimeout := fs.Duration("operation-timeout", participant.DefaultOperationTimeout, "timeout of an operation that names none")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := o.Check(); err != nil {
		fmt.Fprintf(os.Stderr, "participant-consul: %v\n", err)
		os.Exit(2)
	}
	log := runtime.NewLogger(os.Stderr, o.LogLevel, o.Text()).With().Str("service", "participant-consul").Logger()
	ctx, cancel := runtime.SignalContext(context.Background())
	defer cancel()
	env := runtime.NewEnv(o.Kafka, log)
	env.Health.NotReady("participant", "rebuilding the state from acm.sync")
	client, err := cc.Connect(ctx, log)
	if err != nil {
		log.Error().Err(err).Msg("reach Consul")
		os.Exit(1)
	}
	p, err := participant.New(participant.Config{
		Kafka: o.Kafka, ParticipantID: *id, ReplicaID: *replica, Heartbeat: *heartbeat, OperationTimeout: *opTimeout,
		Types: consulparticipant.Callbacks(client.KV(), *prefix), Log: log, Codec: env.Codec,
	})
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
