package constraint

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a dotted decimal version of up to three parts (1, 1.2, 1.2.3;
// missing parts are 0), as Open Horizon's versions are.
type Version [3]int64

// ParseVersion reads a version; a leading "v" is not accepted.
func ParseVersion(s string) (Version, error) {
	var v Version
	if s == "" {
		return v, fmt.Errorf("empty version")
	}
	parts := strings.Split(s, ".")
	if len(parts) > 3 {
		return v, fmt.Errorf("version %q: more than three parts", s)
	}
	for i, p := range parts {
		if p == "" || len(p) > 9 {
			return v, fmt.Errorf("version %q: part %d is not a number of 1 to 9 digits", s, i+1)
		}
		for _, c := range p {
			if c < '0' || c > '9' {
				return v, fmt.Errorf("version %q: part %d is not a number", s, i+1)
			}
		}
		n, _ := strconv.ParseInt(p, 10, 64)
		v[i] = n
	}
	return v, nil
}

// Compare is -1, 0 or 1 as v is older, the same as or newer than o.
func (v Version) Compare(o Version) int {
	for i := range v {
		switch {
		case v[i] < o[i]:
			return -1
		case v[i] > o[i]:
			return 1
		}
	}
	return 0
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// VersionRange is [low,high), (low,high], ... ; an unbounded high end is
// written INFINITY.
type VersionRange struct {
	Low, High         Version
	LowIncl, HighIncl bool
	Unbounded         bool
}

// ParseRange reads a version range; a bare version v means [v,INFINITY),
// as in Open Horizon.
func ParseRange(s string) (*VersionRange, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty version range")
	}
	if s[0] != '[' && s[0] != '(' {
		v, err := ParseVersion(s)
		if err != nil {
			return nil, err
		}
		return &VersionRange{Low: v, LowIncl: true, Unbounded: true}, nil
	}
	last := s[len(s)-1]
	if last != ']' && last != ')' {
		return nil, fmt.Errorf("version range %q: ends with %q, want ] or )", s, last)
	}
	lo, hi, ok := strings.Cut(s[1:len(s)-1], ",")
	if !ok {
		return nil, fmt.Errorf("version range %q: want low,high", s)
	}
	r := &VersionRange{LowIncl: s[0] == '[', HighIncl: last == ']'}
	var err error
	if r.Low, err = ParseVersion(strings.TrimSpace(lo)); err != nil {
		return nil, fmt.Errorf("version range %q: %w", s, err)
	}
	if h := strings.TrimSpace(hi); h == "INFINITY" {
		r.Unbounded = true
	} else if r.High, err = ParseVersion(h); err != nil {
		return nil, fmt.Errorf("version range %q: %w", s, err)
	} else if r.High.Compare(r.Low) < 0 {
		return nil, fmt.Errorf("version range %q: high end below low end", s)
	}
	return r, nil
}

// Contains says whether v lies in the range.
func (r *VersionRange) Contains(v Version) bool {
	c := v.Compare(r.Low)
	if c < 0 || (c == 0 && !r.LowIncl) {
		return false
	}
	if r.Unbounded {
		return true
	}
	c = v.Compare(r.High)
	return c < 0 || (c == 0 && r.HighIncl)
}
