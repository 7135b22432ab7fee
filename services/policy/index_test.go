package policy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// bruteForce is the reference the Index must equal: Match on every filter.
func bruteForce(filters map[string]*CompiledFilter, b Body) []string {
	var out []string
	for k, f := range filters {
		if ok, _ := f.Match(b); ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

var (
	nameTokens    = []string{"DCAE", ".", "Config_", "a", "b", "ab", "_", "1", "x", "X", "\n", "é", "\xff", "+", "(", "k"}
	patternTokens = []string{
		"DCAE", `DCAE\.`, ".", "Config_", "a", "b", "_", "1", "x", ".*", ".+", "[ab]", "[^a]", "(a|b)", "(ab|a)",
		"(?i)x", "(?i:dcae)", "a+", "x{2}", "a{0,2}", `\.`, "^", "$", `\b`, "(?s).", "()", `\Q.+\E`, "é", `\n`,
		"(?m)^", "a?", "(DCAE)", `\pL`, "[[:alpha:]]", "k",
	}
	values = []any{"DCAE", "X", "v", "1", "", 0, 1, 1.0, json.Number("1.0"), json.Number("1e0"), 2.5, true, false, nil,
		map[string]any{"a": "b"}, map[string]any{"": []any{0, map[string]any{"x": nil}}}, []any{"v"}, []any{}}
	// attrKeys are the matchingConditions keys filters and bodies use; ""
	// is a key like any other.
	attrKeys = []string{"k", "m", "ONAPName", ""}
)

func randomName(r *rand.Rand) string {
	var sb strings.Builder
	for n := r.IntN(6); n >= 0; n-- {
		sb.WriteString(nameTokens[r.IntN(len(nameTokens))])
	}
	if r.IntN(3) > 0 {
		fmt.Fprintf(&sb, ".%d.xml", r.IntN(20))
	}
	return sb.String()
}

func randomFilter(r *rand.Rand, names []string) Filter {
	var f Filter
	switch r.IntN(10) {
	case 0: // no policyName
	case 3, 4: // a name from the corpus, cut short, with some runes made wildcards
		runes := []rune(names[r.IntN(len(names))])
		runes = runes[:r.IntN(len(runes)+1)]
		var sb strings.Builder
		for _, c := range runes {
			switch r.IntN(6) {
			case 0:
				sb.WriteString(".")
			case 1:
				sb.WriteString("(?s:.)")
			case 2:
				sb.WriteString("[^x]")
			default:
				sb.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		sb.WriteString([]string{"", "", ".*", "$", "x*"}[r.IntN(5)])
		f.PolicyName = sb.String()
	case 1, 2: // a literal name or policy_id from the corpus
		n := names[r.IntN(len(names))]
		if id, err := PolicyID(n); err == nil && r.IntN(2) == 0 {
			n = id
		}
		f.PolicyName = n
	default:
		var sb strings.Builder
		for n := r.IntN(5); n >= 0; n-- {
			sb.WriteString(patternTokens[r.IntN(len(patternTokens))])
		}
		f.PolicyName = sb.String()
	}
	pick := func(opts ...string) string { return opts[r.IntN(len(opts))] }
	f.OnapName = pick("", "", "DCAE", "X")
	f.ConfigName = pick("", "", "c1", "c2")
	if r.IntN(3) == 0 {
		f.ConfigAttributes = map[string]any{}
		for n := r.IntN(3); n >= 0; n-- {
			f.ConfigAttributes[attrKeys[r.IntN(len(attrKeys))]] = values[r.IntN(len(values))]
		}
	}
	f.Unique = r.IntN(2) == 0
	return f
}

func randomBody(r *rand.Rand, names []string) Body {
	b := Body{"policyName": names[r.IntN(len(names))], "policyVersion": "1"}
	switch r.IntN(8) {
	case 0: // no matchingConditions
	case 1:
		b["matchingConditions"] = "not an object"
	case 2:
		b["matchingConditions"] = map[string]string{"ONAPName": "DCAE", "ConfigName": "c1", "k": "v"}
	default:
		mc := map[string]any{}
		for _, k := range append([]string{"ConfigName"}, attrKeys...) {
			if r.IntN(3) > 0 {
				switch k {
				case "ONAPName":
					mc[k] = []any{"DCAE", "X", "", 5}[r.IntN(4)]
				case "ConfigName":
					mc[k] = []any{"c1", "c2", ""}[r.IntN(3)]
				default:
					mc[k] = values[r.IntN(len(values))]
				}
			}
		}
		b["matchingConditions"] = mc
	}
	if r.IntN(20) == 0 {
		delete(b, "policyName")
	}
	return b
}

func TestIndexEqualsBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7))
		names := make([]string, 60)
		for i := range names {
			names[i] = randomName(r)
		}
		names = append(names, ".1.xml", "DCAE.Config_a.1.xml", "DCAE.Config_a", "DCAE\nConfig_a.1.xml", "\nx.1.xml", "\n")
		ix := NewIndex()
		filters := map[string]*CompiledFilter{}
		for step := 0; step < 1000; step++ {
			key := fmt.Sprintf("comp%d/f%d", r.IntN(40), r.IntN(10))
			switch {
			case r.IntN(4) == 0:
				ix.Remove(key)
				delete(filters, key)
			default:
				c, err := CompileFilter(randomFilter(r, names))
				if err != nil {
					continue
				}
				ix.Add(key, c)
				filters[key] = c
			}
			if ix.Len() != len(filters) {
				t.Fatalf("seed %d step %d: Len = %d; want %d", seed, step, ix.Len(), len(filters))
			}
			if step%10 != 0 {
				continue
			}
			for q := 0; q < 10; q++ {
				b := randomBody(r, names)
				got, want := ix.Matches(b), bruteForce(filters, b)
				if !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
					var diff []string
					for _, k := range symmetricDiff(got, want) {
						diff = append(diff, fmt.Sprintf("%s %q (on %q)", k, filters[k].Filter().PolicyName, b.PolicyName()))
					}
					t.Fatalf("seed %d step %d: Matches differs from brute force on %v:\n%s", seed, step, b, strings.Join(diff, "\n"))
				}
			}
		}
		for k := range filters {
			ix.Remove(k)
		}
		if ix.Len() != 0 || len(ix.root.children) != 0 || len(ix.exact) != 0 || ix.root.size != 0 {
			t.Fatalf("seed %d: index not empty after removing every filter: len %d, children %d, exact %d",
				seed, ix.Len(), len(ix.root.children), len(ix.exact))
		}
	}
}

func symmetricDiff(a, b []string) []string {
	in := map[string]int{}
	for _, k := range a {
		in[k]++
	}
	for _, k := range b {
		in[k]--
	}
	var out []string
	for k, n := range in {
		if n != 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func TestIndexAddReplaceRemove(t *testing.T) {
	ix := NewIndex()
	body := hostCapacityBody()
	add := func(key string, f Filter) {
		c, err := CompileFilter(f)
		if err != nil {
			t.Fatal(err)
		}
		ix.Add(key, c)
	}
	add("c1/f1", Filter{PolicyName: "DCAE.Config_.*"})
	add("c2/f1", Filter{PolicyName: "DCAE.Config_host_capacity_policy_id_value"})
	add("c3/f1", Filter{PolicyName: "DCAE.Config_VM.*"})
	add("c4/f1", Filter{OnapName: "DCAE"})
	if got := ix.Matches(body); !reflect.DeepEqual(got, []string{"c1/f1", "c2/f1"}) {
		t.Fatalf("Matches = %v", got)
	}
	if ix.Len() != 4 {
		t.Fatalf("Len = %d", ix.Len())
	}
	add("c1/f1", Filter{PolicyName: "DCAE.Config_VM.*"}) // replace
	if got := ix.Matches(body); !reflect.DeepEqual(got, []string{"c2/f1"}) {
		t.Fatalf("after replace Matches = %v", got)
	}
	ix.Remove("c2/f1")
	ix.Remove("unknown")
	if got := ix.Matches(body); len(got) != 0 {
		t.Fatalf("after remove Matches = %v", got)
	}
	ix.Add("c3/f1", nil)
	if ix.Len() != 2 {
		t.Fatalf("Len = %d; want 2", ix.Len())
	}
}

func TestPrefixElems(t *testing.T) {
	tests := []struct {
		pattern string
		want    string // '?' any rune, '~' any rune but newline
		exact   bool
	}{
		{"DCAE.Config_.*", "DCAE~Config_", false},
		{`DCAE\.Config_VM`, "DCAE.Config_VM", true},
		{"DCAE.Config_VM", "DCAE~Config_VM", true},
		{"(?s)DCAE.x", "DCAE?x", true},
		{"^DCAE", "DCAE", true},
		{"DCAE$", "DCAE", false},
		{".*", "", true}, // matches every name
		{"(a|)", "", true},
		{"a*$", "", false},
		{"(a|b)c", "?c", false},
		{"ab+c", "ab", false},
		{"(?i)dcae_1", "????_1", false},
		{"x{3}y", "x", false},
		{"()", "", true},
	}
	for _, tt := range tests {
		c, err := CompileFilter(Filter{PolicyName: tt.pattern})
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		for _, e := range c.prefix {
			switch e {
			case elemAny:
				sb.WriteByte('?')
			case elemAnyNotNL:
				sb.WriteByte('~')
			default:
				sb.WriteRune(e)
			}
		}
		if sb.String() != tt.want || c.exact != tt.exact {
			t.Errorf("%q: prefix %q exact %v; want %q exact %v", tt.pattern, sb.String(), c.exact, tt.want, tt.exact)
		}
	}
}

// benchFilters builds n filters of the shapes components register: policy
// ids, per-service prefixes, alternations, case-insensitive prefixes,
// broad scope filters narrowed by configName, and a few catch-alls narrowed
// by configAttributes.
func benchFilters(b *testing.B, n int) (*Index, map[string]*CompiledFilter) {
	ix := NewIndex()
	all := make(map[string]*CompiledFilter, n)
	for i := 0; i < n; i++ {
		svc := i % 5000
		var f Filter
		switch i % 100 {
		case 0: // 1%: catch-all with an attribute
			f = Filter{PolicyName: ".*", ConfigAttributes: map[string]any{"tenant": fmt.Sprintf("t%d", i%97)}}
		case 1, 2, 3, 4: // 4%: scope-wide, by configName
			f = Filter{PolicyName: "DCAE.Config_.*", ConfigName: fmt.Sprintf("cfg_%d", i), OnapName: "DCAE"}
		case 5, 6, 7, 8, 9: // 5%: case-insensitive
			f = Filter{PolicyName: fmt.Sprintf("(?i)dcae.config_svc%d_.*", svc)}
		case 10, 11, 12, 13, 14, 15, 16, 17, 18, 19: // 10%: alternation
			f = Filter{PolicyName: fmt.Sprintf("DCAE.Config_svc%d_(memory|storage).*", svc), OnapName: "DCAE"}
		default:
			if i%2 == 0 { // 40%: policy_id
				f = Filter{PolicyName: fmt.Sprintf("DCAE.Config_svc%d_policy%d", svc, i%7)}
			} else { // 40%: per-service prefix with an attribute
				f = Filter{PolicyName: fmt.Sprintf("DCAE.Config_svc%d_.*", svc), ConfigAttributes: map[string]any{"key1": "value1"}}
			}
		}
		c, err := CompileFilter(f)
		if err != nil {
			b.Fatal(err)
		}
		key := fmt.Sprintf("component%d/filter%d", i/3, i%3)
		ix.Add(key, c)
		all[key] = c
	}
	return ix, all
}

func benchBody() Body {
	return Body{
		"policyName":         "DCAE.Config_svc1234_policy3.17.xml",
		"policyVersion":      "17",
		"policyConfigStatus": "CONFIG_RETRIEVED",
		"matchingConditions": map[string]any{"ONAPName": "DCAE", "ConfigName": "cfg_201", "key1": "value1", "tenant": "t5"},
		"config":             map[string]any{"min_memory": "2GB"},
	}
}

func BenchmarkIndexMatch100k(b *testing.B) {
	ix, all := benchFilters(b, 100_000)
	body := benchBody()
	got, want := ix.Matches(body), bruteForce(all, body)
	if !reflect.DeepEqual(got, want) || len(got) == 0 {
		b.Fatalf("index %d matches, brute force %d", len(got), len(want))
	}
	b.ReportMetric(float64(len(got)), "matches")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ix.Matches(body)
	}
}

func BenchmarkBruteForceMatch100k(b *testing.B) {
	_, all := benchFilters(b, 100_000)
	body := benchBody()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bruteForce(all, body)
	}
}

func BenchmarkLatest(b *testing.B) {
	// 1000 policy_ids with 10 versions each, as one broad /getConfig
	// response returns them.
	bodies := make([]Body, 0, 10_000)
	for v := 1; v <= 10; v++ {
		for id := 0; id < 1000; id++ {
			bodies = append(bodies, pdpBody(fmt.Sprintf("DCAE.Config_svc%d", id), fmt.Sprint(v),
				fmt.Sprintf(`{"version":%d,"min_memory":"%dGB","thresholds":[1,2,3],"nested":{"a":"b"}}`, v, v)))
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		latest, errored := Latest(bodies)
		if len(latest) != 1000 || len(errored) != 0 {
			b.Fatalf("latest %d errored %d", len(latest), len(errored))
		}
	}
}

func TestIndexConcurrentUse(t *testing.T) {
	ix := NewIndex()
	body := hostCapacityBody()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for _, k := range ix.Matches(body) {
					if !strings.HasPrefix(k, "match/") {
						t.Errorf("unexpected match %s", k)
						return
					}
				}
			}
		}()
	}
	yes, _ := CompileFilter(Filter{PolicyName: "DCAE.Config_host.*"})
	no, _ := CompileFilter(Filter{PolicyName: "DCAE.Config_VM.*"})
	for i := 0; i < 400; i++ {
		ix.Add(fmt.Sprintf("match/%d", i%50), yes)
		ix.Add(fmt.Sprintf("other/%d", i%50), no)
		if i%3 == 0 {
			ix.Remove(fmt.Sprintf("match/%d", (i+7)%50))
		}
	}
	close(done)
	wg.Wait()
	if got := len(ix.Matches(body)); got != ix.Len()-50 {
		t.Fatalf("%d matches; want %d", got, ix.Len()-50)
	}
}

// TestIndexAgreesWithMatchOnAttributeEdges runs Match and the Index over
// the same filters and bodies where configAttributes use the empty key,
// scalars that look alike and nested values.
func TestIndexAgreesWithMatchOnAttributeEdges(t *testing.T) {
	attrs := []map[string]any{
		{"": 0},
		{"": ""},
		{"": nil},
		{"": json.Number("0.0")},
		{"": 0, "k": "v"},
		{"k": "v", "": map[string]any{"a": []any{1, map[string]any{"": nil}}}},
		{"k": map[string]any{"": "x"}},
		{"k": []any{}},
		{"k": ""},
	}
	conditions := []any{
		nil, // no matchingConditions
		map[string]any{},
		map[string]any{"": 0},
		map[string]any{"": 0.0, "k": "v"},
		map[string]any{"": "0"},
		map[string]any{"": ""},
		map[string]any{"": nil},
		map[string]any{"": false},
		map[string]any{"k": "v", "": map[string]any{"a": []any{1, map[string]any{"": nil}}}},
		map[string]any{"k": "v", "": map[string]any{"a": []any{1, map[string]any{"": 0}}}},
		map[string]any{"k": map[string]any{"": "x"}},
		map[string]any{"k": []any{}},
		map[string]any{"k": ""},
	}
	ix := NewIndex()
	filters := map[string]*CompiledFilter{}
	for i, a := range attrs {
		c, err := CompileFilter(Filter{PolicyName: "DCAE.Config_.*", ConfigAttributes: a})
		if err != nil {
			t.Fatalf("filter %d %v: %v", i, a, err)
		}
		key := fmt.Sprintf("c/f%d", i)
		ix.Add(key, c)
		filters[key] = c
	}
	for _, mc := range conditions {
		b := Body{"policyName": "DCAE.Config_A.1.xml", "policyVersion": "1"}
		if mc != nil {
			b["matchingConditions"] = mc
		}
		got, want := ix.Matches(b), bruteForce(filters, b)
		if !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Errorf("matchingConditions %v: Index %v, Match %v", mc, got, want)
		}
	}
	// The case as registered: {"": 0} matches a body that has it.
	b := Body{"policyName": "DCAE.Config_A.1.xml", "matchingConditions": map[string]any{"": json.Number("0")}}
	if got := ix.Matches(b); !slices.Contains(got, "c/f0") {
		t.Errorf(`configAttributes {"": 0} on matchingConditions {"": 0}: Index gives %v, want c/f0 among them`, got)
	}
}
