package notify

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
)

func vmMemory() events.Policy {
	return events.Policy{
		PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
		Body: `{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}`,
	}
}

func other() events.Policy {
	return events.Policy{PolicyID: "X", PolicyName: "X.3.xml", PolicyVersion: "3", Body: "{ \"policyName\": \"X.3.xml\",\n \"config\": {\"x\": [1, 2]} }"}
}

func TestPayload(t *testing.T) {
	cases := []struct {
		name string
		a    *events.ComponentApplied
		want string
	}{
		{
			name: "first collection",
			a:    &events.ComponentApplied{Policies: []events.Policy{vmMemory()}, UpdatedPolicies: []events.Policy{vmMemory()}},
			want: `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"updated_policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"removed_policies":[]}`,
		},
		{
			name: "removal, bodies compacted",
			a:    &events.ComponentApplied{Policies: []events.Policy{vmMemory()}, RemovedPolicies: []events.Policy{other()}},
			want: `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"updated_policies":[],"removed_policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}]}`,
		},
		{
			name: "nothing left",
			a:    &events.ComponentApplied{},
			want: `{"policies":[],"updated_policies":[],"removed_policies":[]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Payload(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("payload\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "not json", `"a string"`, `[1]`, `{"open":`} {
		a := &events.ComponentApplied{UpdatedPolicies: []events.Policy{{PolicyID: "B", Body: bad}}}
		if _, err := Payload(a); err == nil || !strings.Contains(err.Error(), "policy B body is not a JSON object") {
			t.Errorf("body %q: error %v", bad, err)
		}
	}
}

func TestShouldNotify(t *testing.T) {
	script := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/bin/true"}
	applied := func(gen int64, n events.NotifyTarget, uninstalled bool) *events.ComponentApplied {
		return &events.ComponentApplied{UpdateID: "u", Generation: gen, Notify: n, Uninstalled: uninstalled}
	}
	cases := []struct {
		name  string
		claim *consulkv.Claim
		a     *events.ComponentApplied
		want  bool
	}{
		{"never notified", nil, applied(1, script, false), true},
		{"older claim", &consulkv.Claim{Generation: 4}, applied(5, script, false), true},
		{"same generation claimed (replay)", &consulkv.Claim{Generation: 5}, applied(5, script, false), false},
		{"newer claim", &consulkv.Claim{Generation: 6}, applied(5, script, false), false},
		{"no notify target", nil, applied(1, events.NotifyTarget{Kind: events.NotifyNone}, false), false},
		{"uninstalled", nil, applied(1, script, true), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := ShouldNotify(tc.claim, tc.a)
			if got != tc.want || (!got && why == "") {
				t.Fatalf("ShouldNotify = %v (%q), want %v with a reason when false", got, why, tc.want)
			}
		})
	}
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunScript(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	echo := writeScript(t, dir, "echo.sh", `printf '%s|' "$#" "$1" >&2; exit 0`+"\n")
	if r := RunScript(ctx, echo, []byte(`{"a":"b c"}`), 10*time.Second); r.ExitCode != 0 || r.Stderr != `2|policies|` {
		t.Fatalf("echo script: %+v", r)
	}
	fail := writeScript(t, dir, "fail.sh", "echo boom >&2\nexit 3\n")
	if r := RunScript(ctx, fail, []byte(`{}`), 10*time.Second); r.ExitCode != 3 || r.Stderr != "boom\n" {
		t.Fatalf("failing script: %+v", r)
	}
	noisy := writeScript(t, dir, "noisy.sh", "i=0; while [ $i -lt 2000 ]; do echo 0123456789 >&2; i=$((i+1)); done\n")
	if r := RunScript(ctx, noisy, []byte(`{}`), 10*time.Second); r.ExitCode != 0 || !strings.HasPrefix(r.Stderr, "0123456789\n") ||
		!strings.Contains(r.Stderr, "more bytes of stderr dropped") || len(r.Stderr) > MaxStderrBytes+100 {
		t.Fatalf("noisy script: exit %d, %d bytes of stderr", r.ExitCode, len(r.Stderr))
	}
	// A script that starts a child and hangs is killed with its child.
	slow := writeScript(t, dir, "slow.sh", "sleep 60 &\nsleep 60\n")
	start := time.Now()
	r := RunScript(ctx, slow, []byte(`{}`), 300*time.Millisecond)
	if r.ExitCode != -1 || !strings.Contains(r.Stderr, "timeout of 300ms") || time.Since(start) > 30*time.Second {
		t.Fatalf("slow script: %+v after %s", r, time.Since(start))
	}
	if r := RunScript(ctx, filepath.Join(dir, "missing.sh"), []byte(`{}`), time.Second); r.ExitCode != -1 || !strings.Contains(r.Stderr, "cannot run") {
		t.Fatalf("missing script: %+v", r)
	}
}

func TestPostWebhook(t *testing.T) {
	var got []byte
	var ctype string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctype = r.Header.Get("Content-Type")
		got, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/fail" {
			http.Error(w, "not today", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	r := PostWebhook(ctx, srv.Client(), srv.URL+"/ok", []byte(`{"policies":[]}`), 5*time.Second)
	if r.ExitCode != 0 || r.HTTPStatus != 200 || string(got) != `{"policies":[]}` || ctype != "application/json" {
		t.Fatalf("webhook: %+v, body %s, content type %s", r, got, ctype)
	}
	r = PostWebhook(ctx, srv.Client(), srv.URL+"/fail", []byte(`{}`), 5*time.Second)
	if r.ExitCode != 1 || r.HTTPStatus != 503 || !strings.Contains(r.Stderr, "not today") {
		t.Fatalf("failing webhook: %+v", r)
	}
	r = PostWebhook(ctx, srv.Client(), "http://127.0.0.1:1/none", []byte(`{}`), 5*time.Second)
	if r.ExitCode != -1 || r.HTTPStatus != 0 || r.Stderr == "" {
		t.Fatalf("unreachable webhook: %+v", r)
	}
}
