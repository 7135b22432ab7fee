package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/rs/zerolog"
)

// startEmbedded starts the in-process broker of the dev stack (three
// brokers, or PF_BROKER_COUNT) and a dev Consul agent from the local
// Consul binary, both on free loopback ports.
func startEmbedded(ctx context.Context) (*Backend, error) {
	quiet := log.Level(zerolog.WarnLevel)
	n, err := devstack.BrokersFromEnv()
	if err != nil {
		return nil, err
	}
	br, err := devstack.StartBroker(devstack.BrokerOptions{Brokers: n, Listen: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("start in-process broker: %w", err)
	}
	bin, err := devstack.ConsulBinary()
	if err != nil {
		br.Close()
		return nil, fmt.Errorf("find the Consul binary: %w", err)
	}
	agent, err := devstack.StartConsul(ctx, devstack.ConsulOptions{Binary: bin, HTTPAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		br.Close()
		return nil, fmt.Errorf("start Consul agent from %s: %w", bin, err)
	}
	return &Backend{
		Kind:       KindEmbedded,
		Brokers:    br.Addrs,
		ConsulAddr: agent.Addr,
		Cluster:    br.Cluster,
		stop: func(context.Context) error {
			var errs []error
			if err := agent.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop Consul agent at %s: %w", agent.Addr, err))
			}
			br.Close()
			return errors.Join(errs...)
		},
	}, nil
}
