package flagtest_test

import (
	"flag"
	"reflect"
	"testing"

	"github.com/policyflow/policyflow/services/admission/admission"
	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consul-writer/consulwriter"
	"github.com/policyflow/policyflow/services/executor/executor"
	"github.com/policyflow/policyflow/services/matcher/matcher"
	"github.com/policyflow/policyflow/services/nmp-hub/nmphub"
	"github.com/policyflow/policyflow/services/pdp-ingest/pdpingest"
	"github.com/policyflow/policyflow/services/replica-sync/replicasync"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/runtime/flagtest"
	"github.com/policyflow/policyflow/services/segmenter/segmenter"
	"github.com/policyflow/policyflow/services/stages"
)

// stageBinaries are the binaries whose main is runtime.Main(Stage()).
var stageBinaries = map[string]func() runtime.Stage{
	"admission":      admission.Stage,
	"agent-notifier": agentnotifier.Stage,
	"consul-writer":  consulwriter.Stage,
	"executor":       executor.Stage,
	"matcher":        matcher.Stage,
	"nmp-hub":        nmphub.Stage,
	"pdp-ingest":     pdpingest.Stage,
	"replica-sync":   replicasync.Stage,
	"segmenter":      segmenter.Stage,
}

// stageValues are values for stage flags whose probe value is refused.
var stageValues = map[string]map[string]string{
	"agent-notifier": {"script-dir": "/opt/probe/scripts", "webhook-allow": "https://probe.example:8443"},
	"admission":      {"admission-hook-allow": "engine.example:8443"},
}

// parsed is what a stage binary runs with: the shared options and the
// stage's own settings.
type parsed struct {
	Options  runtime.Options
	Settings any
}

// Every flag of every stage binary reaches what runtime.Main runs it with.
func TestEveryStageFlagIsHonoured(t *testing.T) {
	for _, s := range stages.All() {
		if stageBinaries[s.Name] == nil {
			t.Errorf("stage %s is not checked: add its Stage to stageBinaries", s.Name)
		}
	}
	for name, stage := range stageBinaries {
		t.Run(name, func(t *testing.T) {
			flagtest.Check(t, flagtest.Binary{
				Name:   name,
				Flags:  func() *flag.FlagSet { fs, _ := runtime.FlagSet(stage()); return fs },
				Values: stageValues[name],
				Parse: func(args []string) (any, error) {
					s := stage()
					o, err := runtime.ParseStage(s, args)
					if err != nil {
						return nil, err
					}
					p := parsed{Options: *o}
					if s.Settings != nil {
						p.Settings = reflect.ValueOf(s.Settings).Elem().Interface()
					}
					return p, nil
				},
			})
		})
	}
}
