package main

import (
	"strings"
	"testing"
)

func TestHelpListsEveryCommand(t *testing.T) {
	r := policyctl(t, "help")
	if r.code != 0 {
		t.Fatalf("help: exit %d, stderr %q", r.code, r.errOut)
	}
	for _, c := range commands {
		if !strings.Contains(r.out, c.name+"   ") || !strings.Contains(r.out, c.summary) {
			t.Errorf("help does not list %q with its summary:\n%s", c.name, r.out)
		}
	}
	for _, name := range []string{"topology apply", "topology verify", "topology describe", "version", "help"} {
		if !strings.Contains(r.out, "  "+name+" ") {
			t.Errorf("help does not list %q:\n%s", name, r.out)
		}
	}

	if r := policyctl(t); r.code != 2 || !strings.Contains(r.errOut, "topology apply") {
		t.Errorf("no arguments: exit %d, stderr %q; want exit 2 and the command list", r.code, r.errOut)
	}
	if r := policyctl(t, "--help"); r.code != 0 || !strings.Contains(r.out, "topology verify") {
		t.Errorf("--help: exit %d, stdout %q", r.code, r.out)
	}
}

func TestHelpOfOneCommandShowsItsFlags(t *testing.T) {
	hermeticEnv(t)
	r := policyctl(t, "help", "topology", "apply")
	if r.code != 0 {
		t.Fatalf("help topology apply: exit %d, stderr %q", r.code, r.errOut)
	}
	for _, want := range []string{"Usage: policyctl topology apply", "-brokers", "-topic-prefix", "-partitions", "-replication-factor", "-timeout"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("help topology apply lacks %q:\n%s", want, r.out)
		}
	}
	r = policyctl(t, "topology", "describe", "-h")
	if r.code != 0 || !strings.Contains(r.errOut, "-topic-prefix") || strings.Contains(r.errOut, "-brokers") {
		t.Errorf("topology describe -h: exit %d, stderr %q; want its own flags and no broker flags", r.code, r.errOut)
	}
	r = policyctl(t, "help", "topology")
	if r.code != 0 || !strings.Contains(r.out, "topology verify") || strings.Contains(r.out, "version") {
		t.Errorf("help topology: exit %d, stdout %q; want the topology commands only", r.code, r.out)
	}
	// A group's own --help lists its commands, as help GROUP does, and is
	// not an unknown command.
	for _, h := range []string{"--help", "-h"} {
		r = policyctl(t, "app-policy", h)
		if r.code != 0 || !strings.Contains(r.out, "app-policy report") || strings.Contains(r.out, "topology verify") || strings.Contains(r.errOut, "unknown command") {
			t.Errorf("app-policy %s: exit %d, stdout %q, stderr %q; want the app-policy commands", h, r.code, r.out, r.errOut)
		}
	}
}

func TestUnknownCommandsSayWhatToType(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"topolgy", "apply"}, []string{`unknown command "topolgy apply"`, `did you mean "topology apply"?`, "policyctl help"}},
		{[]string{"topolgy"}, []string{`did you mean "topology"?`}},
		{[]string{"topology", "aply"}, []string{`did you mean "topology apply"?`, "topology verify"}},
		{[]string{"topology"}, []string{"needs a subcommand", "topology apply", "topology describe", "topology verify"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`, "Run 'policyctl help'"}},
		{[]string{"vresion"}, []string{`did you mean "version"?`}},
		{[]string{"--brokers", "x", "topology", "verify"}, []string{"flags go after the command"}},
	} {
		r := policyctl(t, tc.args...)
		if r.code != 2 {
			t.Errorf("policyctl %s: exit %d, want 2", strings.Join(tc.args, " "), r.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.errOut, w) {
				t.Errorf("policyctl %s: stderr %q lacks %q", strings.Join(tc.args, " "), r.errOut, w)
			}
		}
		if r.out != "" {
			t.Errorf("policyctl %s wrote to stdout: %q", strings.Join(tc.args, " "), r.out)
		}
	}
}

func TestVersion(t *testing.T) {
	r := policyctl(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.out, "policyctl ") {
		t.Errorf("version: exit %d, stdout %q", r.code, r.out)
	}
	if r := policyctl(t, "version", "extra"); r.code != 2 {
		t.Errorf("version extra: exit %d, want 2", r.code)
	}
}

func TestRegisterRefusesClashingNames(t *testing.T) {
	saved := commands
	t.Cleanup(func() { commands = saved })
	for _, name := range []string{"topology", "topology apply", "topology apply now", "version"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("register(%q) did not refuse a name that clashes", name)
				}
			}()
			register(command{name: name, summary: "x", run: runVersion})
		}()
	}
	register(command{name: "topology explain", summary: "x", run: runVersion})
	if _, _, ok := lookup([]string{"topology", "explain"}); !ok {
		t.Error("a new command next to the topology ones is not found")
	}
}
