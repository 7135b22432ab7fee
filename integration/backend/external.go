package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
)

// startExternal connects to a Kafka cluster and a Consul the environment
// names, with the variables the stages read (deploy/README.md):
// PF_BROKERS, PF_SASL_MECHANISM, PF_SASL_USER, PF_SASL_PASSWORD, PF_TLS,
// PF_TLS_CA, PF_TLS_INSECURE_SKIP_VERIFY, PF_CONSUL_ADDR (or
// CONSUL_HTTP_ADDR) and PF_CONSUL_TOKEN (or CONSUL_HTTP_TOKEN). Nothing is
// started and nothing is stopped; every test keeps to its own prefix and
// removes its topics, groups and Consul keys when it ends (Prefix).
// Stages a test starts as processes inherit the same environment, so they
// connect the same way.
func startExternal(context.Context) (*Backend, error) {
	brokers := runtime.SplitList(os.Getenv("PF_BROKERS"))
	consulAddr := runtime.EnvOr("PF_CONSUL_ADDR", os.Getenv("CONSUL_HTTP_ADDR"))
	var missing []string
	if len(brokers) == 0 {
		missing = append(missing, "PF_BROKERS (the cluster's seed brokers, host:port,...)")
	}
	if consulAddr == "" {
		missing = append(missing, "PF_CONSUL_ADDR (a Consul agent's HTTP address, host:port)")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("PF_BACKEND=external needs %s; see deploy/QUALIFICATION.md", strings.Join(missing, " and "))
	}
	k := runtime.Kafka{
		Brokers:       brokers,
		SASLMechanism: os.Getenv("PF_SASL_MECHANISM"),
		SASLUser:      os.Getenv("PF_SASL_USER"),
		SASLPassword:  os.Getenv("PF_SASL_PASSWORD"),
		TLS:           envTrue("PF_TLS"),
		TLSCAFile:     os.Getenv("PF_TLS_CA"),
		TLSSkipVerify: envTrue("PF_TLS_INSECURE_SKIP_VERIFY"),
	}
	if err := k.Validate(); err != nil {
		return nil, fmt.Errorf("PF_BACKEND=external: %w", err)
	}
	c := consulkv.FromEnv()
	c.Addr = consulAddr
	return &Backend{
		Kind:       KindExternal,
		Brokers:    brokers,
		ConsulAddr: consulAddr,
		kafka:      &k,
		consul:     &c,
		stop:       func(context.Context) error { return nil },
	}, nil
}

// envTrue reports a boolean environment variable set to true (1, t, true).
func envTrue(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "t", "true", "yes":
		return true
	}
	return false
}

// cleanupExternal removes, when the test ends, what it left on the
// external cluster under its prefix: the topics named prefix..., the
// consumer groups named prefix... (the stages' groups are the prefix and
// their name) and every Consul key whose path holds the prefix's unique
// stem (the tests name their components after the prefix). Transactional
// ids cannot be deleted in Kafka; they expire after the broker's
// transactional.id.expiration.ms.
func (b *Backend) cleanupExternal(t testing.TB, prefix string) {
	t.Cleanup(func() {
		if os.Getenv("PF_EXTERNAL_KEEP") != "" {
			t.Logf("backend: PF_EXTERNAL_KEEP is set: the topics, groups and Consul keys of %q stay", prefix)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := b.removeUnder(ctx, t, prefix); err != nil {
			t.Errorf("backend: clean up %q on the external cluster: %v", prefix, err)
		}
	})
}

func (b *Backend) removeUnder(ctx context.Context, t testing.TB, prefix string) error {
	adm := b.Admin(t)
	var errs []error
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list topics: %w", err))
	}
	var mine []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, prefix) {
			mine = append(mine, name)
		}
	}
	if len(mine) > 0 {
		resps, err := adm.DeleteTopics(ctx, mine...)
		if err == nil {
			err = resps.Error()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete topics %v: %w", mine, err))
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("list groups: %w", err))
	}
	var gs []string
	for _, g := range groups.Groups() {
		if strings.HasPrefix(g, prefix) {
			gs = append(gs, g)
		}
	}
	// A member killed by the test stays in its group until its session
	// times out: such a group is deleted once it is empty, and left to
	// the broker (it expires once empty) if it is not within 45 s.
	gctx, gcancel := context.WithTimeout(ctx, 45*time.Second)
	defer gcancel()
	for len(gs) > 0 {
		resps, err := adm.DeleteGroups(ctx, gs...)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete groups %v: %w", gs, err))
			break
		}
		var busy []string
		for _, r := range resps.Sorted() {
			switch {
			case r.Err == nil, errors.Is(r.Err, kerr.GroupIDNotFound):
			case errors.Is(r.Err, kerr.NonEmptyGroup):
				busy = append(busy, r.Group)
			default:
				errs = append(errs, fmt.Errorf("delete group %s: %w", r.Group, r.Err))
			}
		}
		gs = busy
		if len(gs) == 0 {
			break
		}
		select {
		case <-gctx.Done():
			t.Logf("backend: groups %v still have members (a killed member waits out its session timeout); the broker removes them once empty", gs)
			gs = nil
		case <-time.After(time.Second):
		}
	}
	if err := b.removeConsulKeys(ctx, Stem(prefix)); err != nil {
		errs = append(errs, err)
	}
	t.Logf("backend: removed the %d topics and the groups of %q from the external cluster", len(mine), prefix)
	return errors.Join(errs...)
}

// removeConsulKeys deletes every key whose path holds stem.
func (b *Backend) removeConsulKeys(ctx context.Context, stem string) error {
	if stem == "" {
		return nil
	}
	cc, err := b.Consul().Client()
	if err != nil {
		return fmt.Errorf("Consul client: %w", err)
	}
	keys, _, err := cc.KV().Keys("", "", (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("list Consul keys: %w", err)
	}
	for _, k := range keys {
		if !strings.Contains(k, stem) {
			continue
		}
		if _, err := cc.KV().Delete(k, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("delete Consul key %s: %w", k, err)
		}
	}
	return nil
}

// Stem is a prefix without its trailing dot: "t-testsmoke-3f9a1c" of
// "t-testsmoke-3f9a1c.", unique to one test, for names that are no topics
// (components, Consul folders).
func Stem(prefix string) string { return strings.TrimSuffix(prefix, ".") }
