// Command policyctl is the operator CLI of policyflow: it sets up and checks
// the Kafka topology and operates on the running pipeline. Run
// `policyctl help` for its commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
)

// command is one thing policyctl does. Each command group registers its
// commands from an init function in its own file (topology.go registers
// "topology apply", "topology verify" and "topology describe").
type command struct {
	// name is the words typed after policyctl, e.g. "topology apply".
	name string
	// summary is one line for `policyctl help`.
	summary string
	// run does the work with the arguments that follow the name. It
	// returns a usage error (exit 2) for bad arguments, an exitError to
	// choose another status, or any other error for a failure (exit 1).
	run func(ctx context.Context, args []string) error
}

// commands is the registry, filled by register.
var commands []command

// register adds a command. A name registered twice, or one that is the
// start of another (so that it would swallow the other's first argument),
// is a programming error found at start-up.
func register(c command) {
	words := strings.Fields(c.name)
	if len(words) == 0 || c.run == nil || c.summary == "" {
		panic(fmt.Sprintf("policyctl: command %q needs a name, a summary and a run function", c.name))
	}
	c.name = strings.Join(words, " ")
	for _, other := range commands {
		ow := strings.Fields(other.name)
		n := min(len(ow), len(words))
		if slices.Equal(ow[:n], words[:n]) {
			panic(fmt.Sprintf("policyctl: command %q clashes with command %q", c.name, other.name))
		}
	}
	commands = append(commands, c)
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed, or found what it checks for wrong
	exitUsage   = 2 // the command line was wrong
)

// exitError makes a command end with a chosen status. Its error, when not
// nil, is printed on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf reports a wrong command line; policyctl exits 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// streams are where a command writes; tests put buffers in the context.
type streams struct{ out, err io.Writer }

type streamsKey struct{}

func withStreams(ctx context.Context, out, errOut io.Writer) context.Context {
	return context.WithValue(ctx, streamsKey{}, streams{out: out, err: errOut})
}

// stdout is where a command writes its results.
func stdout(ctx context.Context) io.Writer {
	if s, ok := ctx.Value(streamsKey{}).(streams); ok {
		return s.out
	}
	return os.Stdout
}

// stderr is where a command writes usage and errors.
func stderr(ctx context.Context) io.Writer {
	if s, ok := ctx.Value(streamsKey{}).(streams); ok {
		return s.err
	}
	return os.Stderr
}

// newFlagSet returns a flag set for the named command that prints its
// usage on the command's stderr: usage line, summary, then the flags.
func newFlagSet(ctx context.Context, name, summary, argsUsage string) *flag.FlagSet {
	fs := flag.NewFlagSet("policyctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr(ctx))
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: policyctl %s [flags] %s\n\n%s\n", name, argsUsage, summary)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(w, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// errHelp ends a command that printed its help on request; policyctl exits 0.
var errHelp = &exitError{code: exitOK}

// parseFlags parses args into fs. A bad flag has already been reported by
// the flag package and becomes a silent usage error; -h becomes errHelp.
// Flags may come before, between or after the positional arguments
// (policyctl nmp status web --org acme); after "--" everything is an
// argument, and "-" alone is an argument (standard input).
func parseFlags(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return errHelp
			}
			return &exitError{code: exitUsage}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	// Leave the arguments in fs.Args(), flags parsed already.
	if err := fs.Parse(append([]string{"--"}, positional...)); err != nil {
		return &exitError{code: exitUsage}
	}
	return nil
}

func init() {
	register(command{
		name:    "help",
		summary: "list the commands, or show the flags of one: policyctl help <command>",
		run:     runHelp,
	})
}

func runHelp(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		printCommands(stdout(ctx), "")
		return nil
	}
	c, _, ok := lookup(args)
	if !ok {
		if g := group(args); g != "" && g == strings.Join(args, " ") {
			printCommands(stdout(ctx), g)
			return nil
		}
		return unknown(ctx, args)
	}
	// The command prints its usage on stderr; asked for, it is the output.
	return c.run(withStreams(ctx, stdout(ctx), stdout(ctx)), []string{"-h"})
}

// printCommands lists the registered commands whose name starts with
// prefix, with their summaries, aligned.
func printCommands(w io.Writer, prefix string) {
	if prefix == "" {
		fmt.Fprintln(w, "policyctl operates a policyflow deployment.")
		fmt.Fprintln(w, "\nUsage: policyctl <command> [flags] [arguments]\n\nCommands:")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	for _, c := range sortedCommands() {
		if prefix == "" || strings.HasPrefix(c.name, prefix+" ") {
			fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
		}
	}
	_ = tw.Flush()
	if prefix == "" {
		fmt.Fprintln(w, "\nRun 'policyctl <command> -h' for the flags of a command; flags may come before or after its arguments.")
		fmt.Fprintln(w, "Read commands print -o json, yaml or table; 'policyctl --version' prints the version; 'policyctl completion bash|zsh|fish' the shell completion.")
		fmt.Fprintln(w, "Flags fall back to PF_* environment variables, e.g. PF_BROKERS, PF_TOPIC_PREFIX.")
	}
}

func sortedCommands() []command {
	cs := slices.Clone(commands)
	slices.SortFunc(cs, func(a, b command) int { return strings.Compare(a.name, b.name) })
	return cs
}

// lookup finds the command whose name is the leading words of args and
// returns it with the remaining arguments.
func lookup(args []string) (command, []string, bool) {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(words) <= len(args) && slices.Equal(words, args[:len(words)]) {
			return c, args[len(words):], true
		}
	}
	return command{}, nil, false
}

// group returns the longest run of leading words of args that starts
// command names without being one, e.g. "topology" for "topology".
func group(args []string) string {
	var best string
	for n := 1; n <= len(args); n++ {
		prefix := strings.Join(args[:n], " ")
		for _, c := range commands {
			if strings.HasPrefix(c.name, prefix+" ") {
				best = prefix
				break
			}
		}
	}
	return best
}

// unknown explains an unknown command line: the subcommands of a group,
// or the nearest command names, and how to list them all.
func unknown(ctx context.Context, args []string) error {
	w := stderr(ctx)
	typed := strings.Join(args, " ")
	if strings.HasPrefix(args[0], "-") {
		return usageErrorf("flags go after the command, e.g. policyctl topology verify --brokers host:9092\nRun 'policyctl help' to list the commands.")
	}
	// A group asked for its help (policyctl explain --help) lists its
	// commands as the output.
	if n := len(args); n > 1 && slices.Contains([]string{"-h", "-help", "--help", "help"}, args[n-1]) {
		if g := group(args[:n-1]); g != "" && g == strings.Join(args[:n-1], " ") {
			fmt.Fprintf(stdout(ctx), "The %s commands are:\n", g)
			printCommands(stdout(ctx), g)
			fmt.Fprintf(stdout(ctx), "\nRun 'policyctl %s <command> -h' for the flags of one.\n", g)
			return nil
		}
	}
	if g := group(args); g != "" && g == typed {
		fmt.Fprintf(w, "policyctl %s needs a subcommand:\n", g)
		printCommands(w, g)
		return &exitError{code: exitUsage}
	}
	var near []string
	for _, c := range sortedCommands() {
		words := strings.Fields(c.name)
		n := min(len(words), len(args))
		candidate := strings.Join(words[:n], " ")
		if d := distance(strings.Join(args[:n], " "), candidate); d <= 2 && d < len(candidate) && !slices.Contains(near, candidate) {
			near = append(near, candidate)
		}
	}
	msg := fmt.Sprintf("unknown command %q", typed)
	if len(near) > 0 {
		quoted := make([]string, len(near))
		for i, n := range near {
			quoted[i] = strconv.Quote(n)
		}
		msg += "; did you mean " + strings.Join(quoted, " or ") + "?"
	}
	if g := group(args); g != "" {
		fmt.Fprintf(w, "policyctl: %s\nThe %s commands are:\n", msg, g)
		printCommands(w, g)
		return &exitError{code: exitUsage}
	}
	return usageErrorf("%s\nRun 'policyctl help' to list the commands.", msg)
}

// distance is the Levenshtein edit distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		printCommands(stderr(ctx), "")
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printCommands(stdout(ctx), "")
		return exitOK
	case "-version", "--version":
		fmt.Fprintln(stdout(ctx), versionString())
		return exitOK
	case completeCommand:
		return runComplete(ctx, args[1:])
	}
	c, rest, ok := lookup(args)
	var err error
	if ok {
		err = c.run(ctx, rest)
	} else {
		err = unknown(ctx, args)
	}
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil {
			return code
		}
	}
	if ok {
		fmt.Fprintf(stderr(ctx), "policyctl %s: %v\n", c.name, err)
	} else {
		fmt.Fprintf(stderr(ctx), "policyctl: %v\n", err)
	}
	return code
}

func main() {
	// The first signal cancels the context so a command can stop cleanly;
	// a second one ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
