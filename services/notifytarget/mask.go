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
	u.User = nil
	u.RawQuery = maskParams(u.RawQuery)
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = maskParams(u.Fragment), ""
	}
	s := u.String()
	if i := strings.Index(s, "//"); hadUser && i >= 0 {
		// Written by hand: url.User would escape the asterisks.
		s = s[:i+2] + Masked + "@" + s[i+2:]
	}
	return s
}

// maskParams masks the secret values of name=value pairs joined by '&',
// keeping everything else as it is.
func maskParams(q string) string {
	if q == "" {
		return q
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		name, _, ok := strings.Cut(p, "=")
		if !ok {
			continue
		}
		plain, err := url.QueryUnescape(name)
		if err != nil {
			plain = name
		}
		if secretName(plain) {
			parts[i] = name + "=" + Masked
		}
	}
	return strings.Join(parts, "&")
}

var urlInText = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// MaskText applies MaskURL to every URL in s, e.g. an error message or a
// claim's stderr written before URLs were masked.
func MaskText(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, MaskURL)
}
