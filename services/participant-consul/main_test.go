package main

import (
	"flag"
	"reflect"
	"strings"
	"testing"
)

// Every flag participant-consul accepts changes its settings: a flag
// accepted and ignored fails this test (--session-timeout and
// --instance-id once were).
func TestEveryFlagIsHonoured(t *testing.T) {
	base, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Values that differ from every default and pass the checks.
	special := map[string]string{"log-format": "text", "log-level": "debug", "memory-limit": "300MiB",
		"brokers": "127.0.0.1:1,127.0.0.1:2", "consul-addr": "127.0.0.1:1", "sasl-mechanism": "PLAIN"}
	// Flags refused rather than ignored, with the reason they give.
	refused := map[string]string{"otlp-endpoint": "exports no traces"}
	// --trace-sample-ratio only matters with --otlp-endpoint, refused here.
	skip := map[string]bool{"trace-sample-ratio": true}

	names := flagNames(t)
	if len(names) < 15 {
		t.Fatalf("only %d flags found: %v", len(names), names)
	}
	for _, name := range names {
		if skip[name] {
			continue
		}
		v, ok := special[name]
		if !ok {
			v = valueFor(t, name)
		}
		args := []string{"--" + name + "=" + v}
		if name == "sasl-mechanism" {
			args = append(args, "--sasl-user=u", "--sasl-password=p")
		}
		got, err := parse(args)
		if why, isRefused := refused[name]; isRefused {
			if err == nil || !strings.Contains(err.Error(), why) {
				t.Errorf("--%s=%s: %v, want it refused (%s)", name, v, err, why)
			}
			continue
		}
		if err != nil {
			t.Errorf("--%s=%s: %v", name, v, err)
			continue
		}
		if reflect.DeepEqual(base, got) {
			t.Errorf("--%s=%s changed nothing participant-consul runs with: accepted and ignored", name, v)
		}
	}
}

// flagNames are the flags parse registers.
func flagNames(t *testing.T) []string {
	t.Helper()
	var names []string
	registered = func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	}
	defer func() { registered = nil }()
	if _, err := parse(nil); err != nil {
		t.Fatal(err)
	}
	return names
}

// valueFor is a value for a flag that differs from its default.
func valueFor(t *testing.T, name string) string {
	t.Helper()
	var kind string
	registered = func(fs *flag.FlagSet) {
		f := fs.Lookup(name)
		switch f.Value.(type) {
		case interface{ IsBoolFlag() bool }:
			kind = "bool"
		default:
			kind = reflect.TypeOf(f.Value).String()
		}
		if kind == "bool" && f.DefValue == "true" {
			kind = "bool-true"
		}
	}
	defer func() { registered = nil }()
	if _, err := parse(nil); err != nil {
		t.Fatal(err)
	}
	switch {
	case kind == "bool":
		return "true"
	case kind == "bool-true":
		return "false"
	case strings.Contains(kind, "duration"):
		return "17s"
	case strings.Contains(kind, "int"):
		return "7"
	case strings.Contains(kind, "float"):
		return "0.25"
	}
	return "probe-" + name
}
