package policy

import (
	"fmt"
	"sort"
)

// SkippedBody is a body that took no part in latest-version selection, and
// why.
type SkippedBody struct {
	Index         int    `json:"index"` // position in the input
	PolicyName    string `json:"policyName,omitempty"`
	PolicyVersion string `json:"policyVersion,omitempty"`
	Reason        string `json:"reason"`
}

// Selection is the outcome of latest-version selection over a set of
// policy_body objects (typically one /getConfig response).
type Selection struct {
	// Latest maps policy_id to its latest body, which is valid. Bodies are
	// Normalize'd copies.
	Latest map[string]Body
	// Errored maps policy_id to its latest body when that body is invalid.
	// An older valid version of the same policy_id is never used instead.
	Errored map[string]Body
	// Reasons maps every Errored policy_id to the Validate error.
	Reasons map[string]error
	// Versions lists, per policy_id, every version that took part, in
	// ascending numeric order.
	Versions map[string][]string
	// Skipped are the bodies that took no part: no policyName, no
	// policy_id, or a policyVersion that is not all digits.
	Skipped []SkippedBody
}

// Latest picks, per policy_id, the body with the greatest integer
// policyVersion ("10" > "9"). Bodies whose policyVersion is not all digits
// are skipped; of equal versions the first one wins. When the greatest
// version is invalid (see Validate) the policy_id goes to errored and is not
// replaced by an older version. Returned bodies are Normalize'd copies; a
// policy_id is in exactly one of the two maps.
func Latest(bodies []Body) (latest map[string]Body, errored map[string]Body) {
	s := SelectLatest(bodies)
	return s.Latest, s.Errored
}

// SelectLatest is Latest with the details an operator needs to see why:
// the versions considered, the skipped bodies and the reason for each
// errored policy_id.
func SelectLatest(bodies []Body) Selection {
	type pick struct {
		body    Body
		version int64
	}
	picks := make(map[string]pick)
	versions := make(map[string][]int64)
	names := make(map[string]map[int64]string)
	var skipped []SkippedBody
	for i, b := range bodies {
		if b == nil {
			skipped = append(skipped, SkippedBody{Index: i, Reason: "body is null"})
			continue
		}
		name := b.PolicyName()
		vs := b.VersionString()
		id, v, reason := selectable(b, name, vs)
		if reason != "" {
			skipped = append(skipped, SkippedBody{Index: i, PolicyName: name, PolicyVersion: vs, Reason: reason})
			continue
		}
		versions[id] = append(versions[id], v)
		if names[id] == nil {
			names[id] = make(map[int64]string)
		}
		if _, seen := names[id][v]; !seen {
			names[id][v] = vs
		}
		if cur, ok := picks[id]; !ok || v > cur.version {
			picks[id] = pick{body: b, version: v}
		}
	}

	sel := Selection{
		Latest:   make(map[string]Body, len(picks)),
		Errored:  make(map[string]Body),
		Reasons:  make(map[string]error),
		Versions: make(map[string][]string, len(versions)),
		Skipped:  skipped,
	}
	for id, p := range picks {
		nb := Normalize(p.body)
		if err := Validate(nb); err != nil {
			sel.Errored[id] = nb
			sel.Reasons[id] = err
		} else {
			sel.Latest[id] = nb
		}
	}
	for id, vs := range versions {
		sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
		out := make([]string, 0, len(vs))
		for i, v := range vs {
			if i > 0 && vs[i-1] == v {
				continue
			}
			out = append(out, names[id][v])
		}
		sel.Versions[id] = out
	}
	return sel
}

// selectable returns the policy_id and version of a body that can take part
// in latest-version selection, or why it cannot.
func selectable(b Body, name, vs string) (id string, v int64, reason string) {
	if name == "" {
		return "", 0, "no policyName"
	}
	id, err := PolicyID(name)
	if err != nil {
		return "", 0, err.Error()
	}
	raw, present := b[FieldPolicyVersion]
	if !present || raw == nil {
		return "", 0, "no policyVersion"
	}
	if _, isString := raw.(string); !isString {
		return "", 0, fmt.Sprintf("policyVersion is %s, want a string of digits", describeValue(raw))
	}
	v, ok := ParseVersion(vs)
	if !ok {
		return "", 0, fmt.Sprintf("policyVersion %q is not all digits or too large for an integer", vs)
	}
	return id, v, ""
}
