package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
)

// ErrMalformed is returned (wrapped) for a record whose body is not exactly
// one encoding of its writer schema: truncated, followed by trailing bytes,
// or claiming more items or bytes than the record holds.
var ErrMalformed = errors.New("malformed record")

// maxNesting is how deep records, arrays, maps and unions may nest in a
// record. Only a recursive writer schema can nest deeper than a handful of
// levels; the limit keeps such a record from exhausting the stack.
const maxNesting = 256

type wireKind uint8

const (
	wireNull wireKind = iota
	wireBool
	wireInt
	wireLong
	wireFloat
	wireDouble
	wireBytes // bytes and string: a length, then that many bytes
	wireFixed
	wireEnum
	wireArray
	wireMap
	wireUnion
	wireRecord
)

// wire is a writer schema compiled for checking a record body before it is
// decoded: it knows the layout of the bytes and, for every array or map,
// the fewest bytes one item takes, so that a length prefix larger than the
// bytes left is refused before any allocation trusts it.
type wire struct {
	kind    wireKind
	what    string // the Avro type, for errors
	min     int    // fewest bytes an encoding of this type takes
	symbols int    // an enum's
	items   *wire  // array items, map values
	// fields are a record's fields; branches a union's types.
	fields   []wireField
	branches []*wire
}

type wireField struct {
	name string
	w    *wire
}

// compileWire compiles a writer schema. Named types are compiled once, so a
// recursive schema compiles to a cyclic wire.
func compileWire(s avro.Schema) (*wire, error) {
	return compileNode(s, map[string]*wire{})
}

func compileNode(s avro.Schema, named map[string]*wire) (*wire, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		if w, ok := named[n.FullName()]; ok {
			return w, nil
		}
	}
	w := &wire{what: string(s.Type())}
	switch s := s.(type) {
	case *avro.NullSchema:
		w.kind = wireNull
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Boolean:
			w.kind, w.min = wireBool, 1
		case avro.Int:
			w.kind, w.min = wireInt, 1
		case avro.Long:
			w.kind, w.min = wireLong, 1
		case avro.Float:
			w.kind, w.min = wireFloat, 4
		case avro.Double:
			w.kind, w.min = wireDouble, 8
		case avro.String, avro.Bytes:
			w.kind, w.min = wireBytes, 1
		default:
			return nil, fmt.Errorf("events: primitive type %s has no wire layout", s.Type())
		}
	case *avro.FixedSchema:
		w.kind, w.min = wireFixed, s.Size()
		named[s.FullName()] = w
	case *avro.EnumSchema:
		w.kind, w.symbols, w.min = wireEnum, len(s.Symbols()), 1
		named[s.FullName()] = w
	case *avro.ArraySchema:
		items, err := compileNode(s.Items(), named)
		if err != nil {
			return nil, err
		}
		w.kind, w.items, w.min = wireArray, items, 1
	case *avro.MapSchema:
		values, err := compileNode(s.Values(), named)
		if err != nil {
			return nil, err
		}
		w.kind, w.items, w.min = wireMap, values, 1
	case *avro.UnionSchema:
		w.kind = wireUnion
		least := -1
		for _, t := range s.Types() {
			b, err := compileNode(t, named)
			if err != nil {
				return nil, err
			}
			w.branches = append(w.branches, b)
			if least < 0 || b.min < least {
				least = b.min
			}
		}
		w.min = 1 + max(least, 0)
	case *avro.RecordSchema:
		w.kind = wireRecord
		// Registered before its fields: a field that refers back to this
		// record sees it with min 0, which is still a lower bound.
		named[s.FullName()] = w
		min := 0
		for _, f := range s.Fields() {
			fw, err := compileNode(f.Type(), named)
			if err != nil {
				return nil, err
			}
			w.fields = append(w.fields, wireField{name: f.Name(), w: fw})
			min += fw.min
		}
		w.min = min
	default:
		return nil, fmt.Errorf("events: schema type %s has no wire layout", s.Type())
	}
	return w, nil
}

// wireError says what is wrong at which byte; path collects the fields and
// indexes on the way out, innermost first.
type wireError struct {
	pos  int
	msg  string
	path []string
}

// errAt is a wireError at byte pos.
func errAt(pos int, format string, args ...any) *wireError {
	return &wireError{pos: pos, msg: fmt.Sprintf(format, args...)}
}

// checkBody checks that body is exactly one encoding of w: nothing
// missing, nothing after it, and no length prefix that claims more than
// the bytes left; nor may its arrays and maps hold more items in all than
// it has bytes. Every item counts as at least one byte, even of a type
// that encodes in none (null, a record without fields): else blocks of a
// few bytes could claim billions of such items, and walking them would
// cost the CPU what a false length costs memory. The error names the field
// and the byte offset in the record, whose body starts after a header of
// offset bytes.
func checkBody(w *wire, body []byte, offset int) error {
	s := scanner{b: body, items: len(body)}
	werr := s.value(w, 0)
	if werr == nil && s.pos != len(body) {
		return fmt.Errorf("%d trailing bytes after the record ends at byte %d: %w",
			len(body)-s.pos, offset+s.pos, ErrMalformed)
	}
	if werr == nil {
		return nil
	}
	var where strings.Builder
	for i := len(werr.path) - 1; i >= 0; i-- {
		p := werr.path[i]
		if where.Len() > 0 && p[0] != '[' {
			where.WriteByte('.')
		}
		where.WriteString(p)
	}
	if where.Len() > 0 {
		where.WriteString(" ")
	}
	return fmt.Errorf("%sat byte %d of %d: %s: %w", where.String(), offset+werr.pos, offset+len(body), werr.msg, ErrMalformed)
}

type scanner struct {
	b     []byte
	pos   int
	items int // how many more array and map items the record may hold
}

func (s *scanner) left() int { return len(s.b) - s.pos }

// varint reads a zigzag varint whose value fits in bits bits (32 or 64).
// On error it names the value as what.
func (s *scanner) varint(what string, bits int) (int64, *wireError) {
	last := (bits + 6) / 7                // bytes at most: 5 or 10
	top := byte(1)<<(bits-7*(last-1)) - 1 // the largest last byte
	var v uint64
	start := s.pos
	for i := range last {
		if s.pos == len(s.b) {
			return 0, errAt(start, "truncated: %s runs past the end", what)
		}
		b := s.b[s.pos]
		s.pos++
		if b&0x80 == 0 && (i < last-1 || b <= top) {
			v |= uint64(b) << (7 * i)
			return int64(v>>1) ^ -int64(v&1), nil
		}
		v |= uint64(b&0x7f) << (7 * i)
	}
	return 0, errAt(start, "%s overflows %d bits", what, bits)
}

// long reads a zigzag varint of at most 64 bits as varint does; ok is
// false if it runs past the end or overflows, and then nothing is
// consumed, so that varint can say which.
func (s *scanner) long() (int64, bool) {
	var v uint64
	b := s.b[s.pos:]
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if c < 0x80 {
			if i == 9 && c > 1 {
				return 0, false
			}
			v |= uint64(c) << (7 * i)
			s.pos += i + 1
			return int64(v>>1) ^ -int64(v&1), true
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	return 0, false
}

// int is long for a varint of at most 32 bits.
func (s *scanner) int() (int64, bool) {
	start := s.pos
	v, ok := s.long()
	if !ok || s.pos-start > 5 || v != int64(int32(v)) {
		s.pos = start
		return 0, false
	}
	return v, true
}

// finite reports whether the little-endian float (4 bytes) or double (8
// bytes) b is a finite number. A NaN compares unequal to everything, so a
// capacity or a demand that is one passes every check made of
// comparisons; an infinity overflows every sum.
func finite(kind wireKind, b []byte) bool {
	if kind == wireFloat {
		f := math.Float32frombits(binary.LittleEndian.Uint32(b))
		return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0)
	}
	f := math.Float64frombits(binary.LittleEndian.Uint64(b))
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

// value checks one encoding of w at the scanner's position.
func (s *scanner) value(w *wire, depth int) *wireError {
	switch w.kind {
	case wireNull:
		return nil
	case wireBool:
		if s.pos == len(s.b) {
			return errAt(s.pos, "truncated: boolean runs past the end")
		}
		if b := s.b[s.pos]; b > 1 {
			return errAt(s.pos, "boolean byte 0x%02x is neither 0 nor 1", b)
		}
		s.pos++
		return nil
	case wireInt:
		if _, ok := s.int(); ok {
			return nil
		}
		_, err := s.varint("int", 32)
		return err
	case wireLong:
		if _, ok := s.long(); ok {
			return nil
		}
		_, err := s.varint("long", 64)
		return err
	case wireFloat, wireDouble, wireFixed:
		if w.min > s.left() {
			return errAt(s.pos, "truncated: %s of %d bytes, only %d left", w.what, w.min, s.left())
		}
		if w.kind != wireFixed && !finite(w.kind, s.b[s.pos:s.pos+w.min]) {
			return errAt(s.pos, "%s is not a finite number (NaN or an infinity): no policyflow value is one", w.what)
		}
		s.pos += w.min
		return nil
	case wireBytes:
		start := s.pos
		if n, ok := s.long(); ok && n >= 0 && n <= int64(s.left()) {
			s.pos += int(n)
			return nil
		}
		s.pos = start
		n, err := s.varint("length", 64)
		if err != nil {
			return err
		}
		if n < 0 {
			return errAt(start, "negative %s length %d", w.what, n)
		}
		if n > int64(s.left()) {
			return errAt(start, "truncated: %s of %d bytes, only %d left", w.what, n, s.left())
		}
		s.pos += int(n)
		return nil
	case wireEnum:
		start := s.pos
		if i, ok := s.int(); ok && i >= 0 && i < int64(w.symbols) {
			return nil
		}
		s.pos = start
		i, err := s.varint("enum index", 32)
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(w.symbols) {
			return errAt(start, "enum index %d, the enum has %d symbols", i, w.symbols)
		}
		return nil
	case wireUnion:
		if depth >= maxNesting {
			return errAt(s.pos, "nested deeper than %d levels", maxNesting)
		}
		start := s.pos
		if i, ok := s.int(); ok && i >= 0 && i < int64(len(w.branches)) {
			return s.value(w.branches[i], depth+1)
		}
		s.pos = start
		i, err := s.varint("union index", 32)
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(len(w.branches)) {
			return errAt(start, "union index %d, the union has %d types", i, len(w.branches))
		}
		return s.value(w.branches[i], depth+1)
	case wireRecord:
		if depth >= maxNesting {
			return errAt(s.pos, "nested deeper than %d levels", maxNesting)
		}
		for i := range w.fields {
			// Strings and longs, most fields, are checked inline; on any
			// doubt value checks them again and says what is wrong.
			switch w.fields[i].w.kind {
			case wireBytes:
				if s.pos < len(s.b) {
					// A length under 64: one byte, even (zigzag).
					if c := s.b[s.pos]; c < 0x80 && c&1 == 0 && int(c>>1) < len(s.b)-s.pos {
						s.pos += 1 + int(c>>1)
						continue
					}
				}
				start := s.pos
				if n, ok := s.long(); ok && n >= 0 && n <= int64(len(s.b)-s.pos) {
					s.pos += int(n)
					continue
				}
				s.pos = start
			case wireLong:
				if _, ok := s.long(); ok {
					continue
				}
			}
			if err := s.value(w.fields[i].w, depth+1); err != nil {
				err.path = append(err.path, w.fields[i].name)
				return err
			}
		}
		return nil
	case wireArray, wireMap:
		if depth >= maxNesting {
			return errAt(s.pos, "nested deeper than %d levels", maxNesting)
		}
		return s.blocks(w, depth)
	}
	return errAt(s.pos, "no wire layout for %s", w.what)
}

// blocks checks the blocks of an array or a map: a count, for a negative
// count its byte size, the items; a zero count ends them. A count is
// honest only if its items fit in the bytes left, each taking at least the
// fewest bytes its type can (at least one).
func (s *scanner) blocks(w *wire, depth int) *wireError {
	least := w.items.min
	if w.kind == wireMap {
		least++ // the key's length
	}
	least = max(least, 1)
	index := 0
	for {
		start := s.pos
		count, ok := s.long()
		if !ok {
			_, err := s.varint("block count", 64)
			return err
		}
		if count == 0 {
			return nil
		}
		size := int64(-1)
		if count < 0 {
			if count = -count; count < 0 {
				return errAt(start, "%s block count overflows", w.what)
			}
			var err *wireError
			if size, err = s.varint("block size", 64); err != nil {
				return err
			}
			if size < 0 {
				return errAt(start, "negative %s block size %d", w.what, size)
			}
			if size > int64(s.left()) {
				return errAt(start, "truncated: %s block of %d bytes, only %d left", w.what, size, s.left())
			}
		}
		if count > int64(s.left()/least) {
			return errAt(start, "truncated: %s block of %d items, only %d bytes left", w.what, count, s.left())
		}
		if count > int64(s.items) {
			return errAt(start, "%s block of %d items: a record of %d bytes holds at most %d more", w.what, count, len(s.b), s.items)
		}
		s.items -= int(count)
		body := s.pos
		for range count {
			if w.kind == wireMap {
				if err := s.value(&wireString, depth+1); err != nil {
					err.path = append(err.path, "["+strconv.Itoa(index)+"]")
					return err
				}
			}
			if err := s.value(w.items, depth+1); err != nil {
				err.path = append(err.path, "["+strconv.Itoa(index)+"]")
				return err
			}
			index++
		}
		if size >= 0 && int64(s.pos-body) != size {
			return errAt(start, "%s block says %d bytes, its items take %d", w.what, size, s.pos-body)
		}
	}
}

// wireString is a map key.
var wireString = wire{kind: wireBytes, what: "string", min: 1}
