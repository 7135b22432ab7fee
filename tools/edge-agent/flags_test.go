package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/runtime/flagdoc"
	"github.com/policyflow/policyflow/services/runtime/flagtest"
)

// Every flag edge-agent accepts reaches what it runs the agent with.
func TestEveryFlagIsHonoured(t *testing.T) {
	flagdoc.CleanEnv(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "signing.key")
	if _, err := nmp.WriteSigningKey(key); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "org.token")
	if err := os.WriteFile(tokenFile, []byte("org-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The flags it does not start without.
	required := []string{"--org=o", "--node=n", "--version=1.0.0", "--install-cmd=/bin/true"}
	flagtest.Check(t, flagtest.Binary{
		Name:  "edge-agent",
		Flags: func() *flag.FlagSet { return newFlags(&settings{}) },
		Parse: func(args []string) (any, error) { return parse(append(append([]string{}, required...), args...)) },
		Values: map[string]string{"trusted-key": key + ".pub", "token-file": tokenFile, "log-level": "debug",
			"properties": `[{"name":"arch","value":"amd64"}]`, "constraint": `arch == "amd64"`},
	})
}

// --properties is decoded into the registration's properties at start,
// and a list the hub would refuse is refused with what to write instead.
func TestPropertiesAreCheckedAtStart(t *testing.T) {
	flagdoc.CleanEnv(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "org.token")
	if err := os.WriteFile(tokenFile, []byte("org-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--org=o", "--node=n", "--version=1.0.0", "--install-cmd=/bin/true", "--token-file=" + tokenFile}
	st, err := parse(append(base, `--properties=[{"name":"arch","value":"amd64"}]`))
	if err != nil || len(st.properties) != 1 || st.properties[0].Name != "arch" || st.properties[0].Value != "amd64" {
		t.Fatalf("parse: %+v, %v", st, err)
	}
	for _, bad := range []string{`{"arch":"amd64"}`, `[{"nmae":"arch"}]`, `[{`} {
		if _, err := parse(append(base, "--properties="+bad)); err == nil || !strings.Contains(err.Error(), `want a JSON list such as [{"name":"arch","value":"amd64"}]`) {
			t.Errorf("--properties=%s: %v, want the list expected", bad, err)
		}
	}
}
