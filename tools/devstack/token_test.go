package devstack

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/policyflow/policyflow/services/north-api/auth"
)

func TestEnsureDevTokenKeepsOneAdminTokenAcrossStarts(t *testing.T) {
	dir := t.TempDir()
	first, err := EnsureDevToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || first.Token == "" || first.TokenFile != filepath.Join(dir, "policyctl.token") || first.TokensFile != filepath.Join(dir, "api-tokens.json") {
		t.Fatalf("first start: %+v", first)
	}
	for _, p := range []string{first.TokenFile, first.TokensFile} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, st.Mode().Perm())
		}
	}
	store, err := auth.Open(first.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := store.Lookup(first.Token); !ok || p.Name != "dev-admin" || p.Role != auth.RoleAdmin {
		t.Errorf("the tokens file names the token %+v %v, want dev-admin, admin", p, ok)
	}

	// A token added to the tokens file survives a restart, which keeps the
	// admin token.
	f, err := auth.ReadFile(first.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	f.Put(auth.Entry{Name: "viewer", Role: auth.RoleReadOnly, SHA256: auth.Hash("viewer-token")})
	if err := auth.WriteFile(first.TokensFile, f); err != nil {
		t.Fatal(err)
	}
	again, err := EnsureDevToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Created || again.Token != first.Token {
		t.Errorf("restart made a new token: %+v", again)
	}
	store, err = auth.Open(again.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Lookup("viewer-token"); !ok {
		t.Error("the token added to the tokens file was dropped on restart")
	}
	if _, ok := store.Lookup(first.Token); !ok {
		t.Error("the admin token is no longer in the tokens file after a restart")
	}

	// A token written to policyctl.token by hand becomes the admin token.
	if err := os.WriteFile(first.TokenFile, []byte("hand-made-token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mine, err := EnsureDevToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err = auth.Open(mine.TokensFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Lookup("hand-made-token"); !ok || mine.Token != "hand-made-token" {
		t.Errorf("the hand-made token %q is not the admin token", mine.Token)
	}
	if _, ok := store.Lookup(first.Token); ok {
		t.Error("the replaced admin token is still accepted")
	}
	if st, _ := os.Stat(mine.TokenFile); st.Mode().Perm() != 0o600 {
		t.Errorf("policyctl.token has mode %v after a restart, want 0600", st.Mode().Perm())
	}
}
