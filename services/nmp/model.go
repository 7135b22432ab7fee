// Package nmp is node management: node management policies (NMPs) as
// Open Horizon defines them, which nodes an NMP applies to (by pattern or
// by two-way policy compatibility), the directive the hub gives each node
// (version to reach, start time within the NMP's window, conflicts
// between NMPs), and the safe-rollout threshold that pauses a rollout.
// Its rules do no I/O. The world of node management is folded one way,
// one fold per topic (World.FoldPolicy, FoldNode, FoldPackage,
// FoldStatus) with one set of checks; FollowWorld keeps a World current
// from the topics, and the nmp-hub stage and the North API (nmpapi) each
// keep one.
package nmp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/nmp/constraint"
)

// Current is the atLeastVersion that means the newest package on the hub.
const Current = "current"

// Now is the start that means the NMP's lastUpdated.
const Now = "now"

// MaxDuration bounds an upgrade window (30 days).
const MaxDuration = 30 * 24 * 3600

// MaxBodyBytes bounds an NMP or node document.
const MaxBodyBytes = 256 << 10

// namePattern is an org, NMP, pattern or node name: one Kafka key segment.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,254}$`)

// CheckName says what is wrong with an org, NMP, pattern or node name.
func CheckName(what, s string) error {
	if !namePattern.MatchString(s) {
		return fmt.Errorf("%s %q: want 1 to 255 ASCII letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit", what, s)
	}
	return nil
}

// Document is an NMP as the API reads and writes it, in Open Horizon's
// names. Both forms of the upgrade policy are read: the first one
// (agentUpgradePolicy {atLeastVersion, start, duration}) and the later
// one (start and startWindow beside agentUpgradePolicy {manifest,
// allowDowngrade}); see README.md for how they map.
type Document struct {
	Owner              string                `json:"owner,omitempty"`
	Label              string                `json:"label,omitempty"`
	Description        string                `json:"description,omitempty"`
	Constraints        []string              `json:"constraints"`
	Properties         []constraint.Property `json:"properties"`
	Patterns           []string              `json:"patterns"`
	Enabled            bool                  `json:"enabled"`
	AgentUpgradePolicy *UpgradePolicy        `json:"agentUpgradePolicy,omitempty"`
	Start              string                `json:"start,omitempty"`
	StartWindow        *int64                `json:"startWindow,omitempty"`
	FailureThreshold   *Threshold            `json:"failureThreshold,omitempty"`
	// Paused and Rollback are set by resume and rollback; ResumedAt says
	// from when failures count again.
	Rollback    bool   `json:"rollback,omitempty"`
	ResumedAt   string `json:"resumedAt,omitempty"`
	LastUpdated string `json:"lastUpdated,omitempty"`
	// ConfirmAllNodes confirms an enabled NMP with no constraints or a
	// "*" pattern (it is not stored).
	ConfirmAllNodes bool `json:"confirmAllNodes,omitempty"`
}

// UpgradePolicy is agentUpgradePolicy.
type UpgradePolicy struct {
	AtLeastVersion string `json:"atLeastVersion,omitempty"`
	Start          string `json:"start,omitempty"`
	Duration       *int64 `json:"duration,omitempty"`
	Manifest       string `json:"manifest,omitempty"`
	AllowDowngrade bool   `json:"allowDowngrade,omitempty"`
	// FromVersions is the version guard: the running versions a node
	// may upgrade from, e.g. ">=1.2.0 <2.0.0" (see FromVersions).
	FromVersions string `json:"fromVersions,omitempty"`
}

// Threshold pauses a rollout when Count nodes failed, or when the failed
// nodes are Ratio (0 to 1) of the nodes that started (after at least
// MinStarted started, 1 by default).
type Threshold struct {
	Count      int64   `json:"count,omitempty"`
	Ratio      float64 `json:"ratio,omitempty"`
	MinStarted int64   `json:"minStarted,omitempty"`
}

// ParseSemver reads a three-part version (1.2.3), the form of agent
// package and NMP versions.
func ParseSemver(s string) (constraint.Version, error) {
	if strings.Count(s, ".") != 2 {
		return constraint.Version{}, fmt.Errorf("version %q: want a semantic version major.minor.patch, e.g. 1.2.3", s)
	}
	return constraint.ParseVersion(s)
}

// Decode reads an NMP document strictly: unknown fields and trailing data
// are refused.
func Decode(raw []byte) (*Document, error) {
	if len(raw) > MaxBodyBytes {
		return nil, fmt.Errorf("the NMP is %d bytes, at most %d", len(raw), MaxBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	var d Document
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("the NMP is not a valid document: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("the NMP is followed by more data")
	}
	return &d, nil
}

// Refusal says an enabled NMP would reach every node and was not
// confirmed.
type Refusal struct{ Why string }

func (r *Refusal) Error() string { return r.Why }

// Build checks a document and turns it into the record stored on
// nmp.policies, with lastUpdated now. An enabled NMP with no constraints
// and no patterns, or with a "*" pattern, is refused with a *Refusal
// unless the document confirms it.
func Build(org, name string, d *Document, now time.Time) (*events.NodeManagementPolicy, error) {
	if err := CheckName("org", org); err != nil {
		return nil, err
	}
	if err := CheckName("NMP name", name); err != nil {
		return nil, err
	}
	if _, err := constraint.ParseList(d.Constraints); err != nil {
		return nil, err
	}
	props, err := constraint.NewProperties(d.Properties)
	if err != nil {
		return nil, err
	}
	_ = props
	propsJSON, err := json.Marshal(nonNil(d.Properties))
	if err != nil {
		return nil, fmt.Errorf("properties: %w", err)
	}
	var patterns []string
	for i, p := range d.Patterns {
		q, err := qualifyPattern(org, p)
		if err != nil {
			return nil, fmt.Errorf("patterns[%d]: %w", i, err)
		}
		patterns = append(patterns, q)
	}
	up, err := buildUpgrade(d)
	if err != nil {
		return nil, err
	}
	ev := &events.NodeManagementPolicy{
		Org: org, Name: name, Owner: d.Owner, Label: d.Label, Description: d.Description,
		Constraints: nonNilS(d.Constraints), Properties: string(propsJSON), Patterns: nonNilS(patterns),
		Enabled: d.Enabled, AgentUpgrade: up, LastUpdated: now.UTC().Truncate(time.Millisecond),
		Rollback: d.Rollback,
	}
	if d.ResumedAt != "" {
		t, err := time.Parse(time.RFC3339, d.ResumedAt)
		if err != nil {
			return nil, fmt.Errorf("resumedAt %q: want an RFC3339 time: %w", d.ResumedAt, err)
		}
		ev.ResumedAt = t.UTC().UnixMilli()
	}
	if th := d.FailureThreshold; th != nil {
		if th.Count < 0 || th.Ratio < 0 || th.Ratio > 1 || th.MinStarted < 0 {
			return nil, fmt.Errorf("failureThreshold: count and minStarted must be ≥ 0 and ratio within 0 to 1")
		}
		ev.FailureCount, ev.FailureRatio, ev.FailureMinStarted = th.Count, th.Ratio, th.MinStarted
	}
	if d.Enabled && !d.ConfirmAllNodes {
		if why := ReachesAll(ev); why != "" {
			return nil, &Refusal{Why: why + "; publish it with confirmAllNodes: true (policyctl nmp publish --yes-all-nodes) if every such node should upgrade"}
		}
	}
	return ev, nil
}

// ReachesAll says why an NMP would apply to every node of its kind, or "".
func ReachesAll(p *events.NodeManagementPolicy) string {
	for _, pat := range p.Patterns {
		if pat == "*" {
			return `the enabled NMP has the pattern "*", so it applies to every node using a pattern`
		}
	}
	nonEmpty := 0
	for _, c := range p.Constraints {
		if strings.TrimSpace(c) != "" {
			nonEmpty++
		}
	}
	if nonEmpty == 0 {
		return "the enabled NMP has no constraints, so it applies to every node of the org using a node policy"
	}
	return ""
}

func qualifyPattern(org, p string) (string, error) {
	if p == "*" {
		return p, nil
	}
	o, n, ok := strings.Cut(p, "/")
	if !ok {
		o, n = org, p
	}
	if err := CheckName("pattern org", o); err != nil {
		return "", err
	}
	if err := CheckName("pattern", n); err != nil {
		return "", err
	}
	return o + "/" + n, nil
}

// buildUpgrade maps both forms of the upgrade policy to one record.
func buildUpgrade(d *Document) (*events.AgentUpgradePolicy, error) {
	u := d.AgentUpgradePolicy
	if u == nil && d.Start == "" && d.StartWindow == nil {
		return nil, nil
	}
	if u == nil {
		u = &UpgradePolicy{}
	}
	out := &events.AgentUpgradePolicy{AtLeastVersion: Current, Start: Now, AllowDowngrade: u.AllowDowngrade}
	// Version: atLeastVersion, or the later form's manifest.
	switch {
	case u.AtLeastVersion != "" && u.Manifest != "" && u.AtLeastVersion != u.Manifest:
		return nil, fmt.Errorf("agentUpgradePolicy: atLeastVersion %q and manifest %q disagree; give one", u.AtLeastVersion, u.Manifest)
	case u.AtLeastVersion != "":
		out.AtLeastVersion, out.Manifest = u.AtLeastVersion, u.Manifest
	case u.Manifest != "":
		out.AtLeastVersion = u.Manifest
		out.Manifest = u.Manifest
	}
	if out.AtLeastVersion != Current {
		if _, err := ParseSemver(out.AtLeastVersion); err != nil {
			return nil, fmt.Errorf("agentUpgradePolicy: %w, or \"current\"", err)
		}
	}
	g, err := ParseFromVersions(u.FromVersions)
	if err != nil {
		return nil, err
	}
	out.FromVersions = g.String()
	// Start: agentUpgradePolicy.start or the later top-level start.
	if u.Start != "" && d.Start != "" && u.Start != d.Start {
		return nil, fmt.Errorf("agentUpgradePolicy.start %q and start %q disagree; give one", u.Start, d.Start)
	}
	if s := u.Start + d.Start; s != "" {
		if u.Start != "" {
			s = u.Start
		} else {
			s = d.Start
		}
		if s != Now {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return nil, fmt.Errorf("start %q: want an RFC3339 time (2026-01-02T15:04:05Z) or \"now\"", s)
			}
			s = t.UTC().Format(time.RFC3339)
		}
		out.Start = s
	}
	// Duration: agentUpgradePolicy.duration or the later startWindow.
	if u.Duration != nil && d.StartWindow != nil && *u.Duration != *d.StartWindow {
		return nil, fmt.Errorf("agentUpgradePolicy.duration %d and startWindow %d disagree; give one", *u.Duration, *d.StartWindow)
	}
	for _, p := range []*int64{u.Duration, d.StartWindow} {
		if p != nil {
			if *p < 0 || *p > MaxDuration {
				return nil, fmt.Errorf("duration %d: want 0 to %d seconds", *p, MaxDuration)
			}
			out.DurationS = *p
		}
	}
	return out, nil
}

// ToDocument is the API form of a stored NMP.
func ToDocument(p *events.NodeManagementPolicy) *Document {
	d := &Document{
		Owner: p.Owner, Label: p.Label, Description: p.Description,
		Constraints: nonNilS(p.Constraints), Patterns: nonNilS(p.Patterns), Enabled: p.Enabled,
		Rollback: p.Rollback, LastUpdated: p.LastUpdated.UTC().Format(time.RFC3339Nano),
	}
	_ = json.Unmarshal([]byte(p.Properties), &d.Properties)
	d.Properties = nonNil(d.Properties)
	if u := p.AgentUpgrade; u != nil {
		dur := u.DurationS
		d.AgentUpgradePolicy = &UpgradePolicy{AtLeastVersion: u.AtLeastVersion, Start: u.Start, Duration: &dur, Manifest: u.Manifest, AllowDowngrade: u.AllowDowngrade, FromVersions: u.FromVersions}
	}
	if p.FailureCount > 0 || p.FailureRatio > 0 {
		d.FailureThreshold = &Threshold{Count: p.FailureCount, Ratio: p.FailureRatio, MinStarted: p.FailureMinStarted}
	}
	if p.ResumedAt > 0 {
		d.ResumedAt = time.UnixMilli(p.ResumedAt).UTC().Format(time.RFC3339Nano)
	}
	return d
}

func nonNil(p []constraint.Property) []constraint.Property {
	if p == nil {
		return []constraint.Property{}
	}
	return p
}

func nonNilS(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Key is the Kafka key of an org's NMP or node: org/name.
func Key(org, name string) string { return org + "/" + name }
