// Package stages lists every pipeline stage that exists, for processes
// that run several of them (the embedded stack, benchmarks, tests).
package stages

import (
	"time"

	"github.com/policyflow/policyflow/services/admission/admission"
	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consul-writer/consulwriter"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/executor/executor"
	"github.com/policyflow/policyflow/services/matcher/matcher"
	"github.com/policyflow/policyflow/services/nmp-hub/nmphub"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/pdp-ingest/pdpingest"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/segmenter/segmenter"
)

// Config carries the settings a process running every stage may change.
type Config struct {
	// PDPURL is where pdp-ingest fetches policy bodies (/getConfig).
	PDPURL string
	// MaxSegmentBytes bounds the segmenter's pieces (0 = its default).
	MaxSegmentBytes int
	// Consul is the agent the consul-writer and the agent-notifier reach
	// (zero: as the environment says, consulkv.FromEnv).
	Consul consulkv.Config
	// NotifyTargets, when it names a script directory or a webhook
	// host, is where the agent-notifier may send notifications;
	// otherwise PF_SCRIPT_DIRS and PF_WEBHOOK_ALLOW say (none by
	// default).
	NotifyTargets notifytarget.Config
	// CatchupInterval, when not 0, replaces pdp-ingest's time between
	// periodic catch-ups.
	CatchupInterval time.Duration
	// OfflineAfter is replica-sync's silence before a participant replica
	// is OFF_LINE (0: its default, PF_OFFLINE_AFTER or 150 s).
	OfflineAfter time.Duration
}

// All returns every stage with its default settings, in pipeline order.
func All() []runtime.Stage { return With(Config{}) }

// With returns every stage, in pipeline order, with cfg applied. Each
// call builds fresh stage values, so two processes' worth can run side by
// side in tests.
func With(cfg Config) []runtime.Stage {
	ic := pdpingest.DefaultConfig()
	if cfg.PDPURL != "" {
		ic.PDPURL = cfg.PDPURL
	}
	if cfg.CatchupInterval != 0 {
		ic.CatchupInterval = cfg.CatchupInterval
	}
	sc := segmenter.DefaultConfig()
	if cfg.MaxSegmentBytes > 0 {
		sc.MaxSegmentBytes = cfg.MaxSegmentBytes
	}
	wc, nc := consulwriter.DefaultConfig(), agentnotifier.DefaultConfig()
	if cfg.Consul != (consulkv.Config{}) {
		wc.Consul, nc.Consul = cfg.Consul, cfg.Consul
	}
	if len(cfg.NotifyTargets.ScriptDirs) > 0 || len(cfg.NotifyTargets.WebhookAllow) > 0 {
		nc.Targets = cfg.NotifyTargets
	}
	rc := replicasync.DefaultConfig()
	if cfg.OfflineAfter > 0 {
		rc.OfflineAfter = cfg.OfflineAfter
	}
	return []runtime.Stage{
		admission.Stage(),
		pdpingest.StageWith(ic),
		matcher.Stage(),
		segmenter.StageWith(sc),
		executor.Stage(),
		consulwriter.StageWith(wc),
		agentnotifier.StageWith(nc),
		replicasync.StageWith(rc),
		nmphub.Stage(),
	}
}
