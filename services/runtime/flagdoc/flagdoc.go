// Package flagdoc writes the configuration reference of a binary, its
// flags with their defaults and environment variables, as Markdown under
// docs/config/, and checks in tests that the committed page is up to date.
package flagdoc

import (
	"bytes"
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// UpdateEnv set to 1 makes Check rewrite the pages instead of comparing.
const UpdateEnv = "PF_UPDATE_DOCS"

// Markdown is the configuration page of a binary: its name, what it is,
// and one table row per flag (name, default, meaning with its env).
func Markdown(binary, intro string, fs *flag.FlagSet) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s: configuration\n\n", binary)
	fmt.Fprintf(&b, "<!-- Generated from the flags of %s by its tests; run `%s=1 go test` in its package to update. -->\n\n", binary, UpdateEnv)
	if intro != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(intro))
	}
	b.WriteString("Every flag may also be given by the environment variable its meaning names; a flag wins over its variable.\n\n")
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		flagCol := "`--" + f.Name
		if name != "" {
			flagCol += " " + name
		}
		flagCol += "`"
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
			def = "(none)"
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", flagCol, def, cell(usage))
	})
	return b.Bytes()
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}

// RepoRoot is the repository's root, found from this file's place.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// CleanEnv unsets, for the test, every environment variable a default
// may come from, so that the page shows the binary's own defaults.
func CleanEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != UpdateEnv && (strings.HasPrefix(k, "PF_") || strings.HasPrefix(k, "CONSUL_HTTP_")) {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// Check compares the committed page docs/config/<binary>.md with want,
// or writes it when PF_UPDATE_DOCS=1. dir is the module directory and pkg
// the package of the calling test, for the message saying how to update.
func Check(t *testing.T, binary string, want []byte, dir, pkg string) {
	t.Helper()
	path := filepath.Join(RepoRoot(), "docs", "config", binary+".md")
	if os.Getenv(UpdateEnv) == "1" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("docs/config/%s.md is not the configuration of %s's flags (%v): run `cd %s && %s=1 go test %s -run TestConfigDocs` and commit the page",
			binary, binary, err, dir, UpdateEnv, pkg)
	}
}

// PackageDoc is the package comment of a main package's main.go (dir is
// relative to the repository's root), for the page's introduction.
func PackageDoc(t *testing.T, dir string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(RepoRoot(), dir, "main.go"), nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		t.Fatalf("read the package comment of %s: %v", dir, err)
	}
	if f.Doc == nil {
		return ""
	}
	return strings.Join(strings.Fields(f.Doc.Text()), " ")
}
