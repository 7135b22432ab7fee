package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// PatchOp is one operation of a JSON Patch (RFC 6902): add, remove or
// replace the value at Path (a JSON Pointer, RFC 6901).
type PatchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// Diff is the JSON Patch that turns the JSON value from into to: objects
// are compared key by key (keys in order), any other value that differs
// (an array included) is replaced whole. Equal values give an empty
// patch. Both must be JSON; numbers compare as written.
func Diff(from, to []byte) ([]PatchOp, error) {
	a, err := decodeForDiff(from)
	if err != nil {
		return nil, fmt.Errorf("diff: the value before: %w", err)
	}
	b, err := decodeForDiff(to)
	if err != nil {
		return nil, fmt.Errorf("diff: the value after: %w", err)
	}
	out := []PatchOp{}
	diffValue("", a, b, &out)
	return out, nil
}

// PDPServedFields are the fields the PDP adds to a body when it serves it
// (/getConfig), which a body pushed to policyflow need not carry.
var PDPServedFields = []string{FieldConfigMessage, FieldResponseAttributes, FieldProperty}

// DiffBodies is the JSON Patch from the policy_body from to the body to,
// bodies compared as the PDP serves them: a field of PDPServedFields that
// from has and to lacks (to is a pushed body, from as the PDP served it)
// is not reported removed.
func DiffBodies(from, to []byte) ([]PatchOp, error) {
	a, err := decodeForDiff(from)
	if err != nil {
		return nil, fmt.Errorf("diff: the value before: %w", err)
	}
	b, err := decodeForDiff(to)
	if err != nil {
		return nil, fmt.Errorf("diff: the value after: %w", err)
	}
	if ao, ok := a.(map[string]any); ok {
		if bo, ok := b.(map[string]any); ok {
			for _, f := range PDPServedFields {
				if _, has := bo[f]; !has {
					delete(ao, f)
				}
			}
		}
	}
	out := []PatchOp{}
	diffValue("", a, b, &out)
	return out, nil
}

func decodeForDiff(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func diffValue(path string, a, b any, out *[]PatchOp) {
	ao, aObj := a.(map[string]any)
	bo, bObj := b.(map[string]any)
	if aObj && bObj {
		keys := make([]string, 0, len(ao)+len(bo))
		for k := range ao {
			keys = append(keys, k)
		}
		for k := range bo {
			if _, ok := ao[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := path + "/" + pointerEscape(k)
			av, inA := ao[k]
			bv, inB := bo[k]
			switch {
			case !inB:
				*out = append(*out, PatchOp{Op: "remove", Path: p})
			case !inA:
				*out = append(*out, PatchOp{Op: "add", Path: p, Value: rawOf(bv)})
			default:
				diffValue(p, av, bv, out)
			}
		}
		return
	}
	if !bytes.Equal(rawOf(a), rawOf(b)) {
		*out = append(*out, PatchOp{Op: "replace", Path: path, Value: rawOf(b)})
	}
}

// rawOf is v as compact JSON, keys sorted.
func rawOf(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return json.RawMessage(bytes.TrimRight(buf.Bytes(), "\n"))
}

// pointerEscape escapes a key for a JSON Pointer: '~' as ~0, '/' as ~1.
func pointerEscape(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
