package edgeagent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/testkit"
)

// testHub is the part of the North API an agent uses, for any node and
// one package version 1.1.0: pkg, served with the signature given
// (none when ""), whose first failDownloads downloads fail. Registering
// issues the token issued.
type testHub struct {
	pkg           []byte
	signature     string
	issued        string
	failDownloads int
	fromVersions  string // the directive's version guard

	mu        sync.Mutex
	downloads int
	polled    int
	reports   []api.StatusRequest
	auths     []string // Authorization of each request
}

// serve serves h until the test ends and answers its URL.
func serve(t *testing.T, h *testHub) string {
	sum := sha(h.pkg)
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/orgs/{org}/nodes/{node}", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"registered": true, "token": h.issued})
	})
	mux.HandleFunc("GET /v1/orgs/{org}/nodes/{node}/directive", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.polled++
		h.mu.Unlock()
		if r.URL.Query().Get("index") != "" {
			select { // nothing changes: answer unchanged after a while
			case <-r.Context().Done():
			case <-time.After(100 * time.Millisecond):
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		json.NewEncoder(w).Encode(api.DirectiveAnswer{Index: 1, DirectiveID: "d1", Policy: "o/p", Action: nmp.ActionUpgrade, TargetVersion: "1.1.0",
			PackageSHA256: sum, FromVersions: h.fromVersions, StartAt: time.Now().Add(-time.Second)})
	})
	mux.HandleFunc("PUT /v1/orgs/{org}/nodes/{node}/status", func(w http.ResponseWriter, r *http.Request) {
		var rep api.StatusRequest
		json.NewDecoder(r.Body).Decode(&rep)
		h.mu.Lock()
		h.reports = append(h.reports, rep)
		h.mu.Unlock()
		w.Write([]byte(`{}`))
	})
	mux.HandleFunc("GET /v1/agentpackages/1.1.0", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"version": "1.1.0", "size": len(h.pkg)})
	})
	mux.HandleFunc("GET /v1/agentpackages/1.1.0/file", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.downloads++
		fail := h.downloads <= h.failDownloads
		h.mu.Unlock()
		if fail {
			http.Error(w, "the package store is unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Checksum-Sha256", sum)
		if h.signature != "" {
			w.Header().Set("X-Package-Signature", h.signature)
		}
		w.Write(h.pkg)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.auths = append(h.auths, r.Header.Get("Authorization"))
		h.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// newRetryHub is a hub of a package signed by a key the agent trusts
// (returned), whose first failDownloads downloads fail.
func newRetryHub(t *testing.T, failDownloads int) (*testHub, *Client, []ed25519.PublicKey) {
	key, trusted := testKey(t)
	pkg := testPackage(t, "1.1.0")
	sig, _ := nmp.SignPackage(key, "1.1.0", sha(pkg))
	h := &testHub{pkg: pkg, signature: sig, issued: "pfn_n1", failDownloads: failDownloads}
	return h, &Client{Hub: serve(t, h), Token: "t", Org: "o", Node: "n1", HTTP: http.DefaultClient}, trusted
}

func testPackage(t *testing.T, version string) []byte {
	pkg, err := nmp.BuildPackage(nmp.Manifest{Version: version}, map[string][]byte{"config/agent.cfg": []byte("HUB=x")})
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// polls is how many times the directive was asked for.
func (h *testHub) polls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.polled
}

// states are the states the agent reported, in order.
func (h *testHub) states() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.reports {
		out = append(out, r.Status)
	}
	return out
}

// runAgent runs an agent at 1.0.0 until it reports final (or fails the
// test after 10 s) and returns the states it reported.
func runAgent(t *testing.T, h *testHub, cfg Config, final string) []string {
	t.Helper()
	var got []string
	runAgentUntil(t, cfg, func() error {
		if got = h.states(); !slices.Contains(got, final) {
			return fmt.Errorf("no %q report; reported %q", final, got)
		}
		return nil
	})
	return got
}

// runAgentUntil runs an agent at 1.0.0 until done answers nil (or fails
// the test after 10 s).
func runAgentUntil(t *testing.T, cfg Config, done func() error) {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.InitialVersion, cfg.InstallCmd, cfg.PollWait, cfg.Log = "1.0.0", []string{"/bin/true"}, time.Second, zerolog.Nop()
	cfg.InsecureHTTP = true
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); a.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	testkit.Eventually(t, 10*time.Second, done)
}

// A package that cannot be downloaded twice is downloaded the third time:
// the node upgrades without reporting download failed.
func TestDownloadIsTriedThreeTimes(t *testing.T) {
	h, c, trusted := newRetryHub(t, 2)
	got := runAgent(t, h, Config{Client: c, TrustedKeys: trusted, DownloadBackoff: time.Millisecond}, nmp.StateSuccessful)
	h.mu.Lock()
	defer h.mu.Unlock()
	if slices.Contains(got, nmp.StateDownloadFailed) || h.downloads != 3 {
		t.Fatalf("reported %q after %d downloads", got, h.downloads)
	}
}

// A node left at download failed tries the same directive again after a
// backoff, and upgrades once the package can be downloaded.
func TestDownloadFailedIsTriedAgain(t *testing.T) {
	h, c, trusted := newRetryHub(t, 2)
	got := runAgent(t, h, Config{Client: c, TrustedKeys: trusted, DownloadAttempts: 1, RetryBackoff: 10 * time.Millisecond}, nmp.StateSuccessful)
	if n := len(slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s != nmp.StateDownloadFailed })); n != 2 {
		t.Fatalf("reported %q; want two download failures before the upgrade", got)
	}
}

// A package whose signature no trusted key verifies is reported as
// signature rejected, with the reason, once; it is not downloaded again,
// neither after the retry backoff of a failed download nor after a
// restart.
func TestSignatureRejectedIsNotDownloadedAgain(t *testing.T) {
	h, c, _ := newRetryHub(t, 0)
	_, untrusted := testKey(t) // the package is signed by another key
	cfg := Config{Client: c, TrustedKeys: untrusted, RetryBackoff: time.Millisecond, StateDir: t.TempDir()}
	got := runAgent(t, h, cfg, nmp.StateSignatureRejected)
	time.Sleep(300 * time.Millisecond) // a download failure would have been retried by now
	// The restart: the agent runs past its first two polls (the directive,
	// then a long poll).
	polled := h.polls()
	runAgentUntil(t, cfg, func() error {
		if p := h.polls(); p < polled+2 {
			return fmt.Errorf("%d polls since the restart", p-polled)
		}
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	all := h.states()
	h.mu.Lock()
	defer h.mu.Unlock()
	if want := []string{nmp.StateDownloadStarted, nmp.StateSignatureRejected}; !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}
	// After the restart only the last report is sent again.
	if want := []string{nmp.StateDownloadStarted, nmp.StateSignatureRejected, nmp.StateSignatureRejected}; !slices.Equal(all, want) {
		t.Errorf("reported %q in all, want %q", all, want)
	}
	if h.downloads != 1 {
		t.Errorf("%d downloads, want 1", h.downloads)
	}
	if e := h.reports[1].Error; !strings.Contains(e, nmp.ErrBadSignature.Error()) {
		t.Errorf("the report's reason is %q", e)
	}
}

// A host without room for the package reports precheck failed and
// downloads nothing.
func TestPrecheckFailsWithoutFreeDisk(t *testing.T) {
	h, c, trusted := newRetryHub(t, 0)
	free := func(string) (uint64, error) { return 10, nil }
	got := runAgent(t, h, Config{Client: c, TrustedKeys: trusted, FreeBytes: free}, nmp.StatePrecheckFailed)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(got, []string{nmp.StatePrecheckFailed}) || h.downloads != 0 {
		t.Fatalf("reported %q after %d downloads", got, h.downloads)
	}
	if e := h.reports[0].Error; !bytes.Contains([]byte(e), []byte("not enough free disk")) {
		t.Fatalf("error %q", e)
	}
}

// The policy's version guard: a node at 1.0.0 whose running version is
// within fromVersions upgrades; one outside reports precheck failed with
// the reason and downloads nothing.
func TestPrecheckVersionGuard(t *testing.T) {
	t.Run("in range", func(t *testing.T) {
		h, c, trusted := newRetryHub(t, 0)
		h.fromVersions = ">=1.0.0 <1.1.0"
		got := runAgent(t, h, Config{Client: c, TrustedKeys: trusted}, nmp.StateSuccessful)
		if slices.Contains(got, nmp.StatePrecheckFailed) {
			t.Fatalf("reported %q", got)
		}
	})
	t.Run("out of range", func(t *testing.T) {
		h, c, trusted := newRetryHub(t, 0)
		h.fromVersions = ">=1.0.1"
		got := runAgent(t, h, Config{Client: c, TrustedKeys: trusted}, nmp.StatePrecheckFailed)
		h.mu.Lock()
		defer h.mu.Unlock()
		if !slices.Equal(got, []string{nmp.StatePrecheckFailed}) || h.downloads != 0 {
			t.Fatalf("reported %q after %d downloads", got, h.downloads)
		}
		if e, want := h.reports[0].Error, "this NMP (o/p) upgrades only from >=1.0.1"; e != want {
			t.Fatalf("error %q, want %q", e, want)
		}
	})
}
