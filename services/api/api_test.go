package api

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/policyflow/policyflow/services/"

// The wire package stays light for its clients: besides the standard
// library it imports only the node constraint language (for node
// properties), and that one only the standard library — nothing of the
// server, its runtime or its event codec.
func TestImportsNothingOfTheServer(t *testing.T) {
	allowed := map[string]bool{module + "nmp/constraint": true}
	check := func(dir string, mayImport func(string) bool) {
		t.Helper()
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read %s: %v", dir, err)
		}
		for _, imp := range p.Imports {
			if !mayImport(imp) {
				t.Errorf("%s imports %s: the wire package and what it imports use the standard library only (allowed besides: %v)", dir, imp, allowed)
			}
		}
	}
	check(".", func(imp string) bool { return stdlib(imp) || allowed[imp] })
	for imp := range allowed {
		check(filepath.Join("..", strings.TrimPrefix(imp, module)), stdlib)
	}
}

// stdlib says whether an import path is the standard library's (no dot in
// its first element).
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}
