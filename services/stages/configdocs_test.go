package stages_test

import (
	"testing"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/runtime/flagdoc"
	"github.com/policyflow/policyflow/services/stages"
)

// TestConfigDocs checks docs/config/<stage>.md against each stage
// binary's flags (PF_UPDATE_DOCS=1 rewrites them).
func TestConfigDocs(t *testing.T) {
	flagdoc.CleanEnv(t)
	for _, s := range stages.All() {
		fs, _ := runtime.FlagSet(s)
		intro := flagdoc.PackageDoc(t, "services/"+s.Name)
		flagdoc.Check(t, s.Name, flagdoc.Markdown(s.Name, intro, fs), "services", "./stages")
	}
}
