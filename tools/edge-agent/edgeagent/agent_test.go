package edgeagent

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/nmp"
)

func testKey(t *testing.T) (ed25519.PrivateKey, []ed25519.PublicKey) {
	t.Helper()
	priv, pub, err := nmp.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	k, _ := nmp.ParseSigningKey(priv)
	trusted, _ := nmp.ParseTrustedKeys(pub)
	return k, trusted
}

func newTestAgent(t *testing.T, hub string, trusted []ed25519.PublicKey, maxUnpacked int64) *Agent {
	t.Helper()
	a, err := New(Config{Client: &Client{Hub: hub, Token: "pf_org", Org: "acme", Node: "n1", HTTP: http.DefaultClient}, StateDir: t.TempDir(),
		InitialVersion: "1.0.0", InstallCmd: []string{"/bin/true"}, TrustedKeys: trusted, InsecureHTTP: true, MaxUnpackedBytes: maxUnpacked, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Whoever answers as the hub cannot choose the code a node runs: an
// unsigned package, one signed by an untrusted key and one whose
// signature is of another file are refused before anything of them is
// unpacked; a package signed by a trusted key is unpacked. A signed
// package with two package.json files, and a signed gzip bomb, are
// refused too.
func TestPackagesAreRefusedUnlessSignedByATrustedKey(t *testing.T) {
	key, trusted := testKey(t)
	otherKey, _ := testKey(t)
	pkg, err := nmp.BuildPackage(nmp.Manifest{Version: "1.1.0"}, map[string][]byte{"packages/agent.bin": []byte("v1.1.0")})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := nmp.SignPackage(key, "1.1.0", sha(pkg))
	byOther, _ := nmp.SignPackage(otherKey, "1.1.0", sha(pkg))
	evil, _ := nmp.BuildPackage(nmp.Manifest{Version: "1.1.0"}, map[string][]byte{"packages/agent.bin": []byte("evil")})
	twice, _ := nmp.TarGz([2]string{"package.json", `{"version":"1.1.0"}`}, [2]string{"package.json", `{"version":"1.1.0"}`})
	signedTwice, _ := nmp.SignPackage(key, "1.1.0", sha(twice))
	bomb, _ := nmp.TarGz([2]string{"package.json", `{"version":"1.1.0"}`}, [2]string{"packages/zeros", strings.Repeat("\x00", 4<<20)})
	signedBomb, _ := nmp.SignPackage(key, "1.1.0", sha(bomb))
	for _, tc := range []struct {
		what      string
		pkg       []byte
		signature string
		want      error
		wantText  string
	}{
		{"unsigned", pkg, "", nmp.ErrUnsigned, ""},
		{"signed by an untrusted key", pkg, byOther, nmp.ErrBadSignature, ""},
		{"another file under a good signature", evil, good, nmp.ErrBadSignature, ""},
		{"two package.json", twice, signedTwice, nil, "twice"},
		{"a gzip bomb", bomb, signedBomb, nmp.ErrUnpackedTooLarge, ""},
	} {
		a := newTestAgent(t, serve(t, &testHub{pkg: tc.pkg, signature: tc.signature}), trusted, 1<<20)
		err := a.fetch(context.Background(), "1.1.0", sha(tc.pkg))
		switch {
		case err == nil:
			t.Errorf("%s: accepted", tc.what)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		case !strings.Contains(err.Error(), tc.wantText):
			t.Errorf("%s: %v, want it to say %q", tc.what, err, tc.wantText)
		}
		if _, err := os.Stat(a.versionDir("1.1.0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: something was unpacked (%v)", tc.what, err)
		}
	}
	a := newTestAgent(t, serve(t, &testHub{pkg: pkg, signature: good}), trusted, 0)
	if err := a.fetch(context.Background(), "1.1.0", sha(pkg)); err != nil {
		t.Fatalf("signed by a trusted key: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(a.versionDir("1.1.0"), "packages", "agent.bin")); err != nil || string(b) != "v1.1.0" {
		t.Fatalf("unpacked: %q %v", b, err)
	}
}

// An agent refuses a plain http:// hub unless told --insecure, and
// refuses to start without a trusted key.
func TestAgentRefusesPlainHTTPWithoutInsecure(t *testing.T) {
	_, trusted := testKey(t)
	cfg := func(hub string, insecure bool, keys []ed25519.PublicKey) Config {
		return Config{Client: &Client{Hub: hub, Org: "acme", Node: "n1", HTTP: http.DefaultClient}, StateDir: t.TempDir(), InitialVersion: "1.0.0",
			InstallCmd: []string{"/bin/true"}, TrustedKeys: keys, InsecureHTTP: insecure, Log: zerolog.Nop()}
	}
	if _, err := New(cfg("http://hub:8080", false, trusted)); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Errorf("http without --insecure: %v, want it refused naming --insecure", err)
	}
	if _, err := New(cfg("http://hub:8080", true, trusted)); err != nil {
		t.Errorf("http with --insecure: %v", err)
	}
	if _, err := New(cfg("https://hub:8080", false, trusted)); err != nil {
		t.Errorf("https: %v", err)
	}
	if _, err := New(cfg("https://hub:8080", false, nil)); err == nil || !strings.Contains(err.Error(), "--trusted-key") {
		t.Errorf("no trusted key: %v, want it refused naming --trusted-key", err)
	}
}

// With --ca-file the agent reaches a hub whose certificate that CA
// signed; without it, the same hub is refused.
func TestTransportTrustsTheCAFile(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := Transport(ca)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Get(ts.URL)
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	resp.Body.Close()
	tr, _ = Transport("")
	if _, err := (&http.Client{Transport: tr}).Get(ts.URL); err == nil {
		t.Fatal("without the CA the hub's certificate was trusted")
	}
}

// The agent registers with the org token once, keeps the node's own
// token (mode 0600) and uses only it from then on, also after a restart.
func TestAgentKeepsAndUsesTheNodeToken(t *testing.T) {
	_, trusted := testKey(t)
	hub := &testHub{issued: "pfn_node"}
	url := serve(t, hub)
	a := newTestAgent(t, url, trusted, 0)
	if err := a.enrol(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(a.cfg.NodeTokenFile)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("node token file: %v %v, want mode 0600", info, err)
	}
	if err := a.register(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A restart finds the node's token and registers with it.
	b, err := New(Config{Client: &Client{Hub: url, Token: "pf_org", Org: "acme", Node: "n1", HTTP: http.DefaultClient}, StateDir: a.cfg.StateDir,
		InitialVersion: "1.0.0", InstallCmd: []string{"/bin/true"}, TrustedKeys: trusted, InsecureHTTP: true, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.enrol(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.register(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"Bearer pf_org", "Bearer pfn_node", "Bearer pfn_node"}
	if strings.Join(hub.auths, ",") != strings.Join(want, ",") {
		t.Fatalf("credentials sent: %q, want %q", hub.auths, want)
	}
}
