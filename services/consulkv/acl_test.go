package consulkv_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/consulkv"
)

// Consul's answers, as the API client returns them.
var (
	unknownToken = api.StatusError{Code: 403, Body: "ACL not found"}
	failedTxn    = errors.New("Failed request: ACL not found") // a transaction with an unknown token
	noRight      = api.StatusError{Code: 403, Body: `Permission denied: token with AccessorID 'a1' lacks permission 'key:write' on "svc:policies/event"`}
)

func TestRefusalsAreToldApart(t *testing.T) {
	for _, c := range []struct {
		name            string
		err             error
		refused, denied bool
	}{
		{"unknown token", unknownToken, true, false},
		{"unknown token in a transaction", fmt.Errorf("step 1/1: %w", failedTxn), true, false},
		{"no right", fmt.Errorf("put: %w", noRight), false, true},
		{"conflict", errors.New("check-and-set failed"), false, false},
		{"none", nil, false, false},
	} {
		if got := consulkv.TokenRefused(c.err); got != c.refused {
			t.Errorf("%s: TokenRefused = %v, want %v", c.name, got, c.refused)
		}
		if got := consulkv.Denied(c.err); got != c.denied {
			t.Errorf("%s: Denied = %v, want %v", c.name, got, c.denied)
		}
	}
	err := consulkv.Explain(failedTxn)
	if !errors.Is(err, consulkv.ErrTokenRefused) || !errors.Is(err, failedTxn) || !strings.Contains(err.Error(), "check --consul-token") {
		t.Errorf("Explain(%v) = %v", failedTxn, err)
	}
	if other := errors.New("timeout"); consulkv.Explain(other) != other {
		t.Error("Explain changed an error that is not about the token")
	}

	denied := &api.TxnResponse{Errors: api.TxnErrors{{OpIndex: 1, What: noRight.Body}}}
	conflict := &api.TxnResponse{Errors: api.TxnErrors{{OpIndex: 0, What: `failed to set key "svc:policies/event", index is stale`}}}
	if !consulkv.TxnDenied(denied) || consulkv.TxnDenied(conflict) || consulkv.TxnDenied(nil) {
		t.Error("TxnDenied does not tell a denied operation from a conflict")
	}
	err = consulkv.DeniedError(consulkv.Folder("svc"), consulkv.TxnReasons(denied))
	if !errors.Is(err, consulkv.ErrDenied) || !consulkv.Denied(err) ||
		!strings.Contains(err.Error(), `key_prefix "svc:policies/" { policy = "write" }`) || !strings.Contains(err.Error(), "lacks permission 'key:write'") {
		t.Errorf("DeniedError says %q", err)
	}
}

// agent answers /v1/acl/token/self as Consul does in each case.
func agent(t *testing.T, code int, body string) consulkv.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/acl/token/self" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return consulkv.Config{Addr: strings.TrimPrefix(srv.URL, "http://"), Token: "the-token"}
}

func TestCheckToken(t *testing.T) {
	check := func(c consulkv.Config) (consulkv.Token, error) {
		cl, err := c.Client()
		if err != nil {
			t.Fatal(err)
		}
		return consulkv.CheckToken(context.Background(), cl, c.Token)
	}
	tok, err := check(agent(t, 200, `{"AccessorID":"a1","Description":"consul-writer"}`))
	if err != nil || tok != (consulkv.Token{ACLs: true, AccessorID: "a1", Description: "consul-writer"}) {
		t.Errorf("a known token: %+v, %v", tok, err)
	}
	if tok, err := check(agent(t, 401, "ACL support disabled")); err != nil || tok.ACLs {
		t.Errorf("ACLs off: %+v, %v; want the token accepted", tok, err)
	}
	_, err = check(agent(t, 403, "token does not exist: ACL not found"))
	if !errors.Is(err, consulkv.ErrTokenRefused) || !strings.HasPrefix(err.Error(), "Consul refused the token: ") || !strings.Contains(err.Error(), "check --consul-token") {
		t.Errorf("an unknown token: %v", err)
	}
	_, err = check(agent(t, 500, "rpc error"))
	if err == nil || errors.Is(err, consulkv.ErrTokenRefused) {
		t.Errorf("an agent failing: %v, want an error that is not a refusal", err)
	}
	if _, err := (consulkv.Config{Addr: "127.0.0.1:1"}).Connect(context.Background(), zeroLog); err != nil {
		t.Errorf("no token: %v; want nothing checked", err)
	}
	if _, err := agent(t, 403, "ACL not found").Connect(context.Background(), zeroLog); !errors.Is(err, consulkv.ErrTokenRefused) {
		t.Errorf("Connect with an unknown token: %v", err)
	}
	if _, err := (consulkv.Config{Addr: "127.0.0.1:1", Token: "t"}).Connect(context.Background(), zeroLog); err != nil {
		t.Errorf("Connect to an agent not up yet: %v; want the client, the token checked later", err)
	}
}

var zeroLog = zerolog.Nop()
