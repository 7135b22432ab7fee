package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMain lets the test binary run as policyctl itself when
// POLICYCTL_AS_MAIN=1, for the scripts that call it by name.
func TestMain(m *testing.M) {
	if os.Getenv("POLICYCTL_AS_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

func TestCompletionCandidates(t *testing.T) {
	hermeticEnv(t)
	for _, tc := range []struct {
		words []string
		want  []string // all of these, in order
		not   []string // none of these
	}{
		{[]string{"top"}, []string{"topology"}, []string{"token"}},
		{[]string{""}, []string{"acm", "completion", "nmp", "topology", "version", "--version"}, []string{completeCommand}},
		{[]string{"topology", ""}, []string{"apply", "describe", "verify"}, nil},
		{[]string{"nmp", "st"}, []string{"status"}, []string{"list"}},
		{[]string{"nmp", "status", "--o"}, []string{"--org", "--output"}, []string{"--api"}},
		{[]string{"nmp", "status", "-"}, []string{"--api", "--json", "-o", "--org", "--token"}, nil},
		{[]string{"nmp", "list", "-o", ""}, []string{"json", "yaml", "table"}, nil},
		{[]string{"component", "status", "--output", "y"}, []string{"yaml"}, []string{"json"}},
		{[]string{"completion", ""}, nil, []string{"bash"}}, // an argument: the shell's own completion
	} {
		got := complete(context.Background(), tc.words)
		at := 0
		for _, w := range tc.want {
			i := slices.Index(got[at:], w)
			if i < 0 {
				t.Errorf("complete %q = %q; want %q (in order %q)", tc.words, got, w, tc.want)
				break
			}
			at += i + 1
		}
		for _, n := range tc.not {
			if slices.Contains(got, n) {
				t.Errorf("complete %q = %q; want no %q", tc.words, got, n)
			}
		}
	}
	// Through the command line, as the scripts call it.
	r := policyctl(t, completeCommand, "dc", "")
	if r.code != 0 || r.out != "apply\ndelete\nget\nlist\n" {
		t.Errorf("policyctl %s dc '': exit %d, stdout %q", completeCommand, r.code, r.out)
	}
}

func TestCompletionScripts(t *testing.T) {
	for shell, check := range map[string][]string{"bash": {"bash", "-n"}, "zsh": {"zsh", "-n"}, "fish": {"fish", "--no-execute"}} {
		r := policyctl(t, "completion", shell)
		if r.code != 0 || !strings.Contains(r.out, "policyctl "+completeCommand) {
			t.Errorf("completion %s: exit %d, stdout %q, stderr %q", shell, r.code, r.out, r.errOut)
			continue
		}
		if _, err := exec.LookPath(check[0]); err != nil {
			t.Logf("no %s here to check the script's syntax", check[0])
			continue
		}
		f := filepath.Join(t.TempDir(), "policyctl."+shell)
		if err := os.WriteFile(f, []byte(r.out), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(check[0], append(check[1:], f)...).CombinedOutput(); err != nil {
			t.Errorf("the %s script is not valid %s: %v\n%s", shell, shell, err, out)
		}
	}
	for _, args := range [][]string{{"completion", "powershell"}, {"completion"}} {
		r := policyctl(t, args...)
		if r.code != exitUsage || !strings.Contains(r.errOut, "bash, zsh") {
			t.Errorf("policyctl %s: exit %d, stderr %q; want exit 2 naming the shells", strings.Join(args, " "), r.code, r.errOut)
		}
	}
}

// TestBashCompletionRuns sources the bash script with this test binary as
// policyctl and completes a command line.
func TestBashCompletionRuns(t *testing.T) {
	hermeticEnv(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash here")
	}
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\nPOLICYCTL_AS_MAIN=1 exec " + self + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "policyctl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := completionScripts["bash"] + `COMP_WORDS=(policyctl topology "") COMP_CWORD=2; _policyctl; printf '%s\n' "${COMPREPLY[@]}"` + "\n"
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "apply\ndescribe\nmembers\nverify\n" {
		t.Errorf("bash completion of 'policyctl topology ': %v %q; want apply, describe, members, verify", err, out)
	}
}

func TestVersionFlag(t *testing.T) {
	for _, flag := range []string{"--version", "-version"} {
		r := policyctl(t, flag)
		if r.code != 0 || !strings.HasPrefix(r.out, "policyctl ") || r.out != policyctl(t, "version").out {
			t.Errorf("policyctl %s: exit %d, stdout %q; want what policyctl version prints", flag, r.code, r.out)
		}
	}
	old := version
	version = "v9.8.7"
	defer func() { version = old }()
	if r := policyctl(t, "--version"); !strings.HasPrefix(r.out, "policyctl v9.8.7") {
		t.Errorf("--version with main.version set: %q", r.out)
	}
}

// TestHelpHasNoStrayBackticks reads every command's help: the flag package
// takes a backquoted word of a flag's usage as the name of its value, and
// a summary is read on a terminal, not rendered as Markdown.
func TestHelpHasNoStrayBackticks(t *testing.T) {
	hermeticEnv(t)
	if r := policyctl(t, "help"); strings.Contains(r.out, "`") {
		t.Errorf("policyctl help has a backtick:\n%s", r.out)
	}
	for _, c := range commands {
		r := policyctl(t, append([]string{"help"}, strings.Fields(c.name)...)...)
		for _, line := range strings.Split(r.out+r.errOut, "\n") {
			if strings.Contains(line, "`") {
				t.Errorf("policyctl help %s: a backtick in %q", c.name, line)
			}
			// "  -name type": a flag's value is named by one word; more
			// are a backquoted phrase of its usage taken as the name.
			if rest, ok := strings.CutPrefix(line, "  -"); ok {
				head, _, _ := strings.Cut(rest, "\t")
				if f := strings.Fields(head); len(f) > 2 {
					t.Errorf("policyctl help %s: flag -%s shows its value as %q: a backquoted phrase in its usage", c.name, f[0], strings.Join(f[1:], " "))
				}
			}
		}
	}
}
