package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Field names of a policy_body as the PDP returns it from /getConfig.
const (
	FieldPolicyName         = "policyName"
	FieldPolicyVersion      = "policyVersion"
	FieldConfigStatus       = "policyConfigStatus"
	FieldConfigMessage      = "policyConfigMessage"
	FieldType               = "type"
	FieldMatchingConditions = "matchingConditions"
	FieldConfig             = "config"
	FieldResponseAttributes = "responseAttributes"
	FieldProperty           = "property"
	MatchingONAPName        = "ONAPName"
	MatchingConfigName      = "ConfigName"
	ConfigRetrieved         = "CONFIG_RETRIEVED"
	ConfigNotFound          = "CONFIG_NOT_FOUND"
	// ConfigRetrievedMessage is the policyConfigMessage the PDP sends with
	// CONFIG_RETRIEVED.
	ConfigRetrievedMessage = "Config Retrieved! "
)

// ErrInvalidBody is wrapped by every error Check and Validate return, so
// callers can tell a refused body from other failures with errors.Is.
var ErrInvalidBody = errors.New("invalid policy_body")

// ErrNoPolicyID is wrapped by PolicyID errors.
var ErrNoPolicyID = errors.New("no policy_id")

// Body is one policy_body as the PDP returns it from /getConfig
// (policyName, policyVersion, policyConfigStatus, policyConfigMessage, type,
// matchingConditions, config, responseAttributes, property, ...). It is the
// raw JSON object, so fields policyflow does not know are carried unchanged.
type Body map[string]any

// AdmissionPrefix starts the policy_id of every policy the admission stage
// makes (an admitted application's settings, admission.<component_id>):
// policyflow's own, never the PDP's.
const AdmissionPrefix = "admission."

// PolicyID derives the policy_id from a full policyName by stripping its
// trailing ".<version>.<ext>": "DCAE.Config_VM_MEMORY.222.xml" gives
// "DCAE.Config_VM_MEMORY". A name without that suffix is already a
// policy_id and is returned unchanged. It fails when the name is empty or
// nothing is left once the suffix is removed.
func PolicyID(policyName string) (string, error) {
	if policyName == "" {
		return "", fmt.Errorf("derive policy_id: policyName is empty: %w", ErrNoPolicyID)
	}
	id := stripVersionSuffix(policyName)
	if id == "" {
		return "", fmt.Errorf("derive policy_id from policyName %q: nothing is left before its .<version>.<ext>: %w",
			policyName, ErrNoPolicyID)
	}
	return id, nil
}

// versionText is the <version> of a policyName id.<version>.<ext> whose
// policy_id is id, as written (leading zeros kept).
func versionText(name, id string) string { return name[len(id)+1 : strings.LastIndexByte(name, '.')] }

// stripVersionSuffix removes a trailing ".<digits>.<letters>" (the regular
// expression `\.[0-9]+\.[a-zA-Z]+$` of the policy-handler), if present.
func stripVersionSuffix(name string) string {
	ext := strings.LastIndexByte(name, '.')
	if ext < 0 || ext == len(name)-1 {
		return name
	}
	for i := ext + 1; i < len(name); i++ {
		if c := name[i] | 0x20; c < 'a' || c > 'z' {
			return name
		}
	}
	ver := strings.LastIndexByte(name[:ext], '.')
	if ver < 0 || ver == ext-1 {
		return name
	}
	for i := ver + 1; i < ext; i++ {
		if name[i] < '0' || name[i] > '9' {
			return name
		}
	}
	return name[:ver]
}

// PolicyName is the body's full policyName, or "" when it has none or it is
// not a string.
func (b Body) PolicyName() string {
	s, _ := b[FieldPolicyName].(string)
	return s
}

// PolicyID is the policy_id derived from the body's policyName.
func (b Body) PolicyID() (string, error) {
	return PolicyID(b.PolicyName())
}

// VersionString is the body's policyVersion as given, or "" when it is
// missing or not a string.
func (b Body) VersionString() string {
	s, _ := b[FieldPolicyVersion].(string)
	return s
}

// Version parses policyVersion. It is false when policyVersion is missing,
// not a string, not all ASCII digits, or does not fit an int64; such a
// version never takes part in latest-version selection.
func (b Body) Version() (int64, bool) {
	return ParseVersion(b.VersionString())
}

// ParseVersion parses a policyVersion or versionNo string that must consist
// of ASCII digits only ("007" is 7).
func ParseVersion(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// Validate accepts a body only when its policyConfigStatus is
// CONFIG_RETRIEVED and its config is not empty. The config is judged the way
// Normalize carries it: missing, null, "", {} and [] (given as such or as a
// JSON string like "{}") are empty; any other value, including 0 and false,
// is not. Every error wraps ErrInvalidBody and says why.
func Validate(b Body) error {
	if b == nil {
		return fmt.Errorf("validate policy_body: body is null: %w", ErrInvalidBody)
	}
	name := b.PolicyName()
	status, present := b[FieldConfigStatus]
	if s, _ := status.(string); s != ConfigRetrieved {
		got := "missing"
		if present {
			got = describeValue(status)
		}
		msg := ""
		if m, ok := b[FieldConfigMessage].(string); ok && m != "" {
			msg = fmt.Sprintf(" (policyConfigMessage %s)", quoteShort(m))
		}
		return fmt.Errorf("validate policy_body %q: policyConfigStatus is %s, want %q%s: %w",
			name, got, ConfigRetrieved, msg, ErrInvalidBody)
	}
	cfg, present := b[FieldConfig]
	if !present {
		return fmt.Errorf("validate policy_body %q: config is missing: %w", name, ErrInvalidBody)
	}
	if isEmptyConfig(normalizeConfig(cfg)) {
		return fmt.Errorf("validate policy_body %q: config is empty (%s): %w",
			name, describeValue(cfg), ErrInvalidBody)
	}
	return nil
}

func isEmptyConfig(v any) bool {
	switch c := v.(type) {
	case nil:
		return true
	case string:
		return c == ""
	case map[string]any:
		return len(c) == 0
	case []any:
		return len(c) == 0
	}
	return false
}

// Normalize returns a copy of b whose config, when it is a string holding
// valid JSON, is carried parsed (numbers keep their exact text as
// json.Number), and parsed again while what it holds is a string holding
// JSON (a config encoded twice); any other config is kept as it is. b is
// not modified.
func Normalize(b Body) Body {
	if b == nil {
		return nil
	}
	out := make(Body, len(b))
	for k, v := range b {
		out[k] = v
	}
	if cfg, ok := out[FieldConfig]; ok {
		out[FieldConfig] = normalizeConfig(cfg)
	}
	return out
}

// normalizeConfig parses a config string holding JSON until what it holds
// is no such string, so that normalizing twice changes nothing. It ends:
// each string parsed is shorter than the one holding it.
func normalizeConfig(cfg any) any {
	for {
		s, ok := cfg.(string)
		if !ok || s == "" {
			return cfg
		}
		v, err := decodeJSONValue([]byte(s))
		if err != nil {
			return cfg
		}
		cfg = v
	}
}

// decodeJSONValue decodes exactly one JSON value, keeping numbers as
// json.Number.
func decodeJSONValue(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	rest := data[dec.InputOffset():]
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// DecodeBody decodes one policy_body JSON object, keeping numbers as
// json.Number so they are carried without loss.
func DecodeBody(data []byte) (Body, error) {
	v, err := decodeJSONValue(data)
	if err != nil {
		return nil, fmt.Errorf("decode policy_body: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("decode policy_body: got %s, want a JSON object", jsonKind(v))
	}
	return Body(m), nil
}

// DecodeBodies decodes a /getConfig response: a JSON array of policy_body
// objects. Numbers are kept as json.Number.
func DecodeBodies(data []byte) ([]Body, error) {
	v, err := decodeJSONValue(data)
	if err != nil {
		return nil, fmt.Errorf("decode policy_body list: %w", err)
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("decode policy_body list: got %s, want a JSON array", jsonKind(v))
	}
	out := make([]Body, 0, len(arr))
	for i, e := range arr {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("decode policy_body list: element %d is %s, want a JSON object", i, jsonKind(e))
		}
		out = append(out, Body(m))
	}
	return out, nil
}

// describeValue renders a JSON value with its JSON type for messages:
// `"value1" (string)`, `1 (number)`.
func describeValue(v any) string {
	return fmt.Sprintf("%s (%s)", compactJSON(v), jsonKind(v))
}

func compactJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	const max = 200
	if len(data) > max {
		return string(data[:max]) + "..."
	}
	return string(data)
}
