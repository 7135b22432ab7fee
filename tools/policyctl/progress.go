package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// progress reports bulk work item by item on stderr: a bar redrawn in
// place on a terminal, one plain line per item otherwise (logs, CI), and
// a summary at the end.
type progress struct {
	w        io.Writer
	tty      bool
	what     string // what an item is, e.g. "component"
	total    int
	done     int
	failures []string
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(ctx context.Context, what string, total int) *progress {
	w := stderr(ctx)
	return &progress{w: w, tty: isTerminal(w), what: what, total: total}
}

const barWidth = 30

// step records one item's outcome.
func (p *progress) step(item string, err error) {
	p.done++
	if err != nil {
		p.failures = append(p.failures, fmt.Sprintf("%s: %v", item, err))
	}
	if !p.tty {
		outcome := "ok"
		if err != nil {
			outcome = "failed: " + err.Error()
		}
		fmt.Fprintf(p.w, "[%d/%d] %s %s %s\n", p.done, p.total, p.what, item, outcome)
		return
	}
	filled := barWidth * p.done / max(p.total, 1)
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d %ss, %d failed ", strings.Repeat("=", filled), strings.Repeat(" ", barWidth-filled),
		p.done, p.total, p.what, len(p.failures))
	if p.done == p.total {
		fmt.Fprintln(p.w)
	}
}

// finish prints the summary and returns an error naming every failed
// item, or nil when all succeeded.
func (p *progress) finish() error {
	fmt.Fprintf(p.w, "%d %ss: %d done, %d failed\n", p.total, p.what, p.total-len(p.failures), len(p.failures))
	if len(p.failures) == 0 {
		return nil
	}
	return errors.New(fmt.Sprintf("%d of %d %ss failed:\n  ", len(p.failures), p.total, p.what) + strings.Join(p.failures, "\n  "))
}
