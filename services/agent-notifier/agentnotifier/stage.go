// Package agentnotifier is the agent-notifier stage: it tells each component that
// its policies changed, by running its reconfigure script or calling its
// webhook. It claims each notification in Consul first (with a lease, and
// naming the notifier process) and records its outcome in the claim, so
// that:
//   - every update is notified at least once: a failing run is retried with
//     backoff, then recorded as failed and run again by the next catch-up;
//     a run a notifier that died left unfinished is run again;
//   - a component's runs never overlap: the script runs in its own process
//     group and dies with the notifier (Linux's parent-death signal), and
//     an unfinished claim of another run, of the same generation or an
//     older one, is taken over only once its lease ended, its process is
//     seen gone, or it names this notifier's instance id (this member
//     restarted: its previous run is gone), after what it left running
//     for the component is killed;
//   - the notifier fences itself: every run, the first and each one again,
//     starts only while the claim is still its own and its lease, as its
//     own monotonic clock counts it, is live (checked in Consul before a
//     run again, renewed when it would not last); leases are short (15 s,
//     whatever the notify timeout) and renewed, all those under way
//     together, while a notification goes on, and a run whose lease was
//     not renewed in time, or whose claim is found to be another's, is
//     stopped; a notifier that was paused past its lease and lost its
//     claim stops without running anything (fence.go);
//   - a run that finished is not run again for the same update, unless the
//     consul-writer repaired the folder since, a catch-up runs a failed one
//     again, or an operator asks (a catch-up request naming the component).
//
// The script gets the update in its environment (POLICYFLOW_COMPONENT_ID,
// POLICYFLOW_UPDATE_ID, POLICYFLOW_GENERATION), the webhook in headers, so
// either can drop a copy, and, as a resource drops a request whose
// sequencer (Chubby) or epoch (Kafka's producers) is older than one it
// already saw, an older generation after a newer one: a lease measured by
// a clock cannot rule out a notifier paused between its check and its run.
// Scripts run and webhooks are called only as the operator's notifytarget
// rules allow; one component's slow or failing target does not hold up
// the others.
//
// The notification is built from Consul, as it is when the component is
// notified: its policies are the bodies in the component's folder, read
// with its claim, and its updated policies are those of the update, taken
// from the folder too. When a later update has already landed, the
// component is sent what Consul holds (a newer version of a policy, and
// no longer a policy the later update removed), which is what it reads
// there. Removed policies are no longer in Consul: their last bodies come
// with the update.
package agentnotifier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// DefaultTimeout bounds a script or webhook whose notify target names no
// timeout of its own.
const DefaultTimeout = 30 * time.Second

// DefaultConcurrency is how many components are notified at once unless
// configured otherwise.
const DefaultConcurrency = 32

// DefaultAttempts is how many times a notification whose script exits
// non-zero (or whose webhook does not answer 2xx) is run before it is
// recorded as failed.
const DefaultAttempts = 3

// DefaultLease is how long a claim's lease lasts from each write of it
// unless configured otherwise: the notifier renews it while the
// notification goes on, and another notifier takes an unfinished claim
// over once it ended, whatever the notify timeout.
const DefaultLease = 15 * time.Second

// consulTimeout bounds one Consul request.
const consulTimeout = time.Minute

// Config is the agent-notifier's own configuration.
type Config struct {
	// Timeout is how long a script or webhook may take when the
	// component's notify target does not say (timeout_ms 0).
	Timeout time.Duration
	// Concurrency is how many scripts and webhooks of different
	// components run at once; one component's notifications still run
	// one after another, in order.
	Concurrency int
	// Attempts is how many times a failing notification runs, with
	// Backoff between runs, before it is recorded as failed.
	Attempts int
	// Backoff is the wait after a failed run, doubling after each one up
	// to its Max (zero: the runtime's retry backoff, 100ms to 10s).
	Backoff runtime.Backoff
	// Lease is how long a claim's lease lasts from each write of it (0:
	// DefaultLease). It is renewed every fifth of it while the
	// notification goes on; a run not renewed in time is stopped a fifth
	// of it before it ends (fence.go).
	Lease time.Duration
	// Consul is the agent that holds the claims.
	Consul consulkv.Config
	// Targets is where notifications may go: the allowed script
	// directories and webhook hosts (none: no script runs, no webhook
	// is called; such notifications are recorded as failed).
	Targets notifytarget.Config
}

// DefaultConfig reads PF_NOTIFY_TIMEOUT, PF_NOTIFY_CONCURRENCY and
// PF_NOTIFY_LEASE, falling back to DefaultTimeout, DefaultConcurrency and
// DefaultLease, PF_SCRIPT_DIRS and
// PF_WEBHOOK_ALLOW (none by default), and reaches Consul as the
// environment says (consulkv.FromEnv).
func DefaultConfig() Config {
	c := Config{Timeout: DefaultTimeout, Concurrency: DefaultConcurrency, Attempts: DefaultAttempts, Lease: DefaultLease, Consul: consulkv.FromEnv(), Targets: notifytarget.ConfigFromEnv()}
	if n, err := strconv.Atoi(runtime.EnvOr("PF_NOTIFY_ATTEMPTS", "")); err == nil {
		c.Attempts = n
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_NOTIFY_TIMEOUT", "")); err == nil {
		c.Timeout = d
	}
	if n, err := strconv.Atoi(runtime.EnvOr("PF_NOTIFY_CONCURRENCY", "")); err == nil {
		c.Concurrency = n
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_NOTIFY_BACKOFF", "")); err == nil {
		c.Backoff.Initial = d
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_NOTIFY_BACKOFF_MAX", "")); err == nil {
		c.Backoff.Max = d
	}
	if d, err := time.ParseDuration(runtime.EnvOr("PF_NOTIFY_LEASE", "")); err == nil {
		c.Lease = d
	}
	return c
}

// RegisterFlags adds the agent-notifier's flags to fs, Consul's among
// them.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Consul.RegisterFlags(fs)
	fs.DurationVar(&c.Timeout, "notify-timeout", c.Timeout,
		"how long a reconfigure script or webhook may take when the component does not say (env PF_NOTIFY_TIMEOUT)")
	fs.IntVar(&c.Concurrency, "notify-concurrency", c.Concurrency,
		"how many components' scripts or webhooks run at once (env PF_NOTIFY_CONCURRENCY)")
	fs.IntVar(&c.Attempts, "notify-attempts", c.Attempts,
		"how many times a notification whose script exits non-zero or whose webhook does not answer 2xx is run, with backoff, before it is recorded as failed (env PF_NOTIFY_ATTEMPTS)")
	fs.DurationVar(&c.Backoff.Initial, "notify-backoff", c.Backoff.Initial,
		"the wait after a notification's first failed run, doubled after each further one; 0: the runtime's retry backoff, 100ms (env PF_NOTIFY_BACKOFF)")
	fs.DurationVar(&c.Backoff.Max, "notify-backoff-max", c.Backoff.Max,
		"the longest wait between runs of a failing notification; 0: 10s (env PF_NOTIFY_BACKOFF_MAX)")
	fs.DurationVar(&c.Lease, "notify-lease", c.Lease,
		"how long a notification's claim is leased from each renewal: renewed every fifth of it while the notification goes on, so a notifier that died leaves its claims to another this long after its last renewal, whatever the notify timeout (env PF_NOTIFY_LEASE)")
	c.Targets.RegisterFlags(fs)
}

// Validate says what is wrong with the configuration.
func (c Config) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("--notify-timeout %s: want a positive duration", c.Timeout)
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("--notify-concurrency %d: want at least 1", c.Concurrency)
	}
	if c.Attempts < 1 || c.Attempts > 100 {
		return fmt.Errorf("--notify-attempts %d: want 1 to 100", c.Attempts)
	}
	if c.Backoff.Initial < 0 || c.Backoff.Max < 0 || c.Backoff.Max > time.Hour {
		return fmt.Errorf("--notify-backoff %s, --notify-backoff-max %s: want durations from 0 to 1h", c.Backoff.Initial, c.Backoff.Max)
	}
	if c.Lease < time.Second || c.Lease > 10*time.Minute {
		return fmt.Errorf("--notify-lease %s: want 1s to 10m", c.Lease)
	}
	if _, err := c.Targets.Rules(); err != nil {
		return err
	}
	return nil
}

// Stage is the agent-notifier configured from the environment (and from
// flags when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is the agent-notifier with the given configuration. It reads
// component.applied at least once, a poll's records at a time, claims
// them and notifies their components, several at once, in order per
// component; a record's offset is committed once its notification is
// finished and recorded (Input.Hold), so the committed lag counts the
// notifications under way and those waiting, and a notifier that dies
// leaves their records to the next member. While records wait for
// another notifier's lease the stage is not ready, and says which.
func StageWith(cfg Config) runtime.Stage {
	n := &notifier{cfg: cfg}
	return runtime.Stage{
		Name:       topology.StageAgentNotifier,
		Mode:       runtime.AtLeastOnce,
		Inputs:     []string{topology.ComponentApplied, topology.CatchupRequests},
		Outputs:    []string{topology.CatchupProgress},
		Flags:      n.cfg.RegisterFlags,
		Settings:   &n.cfg,
		SetupBatch: n.setup,
		// A catch-up request on partition p runs again the failed
		// notifications of component.applied partition p.
		CoPartitioned: true,
		Assigned: func(ctx context.Context, env runtime.Env, assigned map[string][]int32) error {
			return n.recoverPartitions(ctx, env, assigned[topology.ComponentApplied])
		},
		Revoked: func(_ context.Context, _ runtime.Env, revoked map[string][]int32) {
			n.drain()
			n.waits.forget(revoked[topology.ComponentApplied])
		},
	}
}

type notifier struct {
	cfg     Config
	rules   notifytarget.Rules
	txn     *api.Txn
	http    *http.Client
	log     zerolog.Logger
	retry   runtime.Backoff // of Consul requests
	backoff runtime.Backoff // between runs of a failing notification
	chains  *chains
	metrics *runtime.Metrics
	tracer  *runtime.Tracer
	// owner names this run in the claims it writes: "<instance>/<run>".
	owner string
	// instance is the member's instance id (--instance-id), written in
	// its claims; empty for a dynamic member.
	instance string
	// runner names this process in the claims it writes.
	runner *consulkv.Runner
	env    runtime.Env
	// clock is the notifier's clock (nil: time.Now); see now.
	clock func() time.Time
	// waits are the components whose records wait for another
	// notifier's lease.
	waits waits
	// rollouts is policy.rollouts, by policy_id (abortedIn); nil when
	// the notifier runs without Kafka (its batch handler alone).
	rollouts *runtime.Table[*events.PolicyRollout]
}

// now is the time on the notifier's clock. Its monotonic reading is what
// measures the leases this notifier holds (fence): it goes on while the
// process is paused, and a wall clock set back cannot stretch a lease.
func (n *notifier) now() time.Time {
	if n.clock != nil {
		return n.clock()
	}
	return time.Now()
}

// newOwner is the owner name of a notifier run: the member's instance id
// (--instance-id), else the host name, and a random run id.
func newOwner(instance string) string {
	if instance == "" {
		instance, _ = os.Hostname()
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strings.ReplaceAll(instance, "/", "_") + "/" + hex.EncodeToString(b[:])
}

// timeout is the job's script or webhook timeout.
func (n *notifier) timeout(j *job) time.Duration {
	if j.a.Notify.TimeoutMs > 0 {
		return time.Duration(j.a.Notify.TimeoutMs) * time.Millisecond
	}
	return n.cfg.Timeout
}

// lease is how long a claim's lease lasts from each write of it. Another
// notifier takes an unfinished claim over once it ended, unless it sees
// the claim's notifier gone (or is that notifier restarted) sooner.
func (n *notifier) lease() time.Duration {
	if n.cfg.Lease > 0 {
		return n.cfg.Lease
	}
	return DefaultLease
}

func (n *notifier) setup(ctx context.Context, env runtime.Env) (runtime.BatchHandler, func(), error) {
	if err := n.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	cl, err := n.cfg.Consul.Connect(ctx, env.Log.With().Str("stage", topology.StageAgentNotifier).Logger())
	if err != nil {
		return nil, nil, fmt.Errorf("agent-notifier: %w", err)
	}
	if n.rules, err = n.cfg.Targets.Rules(); err != nil {
		return nil, nil, fmt.Errorf("agent-notifier: %w", err)
	}
	n.txn = cl.Txn()
	env.Health.Depend(topology.StageAgentNotifier, consulkv.Dependency(cl))
	env.Health.Blocked(topology.StageAgentNotifier, func() string { return n.waits.reason(n.now(), n.lease()) })
	// As many kept connections per host as webhooks in flight: many
	// components often share one webhook host.
	n.http = n.rules.Client(n.cfg.Concurrency)
	n.log = env.Log.With().Str("stage", topology.StageAgentNotifier).Logger()
	n.log.Info().Strs("script_dirs", n.rules.ScriptDirs()).Strs("webhook_allow", n.rules.WebhookAllow()).Msg("notification targets allowed")
	n.retry = env.Retry
	n.backoff = env.Retry
	if n.cfg.Backoff.Initial > 0 {
		n.backoff.Initial = n.cfg.Backoff.Initial
	}
	if n.cfg.Backoff.Max > 0 {
		n.backoff.Max = n.cfg.Backoff.Max
	}
	n.owner, n.instance = newOwner(env.InstanceID), env.InstanceID
	n.runner = thisRunner()
	n.metrics = env.Metrics
	n.tracer = env.Tracer
	n.metrics.Notifier(topology.StageAgentNotifier, events.NotifyScript, events.NotifyWebhook)
	// A failed run is not run again once the rollout of the version it
	// delivers was aborted (abortedIn). The table is not waited for: a
	// retry it does not know of yet runs, as before.
	if len(env.Kafka.Brokers) > 0 {
		if n.rollouts, err = runtime.FollowTable[*events.PolicyRollout](env, topology.PolicyRollouts, nil); err != nil {
			return nil, nil, fmt.Errorf("agent-notifier: %w", err)
		}
	}
	n.chains = newChains(n)
	n.env = env
	return n.handleInputs(runtime.TypedBatch(runtime.SkipTombstones, n.handle), runtime.Typed(runtime.RefuseTombstones, n.catchUp)), func() {
		n.chains.close()
		n.http.CloseIdleConnections()
		if n.rollouts != nil {
			n.rollouts.Close()
		}
	}, nil
}

// drain waits for the notifications in flight (none before setup).
func (n *notifier) drain() {
	if n.chains != nil {
		n.chains.drain()
	}
}

// handle notifies the components of a poll's records: it sets aside the
// records that need nothing or can never be notified, then claims the
// rest and leaves their notifications running (notifyAll), their offsets
// held until they ended.
func (n *notifier) handle(ctx context.Context, ins []runtime.Msg[*events.ComponentApplied]) []runtime.Outcome {
	out := make([]runtime.Outcome, len(ins))
	var jobs []*job
	for i, in := range ins {
		j, err := n.prepare(in.Value)
		if err != nil {
			out[i].Err = err
			continue
		}
		if j != nil {
			j.i = i
			j.origin, j.hasOrigin = runtime.InputOrigin(in.Input)
			j.trace = in.Trace
			j.partition = in.Partition
			// Its offset is committed once its notification ended.
			j.release = in.Input.Hold()
			jobs = append(jobs, j)
		}
	}
	n.notifyAll(ctx, jobs, out)
	for _, j := range jobs {
		if !j.claimed {
			j.release() // skipped, or handed in again
		}
	}
	return out
}

// handleInputs hands the component.applied records of a poll to applied,
// as one batch, and then each catch-up request to catchUp.
func (n *notifier) handleInputs(applied runtime.BatchHandler, catchUp runtime.Handler) runtime.BatchHandler {
	return func(ctx context.Context, ins []runtime.Input) []runtime.Outcome {
		out := make([]runtime.Outcome, len(ins))
		var idx []int
		var records []runtime.Input
		for i, in := range ins {
			if in.Topic != topology.CatchupRequests {
				idx = append(idx, i)
				records = append(records, in)
			}
		}
		if len(records) > 0 {
			for k, o := range applied(ctx, records) {
				out[idx[k]] = o
			}
		}
		for i, in := range ins {
			if in.Topic == topology.CatchupRequests {
				outs, err := catchUp(ctx, in)
				out[i] = runtime.Outcome{Outputs: outs, Err: err}
			}
		}
		return out
	}
}
