package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/policyflow/policyflow/services/check"
)

// Limits of what Check accepts.
const (
	// MaxBodyBytes is the most a policy_body may take as canonical JSON
	// (Checked.JSON). It is the one size limit of a policy: Consul refuses a
	// KV value above 512 KiB, and the Avro decoder of every stage reads at
	// most 1 MiB in one string, so a body within it is carried by every
	// topic and written to Consul as it is.
	MaxBodyBytes = 512 * 1024
	// MaxNameBytes bounds policyName, and so policy_id: the bound of
	// every id (check.MaxIDBytes).
	MaxNameBytes = check.MaxIDBytes
	// MaxDepth bounds how deep objects and arrays nest in a policy_body,
	// and in a config string holding JSON (well within what JSON decoders
	// downstream, and the scripts a notification runs, take).
	MaxDepth = 100
)

// NameChars says which characters a policyName, and so a policy_id, may
// hold.
const NameChars = check.IDChars

// nameExample is what a refused policyName is told to look like.
const nameExample = "give <policy_id>.<version>.<ext>, e.g. DCAE.Config_VM_MEMORY.5.xml"

// Checked is a policy_body Check accepted, as it travels on: its
// canonical JSON and the header fields the pipeline keys and orders it by.
type Checked struct {
	// PolicyID is PolicyName without its ".<version>.<ext>".
	PolicyID string
	// PolicyName is the full policyName.
	PolicyName string
	// PolicyVersion is policyVersion as the body gives it, or the version
	// in PolicyName when the body gives none.
	PolicyVersion string
	// Version is the integer version.
	Version int64
	// JSON is the body as one compact JSON object: keys sorted, numbers
	// as received, no HTML escaping, a config string that holds JSON
	// carried parsed (also when encoded twice), policyVersion present. At
	// most MaxBodyBytes.
	JSON []byte
	// MatchingConditions is the body's matchingConditions as canonical
	// JSON, "{}" when it has none (see Header).
	MatchingConditions string
}

// Check is the one validation of a policy_body entering policyflow, pushed
// or fetched from a PDP. It accepts raw only when:
//
//   - it is one JSON object in UTF-8, no object in it (a config string
//     holding JSON included) has a key twice, and nothing nests deeper
//     than MaxDepth;
//   - policyName passes CheckName;
//   - policyVersion, when given, is a string of digits equal (as an
//     integer) to the version in policyName; when it is not given, the
//     version of policyName is filled in;
//   - matchingConditions, when given, is a JSON object;
//   - Validate accepts it (CONFIG_RETRIEVED, a config that is not empty);
//   - its canonical JSON is at most MaxBodyBytes.
//
// Every error wraps ErrInvalidBody and says what to fix.
func Check(raw []byte) (Checked, error) {
	v, flaw, err := decodeStrict(raw)
	if err != nil {
		return Checked{}, fmt.Errorf("check policy_body: %v; send one JSON object: %w", err, ErrInvalidBody)
	}
	b, ok := v.(map[string]any)
	if !ok {
		return Checked{}, fmt.Errorf("check policy_body: it is a JSON %s, want a JSON object: %w", jsonKind(v), ErrInvalidBody)
	}
	c, _, err := checkBody(Body(b), flaw)
	return c, err
}

// CheckName accepts a full policyName, as bodies and notifications carry
// it, and returns its policy_id and integer version. The name must:
//
//   - be at most MaxNameBytes long and hold only NameChars (so no '/',
//     space, control character or anything outside ASCII);
//   - hold no ".." and start with a letter or a digit;
//   - end in ".<version>.<ext>": a version of ASCII digits that fits an
//     int64 and an extension of ASCII letters, with a policy_id before
//     them.
//
// Such a policy_id is one Consul key segment and reads the same in every
// terminal.
func CheckName(name string) (id string, version int64, err error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("policyName %s: %s; %s", quoteShort(name), fmt.Sprintf(format, args...), nameExample)
	}
	if name == "" {
		return "", 0, fmt.Errorf("policyName is empty; %s: %w", nameExample, ErrNoPolicyID)
	}
	if len(name) > MaxNameBytes {
		return "", 0, fail("it is %d bytes, over the limit of %d", len(name), MaxNameBytes)
	}
	if err := check.Chars(name); err != nil {
		return "", 0, fail("%v", err)
	}
	id = stripVersionSuffix(name)
	switch {
	case id == "":
		return "", 0, fmt.Errorf("policyName %q: nothing is left before its .<version>.<ext>; %s: %w", name, nameExample, ErrNoPolicyID)
	case id == name:
		return "", 0, fail("it does not end in .<version>.<ext> with an integer version")
	}
	if err := CheckID(id); err != nil {
		return "", 0, fail("%v", err)
	}
	digits := versionText(name, id)
	version, ok := ParseVersion(digits)
	if !ok {
		return "", 0, fail("version %s is too large for an integer", digits)
	}
	return id, version, nil
}

// CheckID accepts a policy_id, as components name the policies they
// want: what CheckName leaves of a policyName, so 1 to MaxNameBytes bytes
// of NameChars without "..", starting with a letter or a digit.
func CheckID(id string) error {
	switch {
	case id == "":
		return errors.New("the policy_id is empty")
	case len(id) > MaxNameBytes:
		return fmt.Errorf("policy_id %s is %d bytes, over the limit of %d", quoteShort(id), len(id), MaxNameBytes)
	}
	if err := check.Chars(id); err != nil {
		return fmt.Errorf("policy_id %s: %w", quoteShort(id), err)
	}
	if !alnum(id[0]) {
		return fmt.Errorf("policy_id %q does not start with a letter or a digit", id)
	}
	return nil
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// checkBody applies Check's rules to a decoded body; flaw is what the
// decoder already refused (a key given twice, bytes that are not UTF-8).
// It also returns the Normalize'd body.
func checkBody(b Body, flaw error) (Checked, Body, error) {
	what := "check policy_body"
	refuse := func(format string, args ...any) (Checked, Body, error) {
		return Checked{}, nil, fmt.Errorf("%s: %s: %w", what, fmt.Sprintf(format, args...), ErrInvalidBody)
	}
	raw, present := b[FieldPolicyName]
	name, isString := raw.(string)
	switch {
	case !present || raw == nil:
		return refuse("policyName is missing; %s", nameExample)
	case !isString:
		return refuse("policyName is %s, want a string; %s", describeValue(raw), nameExample)
	}
	if flaw != nil {
		what = "check policy_body " + quoteShort(name)
		return refuse("%v", flaw)
	}
	id, version, err := CheckName(name)
	if err != nil {
		return refuse("%v", err)
	}
	what = fmt.Sprintf("check policy_body %q", name)
	fromName := versionText(name, id)
	vs := fromName
	if rv, present := b[FieldPolicyVersion]; present {
		s, isString := rv.(string)
		v, ok := ParseVersion(s)
		switch {
		case !isString || !ok:
			return refuse("policyVersion %s is not a string of digits; give it as e.g. %q (the latest version is the greatest integer), or leave it out",
				describeValue(rv), fromName)
		case v != version:
			return refuse("policyVersion %s is not the version %s in its policyName; give policyVersion %q or leave it out",
				quoteShort(s), fromName, fromName)
		}
		vs = s
	}
	if mc, present := b[FieldMatchingConditions]; present && jsonKind(mc) != kindObject {
		return refuse("matchingConditions is %s, want a JSON object such as {\"ONAPName\": \"DCAE\"}; leave it out when there are none",
			describeValue(mc))
	}
	nb := make(Body, len(b)+1)
	for k, v := range b {
		nb[k] = v
	}
	nb[FieldPolicyVersion] = vs
	if cfg, ok := nb[FieldConfig].(string); ok {
		parsed, err := parseConfig(cfg)
		if err != nil {
			return refuse("%v", err)
		}
		nb[FieldConfig] = parsed
	}
	if err := Validate(nb); err != nil {
		return Checked{}, nil, err
	}
	data, err := encodeCanonical(nb)
	if err != nil {
		return refuse("encode as JSON: %v", err)
	}
	mc, err := conditionsJSON(nb)
	if err != nil {
		return refuse("%v", err)
	}
	if len(data) > MaxBodyBytes {
		return refuse("%d bytes as JSON is over the limit of %d bytes (512 KiB, the Consul value limit) by %d bytes; split the config over several policies",
			len(data), MaxBodyBytes, len(data)-MaxBodyBytes)
	}
	return Checked{PolicyID: id, PolicyName: name, PolicyVersion: vs, Version: version, JSON: data, MatchingConditions: mc}, nb, nil
}

// parseConfig is normalizeConfig under Check's rules: a config string that
// is JSON is carried parsed, unless it has a key twice or nests too deep,
// and parsed again while it holds a string holding JSON (a config encoded
// twice), so that Check accepts its canonical JSON unchanged.
func parseConfig(cfg string) (any, error) {
	var v any = cfg
	for {
		s, ok := v.(string)
		if !ok || s == "" {
			return v, nil
		}
		// The config is one level down in the body, so what it holds may
		// nest one level less than the body.
		parsed, flaw, err := decodeStrictAt([]byte(s), 1)
		switch {
		case errors.Is(err, errTooDeep):
			return nil, fmt.Errorf("config is a string holding JSON that %v", err)
		case err != nil:
			return s, nil // not JSON: carried as the string it is
		case flaw != nil:
			return nil, fmt.Errorf("config is a string holding JSON in which %v", flaw)
		}
		v = parsed
	}
}

// encodeCanonical writes a body (or a value in one) as Checked.JSON:
// compact, keys sorted, numbers as received, no HTML escaping.
func encodeCanonical(b any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// SplitList splits a JSON array of policy_body objects (a /getConfig
// answer, a push of several bodies) into the raw bytes of each, for Check.
// It fails when data is not one JSON array or an element is not an object.
func SplitList(data []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("split policy_body list: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("split policy_body list: got %s, want a JSON array", kindOfToken(tok))
	}
	var out []json.RawMessage
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("split policy_body list: element %d: %w", len(out), err)
		}
		if !check.Object(raw) {
			return nil, fmt.Errorf("split policy_body list: element %d is %s, want a JSON object", len(out), kindOfRaw(raw))
		}
		out = append(out, raw)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("split policy_body list: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("split policy_body list: more data after the JSON array")
	}
	return out, nil
}

func kindOfToken(tok any) string {
	if d, ok := tok.(json.Delim); ok {
		if d == '{' {
			return kindObject
		}
		return kindArray
	}
	return jsonKind(tok)
}

func kindOfRaw(raw []byte) string {
	switch raw[0] {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	}
	return kindNumber
}

// errTooDeep is wrapped by decodeStrict when data nests deeper than
// MaxDepth.
var errTooDeep = errors.New("nests too deep")

// decodeStrict decodes exactly one JSON value with numbers as json.Number.
// What Check refuses but a reader can still decode, a key given twice (the
// last one is kept, as encoding/json does) or bytes that are not UTF-8, is
// returned as flaw; err is set when data is no JSON value or nests deeper
// than MaxDepth.
func decodeStrict(data []byte) (v any, flaw error, err error) {
	return decodeStrictAt(data, 0)
}

// decodeStrictAt is decodeStrict for a value that will sit depth levels
// down in a body: it may nest MaxDepth-depth levels.
func decodeStrictAt(data []byte, depth int) (v any, flaw error, err error) {
	d := &strictDecoder{dec: json.NewDecoder(bytes.NewReader(data))}
	d.dec.UseNumber()
	if !utf8.Valid(data) {
		i := 0
		for i < len(data) {
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		d.flaw = fmt.Errorf("byte %d (0x%02x) is not UTF-8; send JSON text in UTF-8", i, data[i])
	}
	v, err = d.value(depth)
	if err != nil {
		return nil, nil, err
	}
	if tok, err := d.dec.Token(); err != io.EOF {
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("more data after the JSON value (%v)", tok)
	}
	return v, d.flaw, nil
}

// strictDecoder walks the tokens of one JSON value, so that it sees keys
// encoding/json would silently merge.
type strictDecoder struct {
	dec  *json.Decoder
	path []any // keys (string) and indexes (int) down to the current value
	flaw error
}

func (d *strictDecoder) value(depth int) (any, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= MaxDepth {
		return nil, fmt.Errorf("%w: more than %d levels of objects and arrays at %s; flatten it", errTooDeep, MaxDepth, d.where())
	}
	switch delim {
	case '{':
		m := map[string]any{}
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return nil, err
			}
			key := kt.(string)
			d.path = append(d.path, key)
			v, err := d.value(depth + 1)
			d.path = d.path[:len(d.path)-1]
			if err != nil {
				return nil, err
			}
			if _, dup := m[key]; dup && d.flaw == nil {
				d.flaw = fmt.Errorf("the key %s appears twice in the object at %s; give every key once", quoteShort(key), d.where())
			}
			m[key] = v
		}
		if _, err := d.dec.Token(); err != nil {
			return nil, err
		}
		return m, nil
	default: // '['
		arr := []any{}
		for d.dec.More() {
			d.path = append(d.path, len(arr))
			v, err := d.value(depth + 1)
			d.path = d.path[:len(d.path)-1]
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := d.dec.Token(); err != nil {
			return nil, err
		}
		return arr, nil
	}
}

// where renders the current path: "the top level", or e.g.
// config.rules[2].
func (d *strictDecoder) where() string {
	if len(d.path) == 0 {
		return "the top level"
	}
	var sb strings.Builder
	for _, p := range d.path {
		switch e := p.(type) {
		case int:
			sb.WriteString("[" + strconv.Itoa(e) + "]")
		case string:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			if plainKey(e) && len(e) <= maxQuoted {
				sb.WriteString(e)
			} else {
				sb.WriteString(quoteShort(e))
			}
		}
	}
	return sb.String()
}

// plainKey reports whether a key reads unambiguously in a path without
// quotes.
func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !alnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// maxQuoted bounds how much of a string from a body an error quotes, so
// that a refusal stays readable and fits a dead-letter header.
const maxQuoted = 80

// quoteShort quotes s, cut to maxQuoted bytes (on a rune boundary) and
// followed by "..." when it is longer.
func quoteShort(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
