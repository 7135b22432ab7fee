package edgeagent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/nmp"
)

// retryHub is the part of the North API an agent uses, for one node and
// one package version 1.1.0, signed by a key the agent trusts, whose
// first failDownloads downloads fail.
type retryHub struct {
	pkg           []byte
	failDownloads int
	trusted       []ed25519.PublicKey

	mu        sync.Mutex
	downloads int
	reports   []Report
}

func newRetryHub(t *testing.T, failDownloads int) (*retryHub, *Client) {
	h := &retryHub{pkg: testPackage(t, "1.1.0"), failDownloads: failDownloads}
	sum := sha256.Sum256(h.pkg)
	key, trusted := testKey(t)
	h.trusted = trusted
	sig, _ := nmp.SignPackage(key, "1.1.0", hex.EncodeToString(sum[:]))
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/orgs/o/nodes/n1", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"registered": true, "token": "pfn_n1"}`))
	})
	mux.HandleFunc("GET /v1/orgs/o/nodes/n1/directive", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("index") != "" {
			select { // nothing changes: answer unchanged after a while
			case <-r.Context().Done():
			case <-time.After(100 * time.Millisecond):
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		json.NewEncoder(w).Encode(Directive{Index: 1, DirectiveID: "d1", Policy: "o/p", Action: nmp.ActionUpgrade, TargetVersion: "1.1.0",
			PackageSHA256: hex.EncodeToString(sum[:]), StartAt: time.Now().Add(-time.Second)})
	})
	mux.HandleFunc("PUT /v1/orgs/o/nodes/n1/status", func(w http.ResponseWriter, r *http.Request) {
		var rep Report
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
		w.Header().Set("X-Checksum-Sha256", hex.EncodeToString(sum[:]))
		w.Header().Set("X-Package-Signature", sig)
		w.Write(h.pkg)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return h, &Client{Hub: srv.URL, Token: "t", Org: "o", Node: "n1", HTTP: srv.Client()}
}

func testPackage(t *testing.T, version string) []byte {
	pkg, err := nmp.BuildPackage(nmp.Manifest{Version: version}, map[string][]byte{"config/agent.cfg": []byte("HUB=x")})
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// states are the states the agent reported, in order.
func (h *retryHub) states() []string {
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
func runAgent(t *testing.T, h *retryHub, cfg Config, final string) []string {
	t.Helper()
	cfg.StateDir, cfg.InitialVersion, cfg.InstallCmd, cfg.PollWait, cfg.Log = t.TempDir(), "1.0.0", []string{"/bin/true"}, time.Second, zerolog.Nop()
	cfg.TrustedKeys, cfg.InsecureHTTP = h.trusted, true
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got := h.states(); slices.Contains(got, final) {
			return got
		}
	}
	t.Fatalf("no %q report in 10 s; reported %q", final, h.states())
	return nil
}

// A package that cannot be downloaded twice is downloaded the third time:
// the node upgrades without reporting download failed.
func TestDownloadIsTriedThreeTimes(t *testing.T) {
	h, c := newRetryHub(t, 2)
	got := runAgent(t, h, Config{Client: c, DownloadBackoff: time.Millisecond}, nmp.StateSuccessful)
	h.mu.Lock()
	defer h.mu.Unlock()
	if slices.Contains(got, nmp.StateDownloadFailed) || h.downloads != 3 {
		t.Fatalf("reported %q after %d downloads", got, h.downloads)
	}
}

// A node left at download failed tries the same directive again after a
// backoff, and upgrades once the package can be downloaded.
func TestDownloadFailedIsTriedAgain(t *testing.T) {
	h, c := newRetryHub(t, 2)
	got := runAgent(t, h, Config{Client: c, DownloadAttempts: 1, RetryBackoff: 10 * time.Millisecond}, nmp.StateSuccessful)
	if n := len(slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s != nmp.StateDownloadFailed })); n != 2 {
		t.Fatalf("reported %q; want two download failures before the upgrade", got)
	}
}

// A host without room for the package reports precheck failed and
// downloads nothing.
func TestPrecheckFailsWithoutFreeDisk(t *testing.T) {
	h, c := newRetryHub(t, 0)
	free := func(string) (uint64, error) { return 10, nil }
	got := runAgent(t, h, Config{Client: c, FreeBytes: free}, nmp.StatePrecheckFailed)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(got, []string{nmp.StatePrecheckFailed}) || h.downloads != 0 {
		t.Fatalf("reported %q after %d downloads", got, h.downloads)
	}
	if e := h.reports[0].Error; !bytes.Contains([]byte(e), []byte("not enough free disk")) {
		t.Fatalf("error %q", e)
	}
}
