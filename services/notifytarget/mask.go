package notifytarget

import (
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
// like a secret. A URL that does not parse is shown as *** altogether.
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

// urlInText finds a URL in text: a scheme, "://", and what follows up to
// whitespace or a character a URL holds only percent-encoded and text
// uses around one ('"', '<', '>', '`'). A "'" belongs to the URL: it may
// stand unencoded in a password or a query value.
var urlInText = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"<>` + "`" + `]+`)

// MaskText applies MaskURL to every URL in s (see urlInText), e.g. an
// error message or a claim's stderr written before URLs were masked.
func MaskText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, MaskURL)
}
