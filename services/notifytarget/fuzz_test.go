package notifytarget

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// maskSeeds are URLs from the masking and webhook tests, and hostile ones.
var maskSeeds = []string{
	"http://hooks.example.com/p?x=1",
	"https://user:pass@h/p",
	"https://user@h/p",
	"http://h/p?token=abc&x=1&API_KEY=k&X-Amz-Signature=s&sig=z&password=p&client_secret=c",
	"http://h/p?access%5Ftoken=abc",
	"http://h/p#access_token=abc&state=1",
	"http://h/%zz?token=abc",
	"http://u:hunter2@evil.example.com/?token=s3cret",
	"http://admin:hunter2@10.0.0.5:8500/v1/kv?token=s3cret",
	"https://u%40x:p%3Aw@h:8443/p?a=1;token=s3cret&b",
	"//user:secret@h/p",
	"http://u:p@h@evil/?Token=abcd#sig=efgh",
	"HTTP://USER:PASSWORD@H/?API%5FKEY=zyxw",
	"http://h/?token=ab'cd&x=1",
	"http://u:p'ss@h/",
	"http:user:pass@h/",
	"http://h/cb?next=http://u:p@o/x?token=abc",
	"http://h/cb?next=http%3A%2F%2Fu%3Ap%40o%2F%3Ftoken%3Dabc&x=1",
	"http://h/api/token/abc123/x",
	"http://h/x;token=abc/y;a=b;sig=c",
	"http://h/x/api_key=abc;v=1",
}

// secretSpans lists where the secrets of raw stand in it, as MaskURL
// reads them: the user information, and the values of the query and
// fragment parameters whose names look like a secret, with ';'
// separating parameters as '&' does (some servers read it so), and the
// secrets of the path as maskPath finds them.
func secretSpans(raw string) [][2]int {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out [][2]int
	if u.User != nil {
		start := 0
		if u.Scheme != "" {
			start = len(u.Scheme) + 1 // and the ':'
		}
		if strings.HasPrefix(raw[start:], "//") {
			start += 2
			authority := raw[start:]
			if i := strings.IndexAny(authority, "/?#"); i >= 0 {
				authority = authority[:i]
			}
			if at := strings.LastIndexByte(authority, '@'); at >= 0 {
				out = append(out, [2]int{start, start + at})
			}
		}
	}
	params := func(start, end int) {
		for i := start; i < end; {
			next := strings.IndexAny(raw[i:end], "&;")
			if next < 0 {
				next = end - i
			}
			name, _, ok := strings.Cut(raw[i:i+next], "=")
			if plain, err := url.QueryUnescape(name); err == nil {
				name = plain
			}
			if ok && secretName(name) {
				out = append(out, [2]int{i + strings.IndexByte(raw[i:], '=') + 1, i + next})
			}
			i += next + 1
		}
	}
	if u.Opaque == "" {
		start := 0
		if u.Scheme != "" {
			start = len(u.Scheme) + 1
		}
		if strings.HasPrefix(raw[start:], "//") {
			start += 2
			if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
				start += i
			} else {
				start = len(raw)
			}
		}
		end := len(raw)
		if i := strings.IndexAny(raw[start:], "?#"); i >= 0 {
			end = start + i
		}
		afterSecret := false
		for i := start; i < end; {
			next := strings.IndexByte(raw[i:end], '/')
			if next < 0 {
				next = end - i
			}
			seg := raw[i : i+next]
			switch {
			case seg == "":
				afterSecret = false
			case afterSecret:
				out = append(out, [2]int{i, i + next})
				afterSecret = false
			default:
				name, _, _ := strings.Cut(seg, ";")
				if plain, err := url.PathUnescape(name); err == nil {
					name = plain
				}
				afterSecret = !strings.Contains(name, "=") && secretName(name)
				if strings.Contains(seg, "=") {
					params(i, i+next)
				}
			}
			i += next + 1
		}
	}
	hash := strings.IndexByte(raw, '#')
	if hash < 0 {
		hash = len(raw)
	} else {
		params(hash+1, len(raw))
	}
	if q := strings.IndexByte(raw[:hash], '?'); q >= 0 {
		params(q+1, hash)
	}
	return out
}

// secretFiller stands for every secret in withOtherSecrets.
const secretFiller = "ZZZZZZZ"

// withOtherSecrets is raw with each of its secrets (secretSpans) replaced
// by secretFiller: whatever shows raw safely shows both alike.
func withOtherSecrets(raw string) string {
	spans := secretSpans(raw)
	slices.SortFunc(spans, func(a, b [2]int) int { return b[0] - a[0] })
	for _, sp := range spans {
		raw = raw[:sp[0]] + secretFiller + raw[sp[1]:]
	}
	return raw
}

// FuzzMaskURL masks any string as a webhook URL. What does not parse is
// shown as Masked; what does is shown the same whatever its secrets
// (secretSpans) are, and parses again with Masked for user information
// and for the value of every parameter whose name looks like a secret
// (in the path too). Seeds: the URLs of TestMaskURL and TestCheckWebhook and hostile ones;
// findings are committed under testdata/fuzz/FuzzMaskURL.
func FuzzMaskURL(f *testing.F) {
	for _, s := range maskSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out := MaskURL(raw)
		if _, err := url.Parse(raw); err != nil {
			if out != Masked {
				t.Fatalf("MaskURL(%q) = %q; want %q for a URL that does not parse", raw, out, Masked)
			}
			return
		}
		if other := withOtherSecrets(raw); MaskURL(other) != out {
			t.Fatalf("MaskURL(%q) = %q, but MaskURL(%q) = %q: what it shows depends on the secrets", raw, out, other, MaskURL(other))
		}
		m, err := url.Parse(out)
		if err != nil {
			t.Fatalf("MaskURL(%q) = %q, which does not parse: %v", raw, out, err)
		}
		if _, hasPassword := m.User.Password(); m.User != nil && (m.User.Username() != Masked || hasPassword) {
			t.Fatalf("MaskURL(%q) = %q, with user information %q", raw, out, m.User)
		}
		for _, sp := range secretSpans(out) {
			if s := out[sp[0]:sp[1]]; s != Masked {
				t.Fatalf("MaskURL(%q) = %q, with the secret %q", raw, out, s)
			}
		}
	})
}

// FuzzMaskText masks text holding a URL between other text. MaskText
// changes nothing in text that holds no "://", shows the text the same
// whatever the secrets of the URL are, and masks a URL that stands alone
// as MaskURL does. URLs holding characters MaskText takes as the end of
// a URL in text ('"', '<', '>', '`' or whitespace, which a URL holds
// percent-encoded) are not judged. Seeds: the text of TestMaskURL and
// maskSeeds; findings are committed under testdata/fuzz/FuzzMaskText.
func FuzzMaskText(f *testing.F) {
	f.Add(`POST "http://u:p@h:8080/x?token=t1": dial tcp: refused; again at`, "https://h/y?key=k2.", "")
	for _, s := range maskSeeds {
		f.Add("error:", s, "(retrying)")
	}
	f.Fuzz(func(t *testing.T, before, raw, after string) {
		text := before + " " + raw + " " + after
		out := MaskText(text)
		if !strings.Contains(text, "://") {
			if out != text {
				t.Fatalf("MaskText(%q) = %q; want it unchanged", text, out)
			}
			return
		}
		if raw == "" || strings.ContainsAny(raw, "\"<>` \t\n\f\r") {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || !strings.HasPrefix(raw[len(u.Scheme):], "://") {
			return
		}
		other := before + " " + withOtherSecrets(raw) + " " + after
		if MaskText(other) != out {
			t.Fatalf("MaskText(%q) = %q, but MaskText(%q) = %q: what it shows depends on the secrets", text, out, other, MaskText(other))
		}
		// MaskText keeps the scheme as written; MaskURL writes it in
		// lower case.
		want := MaskURL(raw)
		if scheme := raw[:len(u.Scheme)]; strings.HasPrefix(want, u.Scheme+"://") {
			want = scheme + want[len(scheme):]
		}
		if alone := MaskText(raw); len(raw) > len(u.Scheme)+len("://") && alone != want {
			t.Fatalf("MaskText(%q) = %q; MaskURL gives %q", raw, alone, want)
		}
	})
}

// FuzzCheckWebhook checks any string as a webhook URL. An accepted URL is
// an absolute http or https URL whose host and port a pattern allows; a
// refusal says the same whatever the URL's secrets are. Seeds: the URLs of
// TestCheckWebhook and maskSeeds; findings are committed under
// testdata/fuzz/FuzzCheckWebhook.
func FuzzCheckWebhook(f *testing.F) {
	for _, s := range append([]string{
		"http://hooks.example.com/x", "https://HOOKS.example.com./x", "http://hooks.example.com:1234/x",
		"https://api.example.org:8443/p", "https://api.example.org/p", "http://a.b.svc.local/", "http://svc.local/",
		"http://10.1.2.3:80/", "http://10.2.0.1/", "http://[fd00::1]:9000/", "http://[fd00::1]:9001/",
		"http://169.254.169.254/latest/meta-data", "http://evil.example.com/", "ftp://hooks.example.com/",
		"hooks.example.com/x", "http://[::ffff:10.1.2.3]/", "http://[fd00::1%25eth0]:9000/", "http://hooks.example.com:0/",
		"http://hooks.example.com:99999/", "http://u:hunter2@hooks.example.com:65536/?token=s3cret",
	}, maskSeeds...) {
		f.Add(s)
	}
	r := Config{WebhookAllow: []string{"hooks.example.com", "api.example.org:8443", "*.svc.local", "10.1.0.0/16", "[fd00::1]:9000"}}.MustRules()
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := r.CheckWebhook(raw)
		if _, perr := url.Parse(raw); perr == nil {
			other := withOtherSecrets(raw)
			_, oerr := r.CheckWebhook(other)
			if (err == nil) != (oerr == nil) || err != nil && err.Error() != oerr.Error() {
				t.Fatalf("CheckWebhook(%q): %v, but CheckWebhook(%q): %v: the answer depends on the secrets", raw, err, other, oerr)
			}
		}
		if err != nil {
			return
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
			t.Fatalf("CheckWebhook(%q) accepted %q, not an absolute http or https URL", raw, u)
		}
		host, port, err := hostPort(u)
		if err != nil || !anyMatches(r.hosts, host, port) {
			t.Fatalf("CheckWebhook(%q) accepted host %s port %d, which no pattern allows (%v)", raw, host, port, err)
		}
	})
}

// FuzzCheckScript checks any string as a script path, against a script
// directory holding an executable script, a file that is not executable,
// a subdirectory and links that stay in it or leave it. An accepted path
// is absolute, clean and in the directory, and resolves to an executable
// regular file in the directory. Seeds: the paths of TestCheckScript;
// findings are committed under testdata/fuzz/FuzzCheckScript.
func FuzzCheckScript(f *testing.F) {
	root := f.TempDir()
	allowed := filepath.Join(root, "scripts")
	other := filepath.Join(root, "other")
	for _, d := range []string{allowed, other, filepath.Join(allowed, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	write := func(path string, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
			f.Fatal(err)
		}
		return path
	}
	ok := write(filepath.Join(allowed, "ok.sh"), 0o755)
	plain := write(filepath.Join(allowed, "plain.sh"), 0o644)
	outside := write(filepath.Join(other, "evil.sh"), 0o755)
	for link, target := range map[string]string{"escape.sh": outside, "link.sh": ok, "up": "..", "loop": "loop"} {
		if err := os.Symlink(target, filepath.Join(allowed, link)); err != nil {
			f.Fatal(err)
		}
	}
	resolvedDir, err := filepath.EvalSymlinks(allowed)
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{
		ok, filepath.Join(allowed, "link.sh"), "/usr/bin/touch", outside, filepath.Join(allowed, "escape.sh"),
		filepath.Join(allowed, "missing.sh"), filepath.Join(allowed, "sub"), plain, "scripts/ok.sh",
		allowed + "/../scripts/ok.sh", allowed + "//ok.sh", "/" + strings.Repeat("a", 64),
		filepath.Join(allowed, "up", "other", "evil.sh"), filepath.Join(allowed, "loop"), allowed, allowed + "/",
		filepath.Join(allowed, "ok.sh\x00"), filepath.Join(allowed, "sub", "..", "ok.sh"),
	} {
		f.Add(p)
	}
	r := Config{ScriptDirs: []string{allowed}}.MustRules()
	f.Fuzz(func(t *testing.T, path string) {
		resolved, err := r.CheckScript(path)
		if err != nil {
			return
		}
		if !filepath.IsAbs(path) || filepath.Clean(path) != path || !inside(allowed, path) && !inside(resolvedDir, path) {
			t.Fatalf("CheckScript accepted %q, which is not an absolute clean path in %s", path, allowed)
		}
		again, err := filepath.EvalSymlinks(path)
		if err != nil || again != resolved || !inside(resolvedDir, resolved) {
			t.Fatalf("CheckScript(%q) = %q, which is not where it leads (%q, %v) or not in %s", path, resolved, again, err, resolvedDir)
		}
		fi, err := os.Stat(resolved)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("CheckScript(%q) = %q, which is no executable regular file (%v)", path, resolved, err)
		}
	})
}
