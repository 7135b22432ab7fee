package main

import (
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagdoc"
)

// TestConfigDocs checks docs/config/north-api.md against the flags
// (PF_UPDATE_DOCS=1 rewrites it).
func TestConfigDocs(t *testing.T) {
	flagdoc.CleanEnv(t)
	fs, _ := flags()
	flagdoc.Check(t, "north-api", flagdoc.Markdown("north-api", flagdoc.PackageDoc(t, "services/north-api"), fs), "services", "./north-api")
}
