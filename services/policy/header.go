package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Header is what the pipeline knows of a policy without its body: the
// fields filters look at, and BodyHash, which names the body's canonical
// bytes. A stage that only needs to match policies, or to tell whether two
// versions differ, carries the header and leaves the body where it is.
type Header struct {
	PolicyID      string
	PolicyName    string
	PolicyVersion string
	// MatchingConditions is the body's matchingConditions as canonical
	// JSON (keys sorted, numbers as received, no HTML escaping): always an
	// object, "{}" when the body has none, which matches alike.
	MatchingConditions string
	// BodyHash is BodyHash of the canonical body.
	BodyHash string
}

// noConditions is MatchingConditions of a body that has none.
const noConditions = "{}"

// BodyHash names a policy body by its canonical bytes (Checked.JSON, as
// every topic carries them): the first 16 bytes of their SHA-256, in hex.
// Every process computes the same hash for the same bytes, so stages
// compare two bodies by comparing their hashes.
func BodyHash(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:16])
}

// Header is the header of a checked body.
func (c Checked) Header() Header {
	return Header{
		PolicyID:           c.PolicyID,
		PolicyName:         c.PolicyName,
		PolicyVersion:      c.PolicyVersion,
		MatchingConditions: c.MatchingConditions,
		BodyHash:           BodyHash(string(c.JSON)),
	}
}

// HeaderOf derives the header of a body Check accepted, from its canonical
// JSON as the catalog holds it: the same header Checked.Header gives. It
// decodes the whole body, so a stage calls it only where no header came
// with the body (reading the catalog back). It fails when the body is not a JSON object, has no
// policyName a policy_id can be derived from, or has matchingConditions
// that are not an object.
func HeaderOf(body string) (Header, error) {
	b, err := DecodeBody([]byte(body))
	if err != nil {
		return Header{}, fmt.Errorf("header of policy_body: %w", err)
	}
	name := b.PolicyName()
	id, err := PolicyID(name)
	if err != nil {
		return Header{}, fmt.Errorf("header of policy_body: %w", err)
	}
	mc, err := conditionsJSON(b)
	if err != nil {
		return Header{}, fmt.Errorf("header of policy_body %q: %w", name, err)
	}
	return Header{PolicyID: id, PolicyName: name, PolicyVersion: b.VersionString(), MatchingConditions: mc, BodyHash: BodyHash(body)}, nil
}

// conditionsJSON is a decoded body's matchingConditions as canonical JSON.
func conditionsJSON(b Body) (string, error) {
	mc, present := b[FieldMatchingConditions]
	if !present {
		return noConditions, nil
	}
	if jsonKind(mc) != kindObject {
		return "", fmt.Errorf("matchingConditions is %s, not an object", describeValue(mc))
	}
	data, err := encodeCanonical(mc)
	if err != nil {
		return "", fmt.Errorf("encode matchingConditions: %w", err)
	}
	return string(data), nil
}

// Matchable is the header as a body holding only what filters look at
// (policyName, policyVersion and matchingConditions): a filter, or an
// Index, matches it exactly as it matches the whole body. Empty
// MatchingConditions count as none.
func (h Header) Matchable() (Body, error) {
	b := Body{FieldPolicyName: h.PolicyName, FieldPolicyVersion: h.PolicyVersion}
	if h.MatchingConditions == "" || h.MatchingConditions == noConditions {
		return b, nil
	}
	v, err := decodeJSONValue([]byte(h.MatchingConditions))
	if err != nil {
		return nil, fmt.Errorf("matchingConditions of policy %s: %w", h.PolicyName, err)
	}
	mc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("matchingConditions of policy %s: a JSON %s, not an object", h.PolicyName, jsonKind(v))
	}
	b[FieldMatchingConditions] = mc
	return b, nil
}
