package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/tools/devstack"
)

// The fault endpoint is off by default, refuses a non-loopback address and
// a missing token file, answers only requests with its token, and moves
// leaders, restarts a broker and injects errors when asked.
func TestAdminEndpointIsLoopbackOnlyAndTokenGuarded(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "admin.token")
	for _, args := range [][]string{
		{"--admin-addr", "0.0.0.0:0", "--admin-token-file", tokFile},
		{"--admin-addr", "192.0.2.1:0", "--admin-token-file", tokFile},
		{"--admin-addr", "127.0.0.1:0"},
	} {
		if err := run(context.Background(), args, &syncBuffer{}, &syncBuffer{}); err == nil {
			t.Errorf("devbroker %v started, want a refusal", args)
		}
	}

	adminAddr, err := devstack.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startDevbroker(t, "--listen", "127.0.0.1:0", "--log-level", "none", "--admin-addr", adminAddr, "--admin-token-file", tokFile)
	defer stop()
	st, err := os.Stat(tokFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, mode %v; want it created 0600", tokFile, err, st)
	}
	b, _ := os.ReadFile(tokFile)
	token := strings.TrimSpace(string(b))

	post := func(path, tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+adminAddr+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := post("/v1/faults/leader-move", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", code)
	}
	if code, _ := post("/v1/faults/leader-move", token+"x"); code != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d, want 401", code)
	}
	if resp, err := http.Get("http://" + adminAddr + "/v1/faults/leader-move"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without a token: %v %v, want 401", resp, err)
	}
	for path, want := range map[string]int{
		"/v1/faults/nothing":                  http.StatusNotFound,
		"/v1/faults/broker-restart?node=9":    http.StatusBadRequest,
		"/v1/faults/broker-restart?down=2h":   http.StatusBadRequest,
		"/v1/faults/retriable-errors?count=0": http.StatusBadRequest,
	} {
		if code, body := post(path, token); code != want {
			t.Errorf("POST %s: %d %s, want %d", path, code, body, want)
		}
	}

	// The faults act on the cluster, and clients carry on through them.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...), kgo.DefaultProduceTopic("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, "f"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/faults/leader-move", "/v1/faults/coordinator-move",
		"/v1/faults/broker-restart?node=1&down=200ms", "/v1/faults/retriable-errors?count=2"} {
		if code, body := post(path, token); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s, want 200", path, code, body)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(path)}).FirstErr(); err != nil {
			t.Fatalf("produce after %s: %v", path, err)
		}
	}
}
