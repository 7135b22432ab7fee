package nmp

import (
	"fmt"
	"strings"

	"github.com/policyflow/policyflow/services/nmp/constraint"
)

// MaxFromVersionsBytes bounds agentUpgradePolicy.fromVersions.
const MaxFromVersionsBytes = 256

// FromVersions is an NMP's version guard (agentUpgradePolicy.fromVersions):
// the versions a node may upgrade from, written as comparators separated
// by spaces that must all hold, e.g. ">=1.2.0 <2.0.0". A comparator is
// one of >=, >, <=, <, = followed by a three-part version (1.2.3); a
// bare version means =. The empty guard admits every version.
type FromVersions []comparator

type comparator struct {
	op string
	v  constraint.Version
}

// ParseFromVersions reads a version guard; "" is the guard that admits
// every version.
func ParseFromVersions(s string) (FromVersions, error) {
	if len(s) > MaxFromVersionsBytes {
		return nil, fmt.Errorf("agentUpgradePolicy.fromVersions is %d bytes, at most %d", len(s), MaxFromVersionsBytes)
	}
	var g FromVersions
	for _, f := range strings.Fields(s) {
		op := ""
		for _, o := range []string{">=", "<=", ">", "<", "="} {
			if strings.HasPrefix(f, o) {
				op = o
				break
			}
		}
		rest := f[len(op):]
		if op == "" {
			op = "="
		}
		v, err := ParseSemver(rest)
		if err != nil {
			return nil, fmt.Errorf("agentUpgradePolicy.fromVersions %q: comparator %q: %w; want comparators like \">=1.2.0 <2.0.0\" (>=, >, <=, <, = or none, then a version)", s, f, err)
		}
		g = append(g, comparator{op, v})
	}
	return g, nil
}

// Admits says whether version v may upgrade under the guard.
func (g FromVersions) Admits(v constraint.Version) bool {
	for _, c := range g {
		r := v.Compare(c.v)
		ok := false
		switch c.op {
		case ">=":
			ok = r >= 0
		case ">":
			ok = r > 0
		case "<=":
			ok = r <= 0
		case "<":
			ok = r < 0
		case "=":
			ok = r == 0
		}
		if !ok {
			return false
		}
	}
	return true
}

// String is the guard in its canonical form (one space between
// comparators, = written out).
func (g FromVersions) String() string {
	s := make([]string, len(g))
	for i, c := range g {
		s[i] = c.op + c.v.String()
	}
	return strings.Join(s, " ")
}
