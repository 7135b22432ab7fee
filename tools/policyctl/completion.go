package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

const completionSummary = "print the shell completion script for bash, zsh or fish"

// completeCommand is the hidden command the completion scripts call with
// the words typed so far (the last one the word being completed); it
// prints one candidate a line, nothing to let the shell complete files.
const completeCommand = "__complete"

func init() {
	register(command{name: "completion", summary: completionSummary, run: runCompletion})
}

func runCompletion(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "completion", completionSummary+
		"\n\nbash:  source <(policyctl completion bash)   (or save it in /etc/bash_completion.d/policyctl)"+
		"\nzsh:   source <(policyctl completion zsh)    (or save it as _policyctl in a directory of $fpath)"+
		"\nfish:  policyctl completion fish > ~/.config/fish/completions/policyctl.fish", "bash|zsh|fish")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("completion takes the shell: bash, zsh or fish")
	}
	script, ok := completionScripts[fs.Arg(0)]
	if !ok {
		return usageErrorf("no completion for shell %q; policyctl completes bash, zsh and fish", fs.Arg(0))
	}
	_, err := io.WriteString(stdout(ctx), script)
	return err
}

var completionScripts = map[string]string{
	"bash": `# bash completion of policyctl: source <(policyctl completion bash)
_policyctl() {
	local IFS=$'\n'
	COMPREPLY=($(policyctl ` + completeCommand + ` "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _policyctl policyctl
`,
	"zsh": `#compdef policyctl
# zsh completion of policyctl: source <(policyctl completion zsh)
_policyctl() {
	local -a candidates
	candidates=("${(@f)$(policyctl ` + completeCommand + ` "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	if [[ -n "${candidates[1]}" ]]; then
		compadd -- "${candidates[@]}"
	else
		_files
	fi
}
compdef _policyctl policyctl
`,
	"fish": `# fish completion of policyctl: policyctl completion fish > ~/.config/fish/completions/policyctl.fish
function __policyctl_complete
	set -l words (commandline -opc)
	set -e words[1]
	policyctl ` + completeCommand + ` $words (commandline -ct) 2>/dev/null
end
complete -c policyctl -a '(__policyctl_complete)'
`,
}

// complete answers the candidates for the last of words (the word being
// completed; the others are typed already): command words, a command's
// flags, the values of -o. Nothing means files.
func complete(ctx context.Context, words []string) []string {
	if len(words) == 0 {
		words = []string{""}
	}
	typed, cur := words[:len(words)-1], words[len(words)-1]
	var out []string
	add := func(s string) {
		if strings.HasPrefix(s, cur) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	c, rest, ok := lookup(typed)
	if !ok {
		if cur == "" || !strings.HasPrefix(cur, "-") {
			for _, c := range sortedCommands() {
				w := strings.Fields(c.name)
				if len(w) > len(typed) && slices.Equal(w[:len(typed)], typed) {
					add(w[len(typed)])
				}
			}
		}
		if len(typed) == 0 {
			add("--help")
			add("--version")
		}
		return out
	}
	flags := commandFlags(ctx, c)
	if n := len(rest); n > 0 && strings.HasPrefix(rest[n-1], "-") && !strings.Contains(rest[n-1], "=") {
		name := strings.TrimLeft(rest[n-1], "-")
		if takesValue, known := flags[name]; known && takesValue {
			if name == "o" || name == "output" {
				for _, f := range []string{outputJSON, outputYAML, outputTable} {
					add(f)
				}
			}
			return out
		}
	}
	if strings.HasPrefix(cur, "-") {
		names := make([]string, 0, len(flags))
		for name := range flags {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if len(name) == 1 {
				add("-" + name)
			} else {
				add("--" + name)
			}
		}
	}
	return out
}

// commandFlags are the flags of a command by name, each with whether it
// takes a value, read from the usage the command prints for -h.
func commandFlags(ctx context.Context, c command) map[string]bool {
	var buf bytes.Buffer
	_ = c.run(withStreams(ctx, io.Discard, &buf), []string{"-h"})
	flags := map[string]bool{"h": false, "help": false}
	for _, line := range strings.Split(buf.String(), "\n") {
		rest, ok := strings.CutPrefix(line, "  -")
		if !ok {
			continue
		}
		head, _, _ := strings.Cut(rest, "\t")
		fields := strings.Fields(head)
		if len(fields) == 0 {
			continue
		}
		flags[fields[0]] = len(fields) > 1
	}
	return flags
}

func runComplete(ctx context.Context, words []string) int {
	for _, c := range complete(ctx, words) {
		fmt.Fprintln(stdout(ctx), c)
	}
	return exitOK
}
