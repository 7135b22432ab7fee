package constraint

import (
	"errors"
	"strings"
	"testing"
)

func props(t *testing.T, js string) Properties {
	t.Helper()
	p, err := ParseProperties([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEval(t *testing.T) {
	ps := props(t, `[
		{"name":"arch","value":"amd64"},
		{"name":"cores","value":4},
		{"name":"ram","value":2.5,"type":"float"},
		{"name":"gpu","value":false},
		{"name":"zones","value":"north, east","type":"list of strings"},
		{"name":"agentVersion","value":"1.4.2","type":"version"},
		{"name":"site name","value":"lab 1"}
	]`)
	cases := []struct {
		expr string
		want bool
	}{
		{`arch == amd64`, true},
		{`arch == "amd64"`, true},
		{`arch == 'arm64'`, false},
		{`arch != arm64`, true},
		{`arch == arm64,amd64`, true},
		{`arch in "arm64,amd64"`, true},
		{`arch in "arm64,riscv"`, false},
		{`cores == 4`, true},
		{`cores > 3 AND cores < 5`, true},
		{`cores >= 4 && cores <= 4`, true},
		{`cores > 4`, false},
		{`ram < 3`, true},
		{`ram >= 2.5`, true},
		{`gpu == false`, true},
		{`gpu == true`, false},
		{`gpu == "false"`, false},
		{`zones == east`, true},
		{`zones in "south,north"`, true},
		{`zones == south`, false},
		{`agentVersion == 1.4.2`, true},
		{`agentVersion == [1.0.0,2.0.0)`, true},
		{`agentVersion in [1.4.2,INFINITY)`, true},
		{`agentVersion in (1.4.2,INFINITY)`, false},
		{`agentVersion == [1.0.0,1.4.2)`, false},
		{`agentVersion == [1.0.0,1.4.2]`, true},
		{`agentVersion > 1.4.1`, true},
		{`agentVersion < 1.10`, true},
		{`missing == x`, false},
		{`missing != x`, false},
		{`arch == arm64 OR cores == 4`, true},
		{`arch == arm64 || cores == 5`, false},
		{`arch == arm64 OR cores == 4 AND gpu == true`, false},
		{`(arch == arm64 OR cores == 4) AND gpu == false`, true},
		{`((arch == amd64))`, true},
		{`"site name" == "lab 1"`, true},
	}
	for _, c := range cases {
		e, err := Parse(c.expr)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.expr, err)
			continue
		}
		if got := e.Eval(ps); got != c.want {
			t.Errorf("%q (parsed %s) = %v, want %v", c.expr, e, got, c.want)
		}
	}
}

func TestParseErrorPosition(t *testing.T) {
	cases := []struct {
		expr string
		pos  int
		msg  string
	}{
		{``, 0, "empty"},
		{`arch`, 4, "want an operator"},
		{`arch = amd64`, 5, "use == or !="},
		{`arch == `, 8, "want a value"},
		{`arch == amd64 AND`, 17, "ends where"},
		{`arch == amd64 & cores == 4`, 14, "use &&"},
		{`(arch == amd64`, 0, "never closed"},
		{`arch == amd64)`, 13, "unexpected"},
		{`arch == "amd64`, 8, "unterminated"},
		{`v == [1.0.0,x)`, 5, "version range"},
		{`v < [1.0.0,2.0.0)`, 4, "needs == or in"},
		{`cores > many`, 8, "number or a version"},
		{`arch == amd64 cores == 4`, 14, "join expressions"},
		{`arch == é`, 8, "unexpected character"},
		{`== 4`, 0, "property name"},
	}
	for _, c := range cases {
		_, err := Parse(c.expr)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q) = %v, want a ParseError", c.expr, err)
			continue
		}
		if pe.Pos != c.pos || !strings.Contains(pe.Msg, c.msg) {
			t.Errorf("Parse(%q): position %d %q, want position %d with %q", c.expr, pe.Pos, pe.Msg, c.pos, c.msg)
		}
	}
}

func TestParseListNamesTheIndex(t *testing.T) {
	_, err := ParseList([]string{"a == 1", "", "b =="})
	if err == nil || !strings.Contains(err.Error(), "constraints[2]") {
		t.Fatalf("got %v", err)
	}
	l, err := ParseList(nil)
	if err != nil || !l.Eval(nil) {
		t.Fatal("the empty list must hold")
	}
}

func TestDeepNestingRefused(t *testing.T) {
	e := strings.Repeat("(", 100) + "a == 1" + strings.Repeat(")", 100)
	if _, err := Parse(e); err == nil || !strings.Contains(err.Error(), "nest deeper") {
		t.Fatalf("got %v", err)
	}
}

func TestProperties(t *testing.T) {
	bad := []string{
		`{}`,
		`[{"value":1}]`,
		`[{"name":"a","value":1},{"name":"a","value":2}]`,
		`[{"name":"a","value":"x","type":"int"}]`,
		`[{"name":"a","value":1.5,"type":"int"}]`,
		`[{"name":"a","value":"1.x","type":"version"}]`,
		`[{"name":"a","value":"x","type":"colour"}]`,
		`[{"name":"a","value":{"b":1}}]`,
		`[{"name":"a"}]`,
	}
	for _, b := range bad {
		if _, err := ParseProperties([]byte(b)); err == nil {
			t.Errorf("ParseProperties(%s) accepted", b)
		}
	}
}

func TestVersionRange(t *testing.T) {
	for _, s := range []string{"[1.0.0,2.0.0)", "(1,INFINITY]", "1.2.3"} {
		if _, err := ParseRange(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"[2.0.0,1.0.0)", "[1.0.0]", "[1.0.0,2.0.0", "v1", "1.2.3.4"} {
		if _, err := ParseRange(s); err == nil {
			t.Errorf("%s accepted", s)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`a == 1`, `(a == "x" OR b in "1,2") && v == [1.0.0,2.0.0)`, `a <= 1.2.3`, `"a b" != 'c'`, `((`, `a == [`} {
		f.Add(s)
	}
	ps := Properties{"a": {Name: "a", Value: "1"}, "v": {Name: "v", Value: "1.5.0", Type: TypeVersion}, "n": {Name: "n", Value: 2.0}}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Pos < 0 || pe.Pos > len(s) {
				t.Fatalf("Parse(%q): error %v without a position inside it", s, err)
			}
			return
		}
		e.Eval(ps)
		// What it prints parses to the same meaning.
		e2, err := Parse(e.String())
		if err != nil {
			t.Fatalf("Parse(%q) printed %q, which does not parse: %v", s, e.String(), err)
		}
		if e2.String() != e.String() {
			t.Fatalf("%q printed %q, reparsed %q", s, e.String(), e2.String())
		}
	})
}
