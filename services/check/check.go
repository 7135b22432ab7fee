// Package check holds the rules every policyflow module applies to what
// it is given, once: what an id that becomes a Kafka key, a Consul key
// segment or a URL path segment may hold (ID, Chars), and what counts as
// a JSON object (Object).
package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIDBytes bounds an id: it becomes a Kafka key and a Consul key
// segment.
const MaxIDBytes = 255

// IDChars says which characters an id (and a policyName) may hold.
const IDChars = "ASCII letters, digits, '.', '_', '-' and ':'"

// ErrBadID is matched (errors.Is) by every error ID returns.
var ErrBadID = errors.New("bad id")

// idError is an id ID refused; it matches ErrBadID.
type idError struct{ msg string }

func (e *idError) Error() string        { return e.msg }
func (e *idError) Is(target error) bool { return target == ErrBadID }

// ID says what is wrong with an id used as a Kafka key, a Consul key
// segment or a URL path segment (a component_id, deployment_id,
// participant_id, datacenter id ...): it must be 1 to MaxIDBytes bytes
// of IDChars (so UTF-8, with no '/', whitespace or control character)
// without "..". what names the id in the message ("deployment_id is
// missing"); when empty, the message starts with the problem ("is
// missing") for the caller to put the name in front. The error matches
// ErrBadID.
func ID(what, id string) error {
	name := what
	if name != "" {
		name += " "
	}
	switch {
	case id == "":
		return &idError{name + "is missing"}
	case len(id) > MaxIDBytes:
		return &idError{fmt.Sprintf("%sis %d bytes long; the limit is %d", name, len(id), MaxIDBytes)}
	}
	if err := Chars(id); err != nil {
		return &idError{fmt.Sprintf("%s%q: %v", name, id, err)}
	}
	return nil
}

// Chars says what is wrong with a name that becomes one Kafka key or
// Consul key segment (an id, a policyName): a byte that is not UTF-8, a
// character outside IDChars (so no '/', space or control character), or
// "..". It does not bound the length; ID does, and a policyName has its
// own limit.
func Chars(s string) error {
	for i := 0; i < len(s); i++ {
		if idByte(s[i]) {
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("byte %d (0x%02x) is not UTF-8; use only %s", i, s[i], IDChars)
		}
		return fmt.Errorf("character %q at byte %d is not allowed; use only %s", r, i, IDChars)
	}
	if strings.Contains(s, "..") {
		return errors.New(`".." is not allowed`)
	}
	return nil
}

func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':'
}

// Object reports whether b, leading and trailing white space aside, is
// one JSON object: the shape of every properties field, policy body and
// config.
func Object(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}
