package policy

import (
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

func hostCapacityBody() Body {
	// The policy_body of seed 000 ("Sample policy_body structure").
	b, err := DecodeBody([]byte(`{
	  "policyName": "DCAE.Config_host_capacity_policy_id_value.69.xml",
	  "policyConfigMessage": "Config Retrieved! ",
	  "responseAttributes": {},
	  "policyConfigStatus": "CONFIG_RETRIEVED",
	  "type": "JSON",
	  "matchingConditions": {"ONAPName": "DCAE", "ConfigName": "alex_config_name", "priority": "1", "n": 1, "flag": true, "obj": {"a": [1, "x"]}},
	  "property": null,
	  "config": {"hello": "world"},
	  "policyVersion": "69"
	}`))
	if err != nil {
		panic(err)
	}
	return b
}

// filterMatchCase is a filter, a body (nil: hostCapacityBody) and whether
// the filter matches it.
type filterMatchCase struct {
	name   string
	filter Filter
	body   Body
	want   bool
}

// filterMatchCases are the cases of TestFilterMatch; they also seed
// FuzzFilterMatch.
func filterMatchCases() []filterMatchCase {
	return []filterMatchCase{
		{name: "regex prefix", filter: Filter{PolicyName: "DCAE.Config_.*"}, want: true},
		{name: "regex matches from the start only", filter: Filter{PolicyName: "Config_.*"}, want: false},
		{name: "regex need not reach the end", filter: Filter{PolicyName: "DCAE.Config_host"}, want: true},
		{name: "regex anchored at the end by the user", filter: Filter{PolicyName: "DCAE.Config_host$"}, want: false},
		{name: "regex with its own ^", filter: Filter{PolicyName: "^DCAE"}, want: true},
		{name: "alternation stays anchored", filter: Filter{PolicyName: "nothing|DCAE"}, want: true},
		{name: "alternation: no branch at the start", filter: Filter{PolicyName: "nothing|capacity"}, want: false},
		{name: "full name literally", filter: Filter{PolicyName: "DCAE.Config_host_capacity_policy_id_value.69.xml"}, want: true},
		{name: "policy_id", filter: Filter{PolicyName: "DCAE.Config_host_capacity_policy_id_value"}, want: true},
		{name: "other policy_id", filter: Filter{PolicyName: "DCAE.Config_other"}, want: false},
		{name: "case sensitive", filter: Filter{PolicyName: "dcae.config_.*"}, want: false},
		{name: "case folding when asked", filter: Filter{PolicyName: "(?i)dcae.config_.*"}, want: true},
		{name: "no policyName matches nothing", filter: Filter{OnapName: "DCAE"}, want: false},
		{name: "onapName equal", filter: Filter{PolicyName: ".*", OnapName: "DCAE"}, want: true},
		{name: "onapName differs", filter: Filter{PolicyName: ".*", OnapName: "ECOMP"}, want: false},
		{name: "configName equal", filter: Filter{PolicyName: ".*", ConfigName: "alex_config_name"}, want: true},
		{name: "configName differs", filter: Filter{PolicyName: ".*", ConfigName: "sample"}, want: false},
		{name: "all AND-ed", filter: Filter{PolicyName: "DCAE.Config_.*", OnapName: "DCAE", ConfigName: "alex_config_name",
			ConfigAttributes: map[string]any{"priority": "1"}}, want: true},
		{name: "one of all fails", filter: Filter{PolicyName: "DCAE.Config_.*", OnapName: "DCAE", ConfigName: "alex_config_name",
			ConfigAttributes: map[string]any{"priority": "2"}}, want: false},
		{name: "attribute same type", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"n": 1}}, want: true},
		{name: "attribute 1.0 is 1", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"n": 1.0}}, want: true},
		{name: "attribute string vs number", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"n": "1"}}, want: false},
		{name: "attribute number vs string", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"priority": 1}}, want: false},
		{name: "attribute bool", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"flag": true}}, want: true},
		{name: "attribute bool vs number", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"n": true}}, want: false},
		{name: "attribute object deep", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"obj": map[string]any{"a": []any{1, "x"}}}}, want: true},
		{name: "attribute object differs", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"obj": map[string]any{"a": []any{"1", "x"}}}}, want: false},
		{name: "attribute missing", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"key1": "value1"}}, want: false},
		{name: "attribute null vs missing", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"key1": nil}}, want: false},
		{name: "ONAPName via configAttributes", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"ONAPName": "DCAE"}}, want: true},
		{name: "empty configAttributes is no condition", filter: Filter{PolicyName: ".*", ConfigAttributes: map[string]any{}}, want: true},
		{name: "unique does not change matching", filter: Filter{PolicyName: "DCAE.Config_.*", Unique: true}, want: true},
		{name: "body without matchingConditions, filter without conditions",
			filter: Filter{PolicyName: ".*"}, body: Body{"policyName": "DCAE.Config_x.1.xml"}, want: true},
		{name: "body without matchingConditions, filter with onapName",
			filter: Filter{PolicyName: ".*", OnapName: "DCAE"}, body: Body{"policyName": "DCAE.Config_x.1.xml"}, want: false},
		{name: "matchingConditions not an object",
			filter: Filter{PolicyName: ".*", OnapName: "DCAE"}, body: Body{"policyName": "DCAE.Config_x.1.xml", "matchingConditions": "DCAE"}, want: false},
		{name: "matchingConditions null matches no filter, even one without conditions",
			filter: Filter{PolicyName: ".*"}, body: Body{"policyName": "DCAE.Config_x.1.xml", "matchingConditions": nil}, want: false},
		{name: "matchingConditions a list matches no filter",
			filter: Filter{PolicyName: "DCAE.Config_x"}, body: Body{"policyName": "DCAE.Config_x.1.xml", "matchingConditions": []any{map[string]any{"ONAPName": "DCAE"}}}, want: false},
		{name: "matchingConditions a string matches no filter, not even by policy_id",
			filter: Filter{PolicyName: "DCAE.Config_x"}, body: Body{"policyName": "DCAE.Config_x.1.xml", "matchingConditions": "DCAE"}, want: false},
		{name: "matchingConditions an empty object is no condition",
			filter: Filter{PolicyName: ".*"}, body: Body{"policyName": "DCAE.Config_x.1.xml", "matchingConditions": map[string]any{}}, want: true},
		{name: "body without policyName", filter: Filter{PolicyName: ".*"}, body: Body{"matchingConditions": map[string]any{}}, want: false},
		{name: "body without policy_id", filter: Filter{PolicyName: ".*"}, body: Body{"policyName": ".1.xml"}, want: false},
		{name: "policy_id with regex characters", filter: Filter{PolicyName: "DCAE.Config_a+b"},
			body: Body{"policyName": "DCAE.Config_a+b.3.xml"}, want: true},
		{name: "dot does not match a newline", filter: Filter{PolicyName: "DCAE.Config_"},
			body: Body{"policyName": "DCAE\nConfig_a.1.xml"}, want: false},
		{name: "dot matches a newline with (?s)", filter: Filter{PolicyName: "(?s)DCAE.Config_"},
			body: Body{"policyName": "DCAE\nConfig_a.1.xml"}, want: true},
		{name: "header body from a notification", filter: Filter{PolicyName: "DCAE.Config_.*", ConfigName: "c1"},
			body: LoadedPolicy{PolicyName: "DCAE.Config_n.2.xml", VersionNo: "2", Matches: map[string]string{"ConfigName": "c1"}}.Header(), want: true},
	}
}

func TestFilterMatch(t *testing.T) {
	for _, tt := range filterMatchCases() {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body
			if body == nil {
				body = hostCapacityBody()
			}
			c, err := CompileFilter(tt.filter)
			if err != nil {
				t.Fatalf("CompileFilter: %v", err)
			}
			got, reasons := c.Match(body)
			if got != tt.want {
				t.Fatalf("Match = %v; want %v; reasons:\n%s", got, tt.want, strings.Join(reasons, "\n"))
			}
			if len(reasons) == 0 {
				t.Fatalf("no reasons given")
			}
			ix := NewIndex()
			ix.Add("k", c)
			if m := ix.Matches(body); (len(m) == 1) != tt.want {
				t.Fatalf("Index.Matches = %v; want match %v", m, tt.want)
			}
		})
	}
}

func TestFilterMatchReasons(t *testing.T) {
	c, err := CompileFilter(Filter{
		PolicyName:       "DCAE.Config_.*",
		OnapName:         "DCAE",
		ConfigName:       "other",
		ConfigAttributes: map[string]any{"n": "1", "priority": "1", "key1": "value1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ok, reasons := c.Match(hostCapacityBody())
	if ok {
		t.Fatalf("matched; want no match")
	}
	want := []string{
		`policyName "DCAE.Config_host_capacity_policy_id_value.69.xml" matches ^(?:DCAE.Config_.*)`,
		`onapName: want "DCAE" (string), have "DCAE" (string)`,
		`configName: want "other" (string), have "alex_config_name" (string)`,
		`configAttributes key1: want "value1" (string), but matchingConditions has no key1`,
		`configAttributes n: want "1" (string), have 1 (number)`,
		`configAttributes priority: want "1" (string), have "1" (string)`,
	}
	if strings.Join(reasons, "\n") != strings.Join(want, "\n") {
		t.Fatalf("reasons:\n%s\nwant:\n%s", strings.Join(reasons, "\n"), strings.Join(want, "\n"))
	}

	byID, _ := CompileFilter(Filter{PolicyName: "DCAE.Config_host_capacity_policy_id_value"})
	if ok, r := byID.Match(hostCapacityBody()); !ok || r[0] != `policy_id "DCAE.Config_host_capacity_policy_id_value" equals the filter's policyName` {
		t.Fatalf("by id: %v %q", ok, r)
	}
	miss, _ := CompileFilter(Filter{PolicyName: "DCAE.Config_VM_.*"})
	if ok, r := miss.Match(hostCapacityBody()); ok || !strings.Contains(r[0], `does not match ^(?:DCAE.Config_VM_.*)`) {
		t.Fatalf("miss: %v %q", ok, r)
	}
	none, _ := CompileFilter(Filter{ConfigName: "x"})
	if ok, r := none.Match(hostCapacityBody()); ok || r[0] != "filter has no policyName: it matches nothing" {
		t.Fatalf("none: %v %q", ok, r)
	}
}

func TestCompileFilterErrors(t *testing.T) {
	tests := []struct {
		pattern string
		want    []string
	}{
		{pattern: "DCAE.Config_(x", want: []string{"policyName", `"DCAE.Config_(x"`, "missing closing )"}},
		{pattern: "DCAE.Config_(?=x)", want: []string{"policyName", `"DCAE.Config_(?=x)"`, "invalid or unsupported Perl syntax"}},
		{pattern: "a)|(b", want: []string{"policyName", `"a)|(b"`, "unexpected )"}},
		{pattern: "*DCAE", want: []string{"policyName", "missing argument to repetition operator"}},
		{pattern: `DCAE\`, want: []string{"policyName", "trailing backslash"}},
	}
	for _, tt := range tests {
		_, err := CompileFilter(Filter{PolicyName: tt.pattern})
		if err == nil {
			t.Errorf("CompileFilter(%q) succeeded", tt.pattern)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CompileFilter(%q) error %q does not mention %q", tt.pattern, err, w)
			}
		}
	}
	if _, err := CompileFilter(Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"f": func() {}}}); err == nil ||
		!strings.Contains(err.Error(), "configAttributes") {
		t.Errorf("unencodable configAttributes: %v", err)
	}
}

func TestAnchorQuote(t *testing.T) {
	// \Q without \E quotes to the end of the pattern; the anchoring must
	// not change that.
	for _, tt := range []struct {
		pattern, name string
		want          bool
	}{
		{`DCAE\Q.Config_(`, "DCAE.Config_(.1.xml", true},
		{`DCAE\Q.Config_(`, "DCAEXConfig_(.1.xml", false},
		{`DCAE\Q.C\E.*`, "DCAE.Config_a.1.xml", true},
		{`DCAE\\Q.*`, `DCAE\Qx.1.xml`, true},
	} {
		c, err := CompileFilter(Filter{PolicyName: tt.pattern})
		if err != nil {
			t.Fatalf("CompileFilter(%q): %v", tt.pattern, err)
		}
		if got, r := c.Match(Body{"policyName": tt.name}); got != tt.want {
			t.Errorf("%q on %q = %v; want %v (%q)", tt.pattern, tt.name, got, tt.want, r)
		}
	}
}

func TestDecodeConfigAttributes(t *testing.T) {
	m, err := DecodeConfigAttributes(`{"key1":"value1","n":1}`)
	if err != nil || m["key1"] != "value1" || m["n"] != json.Number("1") {
		t.Fatalf("got %#v, %v", m, err)
	}
	for _, s := range []string{"", "  ", "null"} {
		if m, err := DecodeConfigAttributes(s); err != nil || m != nil {
			t.Errorf("DecodeConfigAttributes(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := DecodeConfigAttributes(`[1]`); err == nil {
		t.Errorf("array accepted")
	}
	// A filter decoded from an event matches a body decoded from the PDP.
	c, err := CompileFilter(Filter{PolicyName: ".*", ConfigAttributes: m})
	if err != nil {
		t.Fatal(err)
	}
	body := Body{"policyName": "DCAE.Config_x.1.xml", "matchingConditions": map[string]any{"key1": "value1", "n": 1.0}}
	if ok, r := c.Match(body); !ok {
		t.Fatalf("no match: %q", r)
	}
}

func TestAnchoredEqualsStartMatch(t *testing.T) {
	// Matching "from the start" equals: the leftmost match of the plain
	// expression begins at 0.
	patterns := []string{"DCAE.Config_.*", "a|DCAE", "Config", "(?i)dcae", "(x)?DCAE", `\QDCAE.\E`, "(?m)^DCAE", "$", "D*", "(?s).C"}
	names := []string{"DCAE.Config_a.1.xml", "xDCAE.Config", "Config_DCAE", "dcae", "", "a"}
	for _, p := range patterns {
		plain := regexp.MustCompile(p)
		c, err := CompileFilter(Filter{PolicyName: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			loc := plain.FindStringIndex(n)
			want := loc != nil && loc[0] == 0
			if got := c.re.MatchString(n); got != want {
				t.Errorf("%q on %q: anchored %v, leftmost-at-0 %v", p, n, got, want)
			}
		}
	}
}

// Filters with the same policyName share one compiled expression, however
// their other conditions differ (100,000 components of a few blueprints
// would otherwise keep 100,000 copies), and match as they did; once no
// filter uses a policyName, its entry goes.
func TestFiltersShareCompiledPolicyName(t *testing.T) {
	const name = "DCAE.Config_shared_test_.*"
	a, err := CompileFilter(Filter{PolicyName: name, ConfigAttributes: map[string]any{"instance": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := CompileFilter(Filter{PolicyName: name, ConfigName: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if a.NameRegexp() == nil || a.NameRegexp() != b.NameRegexp() {
		t.Errorf("two filters of policyName %q keep two compiled expressions", name)
	}
	if !a.MatchesName("DCAE.Config_shared_test_x.1.xml") || b.MatchesName("DCAE.Other.1.xml") {
		t.Error("a shared expression matches otherwise than the filter's own")
	}
	if other, _ := CompileFilter(Filter{PolicyName: "DCAE.Other_.*"}); other.NameRegexp() == a.NameRegexp() {
		t.Error("filters of different policyNames share an expression")
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	a, b = nil, nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		patterns.Lock()
		_, held := patterns.m[name]
		patterns.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("policyName %q is still held with no filter using it", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
