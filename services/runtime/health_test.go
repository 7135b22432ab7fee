package runtime_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
)

func TestProfilesAreServedOnlyWithPprof(t *testing.T) {
	env := runtime.NewEnv(runtime.Kafka{}, zerolog.Nop())
	get := func(h http.Handler, path string) int {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	off := env.Handler(runtime.Options{}.OpsRoutes())
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
		if code := get(off, p); code != http.StatusNotFound {
			t.Errorf("%s without --pprof: %d, want 404", p, code)
		}
	}
	if code := get(off, "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	on := env.Handler(runtime.Options{Pprof: true}.OpsRoutes())
	if code := get(on, "/debug/pprof/cmdline"); code != http.StatusOK {
		t.Errorf("/debug/pprof/cmdline with --pprof: %d, want 200", code)
	}
}
