package events

import (
	"io/fs"
	"os/exec"
	"path"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/policyflow/policyflow/schemas"
)

// bothWays checks that new readers read old records and old readers read
// new ones, with a fresh checker each time (hamba/avro caches results by
// canonical form, which drops defaults).
func bothWays(t *testing.T, what, oldJSON string, cur avro.Schema) {
	t.Helper()
	old, err := avro.ParseWithCache(oldJSON, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatalf("%s: parse: %v", what, err)
	}
	if err := avro.NewSchemaCompatibility().Compatible(cur, old); err != nil {
		t.Errorf("%s: the current schema cannot read records written with it: %v", what, err)
	}
	if err := avro.NewSchemaCompatibility().Compatible(old, cur); err != nil {
		t.Errorf("%s: readers of it cannot read records written with the current schema: %v", what, err)
	}
}

func TestSchemasCompatibleWithHistory(t *testing.T) {
	c := Default()
	entries, err := fs.ReadDir(schemas.History, "history")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		b, err := fs.ReadFile(schemas.History, path.Join("history", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, err := parseWriter(string(b))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		cur, ok := c.Schema(w.name)
		if !ok {
			t.Errorf("history/%s is %s, which has no current schema", e.Name(), w.name)
			continue
		}
		seen[w.name] = true
		bothWays(t, "history/"+e.Name(), string(b), cur)
	}
	for _, n := range SchemaNames() {
		if !seen[n] {
			t.Errorf("%s has no frozen version under schemas/history/", n)
		}
	}
	// The newest frozen version must be the current one: a changed schema is
	// frozen as a new version in the same change.
	for name, fp := range c.currFP {
		c.mu.RLock()
		_, frozen := c.writers[fp]
		c.mu.RUnlock()
		if !frozen {
			t.Errorf("%s: current schema is not frozen under history/", name)
		}
	}
}

func TestSchemasCompatibleWithLastCommit(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not a git checkout: the history/ check above still applies")
	}
	root := strings.TrimSpace(string(top))
	c := Default()
	entries, err := fs.ReadDir(schemas.Current, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".avsc") {
			continue
		}
		prev, err := exec.Command("git", "-C", root, "show", "HEAD:schemas/"+e.Name()).Output()
		if err != nil {
			continue // new in this change
		}
		b, _ := fs.ReadFile(schemas.Current, e.Name())
		w, err := parseWriter(string(b))
		if err != nil {
			t.Fatal(err)
		}
		cur, _ := c.Schema(w.name)
		bothWays(t, "HEAD:schemas/"+e.Name(), string(prev), cur)
	}
}
