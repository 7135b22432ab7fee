package hooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	none := Config{}.MustRules()
	if err := none.Check("https://engine.example/x"); err != ErrNoHosts {
		t.Errorf("no hosts allowed: %v", err)
	}
	r := Config{Allow: []string{"engine.example", "127.0.0.1"}}.MustRules()
	for raw, want := range map[string]string{
		"https://engine.example/decide": "",
		"http://127.0.0.1:9/x":          "",
		"https://other.example/decide":  "host other.example:443 is not allowed; webhooks go only to engine.example, 127.0.0.1 (--admission-hook-allow, env PF_ADMISSION_HOOK_ALLOW)",
		"ftp://engine.example/":         "is not an absolute http or https URL",
	} {
		err := r.Check(raw)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Check(%s) = %v, want %q", raw, err, want)
		}
	}
	if _, err := (Config{Allow: []string{"http://x"}}).Rules(); err == nil || !strings.Contains(err.Error(), "--admission-hook-allow") {
		t.Errorf("bad pattern: %v", err)
	}
}

func TestCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(`{"allowed":true}`))
	}))
	defer srv.Close()
	r := Config{Allow: []string{"127.0.0.1"}}.MustRules()
	if out, err := r.Call(context.Background(), srv.URL+"/ok", []byte(`{}`)); err != nil || string(out) != `{"allowed":true}` {
		t.Errorf("ok: %s %v", out, err)
	}
	if _, err := r.Call(context.Background(), srv.URL+"/fail", []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "answered 500") {
		t.Errorf("fail: %v", err)
	}
	if _, err := (Config{}).MustRules().Call(context.Background(), srv.URL+"/ok", []byte(`{}`)); err != ErrNoHosts {
		t.Errorf("no hosts: %v", err)
	}
}
