package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/testkit"
)

func TestNewTokensAreRandomAndHashedAsTheFileSays(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if a == b || !strings.HasPrefix(a, "pf_") || len(a) != 3+43 {
		t.Errorf("tokens %q and %q: want two different pf_ tokens of 46 characters", a, b)
	}
	// The hash is what `printf %s "$TOKEN" | sha256sum` prints.
	if got := Hash("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("Hash(abc) = %s", got)
	}
}

func TestCheckRefusesWhatWouldWidenOrConfuseAToken(t *testing.T) {
	sum := Hash("t")
	for _, tc := range []struct {
		json, want string
	}{
		{`{"tokens": [{"role": "admin", "sha256": "` + sum + `"}]}`, "has no name"},
		{`{"tokens": [{"name": "a", "role": "root", "sha256": "` + sum + `"}]}`, `role "root" is unknown`},
		{`{"tokens": [{"name": "a", "role": "tenant", "sha256": "` + sum + `"}]}`, "needs the tenant"},
		{`{"tokens": [{"name": "a", "role": "operator", "tenant": "t", "sha256": "` + sum + `"}]}`, "takes no tenant"},
		{`{"tokens": [{"name": "a", "role": "admin", "sha256": "abc"}]}`, "64 hex digits"},
		{`{"tokens": [{"name": "a", "role": "admin", "sha256": "` + sum + `"}, {"name": "a", "role": "admin", "sha256": "` + Hash("u") + `"}]}`, "same name"},
		{`{"tokens": [{"name": "a", "role": "admin", "sha256": "` + sum + `"}, {"name": "b", "role": "admin", "sha256": "` + strings.ToUpper(sum) + `"}]}`, "same sha256"},
		{`{"tokens": [{"name": "a", "role": "tenant", "tennant": "t", "sha256": "` + sum + `"}]}`, `unknown field "tennant"`},
		{`{"tokens": [{"name": "a", "role": "read-only", "Role": "admin", "sha256": "` + sum + `"}]}`,
			`tokens[0]: the key "Role" is not one of name, role, tenant, sha256 (keys are case-sensitive)`},
		{`{"tokens": [{"name": "a", "role": "read-only", "role": "admin", "sha256": "` + sum + `"}]}`, `tokens[0]: the key "role" is given twice`},
		{`{"tokens": [{"name": "a", "role": "admin", "sha256": "` + sum + `"}], "tokens": []}`, `the top level: the key "tokens" is given twice`},
		{`{"TOKENS": [{"name": "a", "role": "admin", "sha256": "` + sum + `"}]}`, `the key "TOKENS" is not one of tokens`},
	} {
		if _, err := Parse([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.json, err, tc.want)
		}
	}
}

func TestLookupNamesTheHolder(t *testing.T) {
	f, err := Parse([]byte(`{"tokens": [
		{"name": "ops", "role": "operator", "sha256": "` + Hash("tok-ops") + `"},
		{"name": "billing", "role": "tenant", "tenant": "billing", "sha256": "` + strings.ToUpper(Hash("tok-billing")) + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	set, err := f.Set()
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := set.Lookup("tok-billing"); !ok || p != (Principal{Name: "billing", Role: RoleTenant, Tenant: "billing"}) {
		t.Errorf("Lookup(tok-billing) = %+v %v", p, ok)
	}
	if p, ok := set.Lookup("tok-ops"); !ok || p.Name != "ops" || p.Role != RoleOperator {
		t.Errorf("Lookup(tok-ops) = %+v %v", p, ok)
	}
	for _, bad := range []string{"", "tok", "tok-ops ", Hash("tok-ops")} {
		if p, ok := set.Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %+v, want unknown", bad, p)
		}
	}
}

func TestWriteFileIsPrivateAndReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	f := File{}
	f.Put(Entry{Name: "a", Role: RoleAdmin, SHA256: Hash("x")})
	f.Put(Entry{Name: "a", Role: RoleReadOnly, SHA256: Hash("y")})
	if err := WriteFile(path, f); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("tokens file mode %v, want 0600", st.Mode().Perm())
	}
	back, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Tokens) != 1 || back.Tokens[0] != (Entry{Name: "a", Role: RoleReadOnly, SHA256: Hash("y")}) {
		t.Errorf("read back %+v; want the one entry Put replaced", back.Tokens)
	}
}

func TestStoreReloadsTheFileWhenItChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	write := func(entries ...Entry) {
		t.Helper()
		if err := WriteFile(path, File{Tokens: entries}); err != nil {
			t.Fatal(err)
		}
	}
	write(Entry{Name: "old", Role: RoleAdmin, SHA256: Hash("old-token")})
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup("old-token"); !ok {
		t.Fatal("the token of the file is unknown after Open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(ctx, 10*time.Millisecond, zerolog.Nop()) }()
	defer func() { cancel(); <-done }()

	write(Entry{Name: "new", Role: RoleReadOnly, SHA256: Hash("new-token")})
	testkit.Eventually(t, 10*time.Second, func() error {
		p, ok := s.Lookup("new-token")
		if !ok {
			return errors.New("the rewritten tokens file is not reloaded: new-token is unknown")
		}
		if p.Name != "new" || p.Role != RoleReadOnly {
			t.Errorf("new token names %+v", p)
		}
		return nil
	})
	if _, ok := s.Lookup("old-token"); ok {
		t.Error("the token removed from the file is still accepted after the reload")
	}

	// A broken file keeps the tokens loaded before.
	if err := os.WriteFile(path, []byte(`{"tokens": [{"name": "x", "role": "root"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := s.Reload(); changed || err == nil {
		t.Errorf("Reload of a broken file: changed %v, err %v; want an error and no change", changed, err)
	}
	if _, ok := s.Lookup("new-token"); !ok {
		t.Error("a broken tokens file dropped the tokens loaded before")
	}
	if !s.Stale() {
		t.Error("a broken tokens file does not mark the store stale: the old tokens stay in force unseen")
	}
	if _, err := Open(path); err == nil {
		t.Error("Open of a broken tokens file: no error")
	}
	// Mended, it is loaded and no longer stale.
	write(Entry{Name: "mended", Role: RoleReadOnly, SHA256: Hash("mended-token")})
	if _, err := s.Reload(); err != nil || s.Stale() {
		t.Errorf("Reload of the mended file: %v, stale %v", err, s.Stale())
	}
}

func TestTransportSendsTheToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		tok, _ := BearerToken(r)
		got = append(got, tok)
	}))
	defer srv.Close()
	c := Client("secret")
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	SetBearer(req, "mine")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if strings.Join(got, ",") != "secret,mine" {
		t.Errorf("tokens received %v, want the client's, then the request's own", got)
	}
}
