package main

import (
	"testing"

	"github.com/policyflow/policyflow/services/runtime/flagdoc"
)

// TestConfigDocs checks docs/config/pdpsim.md against the flags
// (PF_UPDATE_DOCS=1 rewrites it).
func TestConfigDocs(t *testing.T) {
	flagdoc.CleanEnv(t)
	var c config
	fs, err := newFlags(&c)
	if err != nil {
		t.Fatal(err)
	}
	flagdoc.Check(t, "pdpsim", flagdoc.Markdown("pdpsim", flagdoc.PackageDoc(t, "tools/pdpsim"), fs), "tools", "./pdpsim")
}
