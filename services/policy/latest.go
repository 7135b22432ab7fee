package policy

import (
	"encoding/json"
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
	// Latest maps policy_id to its latest body, which Check accepts, as
	// Check carries it (config parsed, policyVersion filled in).
	Latest map[string]Body
	// Checked maps the same policy_ids to the same bodies as Check
	// returns them: canonical JSON and header fields.
	Checked map[string]Checked
	// Errored maps policy_id to its latest body (Normalize'd) when Check
	// refuses that body. An older valid version of the same policy_id is
	// never used instead.
	Errored map[string]Body
	// Reasons maps every Errored policy_id to Check's error.
	Reasons map[string]error
	// Versions lists, per policy_id, every version that took part, in
	// ascending numeric order.
	Versions map[string][]string
	// Skipped are the bodies that took no part: no policyName, no
	// policy_id, or a policyVersion that is not all digits.
	Skipped []SkippedBody
}

// Latest picks, per policy_id, the body with the greatest integer
// policyVersion ("10" > "9"), or the version in its policyName when it
// has no policyVersion. Bodies whose policyVersion is not all digits are
// skipped; of equal versions the first one wins. When Check refuses the
// greatest version the policy_id goes to errored and is not replaced by an
// older version. Returned bodies are copies; a policy_id is in exactly one
// of the two maps.
func Latest(bodies []Body) (latest map[string]Body, errored map[string]Body) {
	s := SelectLatest(bodies)
	return s.Latest, s.Errored
}

// SelectLatest is Latest with the details an operator needs to see why:
// the versions considered, the skipped bodies and the reason for each
// errored policy_id.
func SelectLatest(bodies []Body) Selection {
	cands := make([]candidate, len(bodies))
	for i, b := range bodies {
		cands[i] = candidate{body: b}
		if b == nil {
			cands[i].skip = "body is null"
		}
	}
	return selectLatest(cands)
}

// SelectLatestRaw is SelectLatest over raw bodies, as SplitList gives them
// from a /getConfig answer, under every rule of Check: a body with a key
// given twice, or with bytes that are not UTF-8, takes part with the name
// and version it gives and is errored when it is the latest.
func SelectLatestRaw(bodies []json.RawMessage) Selection {
	cands := make([]candidate, len(bodies))
	for i, raw := range bodies {
		v, flaw, err := decodeStrict(raw)
		m, isObject := v.(map[string]any)
		switch {
		case err != nil:
			cands[i].skip = fmt.Sprintf("not one JSON value: %v", err)
		case !isObject:
			cands[i].skip = fmt.Sprintf("a JSON %s, not an object", jsonKind(v))
		default:
			cands[i] = candidate{body: Body(m), flaw: flaw}
		}
	}
	return selectLatest(cands)
}

// candidate is one body offered to selection.
type candidate struct {
	body Body
	flaw error  // what the decoder refused, see decodeStrict
	skip string // why it cannot take part at all
}

func selectLatest(cands []candidate) Selection {
	type pick struct {
		cand    candidate
		version int64
	}
	picks := make(map[string]pick)
	versions := make(map[string][]int64)
	names := make(map[string]map[int64]string)
	var skipped []SkippedBody
	for i, c := range cands {
		if c.skip != "" {
			skipped = append(skipped, SkippedBody{Index: i, Reason: c.skip})
			continue
		}
		b := c.body
		name := b.PolicyName()
		id, v, vs, reason := selectable(b, name)
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
			picks[id] = pick{cand: c, version: v}
		}
	}

	sel := Selection{
		Latest:   make(map[string]Body, len(picks)),
		Checked:  make(map[string]Checked, len(picks)),
		Errored:  make(map[string]Body),
		Reasons:  make(map[string]error),
		Versions: make(map[string][]string, len(versions)),
		Skipped:  skipped,
	}
	for id, p := range picks {
		c, nb, err := checkBody(p.cand.body, p.cand.flaw)
		if err != nil {
			sel.Errored[id] = Normalize(p.cand.body)
			sel.Reasons[id] = err
			continue
		}
		sel.Latest[id] = nb
		sel.Checked[id] = c
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

// selectable returns the policy_id and version of a body that can take
// part in latest-version selection, or why it cannot. The version is
// policyVersion, or the one in policyName when policyVersion is absent.
func selectable(b Body, name string) (id string, v int64, vs string, reason string) {
	if name == "" {
		return "", 0, "", "no policyName"
	}
	id, err := PolicyID(name)
	if err != nil {
		return "", 0, "", err.Error()
	}
	raw, present := b[FieldPolicyVersion]
	switch {
	case !present && id != name:
		vs = versionText(name, id)
	case !present || raw == nil:
		return "", 0, "", "no policyVersion"
	default:
		s, isString := raw.(string)
		if !isString {
			return "", 0, "", fmt.Sprintf("policyVersion is %s, want a string of digits", describeValue(raw))
		}
		vs = s
	}
	v, ok := ParseVersion(vs)
	if !ok {
		return "", 0, vs, fmt.Sprintf("policyVersion %q is not all digits or too large for an integer", vs)
	}
	return id, v, vs, ""
}
