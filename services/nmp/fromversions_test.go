package nmp

import (
	"strings"
	"testing"
)

// A version guard admits exactly the versions all its comparators hold
// for, is kept in canonical form, and reaches the node's directive.
func TestFromVersions(t *testing.T) {
	g, err := ParseFromVersions(" >=1.2.0   <2.0.0 ")
	if err != nil {
		t.Fatal(err)
	}
	for v, want := range map[string]bool{"1.1.9": false, "1.2.0": true, "1.9.9": true, "2.0.0": false} {
		if got := g.Admits(mustSemver(t, v)); got != want {
			t.Errorf("%s admitted %v, want %v", v, got, want)
		}
	}
	if s := g.String(); s != ">=1.2.0 <2.0.0" {
		t.Errorf("canonical form %q", s)
	}
	for expr, in := range map[string]string{"1.0.0": "1.0.0", "=1.0.0": "1.0.0", ">1.0.0": "1.0.1", "<=1.0.0": "1.0.0", "": "0.0.1"} {
		g, err := ParseFromVersions(expr)
		if err != nil || !g.Admits(mustSemver(t, in)) {
			t.Errorf("%q does not admit %s: %v", expr, in, err)
		}
	}
	if _, err := ParseFromVersions(strings.Repeat(">=1.0.0 ", 40)); err == nil || !strings.Contains(err.Error(), "agentUpgradePolicy.fromVersions") {
		t.Errorf("an over-long guard: %v", err)
	}

	p := build(t, "o", "g", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"fromVersions":">=1.0.0  <2.0.0"}}`)
	if f := p.AgentUpgrade.FromVersions; f != ">=1.0.0 <2.0.0" {
		t.Fatalf("stored guard %q", f)
	}
	if doc := ToDocument(p); doc.AgentUpgradePolicy.FromVersions != ">=1.0.0 <2.0.0" {
		t.Fatalf("API form %+v", doc.AgentUpgradePolicy)
	}
	n := node(t, "o", "a", "", `[{"name":"a","value":1}]`, nil, "1.0.0")
	d := Compute(Input{Node: n, Policies: []*Policy{compile(t, p)}, Packages: pkgs("1.1.0")}, t0)
	if d.Action != ActionUpgrade || d.FromVersions != ">=1.0.0 <2.0.0" {
		t.Fatalf("directive %+v", d)
	}
	open := build(t, "o", "g", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{}}`)
	if o := Compute(Input{Node: n, Policies: []*Policy{compile(t, open)}, Packages: pkgs("1.1.0")}, t0); o.FromVersions != "" || o.DirectiveID == d.DirectiveID {
		t.Fatalf("a guard does not change the directive: %+v", o)
	}
	bad := *p
	up := *p.AgentUpgrade
	up.FromVersions = "~1"
	bad.AgentUpgrade = &up
	if _, err := Compile(&bad); err == nil || !strings.Contains(err.Error(), "fromVersions") {
		t.Fatalf("a stored bad guard compiled: %v", err)
	}
}

func mustSemver(t *testing.T, s string) (v [3]int64) {
	t.Helper()
	x, err := ParseSemver(s)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
