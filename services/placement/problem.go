package placement

import (
	"fmt"
	"strings"
)

// maxProblems bounds the problems one validation reports; the rest are
// counted. It is high enough that a model or template written by hand
// has every problem listed in one refusal.
const maxProblems = 1000

// Problem is one thing wrong with a datacenter or a template: the field
// (a JSON path such as location[3].level) and what to fix.
type Problem struct {
	Field string `json:"field"`
	Msg   string `json:"message"`
}

func (p Problem) String() string { return p.Field + ": " + p.Msg }

// Invalid is a datacenter or a template that breaks the rules; it lists
// every problem found (up to 1,000, then how many more).
type Invalid struct {
	// What is "datacenter" or "template".
	What     string
	Problems []Problem
	// More counts the problems not listed.
	More int
}

func (e *Invalid) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is not valid: ", e.What)
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "; and %d more problems", e.More)
	}
	return b.String()
}

// problems collects problems up to maxProblems.
type problems struct {
	list []Problem
	more int
}

func (ps *problems) add(field, format string, args ...any) {
	if len(ps.list) >= maxProblems {
		ps.more++
		return
	}
	ps.list = append(ps.list, Problem{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// n counts the problems found, listed or not.
func (ps *problems) n() int { return len(ps.list) + ps.more }

func (ps *problems) err(what string) error {
	if len(ps.list) == 0 {
		return nil
	}
	return &Invalid{What: what, Problems: ps.list, More: ps.more}
}
