package notifytarget

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Masked is what a secret in a URL is shown as.
const Masked = "***"

// secretWords mark a query parameter whose value is a secret: a name that
// holds one of them, in any case (token, api_key, X-Amz-Signature,
// password, client_secret, sig, auth, ...).
var secretWords = []string{"token", "key", "secret", "pass", "pwd", "sig", "auth", "credential", "session", "jwt", "bearer", "cookie"}

func secretName(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// MaskURL is the one way a webhook URL is shown (in claims, status
// answers, logs and errors): the user information becomes ***, and so
// does the value of every query (or fragment) parameter whose name looks
// like a secret, a URL given as a parameter value (masked as a URL of its
// own, also when percent-encoded), and a secret in the path (see
// maskPath). A URL that does not parse is shown as *** altogether.
func MaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Masked
	}
	hadUser := u.User != nil
	if hadUser {
		// An empty user keeps the authority where it was (also without
		// a host); Masked is written into it by hand below, as url.User
		// would escape the asterisks.
		u.User = url.User("")
	}
	if p := u.RawPath; p != "" || u.Path != "" {
		// The path as written (RawPath, or Path when it needed no
		// escaping), masked segment by segment and written back in a
		// form url.URL keeps as it is: shown the same whatever the
		// secrets held.
		if p == "" {
			p = u.EscapedPath()
		}
		masked := maskPath(p)
		if plain, err := url.PathUnescape(masked); err == nil {
			u.Path, u.RawPath = plain, masked
		}
	}
	u.RawQuery = maskParams(u.RawQuery)
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = maskParams(u.Fragment), ""
	}
	s := u.String()
	if i := strings.Index(s, "//@"); hadUser && i >= 0 {
		s = s[:i+2] + Masked + s[i+2:]
	}
	return s
}

// maskParams masks the secret values of name=value pairs joined by '&'
// or ';' (which some servers read as '&'), keeping everything else as it
// is.
func maskParams(q string) string {
	if q == "" {
		return q
	}
	var sb strings.Builder
	for q != "" {
		end := strings.IndexAny(q, "&;")
		if end < 0 {
			end = len(q)
		}
		p := q[:end]
		if name, _, ok := strings.Cut(p, "="); ok {
			plain, err := url.QueryUnescape(name)
			if err != nil {
				plain = name
			}
			if secretName(plain) {
				p = name + "=" + Masked
			} else {
				p = name + "=" + maskValue(p[len(name)+1:])
			}
		}
		sb.WriteString(p)
		if end < len(q) {
			sb.WriteByte(q[end])
			end++
		}
		q = q[end:]
	}
	return sb.String()
}

// maskValue masks the URLs in a parameter value that is not a secret
// itself: a value holding "://" as it is, or once percent-decoded (the
// masked URL is then encoded again, its Masked kept readable).
func maskValue(v string) string {
	if strings.Contains(v, "://") {
		return MaskText(v)
	}
	plain, err := url.QueryUnescape(v)
	if err != nil || !strings.Contains(plain, "://") {
		return v
	}
	masked := MaskText(plain)
	if masked == plain {
		return v
	}
	return strings.ReplaceAll(url.QueryEscape(masked), "%2A", "*")
}

// maskPath masks the secrets of an escaped URL path: in each segment, the
// values of name=value pairs (joined by ';', as matrix parameters are)
// whose name looks like a secret, and a whole segment that follows one
// named like a secret (/token/<secret>, /keys/<secret>).
func maskPath(p string) string {
	segs := strings.Split(p, "/")
	afterSecret := false
	for i, seg := range segs {
		if seg == "" {
			afterSecret = false
			continue
		}
		if afterSecret {
			segs[i], afterSecret = Masked, false
			continue
		}
		name, _, _ := strings.Cut(seg, ";")
		if plain, err := url.PathUnescape(name); err == nil {
			name = plain
		}
		afterSecret = !strings.Contains(name, "=") && secretName(name)
		if strings.Contains(seg, "=") {
			seg = maskParams(seg)
		}
		segs[i] = escapeInvalid(seg)
	}
	return strings.Join(segs, "/")
}

// escapeInvalid percent-encodes the bytes of an escaped path segment that
// an escaped path may not hold as they are (a space, a quote, a byte
// beyond ASCII), keeping the rest, its escapes included, as written.
func escapeInvalid(seg string) string {
	var sb strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '%' && i+2 < len(seg) && isHex(seg[i+1]) && isHex(seg[i+2]):
			sb.WriteString(seg[i : i+3])
			i += 2
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			strings.IndexByte("-._~!$&'()*+,;=:@[]", c) >= 0:
			sb.WriteByte(c)
		default:
			fmt.Fprintf(&sb, "%%%02X", c)
		}
	}
	return sb.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// urlInText finds a URL in text: a scheme, "://", and what follows up to
// whitespace or a character a URL holds only percent-encoded and text
// uses around one ('"', '<', '>', '`'). A "'" belongs to the URL: it may
// stand unencoded in a password or a query value. The scheme starts at
// the first letter of the run of scheme characters before "://", so a URL
// glued to the text before it ("_http://", "2http://") is found too.
var urlInText = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://[^\s"<>` + "`" + `]+`)

// MaskText applies MaskURL to every URL in s (see urlInText), e.g. an
// error message or a claim's stderr written before URLs were masked. The
// scheme is kept as it was written (MaskURL writes it in lower case), so
// text glued to a URL reads as before.
func MaskText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, func(raw string) string {
		masked := MaskURL(raw)
		scheme := raw[:strings.Index(raw, "://")]
		if strings.HasPrefix(masked, strings.ToLower(scheme)+"://") {
			masked = scheme + masked[len(scheme):]
		}
		return masked
	})
}
