package notifytarget

import (
	"context"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckScript(t *testing.T) {
	root := t.TempDir()
	allowed := filepath.Join(root, "scripts")
	other := filepath.Join(root, "other")
	for _, d := range []string{allowed, other, filepath.Join(allowed, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ok := writeFile(t, filepath.Join(allowed, "ok.sh"), 0o755)
	plain := writeFile(t, filepath.Join(allowed, "plain.sh"), 0o644)
	outside := writeFile(t, filepath.Join(other, "evil.sh"), 0o755)
	if err := os.Symlink(outside, filepath.Join(allowed, "escape.sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ok, filepath.Join(allowed, "link.sh")); err != nil {
		t.Fatal(err)
	}
	// The allowed directory reached through a link is the same directory.
	viaLink := filepath.Join(root, "linked")
	if err := os.Symlink(allowed, viaLink); err != nil {
		t.Fatal(err)
	}
	r := Config{ScriptDirs: []string{viaLink}}.MustRules()
	okResolved, _ := filepath.EvalSymlinks(ok)

	for _, tc := range []struct {
		path, want string
	}{
		{ok, ""},
		{filepath.Join(viaLink, "ok.sh"), ""},
		{filepath.Join(allowed, "link.sh"), ""},
		{"/usr/bin/touch", "not in an allowed directory; scripts run only from " + viaLink + " (--script-dir"},
		{outside, "not in an allowed directory"},
		{filepath.Join(allowed, "escape.sh"), "resolves to"},
		{filepath.Join(allowed, "missing.sh"), "does not exist"},
		{filepath.Join(allowed, "sub"), "is a directory"},
		{plain, "is not executable (mode -rw-r--r--)"},
		{"scripts/ok.sh", "not an absolute path"},
		{allowed + "/../scripts/ok.sh", "is not clean"},
		{allowed + "//ok.sh", "is not clean"},
		{"/" + strings.Repeat("a", MaxPathBytes), "the limit is 4096"},
	} {
		got, err := r.CheckScript(tc.path)
		switch {
		case tc.want == "" && (err != nil || got != okResolved):
			t.Errorf("CheckScript(%q) = %q, %v; want %q", tc.path, got, err, okResolved)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckScript(%q) = %q, %v; want an error saying %q", tc.path, got, err, tc.want)
		}
	}
	if _, err := (Rules{}).CheckScript(ok); err != ErrNoScriptDirs || !strings.Contains(err.Error(), "--script-dir") {
		t.Errorf("no directories allowed: %v", err)
	}
}

func TestConfigRules(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, filepath.Join(dir, "f"), 0o644)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ScriptDirs: []string{"rel"}}, `--script-dir "rel": want an absolute path`},
		{Config{ScriptDirs: []string{"/"}}, "every program on the host"},
		{Config{ScriptDirs: []string{filepath.Join(dir, "none")}}, "resolve the directory"},
		{Config{ScriptDirs: []string{file}}, "is not a directory"},
		{Config{WebhookAllow: []string{"http://h/"}}, "not a URL"},
		{Config{WebhookAllow: []string{"h:0"}}, "want 1 to 65535"},
		{Config{WebhookAllow: []string{"*"}}, "is not a host name"},
		{Config{WebhookAllow: []string{"a..b"}}, "is not a host name"},
		{Config{WebhookAllow: []string{"[::1"}}, "missing ']'"},
		{Config{WebhookAllow: []string{"fe80::1%eth0"}}, "without a zone"},
	} {
		if _, err := tc.cfg.Rules(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error saying %q", tc.cfg, err, tc.want)
		}
	}
	good := Config{ScriptDirs: []string{dir}, WebhookAllow: []string{"h", "h:8080", "*.example.com", "10.0.0.0/8", "10.0.0.0/8:443", "[::1]:80", "::1", "127.0.0.1"}}
	if _, err := good.Rules(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
}

func TestFlagsReplaceTheEnvironmentThenAdd(t *testing.T) {
	t.Setenv("PF_SCRIPT_DIRS", "/a:/b,/c")
	t.Setenv("PF_WEBHOOK_ALLOW", "h1, h2:80")
	c := ConfigFromEnv()
	if strings.Join(c.ScriptDirs, " ") != "/a /b /c" || strings.Join(c.WebhookAllow, " ") != "h1 h2:80" {
		t.Fatalf("from the environment: %+v", c)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--script-dir", "/d", "--script-dir", "/e:/f", "--webhook-allow", "h3"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.ScriptDirs, " ") != "/d /e /f" || strings.Join(c.WebhookAllow, " ") != "h3" {
		t.Fatalf("after the flags: %+v", c)
	}
}

func TestCheckArg(t *testing.T) {
	if err := CheckArg(MaxArgBytes); err != nil {
		t.Errorf("%d bytes: %v", MaxArgBytes, err)
	}
	if err := CheckArg(MaxArgBytes + 1); err == nil || !strings.Contains(err.Error(), "128 KiB") || !strings.Contains(err.Error(), "webhook") {
		t.Errorf("%d bytes: %v", MaxArgBytes+1, err)
	}
}

func TestCheckWebhook(t *testing.T) {
	r := Config{WebhookAllow: []string{"hooks.example.com", "api.example.org:8443", "*.svc.local", "10.1.0.0/16", "[fd00::1]:9000"}}.MustRules()
	for _, tc := range []struct {
		url, want string
	}{
		{"http://hooks.example.com/x", ""},
		{"https://HOOKS.example.com./x", ""},
		{"http://hooks.example.com:1234/x", ""},
		{"https://api.example.org:8443/p", ""},
		{"https://api.example.org/p", "host api.example.org:443 is not allowed"},
		{"http://a.b.svc.local/", ""},
		{"http://svc.local/", "is not allowed"},
		{"http://10.1.2.3:80/", ""},
		{"http://10.2.0.1/", "is not allowed"},
		{"http://[fd00::1]:9000/", ""},
		{"http://[fd00::1]:9001/", "is not allowed"},
		{"http://169.254.169.254/latest/meta-data", "is not allowed"},
		{"http://evil.example.com/", "webhooks go only to hooks.example.com, api.example.org:8443"},
		{"ftp://hooks.example.com/", "not an absolute http or https URL"},
		{"hooks.example.com/x", "not an absolute http or https URL"},
		{"http://u:hunter2@evil.example.com/?token=s3cret", "http://***@evil.example.com/?token=***"},
	} {
		_, err := r.CheckWebhook(tc.url)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckWebhook(%q): %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckWebhook(%q) = %v; want an error saying %q", tc.url, err, tc.want)
		case err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret")):
			t.Errorf("CheckWebhook(%q) shows a secret: %v", tc.url, err)
		}
	}
	if _, err := (Rules{}).CheckWebhook("http://hooks.example.com/"); err != ErrNoWebhookHosts || !strings.Contains(err.Error(), "--webhook-allow") {
		t.Errorf("no host allowed: %v", err)
	}
}

func TestCheckDial(t *testing.T) {
	r := Config{WebhookAllow: []string{"hooks.example.com", "metadata.internal", "127.0.0.1:8080"}}.MustRules()
	for _, tc := range []struct {
		host, addr, want string
	}{
		{"hooks.example.com", "203.0.113.7:80", ""},
		{"hooks.example.com", "10.0.0.7:80", ""},
		{"metadata.internal", "169.254.169.254:80", "a link-local address, which is reached only when allowed by address: --webhook-allow 169.254.169.254"},
		{"hooks.example.com", "127.0.0.1:80", "loopback"},
		{"hooks.example.com", "[::1]:80", "loopback"},
		{"hooks.example.com", "[::ffff:169.254.1.1]:80", "link-local"},
		{"hooks.example.com", "0.0.0.0:80", "unspecified"},
		{"hooks.example.com", "[fd00:ec2::254]:80", "cloud metadata"},
		{"localhost", "127.0.0.1:8080", ""}, // allowed by address
		{"localhost", "127.0.0.1:8081", "is not allowed"},
		{"other.example.com", "203.0.113.7:80", "is not allowed"},
	} {
		err := r.checkDial(tc.host, tc.addr)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("checkDial(%s, %s): %v", tc.host, tc.addr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("checkDial(%s, %s) = %v; want an error saying %q", tc.host, tc.addr, err, tc.want)
		}
	}
}

// TestRefusedAddressesWinOverTheAllowList: a loopback allowed on every
// port still does not reach a refused port (a stack's Consul), neither as
// written in the URL nor through a name that resolves to it.
func TestRefusedAddressesWinOverTheAllowList(t *testing.T) {
	r := Config{WebhookAllow: []string{"127.0.0.1", "::1", "localhost"}, WebhookRefuse: []string{"127.0.0.0/8:8500", "[::1]:8500"}}.MustRules()
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:8500/v1/kv/x", "127.0.0.1:8500 serves this stack itself, which no webhook may reach (refused: 127.0.0.0/8:8500, [::1]:8500)"},
		{"http://[::1]:8500/v1/kv/x", "[::1]:8500 serves this stack itself"},
		{"http://127.0.0.1:9000/hook", ""},
	} {
		_, err := r.CheckWebhook(tc.url)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckWebhook(%q) = %v; want %q", tc.url, err, tc.want)
		}
	}
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:8500", "webhook host localhost: address 127.0.0.1:8500 serves this stack itself"},
		{"127.0.0.2:8500", "serves this stack itself"},
		{"[::1]:8500", "serves this stack itself"},
		{"127.0.0.1:9000", ""},
	} {
		err := r.checkDial("localhost", tc.addr)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkDial(localhost, %s) = %v; want %q", tc.addr, err, tc.want)
		}
	}
	if _, err := (Config{WebhookRefuse: []string{"http://x"}}).Rules(); err == nil || !strings.Contains(err.Error(), `refused webhook address "http://x"`) {
		t.Errorf("a bad refused pattern: %v", err)
	}
}

// TestClientChecksTheDialledAddress: a name the patterns allow that
// resolves to a loopback address is refused when dialled, unless the
// address is allowed too.
func TestClientChecksTheDialledAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	u := "http://localhost:" + strconv.Itoa(srv.Listener.Addr().(*net.TCPAddr).Port) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	post := func(r Rules) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
		resp, err := r.Client(1).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	byName := Config{WebhookAllow: []string{"localhost"}}.MustRules()
	if _, err := byName.CheckWebhook(u); err != nil {
		t.Fatalf("CheckWebhook: %v", err)
	}
	if err := post(byName); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("localhost allowed by name only: %v; want the loopback address refused", err)
	}
	if err := post(Config{WebhookAllow: []string{"localhost", "127.0.0.1", "::1"}}.MustRules()); err != nil {
		t.Fatalf("localhost and its addresses allowed: %v", err)
	}
}

func TestClientFollowsNoRedirect(t *testing.T) {
	var hit bool
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit = true }))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	r := Config{WebhookAllow: []string{"127.0.0.1"}}.MustRules()
	resp, err := r.Client(1).Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || hit {
		t.Fatalf("status %d, redirect target reached: %v; want the 307 itself", resp.StatusCode, hit)
	}
}

func TestMaskURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://hooks.example.com/p?x=1", "http://hooks.example.com/p?x=1"},
		{"https://user:pass@h/p", "https://***@h/p"},
		{"https://user@h/p", "https://***@h/p"},
		{"http://h/p?token=abc&x=1&API_KEY=k&X-Amz-Signature=s&sig=z&password=p&client_secret=c", "http://h/p?token=***&x=1&API_KEY=***&X-Amz-Signature=***&sig=***&password=***&client_secret=***"},
		{"http://h/p?access%5Ftoken=abc", "http://h/p?access%5Ftoken=***"},
		{"http://h/p#access_token=abc&state=1", "http://h/p#access_token=***&state=1"},
		{"http://h/%zz?token=abc", "***"},
		{"http://h/p?a=1;token=abc;x=2&sig=z", "http://h/p?a=1;token=***;x=2&sig=***"},
		{"http://u:p'ss@h/it's?token=ab'cd", "http://***@h/it's?token=***"},
		{"http://u:p@/x", "http://***@/x"},
		{"//@// ", "//***@//%20"},
	} {
		if _, err := url.Parse(MaskURL(tc.in)); err != nil {
			t.Errorf("MaskURL(%q) = %q, which does not parse: %v", tc.in, MaskURL(tc.in), err)
		}
		if got := MaskURL(tc.in); got != tc.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	text := `POST "http://u:p@h:8080/x?token=t1": dial tcp: refused; again at https://h/y?key=k2.`
	if got := MaskText(text); got != `POST "http://***@h:8080/x?token=***": dial tcp: refused; again at https://h/y?key=***` {
		t.Errorf("MaskText: %q", got)
	}
	text = `at 'http://u:p'ss@h/?a=1;token=ab'cd', then`
	if got := MaskText(text); got != `at 'http://***@h/?a=1;token=*** then` {
		t.Errorf("MaskText: %q", got)
	}
	if _, err := url.Parse(MaskURL("http://u:p@h/")); err != nil {
		t.Errorf("a masked URL does not parse: %v", err)
	}
}

// TestMaskURLNestedAndPath: a URL given as a query value (as it is, or
// percent-encoded) is masked as a URL of its own, and a secret in the
// path (a name=value segment or matrix parameter, or the segment after one
// named like a secret) is masked as in a query.
func TestMaskURLNestedAndPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://h/cb?next=http://u:p@o/x?token=abc", "http://h/cb?next=http://***@o/x?token=***"},
		{"http://h/cb?next=http%3A%2F%2Fu%3Ap%40o%2F%3Ftoken%3Dabc&x=1", "http://h/cb?next=http%3A%2F%2F***%40o%2F%3Ftoken%3D***&x=1"},
		{"http://h/cb?next=https%3A%2F%2Fo%2Fx%3Fa%3D1", "http://h/cb?next=https%3A%2F%2Fo%2Fx%3Fa%3D1"},
		{"http://h/api/token/abc123/x", "http://h/api/token/***/x"},
		{"http://h/keys/abc123", "http://h/keys/***"},
		{"http://h/x;token=abc/y", "http://h/x;token=***/y"},
		{"http://h/x/api_key=abc;v=1", "http://h/x/api_key=***;v=1"},
		{"http://h/token/", "http://h/token/"},
		{"http://h/a/b?x=1", "http://h/a/b?x=1"},
	} {
		got := MaskURL(tc.in)
		if got != tc.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if _, err := url.Parse(got); err != nil {
			t.Errorf("MaskURL(%q) = %q, which does not parse: %v", tc.in, got, err)
		}
	}
}

// TestMaskTextGlued: a URL glued to the text before it (a letter, a digit,
// an underscore) is masked, and the text around it is kept as it was.
func TestMaskTextGlued(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"_http://u:p@h/?token=a", "_http://***@h/?token=***"},
		{"1http://u:p@h/?token=a", "1http://***@h/?token=***"},
		{"retry#2http://u:p@h/", "retry#2http://***@h/"},
		{"Posthttp://u:p@h/?token=a", "Posthttp://***@h/?token=***"},
		{"Get HTTPS://u:p@h/x: EOF", "Get HTTPS://***@h/x: EOF"},
		{"failed:http://u:p@h/", "failed:http://***@h/"},
	} {
		if got := MaskText(tc.in); got != tc.want {
			t.Errorf("MaskText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestClientKeepsEveryHostConnection: the webhook client keeps as many
// idle connections in all as it keeps per host, so that calls in flight
// to one busy host above the transport's default of 100 in all do not
// close their connections and dial again.
func TestClientKeepsEveryHostConnection(t *testing.T) {
	for _, n := range []int{1, 32, 256} {
		tr := loopbackRules(t).Client(n).Transport.(*http.Transport)
		if tr.MaxIdleConnsPerHost != n || tr.MaxIdleConns < n {
			t.Fatalf("Client(%d): %d idle connections per host, %d in all; want %d and at least as many", n, tr.MaxIdleConnsPerHost, tr.MaxIdleConns, n)
		}
	}
}

// loopbackRules are rules allowing webhooks to 127.0.0.1.
func loopbackRules(t *testing.T) Rules {
	t.Helper()
	r, err := Config{WebhookAllow: []string{"127.0.0.1"}}.Rules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
