package nmp

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

var t0 = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)

func build(t *testing.T, org, name, js string) *events.NodeManagementPolicy {
	t.Helper()
	d, err := Decode([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(org, name, d, t0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func compile(t *testing.T, p *events.NodeManagementPolicy) *Policy {
	t.Helper()
	c, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func node(t *testing.T, org, id, pattern, props string, cons []string, version string) *Node {
	t.Helper()
	if props == "" {
		props = "[]"
	}
	n, err := CompileNode(&events.AgentNode{Org: org, Node: id, Pattern: pattern, Properties: props, Constraints: cons, SoftwareVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBuildRefusesBadInput(t *testing.T) {
	cases := []struct{ org, name, body, want string }{
		{"o", "n", `{"constraints":["a =="]}`, "at position 4"},
		{"o", "n", `{"agentUpgradePolicy":{"atLeastVersion":"1.2"}}`, "semantic version"},
		{"o", "n", `{"agentUpgradePolicy":{"atLeastVersion":"v1.2.3"}}`, "not a number"},
		{"o", "n", `{"agentUpgradePolicy":{"start":"tomorrow"}}`, "RFC3339"},
		{"o", "n", `{"agentUpgradePolicy":{"duration":-1}}`, "0 to"},
		{"o", "n", `{"agentUpgradePolicy":{"atLeastVersion":"1.0.0","manifest":"1.1.0"}}`, "disagree"},
		{"o", "n", `{"start":"now","agentUpgradePolicy":{"start":"2026-01-01T00:00:00Z"}}`, "disagree"},
		{"o", "n", `{"startWindow":10,"agentUpgradePolicy":{"duration":20}}`, "disagree"},
		{"o", "n", `{"agentUpgradePolicy":{"fromVersions":">=1.2"}}`, "agentUpgradePolicy.fromVersions"},
		{"o", "n", `{"agentUpgradePolicy":{"fromVersions":"~1.2.0"}}`, "agentUpgradePolicy.fromVersions"},
		{"o", "n", `{"agentUpgradePolicy":{"fromVersions":">=1.0.0 <"}}`, "agentUpgradePolicy.fromVersions"},
		{"o", "n", `{"agentUpgradePolicy":{"fromVersions":"=>1.0.0"}}`, "agentUpgradePolicy.fromVersions"},
		{"o", "n", `{"patterns":["a/b/c"]}`, "pattern"},
		{"o", "n", `{"properties":[{"name":"x","value":"y","type":"int"}]}`, "not an integer"},
		{"o", "n", `{"failureThreshold":{"ratio":2}}`, "ratio"},
		{"bad org", "n", `{}`, "org"},
		{"o", "../n", `{}`, "NMP name"},
	}
	for _, c := range cases {
		d, err := Decode([]byte(c.body))
		if err == nil {
			_, err = Build(c.org, c.name, d, t0)
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.body, err, c.want)
		}
	}
	if _, err := Decode([]byte(`{"enable":true}`)); err == nil {
		t.Error("an unknown field was accepted")
	}
}

func TestEnabledForAllNodesNeedsConfirmation(t *testing.T) {
	for _, body := range []string{
		`{"enabled":true,"agentUpgradePolicy":{}}`,
		`{"enabled":true,"constraints":["a == 1"],"patterns":["*"]}`,
	} {
		d, _ := Decode([]byte(body))
		_, err := Build("o", "n", d, t0)
		var r *Refusal
		if !errors.As(err, &r) {
			t.Errorf("%s: got %v, want a refusal", body, err)
		}
		d.ConfirmAllNodes = true
		if _, err := Build("o", "n", d, t0); err != nil {
			t.Errorf("%s confirmed: %v", body, err)
		}
	}
	// Disabled, it is stored as it is.
	build(t, "o", "n", `{"agentUpgradePolicy":{}}`)
}

func TestBothFormsMapToOneRecord(t *testing.T) {
	first := build(t, "o", "n", `{"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0","start":"2026-12-01T10:00:00+01:00","duration":600}}`)
	later := build(t, "o", "n", `{"constraints":["a == 1"],"start":"2026-12-01T09:00:00Z","startWindow":600,"agentUpgradePolicy":{"manifest":"1.1.0","allowDowngrade":true}}`)
	f, l := first.AgentUpgrade, later.AgentUpgrade
	if f.AtLeastVersion != "1.1.0" || l.AtLeastVersion != "1.1.0" || f.Start != "2026-12-01T09:00:00Z" || l.Start != f.Start || f.DurationS != 600 || l.DurationS != 600 {
		t.Fatalf("first %+v, later %+v", f, l)
	}
	if f.AllowDowngrade || !l.AllowDowngrade || l.Manifest != "1.1.0" {
		t.Fatalf("first %+v, later %+v", f, l)
	}
	def := build(t, "o", "n", `{"constraints":["a == 1"],"agentUpgradePolicy":{}}`)
	if u := def.AgentUpgrade; u.AtLeastVersion != Current || u.Start != Now || u.DurationS != 0 {
		t.Fatalf("defaults: %+v", u)
	}
	// Round trip through the API form.
	d := ToDocument(later)
	again, err := Build("o", "n", d, t0)
	if err != nil || *again.AgentUpgrade != *later.AgentUpgrade {
		t.Fatalf("round trip: %v %+v", err, again.AgentUpgrade)
	}
}

func TestSelection(t *testing.T) {
	p := compile(t, build(t, "o", "n", `{"constraints":["arch == amd64"],"properties":[{"name":"tier","value":"edge"}],"patterns":["web","other/db"]}`))
	cases := []struct {
		n    *Node
		want bool
	}{
		{node(t, "o", "a", "", `[{"name":"arch","value":"amd64"}]`, nil, ""), true},
		{node(t, "o", "b", "", `[{"name":"arch","value":"arm64"}]`, nil, ""), false},
		// The node's own constraint on the NMP's properties: two ways.
		{node(t, "o", "c", "", `[{"name":"arch","value":"amd64"}]`, []string{"tier == edge"}, ""), true},
		{node(t, "o", "d", "", `[{"name":"arch","value":"amd64"}]`, []string{"tier == core"}, ""), false},
		{node(t, "o", "e", "web", "", nil, ""), true},
		{node(t, "o", "f", "o/web", "", nil, ""), true},
		{node(t, "o", "g", "other/db", "", nil, ""), true},
		{node(t, "o", "h", "db", "", nil, ""), false},
		// A pattern node is not selected by its properties.
		{node(t, "o", "i", "db", `[{"name":"arch","value":"amd64"}]`, nil, ""), false},
		// Another org's node never.
		{node(t, "x", "a", "", `[{"name":"arch","value":"amd64"}]`, nil, ""), false},
	}
	for _, c := range cases {
		if got := p.Applies(c.n); got != c.want {
			t.Errorf("%s: applies %v, want %v", c.n.Key, got, c.want)
		}
	}
	any := compile(t, build(t, "o", "any", `{"patterns":["*"],"constraints":["never == 1"]}`))
	if !any.Applies(node(t, "o", "e", "whatever", "", nil, "")) || any.Applies(node(t, "o", "p", "", "", nil, "")) {
		t.Error(`"*" must select every pattern node and no policy node`)
	}
}

func TestStartTimeStableUniformAndAnchored(t *testing.T) {
	p := compile(t, build(t, "o", "n", `{"constraints":["a == 1"],"agentUpgradePolicy":{"duration":600}}`))
	buckets := make([]int, 10)
	for i := range 10000 {
		k := fmt.Sprintf("o/node-%d", i)
		s := p.StartFor(k)
		if s.Before(t0) || s.After(t0.Add(600*time.Second)) {
			t.Fatalf("%s starts at %v, outside [%v, +600s]", k, s, t0)
		}
		if !s.Equal(p.StartFor(k)) {
			t.Fatalf("%s: the start moved on recomputation", k)
		}
		buckets[int(s.Sub(t0)/(60*time.Second))%10]++
	}
	for i, b := range buckets { // 1000 expected in each minute
		if b < 850 || b > 1150 {
			t.Errorf("minute %d holds %d of 10000 starts, want about 1000: %v", i, b, buckets)
		}
	}
	fixed := compile(t, build(t, "o", "n", `{"constraints":["a == 1"],"agentUpgradePolicy":{"start":"2027-01-01T00:00:00Z"}}`))
	if got := fixed.StartFor("o/x"); !got.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("duration 0 starts at %v", got)
	}
}

func pkgs(vs ...string) Packages {
	ps := Packages{}
	for _, v := range vs {
		ps[v] = &events.AgentPackage{Version: v, SHA256: "sha-" + v}
	}
	return ps
}

func TestDirective(t *testing.T) {
	n := node(t, "o", "a", "", `[{"name":"a","value":1}]`, nil, "1.0.0")
	cur := compile(t, build(t, "o", "cur", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{}}`))
	d := Compute(Input{Node: n, Policies: []*Policy{cur}, Packages: pkgs("1.0.0", "1.1.0", "1.0.9")}, t0)
	if d.Action != ActionUpgrade || d.TargetVersion != "1.1.0" || d.PackageSHA256 != "sha-1.1.0" || d.Policy != "o/cur" || !d.StartAt.Equal(t0) {
		t.Fatalf("current: %+v", d)
	}
	d2 := Compute(Input{Node: n, Policies: []*Policy{cur}, Packages: pkgs("1.0.0", "1.1.0", "1.0.9")}, t0.Add(time.Hour))
	if !Same(d, d2) {
		t.Fatal("recomputing later changed the directive")
	}
	if d := Compute(Input{Node: n, Policies: []*Policy{cur}}, t0); d.Action != ActionWaiting {
		t.Fatalf("no package: %+v", d)
	}
	pinned := compile(t, build(t, "o", "pin", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.2.0"}}`))
	if d := Compute(Input{Node: n, Policies: []*Policy{pinned}, Packages: pkgs("1.1.0")}, t0); d.Action != ActionWaiting || !strings.Contains(d.Reason, "1.2.0") {
		t.Fatalf("missing version: %+v", d)
	}
	off := build(t, "o", "off", `{"constraints":["a == 1"],"agentUpgradePolicy":{}}`)
	if d := Compute(Input{Node: n, Policies: []*Policy{compile(t, off)}, Packages: pkgs("1.1.0")}, t0); d.Action != ActionNone {
		t.Fatalf("disabled: %+v", d)
	}
}

func TestConflicts(t *testing.T) {
	n := node(t, "o", "a", "", `[{"name":"a","value":1}]`, nil, "1.0.0")
	older := build(t, "o", "one", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0"}}`)
	newer := build(t, "o", "two", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.2.0"}}`)
	newer.LastUpdated = older.LastUpdated.Add(time.Second)
	same := build(t, "o", "three", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"atLeastVersion":"1.1.0"}}`)
	ps := []*Policy{compile(t, older), compile(t, newer), compile(t, same)}
	// Arriving together: the newer wins, the older is reported.
	d := Compute(Input{Node: n, Policies: ps, Packages: pkgs("1.1.0", "1.2.0")}, t0)
	if d.Policy != "o/two" || d.TargetVersion != "1.2.0" || len(d.Conflicts) != 2 {
		t.Fatalf("together: %+v", d)
	}
	// One already enacted on the node stays; the later one is ignored.
	st := &events.AgentStatus{Org: "o", Node: "a", Policy: "o/one", Status: StateSuccessful}
	d = Compute(Input{Node: n, Policies: ps, Packages: pkgs("1.1.0", "1.2.0"), Status: st}, t0)
	if d.Policy != "o/one" || d.TargetVersion != "1.1.0" || len(d.Conflicts) != 1 || !strings.Contains(d.Conflicts[0], "o/two: ignored") || !strings.Contains(d.Conflicts[0], "already enacted") {
		t.Fatalf("enacted: %+v", d)
	}
	w := NewWorld()
	w.SetNode(n.Key, n)
	w.SetStatus(n.Key, st)
	for _, p := range ps {
		w.SetPolicy(p.Key, p)
	}
	if c := w.Conflicts(ps[1]); c[n.Key] != "o/one" || len(c) != 1 {
		t.Fatalf("conflicts before publishing: %v", c)
	}
	if c := w.Conflicts(ps[2]); len(c) != 0 {
		t.Fatalf("same intent is no conflict: %v", c)
	}
}

func TestThresholdPausesAndResume(t *testing.T) {
	p := build(t, "o", "n", `{"enabled":true,"constraints":["a == 1"],"agentUpgradePolicy":{"duration":60},"failureThreshold":{"count":2}}`)
	w := NewWorld()
	w.SetPackage("1.1.0", &events.AgentPackage{Version: "1.1.0", SHA256: "x"})
	w.SetPolicy("o/n", compile(t, p))
	for i := range 5 {
		n := node(t, "o", fmt.Sprint("n", i), "", `[{"name":"a","value":1}]`, nil, "1.0.0")
		w.SetNode(n.Key, n)
	}
	report := func(i int, state string, at time.Time) []string {
		return w.SetStatus(fmt.Sprint("o/n", i), &events.AgentStatus{Org: "o", Node: fmt.Sprint("n", i), Policy: "o/n", Status: state, ReportedAt: at, UpgradeStart: &at})
	}
	report(0, StateSuccessful, t0)
	report(1, StateFailed, t0)
	if w.Rollout("o/n").Paused {
		t.Fatal("paused after one failure")
	}
	if got := report(2, StateRollbackSuccessful, t0); len(got) != 5 {
		t.Fatalf("crossing the threshold recomputes %d nodes, want all 5", len(got))
	}
	r := w.Rollout("o/n")
	if !r.Paused || r.Failed != 2 || r.Started != 3 || !strings.Contains(r.Reason, "2 nodes failed") {
		t.Fatalf("rollout %+v", r)
	}
	if d := w.Directive("o/n3", t0); d.Action != ActionPaused {
		t.Fatalf("a node that had not started: %+v", d)
	}
	if d := w.Directive("o/n1", t0); d.Action != ActionUpgrade {
		t.Fatalf("a node that started keeps its directive: %+v", d)
	}
	// Resume: failures before it no longer count.
	p2 := *p
	p2.ResumedAt = t0.Add(time.Minute).UnixMilli()
	w.SetPolicy("o/n", compile(t, &p2))
	if w.Rollout("o/n").Paused {
		t.Fatal("still paused after resume")
	}
	if d := w.Directive("o/n3", t0); d.Action != ActionUpgrade {
		t.Fatalf("after resume: %+v", d)
	}
	// Rollback: the upgraded node goes back, others do not start.
	p3 := p2
	p3.Rollback = true
	w.SetPackage("1.0.0", &events.AgentPackage{Version: "1.0.0", SHA256: "old"})
	w.SetPolicy("o/n", compile(t, &p3))
	st := *w.Status("o/n0")
	st.PreviousVersion = "1.0.0"
	w.SetStatus("o/n0", &st)
	if d := w.Directive("o/n0", t0); d.Action != ActionRollback || d.TargetVersion != "1.0.0" || d.PackageSHA256 != "old" {
		t.Fatalf("rollback: %+v", d)
	}
	if d := w.Directive("o/n4", t0); d.Action != ActionPaused {
		t.Fatalf("rollback, node not upgraded: %+v", d)
	}
}

func TestRatioThreshold(t *testing.T) {
	p := &events.NodeManagementPolicy{Org: "o", Name: "n", FailureRatio: 0.5, FailureMinStarted: 4}
	if r := Evaluate(p, Tally{Started: 2, Failed: 2}); r.Paused {
		t.Fatal("paused before minStarted")
	}
	if r := Evaluate(p, Tally{Started: 4, Failed: 2}); !r.Paused {
		t.Fatal("not paused at the ratio")
	}
	if r := Evaluate(p, Tally{Started: 5, Failed: 2}); r.Paused {
		t.Fatal("paused below the ratio")
	}
}

// BenchmarkDirectives100k computes the directives of 100,000 nodes after
// an NMP is enabled, as the hub does.
func BenchmarkDirectives100k(b *testing.B) {
	w := NewWorld()
	w.SetPackage("1.1.0", &events.AgentPackage{Version: "1.1.0", SHA256: "x"})
	keys := make([]string, 0, 100000)
	for i := range 100000 {
		n, err := CompileNode(&events.AgentNode{Org: "o", Node: fmt.Sprint("node-", i), Properties: fmt.Sprintf(`[{"name":"arch","value":"amd64"},{"name":"rack","value":%d}]`, i%40), SoftwareVersion: "1.0.0"})
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, n.Key)
		w.SetNode(n.Key, n)
	}
	d, _ := Decode([]byte(`{"enabled":true,"constraints":["arch == amd64 AND rack < 30"],"agentUpgradePolicy":{"duration":600}}`))
	ev, err := Build("o", "fleet", d, t0)
	if err != nil {
		b.Fatal(err)
	}
	p, _ := Compile(ev)
	b.ResetTimer()
	for b.Loop() {
		up := 0
		for _, k := range w.SetPolicy(p.Key, p) {
			if w.Directive(k, t0).Action == ActionUpgrade {
				up++
			}
		}
		if up != 75000 {
			b.Fatalf("%d upgrades, want 75000", up)
		}
	}
}
