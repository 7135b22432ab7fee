// Package constraint is Open Horizon's policy constraint language: a parser
// that reports where an expression is wrong, and its evaluation against a
// set of policy properties.
//
// An expression compares a property with a value (==, !=, <, >, <=, >=, in)
// and combines comparisons with AND / && and OR / || (AND binds tighter) and
// parentheses. A value is a quoted string ("a b" or 'a b'), a number, a
// boolean (true, false), a version (1.2.3) or a version range ([1.0.0,2.0.0),
// (1.0.0,INFINITY]), or a bare word. A list of expressions, as a policy's
// constraints are written, holds when every one of them holds.
package constraint

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// MaxLen bounds the length of one expression, so a hostile one cannot make
// parsing or evaluation costly.
const MaxLen = 8192

// maxDepth bounds the nesting of parentheses.
const maxDepth = 64

// ParseError says where an expression is wrong: Pos is the byte offset
// (from 0) in the expression.
type ParseError struct {
	Expr string
	Pos  int
	Msg  string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("constraint %q: at position %d: %s", e.Expr, e.Pos, e.Msg)
}

// Op is a comparison operator.
type Op string

// The comparison operators.
const (
	Eq Op = "=="
	Ne Op = "!="
	Lt Op = "<"
	Gt Op = ">"
	Le Op = "<="
	Ge Op = ">="
	In Op = "in"
)

// Expr is a parsed expression.
type Expr interface {
	// Eval says whether the properties satisfy the expression.
	Eval(p Properties) bool
	String() string
}

// And holds when both sides hold.
type And struct{ L, R Expr }

// Or holds when either side holds.
type Or struct{ L, R Expr }

// Compare compares a property with a value.
type Compare struct {
	Prop  string
	Op    Op
	Value Value
}

// Value is the right-hand side of a comparison as written.
type Value struct {
	Raw    string // the text, unquoted
	Quoted bool
	Range  *VersionRange // set for a version range
}

// Eval implements Expr.
func (a And) Eval(p Properties) bool { return a.L.Eval(p) && a.R.Eval(p) }

// Eval implements Expr.
func (o Or) Eval(p Properties) bool { return o.L.Eval(p) || o.R.Eval(p) }

func (a And) String() string { return "(" + a.L.String() + " AND " + a.R.String() + ")" }
func (o Or) String() string  { return "(" + o.L.String() + " OR " + o.R.String() + ")" }
func (c Compare) String() string {
	v := c.Value.Raw
	if c.Value.Quoted {
		v = quote(v)
	}
	return quoteWord(c.Prop) + " " + string(c.Op) + " " + v
}

// quote writes s as a string the lexer reads back as s.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// quoteWord leaves a property name bare when it reads back as one word.
func quoteWord(s string) string {
	if s == "" || s == "AND" || s == "OR" || s == "in" {
		return quote(s)
	}
	for i := 0; i < len(s); i++ {
		if !isWordByte(s[i]) {
			return quote(s)
		}
	}
	return s
}

// Parse parses one expression.
func Parse(expr string) (Expr, error) {
	if len(expr) > MaxLen {
		return nil, &ParseError{Expr: expr[:64] + "...", Pos: MaxLen, Msg: fmt.Sprintf("longer than %d bytes", MaxLen)}
	}
	p := &parser{src: expr}
	p.next()
	if p.tok.kind == tEOF {
		return nil, p.errAt(0, "empty expression")
	}
	e, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.tok.kind == tBad {
		return nil, p.errAt(p.tok.pos, p.tok.bad)
	}
	if p.tok.kind != tEOF {
		return nil, p.errAt(p.tok.pos, fmt.Sprintf("unexpected %s after a complete expression; join expressions with AND or OR", p.tok.describe()))
	}
	return e, nil
}

// List is a list of expressions that all must hold (a policy's
// constraints). The empty list holds for any properties.
type List []Expr

// ParseList parses every expression of a list; an error names the index of
// the expression that is wrong.
func ParseList(exprs []string) (List, error) {
	l := make(List, 0, len(exprs))
	for i, s := range exprs {
		if strings.TrimSpace(s) == "" {
			continue // OH ignores empty constraint strings
		}
		e, err := Parse(s)
		if err != nil {
			return nil, fmt.Errorf("constraints[%d]: %w", i, err)
		}
		l = append(l, e)
	}
	return l, nil
}

// Eval says whether every expression holds.
func (l List) Eval(p Properties) bool {
	for _, e := range l {
		if !e.Eval(p) {
			return false
		}
	}
	return true
}

type tokKind int

const (
	tEOF tokKind = iota
	tWord
	tString
	tRange
	tOp
	tAnd
	tOr
	tLParen
	tRParen
	tBad
)

type token struct {
	kind tokKind
	pos  int
	text string
	rng  *VersionRange
	bad  string
}

func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "end of expression"
	case tString:
		return fmt.Sprintf("string %q", t.text)
	case tLParen:
		return `"("`
	case tRParen:
		return `")"`
	case tAnd:
		return "AND"
	case tOr:
		return "OR"
	}
	return fmt.Sprintf("%q", t.text)
}

type parser struct {
	src     string
	pos     int
	tok     token
	afterOp bool // the next token is a value: "[" or "(" may start a range
}

func (p *parser) errAt(pos int, msg string) *ParseError {
	return &ParseError{Expr: p.src, Pos: pos, Msg: msg}
}

func isWordByte(c byte) bool {
	return c > ' ' && c < 0x7f && !strings.ContainsRune(`()"'=!<>&|`, rune(c))
}

// next reads the next token into p.tok.
func (p *parser) next() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t' || p.src[p.pos] == '\n' || p.src[p.pos] == '\r') {
		p.pos++
	}
	start := p.pos
	if p.pos >= len(p.src) {
		p.tok = token{kind: tEOF, pos: start}
		return
	}
	afterOp := p.afterOp
	p.afterOp = false
	c := p.src[p.pos]
	switch {
	case afterOp && (c == '[' || c == '('):
		end := strings.IndexAny(p.src[p.pos+1:], "])")
		if end >= 0 && strings.Contains(p.src[p.pos:p.pos+1+end], ",") {
			text := p.src[p.pos : p.pos+2+end]
			r, err := ParseRange(text)
			p.pos += 2 + end
			if err != nil {
				p.tok = token{kind: tBad, pos: start, text: text, bad: err.Error()}
				return
			}
			p.tok = token{kind: tRange, pos: start, text: text, rng: r}
			return
		}
		if c == '[' {
			p.pos++
			p.tok = token{kind: tBad, pos: start, text: "[", bad: "a version range is [low,high) or (low,high]"}
			return
		}
		p.pos++
		p.tok = token{kind: tLParen, pos: start, text: "("}
	case c == '(':
		p.pos++
		p.tok = token{kind: tLParen, pos: start, text: "("}
	case c == ')':
		p.pos++
		p.tok = token{kind: tRParen, pos: start, text: ")"}
	case c == '"' || c == '\'':
		var b strings.Builder
		i := p.pos + 1
		for i < len(p.src) && p.src[i] != c {
			if p.src[i] == '\\' && i+1 < len(p.src) {
				i++
			}
			b.WriteByte(p.src[i])
			i++
		}
		if i >= len(p.src) {
			p.pos = len(p.src)
			p.tok = token{kind: tBad, pos: start, text: p.src[start:], bad: "unterminated string: no closing " + string(c)}
			return
		}
		p.pos = i + 1
		p.tok = token{kind: tString, pos: start, text: b.String()}
	case c == '&' || c == '|':
		if p.pos+1 < len(p.src) && p.src[p.pos+1] == c {
			p.pos += 2
			if c == '&' {
				p.tok = token{kind: tAnd, pos: start, text: "&&"}
			} else {
				p.tok = token{kind: tOr, pos: start, text: "||"}
			}
			return
		}
		p.pos++
		p.tok = token{kind: tBad, pos: start, text: string(c), bad: fmt.Sprintf("%q is not an operator; use %c%c", c, c, c)}
	case c == '=' || c == '!' || c == '<' || c == '>':
		if p.pos+1 < len(p.src) && p.src[p.pos+1] == '=' {
			p.pos += 2
			p.tok = token{kind: tOp, pos: start, text: p.src[start:p.pos]}
			return
		}
		p.pos++
		if c == '=' || c == '!' {
			p.tok = token{kind: tBad, pos: start, text: string(c), bad: fmt.Sprintf("%q is not an operator; use == or !=", c)}
			return
		}
		p.tok = token{kind: tOp, pos: start, text: string(c)}
	case isWordByte(c):
		for p.pos < len(p.src) && isWordByte(p.src[p.pos]) {
			p.pos++
		}
		text := p.src[start:p.pos]
		switch {
		case text == "AND":
			p.tok = token{kind: tAnd, pos: start, text: text}
		case text == "OR":
			p.tok = token{kind: tOr, pos: start, text: text}
		case text == "in":
			p.tok = token{kind: tOp, pos: start, text: text}
		default:
			p.tok = token{kind: tWord, pos: start, text: text}
		}
	default:
		p.pos++
		for p.pos < len(p.src) && p.src[p.pos] >= 0x80 && p.src[p.pos] < 0xc0 {
			p.pos++ // the rest of a UTF-8 sequence
		}
		p.tok = token{kind: tBad, pos: start, text: p.src[start:p.pos], bad: fmt.Sprintf("unexpected character %q", p.src[start:p.pos])}
	}
}

func (p *parser) or(depth int) (Expr, error) {
	l, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tOr {
		p.next()
		r, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		l = Or{L: l, R: r}
	}
	return l, nil
}

func (p *parser) and(depth int) (Expr, error) {
	l, err := p.primary(depth)
	if err != nil {
		return nil, err
	}
	for p.tok.kind == tAnd {
		p.next()
		r, err := p.primary(depth)
		if err != nil {
			return nil, err
		}
		l = And{L: l, R: r}
	}
	return l, nil
}

func (p *parser) primary(depth int) (Expr, error) {
	switch p.tok.kind {
	case tBad:
		return nil, p.errAt(p.tok.pos, p.tok.bad)
	case tLParen:
		if depth >= maxDepth {
			return nil, p.errAt(p.tok.pos, fmt.Sprintf("parentheses nest deeper than %d", maxDepth))
		}
		open := p.tok.pos
		p.next()
		e, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			if p.tok.kind == tEOF {
				return nil, p.errAt(open, `"(" is never closed`)
			}
			return nil, p.errAt(p.tok.pos, fmt.Sprintf(`want ")" or AND or OR, found %s`, p.tok.describe()))
		}
		p.next()
		return e, nil
	case tWord, tString:
		prop := p.tok.text
		if prop == "" {
			return nil, p.errAt(p.tok.pos, "empty property name")
		}
		p.afterOp = false
		p.next()
		if p.tok.kind == tBad {
			return nil, p.errAt(p.tok.pos, p.tok.bad)
		}
		if p.tok.kind != tOp {
			return nil, p.errAt(p.tok.pos, fmt.Sprintf("want an operator (==, !=, <, >, <=, >=, in) after property %q, found %s", prop, p.tok.describe()))
		}
		op := Op(p.tok.text)
		// Re-read the value with ranges allowed.
		p.afterOp = true
		p.next()
		var v Value
		switch p.tok.kind {
		case tWord:
			v = Value{Raw: p.tok.text}
		case tString:
			v = Value{Raw: p.tok.text, Quoted: true}
		case tRange:
			if op != Eq && op != In {
				return nil, p.errAt(p.tok.pos, fmt.Sprintf("a version range needs == or in, not %s", op))
			}
			v = Value{Raw: p.tok.text, Range: p.tok.rng}
		case tBad:
			return nil, p.errAt(p.tok.pos, p.tok.bad)
		default:
			return nil, p.errAt(p.tok.pos, fmt.Sprintf("want a value after %s, found %s", op, p.tok.describe()))
		}
		if op == Lt || op == Gt || op == Le || op == Ge {
			if _, ok := number(v.Raw); !ok {
				if _, err := ParseVersion(v.Raw); err != nil {
					return nil, p.errAt(p.tok.pos, fmt.Sprintf("%s needs a number or a version, not %q", op, v.Raw))
				}
			}
		}
		p.next()
		return Compare{Prop: prop, Op: op, Value: v}, nil
	case tEOF:
		return nil, p.errAt(p.tok.pos, "expression ends where a comparison or \"(\" is wanted")
	}
	return nil, p.errAt(p.tok.pos, fmt.Sprintf("want a property name or \"(\", found %s", p.tok.describe()))
}

func number(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	for _, r := range s { // no "Inf", "NaN", hex
		if !unicode.IsDigit(r) && r != '.' && r != '-' && r != '+' && r != 'e' && r != 'E' {
			return 0, false
		}
	}
	return f, true
}
