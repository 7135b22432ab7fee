package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// External is a Kafka cluster and a Consul already running, to run the
// faults that leave them alone against (Options.External): the stages
// are still processes of this run, under a topic prefix, group names and
// component ids of the run's own, removed when it ends. The stages
// inherit this process's environment, so PF_SASL_*, PF_TLS* and
// PF_CONSUL_TOKEN reach them as they reach Kafka and Consul here.
type External struct {
	Kafka  runtime.Kafka
	Consul consulkv.Config
}

// ExternalFaults are the faults that run against an external cluster:
// none stops the broker or Consul, and none needs the in-process kfake.
func ExternalFaults() []string {
	var out []string
	for _, f := range AllFaults() {
		if f == FaultBrokerRestart || f == FaultConsulDown || clusterFault(f) || containersFault(f) {
			continue
		}
		out = append(out, f)
	}
	return out
}

// checkExternal refuses faults that would stop a cluster this run does
// not own.
func checkExternal(o Options) error {
	if o.External == nil {
		return nil
	}
	for _, f := range o.Faults {
		if !slices.Contains(ExternalFaults(), f) {
			return fmt.Errorf("fault %q cannot run against an external cluster (it stops the broker or Consul, or needs the in-process broker); the ones that can are %s",
				f, strings.Join(ExternalFaults(), ", "))
		}
	}
	return nil
}

// useExternal points the stack at o.External under a prefix of its own.
func (s *stack) useExternal() error {
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	stem := "chaos-" + hex.EncodeToString(r[:])
	s.compBase = stem + "-"
	s.kafka = s.o.External.Kafka
	s.kafka.Prefix = stem + "."
	s.kafka.FetchMaxWait, s.kafka.MetadataMinAge = 100*time.Millisecond, 250*time.Millisecond
	s.brokerAddr = strings.Join(s.kafka.Brokers, ",")
	s.consulAddr = s.o.External.Consul.Addr
	return nil
}

// removeExternal deletes the run's topics, groups and Consul keys.
func (s *stack) removeExternal() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if opts, err := s.kafka.ClientOpts(); err != nil {
		errs = append(errs, err)
	} else if cl, err := kgo.NewClient(opts...); err != nil {
		errs = append(errs, err)
	} else {
		defer cl.Close()
		adm := kadm.NewClient(cl)
		if topics, err := adm.ListTopics(ctx); err != nil {
			errs = append(errs, err)
		} else {
			var mine []string
			for _, n := range topics.Names() {
				if strings.HasPrefix(n, s.kafka.Prefix) {
					mine = append(mine, n)
				}
			}
			if len(mine) > 0 {
				if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if groups, err := adm.ListGroups(ctx); err == nil {
			var mine []string
			for _, g := range groups.Groups() {
				if strings.HasPrefix(g, s.kafka.Prefix) {
					mine = append(mine, g)
				}
			}
			if len(mine) > 0 {
				_, _ = adm.DeleteGroups(ctx, mine...)
			}
		}
	}
	if s.kv != nil {
		if _, err := s.kv.KV().DeleteTree(s.compBase, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		s.log.Warn().Err(err).Str("prefix", s.kafka.Prefix).Msg("remove the run's topics, groups and Consul keys from the external cluster")
	}
}

// ExternalFromEnv is the external cluster the environment names, with the
// variables the stages read: PF_BROKERS, PF_SASL_MECHANISM, PF_SASL_USER,
// PF_SASL_PASSWORD, PF_TLS, PF_TLS_CA, PF_TLS_INSECURE_SKIP_VERIFY,
// PF_CONSUL_ADDR (or CONSUL_HTTP_ADDR) and PF_CONSUL_TOKEN (or
// CONSUL_HTTP_TOKEN).
func ExternalFromEnv() (*External, error) {
	k := runtime.Kafka{
		Brokers:       runtime.SplitList(runtime.EnvOr("PF_BROKERS", "")),
		SASLMechanism: runtime.EnvOr("PF_SASL_MECHANISM", ""),
		SASLUser:      runtime.EnvOr("PF_SASL_USER", ""),
		SASLPassword:  runtime.EnvOr("PF_SASL_PASSWORD", ""),
		TLS:           isTrue(runtime.EnvOr("PF_TLS", "")),
		TLSCAFile:     runtime.EnvOr("PF_TLS_CA", ""),
		TLSSkipVerify: isTrue(runtime.EnvOr("PF_TLS_INSECURE_SKIP_VERIFY", "")),
	}
	if len(k.Brokers) == 0 {
		return nil, errors.New("an external cluster needs PF_BROKERS (its seed brokers, host:port,...)")
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	c := consulkv.FromEnv()
	if runtime.EnvOr("PF_CONSUL_ADDR", runtime.EnvOr("CONSUL_HTTP_ADDR", "")) == "" {
		return nil, errors.New("an external cluster needs PF_CONSUL_ADDR (a Consul agent's HTTP address, host:port)")
	}
	return &External{Kafka: k, Consul: c}, nil
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "t", "true", "yes":
		return true
	}
	return false
}
