package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build information is shown.
var version = ""

const versionSummary = "print the version of policyctl"

func init() {
	register(command{name: "version", summary: versionSummary, run: runVersion})
}

func runVersion(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "version", versionSummary, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("version takes no arguments, got %q", fs.Args())
	}
	fmt.Fprintln(stdout(ctx), versionString())
	return nil
}

// versionString is "policyctl <version> (<revision>, <go version>)" with
// what the build recorded.
func versionString() string {
	v, rev, goVersion, modified := version, "", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
				if len(rev) > 12 {
					rev = rev[:12]
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if rev != "" && modified {
		rev += "+dirty"
	}
	out := "policyctl " + v
	switch {
	case rev != "" && goVersion != "":
		out += fmt.Sprintf(" (%s, %s)", rev, goVersion)
	case goVersion != "":
		out += fmt.Sprintf(" (%s)", goVersion)
	}
	return out
}
