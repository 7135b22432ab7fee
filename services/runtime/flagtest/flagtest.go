// Package flagtest checks that a binary honours every flag it accepts:
// each flag, set to a value other than its default, must change what the
// binary runs with, or be refused with a reason. A flag accepted and
// ignored (participant-consul's --session-timeout and --instance-id once
// were, the North API's too) fails the check. Every binary's tests call
// Check with its own parse function.
package flagtest

import (
	"flag"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// Binary is one command line under check.
type Binary struct {
	// Name is the binary, for the failure messages.
	Name string
	// Flags returns the binary's flag set, unparsed: the names and kinds
	// of the flags to check.
	Flags func() *flag.FlagSet
	// Parse parses args as the binary does, with every check it makes
	// before it starts, and returns what it then runs with: everything it
	// reads of its flags (compared with reflect.DeepEqual, so no func and
	// no pointer to a fresh value), or the error it stops with.
	Parse func(args []string) (any, error)
	// Values are values for flags whose kind says none (a flag.Func, a
	// flag.Var) or whose probe value the binary refuses. Shared holds
	// those of the runtime's shared flags.
	Values map[string]string
	// With are flags given along with one, which it needs (e.g. a SASL
	// user and password with --sasl-mechanism); the values compared are
	// then those parsed with and without the flag itself, or, when the
	// binary refuses those alone (--tls-key without --tls-cert), with the
	// flag's value and that value with "2" appended.
	With map[string][]string
	// Refused are flags the binary refuses any value of, with a fragment
	// of the error it gives: refusing is not ignoring.
	Refused map[string]string
	// Skip are flags left out, with the reason.
	Skip map[string]string
}

// Shared are values of the runtime's shared flags (runtime.Options) that
// pass its checks.
var Shared = map[string]string{
	"brokers":        "127.0.0.1:1,127.0.0.1:2",
	"log-format":     "text",
	"log-level":      "debug",
	"memory-limit":   "300MiB",
	"sasl-mechanism": "PLAIN",
	"consul-addr":    "127.0.0.1:1",
	"otlp-endpoint":  "127.0.0.1:4317",
}

// SharedWith are the flags the runtime's shared flags need along.
var SharedWith = map[string][]string{
	"sasl-mechanism": {"--sasl-user=u", "--sasl-password=p"},
}

// Check sets each flag of b in turn and fails the test for each one that
// changes nothing b runs with.
func Check(t *testing.T, b Binary) {
	t.Helper()
	base, err := b.Parse(nil)
	if err != nil {
		t.Fatalf("%s with no flags: %v", b.Name, err)
	}
	if again, _ := b.Parse(nil); !reflect.DeepEqual(base, again) {
		t.Fatalf("%s: two parses of no flags differ, so no flag could be seen ignored: Parse must return values (no func, no pointer to a fresh value)", b.Name)
	}
	fs := b.Flags()
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	if len(flags) == 0 {
		t.Fatalf("%s registers no flag", b.Name)
	}
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	for _, f := range flags {
		name := f.Name
		if why, ok := b.Skip[name]; ok {
			t.Logf("%s --%s not checked: %s", b.Name, name, why)
			continue
		}
		v, ok := b.Values[name]
		if !ok {
			v, ok = Shared[name]
		}
		if !ok {
			if v, ok = probe(f); !ok {
				t.Errorf("%s --%s is a %T: give a value for it in Binary.Values", b.Name, name, f.Value)
				continue
			}
		}
		with, ok := b.With[name]
		if !ok {
			with = SharedWith[name]
		}
		want := base
		if len(with) > 0 {
			if want, err = b.Parse(with); err != nil {
				// Refused alone (--tls-key without --tls-cert): the
				// flag is compared between two of its values.
				alt := append([]string{"--" + name + "=" + v + "2"}, with...)
				if want, err = b.Parse(alt); err != nil {
					t.Errorf("%s %v: %v", b.Name, alt, err)
					continue
				}
			}
		}
		args := append([]string{"--" + name + "=" + v}, with...)
		got, err := b.Parse(args)
		if why, refused := b.Refused[name]; refused {
			if err == nil || !strings.Contains(err.Error(), why) {
				t.Errorf("%s %v: %v, want it refused (%s)", b.Name, args, err, why)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %v: %v (give a value it takes in Binary.Values)", b.Name, args, err)
			continue
		}
		if reflect.DeepEqual(want, got) {
			t.Errorf("%s %v changed nothing %s runs with: the flag is accepted and ignored", b.Name, args, b.Name)
		}
	}
	for _, m := range []map[string]string{b.Values, b.Refused, b.Skip} {
		for name := range m {
			if fs.Lookup(name) == nil {
				t.Errorf("%s has no flag --%s: drop it from the check", b.Name, name)
			}
		}
	}
}

// probe is a value of f other than its default, from its kind.
func probe(f *flag.Flag) (string, bool) {
	if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		if f.DefValue == "true" {
			return "false", true
		}
		return "true", true
	}
	pick := func(a, b string) string {
		if f.DefValue == a {
			return b
		}
		return a
	}
	switch reflect.TypeOf(f.Value).String() {
	case "*flag.durationValue":
		return pick("17s", "19s"), true
	case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
		return pick("7", "9"), true
	case "*flag.float64Value":
		return pick("0.25", "0.5"), true
	case "*flag.stringValue":
		return "probe-" + f.Name, true
	}
	return "", false
}
