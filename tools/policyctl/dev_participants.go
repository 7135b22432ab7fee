package main

import (
	"context"
	"flag"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/policyflow/policyflow/services/acm/participant"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/participant-consul/consulparticipant"
)

// devParticipants are the settings of the reference participant replicas
// `policyctl dev` runs.
var devParticipants struct {
	replicas int
	id       string
	prefix   string
}

// maxDevReplicas bounds --participant-replicas on one machine.
const maxDevReplicas = 32

func init() {
	registerDevHook(devHook{
		name: "participant replicas",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&devParticipants.replicas, "participant-replicas", 0, fmt.Sprintf("run this many replicas (0 to %d) of the reference participant, which writes deployed elements' properties into Consul", maxDevReplicas))
			fs.StringVar(&devParticipants.id, "participant-id", "participant-consul", "participant id of the reference participant's replicas")
			fs.StringVar(&devParticipants.prefix, "participant-prefix", consulkv.DefaultParticipantPrefix, "Consul key prefix the reference participant writes under")
		},
		prepare: func(_ context.Context, s *devStack) error {
			n := devParticipants.replicas
			if n < 0 || n > maxDevReplicas {
				return usageErrorf("--participant-replicas %d: want 0 to %d", n, maxDevReplicas)
			}
			if n > 0 {
				s.AddBannerLine("participant", fmt.Sprintf("%s, %d replica(s), element type %s, Consul keys %s/<instance>/<element>",
					devParticipants.id, n, consulparticipant.ElementType, devParticipants.prefix))
			}
			return nil
		},
		run: func(ctx context.Context, s *devStack) error {
			n := devParticipants.replicas
			if n == 0 {
				return nil
			}
			log := s.Env.Log.With().Str("service", "participant-consul").Logger()
			client, err := s.Consul.Connect(ctx, log)
			if err != nil {
				return err
			}
			g, gctx := errgroup.WithContext(ctx)
			for range n {
				p, err := participant.New(participant.Config{Kafka: s.Kafka, ParticipantID: devParticipants.id,
					Types: consulparticipant.Callbacks(client.KV(), devParticipants.prefix), Log: log, Codec: s.Env.Codec})
				if err != nil {
					return err
				}
				g.Go(func() error { return p.Run(gctx) })
			}
			return g.Wait()
		},
	})
}
