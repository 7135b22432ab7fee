// Package stages lists every pipeline stage that exists, for processes
// that run several of them (the embedded stack, benchmarks, tests).
package stages

import (
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/consulwriter/consulwrite"
	"github.com/policyflow/policyflow/services/executor/execute"
	"github.com/policyflow/policyflow/services/matcher/matching"
	"github.com/policyflow/policyflow/services/notifier/notify"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/pdpingest/ingest"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/segmenter/segment"
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
}

// All returns every stage with its default settings, in pipeline order.
func All() []runtime.Stage { return With(Config{}) }

// With returns every stage, in pipeline order, with cfg applied. Each
// call builds fresh stage values, so two processes' worth can run side by
// side in tests.
func With(cfg Config) []runtime.Stage {
	ic := ingest.DefaultConfig()
	if cfg.PDPURL != "" {
		ic.PDPURL = cfg.PDPURL
	}
	sc := segment.DefaultConfig()
	if cfg.MaxSegmentBytes > 0 {
		sc.MaxSegmentBytes = cfg.MaxSegmentBytes
	}
	wc, nc := consulwrite.DefaultConfig(), notify.DefaultConfig()
	if cfg.Consul != (consulkv.Config{}) {
		wc.Consul, nc.Consul = cfg.Consul, cfg.Consul
	}
	if len(cfg.NotifyTargets.ScriptDirs) > 0 || len(cfg.NotifyTargets.WebhookAllow) > 0 {
		nc.Targets = cfg.NotifyTargets
	}
	return []runtime.Stage{
		ingest.StageWith(ic),
		matching.Stage(),
		segment.StageWith(sc),
		execute.Stage(),
		consulwrite.StageWith(wc),
		notify.StageWith(nc),
	}
}
