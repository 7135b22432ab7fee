package events

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/hamba/avro/v2"
)

// reportedRecord is the record produced to pdp.notifications that killed
// pdp-ingest on every start: a PdpNotification whose loaded_policies claims
// 2^44 items in a record of 22 bytes (its fingerprint is the current
// writer schema's).
var reportedRecord = []byte("\xc3\x01\xdf\x56\xc9\x3f\xc3\x71\x66\x17\x02\x30\x02\x30\x30\x80\x80\x80\x80\x80\x80\x08")

// writerRecord is a valid record of one writer schema.
type writerRecord struct {
	name string // "<schema> <fingerprint>", for test names
	fp   Fingerprint
	data []byte
}

// writerRecords returns a valid record of every writer schema the codec
// knows, the current ones and the frozen history: every field set, every
// array with two items. A history writer's record holds the current
// event's values, re-encoded with that writer schema.
func writerRecords(tb testing.TB, c *Codec) []writerRecord {
	tb.Helper()
	cur := map[string][]byte{}
	for _, name := range SchemaNames() {
		ev := newEvent[name]()
		fill(reflect.ValueOf(ev).Elem(), 7)
		enumFix(ev)
		b, err := c.Encode(ev)
		if err != nil {
			tb.Fatalf("encode %s: %v", name, err)
		}
		cur[name] = b
	}
	var out []writerRecord
	for fp, w := range c.writers {
		data := cur[w.name]
		if fp != c.currFP[w.name] {
			var generic any
			if err := avro.Unmarshal(c.current[w.name], data[headerSize:], &generic); err != nil {
				tb.Fatalf("read %s generically: %v", w.name, err)
			}
			// A configuration of its own per writer: hamba/avro caches
			// encoders by canonical form, in which an array of a named
			// type reads the same in every version of the schema.
			body, err := avro.Config{}.Freeze().Marshal(w.schema, generic)
			if err != nil {
				tb.Fatalf("write %s with writer %s: %v", w.name, fp, err)
			}
			data = append(append([]byte{0xc3, 0x01}, fp[:]...), body...)
		}
		out = append(out, writerRecord{name: w.name + " " + fp.String(), fp: fp, data: data})
	}
	slices.SortFunc(out, func(a, b writerRecord) int { return strings.Compare(a.name, b.name) })
	return out
}

// hostile is a record whose one length prefix claims far more than the
// record holds.
type hostile struct {
	name string
	data []byte
}

// hostileRecords returns, for every writer schema of c and every length
// prefix in it (array and map block counts, string lengths), records whose
// prefix claims each of claims: the 22-, 20- and 19-byte attacks on every
// field of every schema. Each comes twice: ending right after the claim,
// and followed by the minimal rest of the record.
func hostileRecords(c *Codec, claims ...int64) []hostile {
	var out []hostile
	fps := make([]Fingerprint, 0, len(c.writers))
	for fp := range c.writers {
		fps = append(fps, fp)
	}
	slices.SortFunc(fps, func(a, b Fingerprint) int { return strings.Compare(a.String(), b.String()) })
	for _, fp := range fps {
		w := c.writers[fp]
		for _, claim := range claims {
			for site := 0; ; site++ {
				g := hostileGen{target: site, claim: claim}
				g.value(w.wire, 0)
				if g.at < 0 {
					break
				}
				head := append([]byte{0xc3, 0x01}, fp[:]...)
				name := fmt.Sprintf("%s %s length %d claims %d", w.name, fp, site, claim)
				out = append(out,
					hostile{name + " at the end", append(slices.Clip(head), g.out[:g.at]...)},
					hostile{name + " before the rest", append(slices.Clip(head), g.out...)})
			}
		}
	}
	return out
}

// hostileGen writes a minimal encoding of a schema with one item in every
// array and map, so that nested length prefixes are reached, and its
// target-th length prefix replaced by claim.
type hostileGen struct {
	target, seen int
	claim        int64
	out          []byte
	at           int // end of the claim in out: 0 until written, -1 if there was no target-th prefix
}

// length writes the next length prefix: the claim if it is the target's
// turn, else n. It reports whether it wrote the claim.
func (g *hostileGen) length(n int64) bool {
	if g.seen == g.target && g.at == 0 {
		g.out = appendLong(g.out, g.claim)
		g.at = len(g.out)
		g.seen++
		return true
	}
	g.seen++
	g.out = appendLong(g.out, n)
	return false
}

func (g *hostileGen) value(w *wire, depth int) {
	if depth == 0 {
		g.at = 0
		defer func() {
			if g.at == 0 {
				g.at = -1 // no target-th prefix: past the last site
			}
		}()
	}
	switch w.kind {
	case wireNull:
	case wireBool, wireInt, wireLong, wireEnum:
		g.out = append(g.out, 0)
	case wireFloat, wireDouble, wireFixed:
		g.out = append(g.out, make([]byte, w.min)...)
	case wireBytes:
		g.length(0)
	case wireUnion:
		// The last branch: the value of a ["null", T] union.
		i := len(w.branches) - 1
		if depth > 16 {
			i = 0
		}
		g.out = appendLong(g.out, int64(i))
		g.value(w.branches[i], depth+1)
	case wireRecord:
		for _, f := range w.fields {
			g.value(f.w, depth+1)
		}
	case wireArray, wireMap:
		if g.at != 0 || depth > 16 {
			g.out = append(g.out, 0) // no items after the claim
			return
		}
		if g.length(1) {
			return
		}
		if w.kind == wireMap {
			g.value(&wireString, depth+1)
		}
		g.value(w.items, depth+1)
		g.out = append(g.out, 0)
	}
}

func appendLong(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// allocated returns the bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// decodeFails decodes data with c and fails the test unless Decode returns
// an error wrapping ErrMalformed that contains every one of want, without
// allocating more than limit bytes.
func decodeFails(t *testing.T, c *Codec, data []byte, limit uint64, want ...string) {
	t.Helper()
	var err error
	alloc := allocated(func() { _, err = c.Decode(context.Background(), data) })
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("decode of % x: %v, want ErrMalformed", data, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if alloc > limit {
		t.Errorf("decode of %d bytes allocated %d bytes, want at most %d", len(data), alloc, limit)
	}
}

func TestReportedRecordIsRefused(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	if fp, _, err := c.Peek(reportedRecord); err != nil || fp != c.currFP[SchemaPdpNotification] {
		t.Fatalf("the reported record is no longer a current PdpNotification (%s, %v): rebuild it", fp, err)
	}
	decodeFails(t, c, reportedRecord, 64<<10,
		"record of schema policyflow.PdpNotification (writer df56c93fc3716617): loaded_policies at byte 15 of 22: truncated: array block of 17592186044416 items, only 0 bytes left")
	if err := c.DecodeInto(context.Background(), reportedRecord, &PdpNotification{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("DecodeInto: %v, want ErrMalformed", err)
	}
}

// TestLengthBeyondInputIsRefused builds the reported attack, and its 20-
// and 19-byte variants, against every length prefix of every writer
// schema: each is refused, and refusing it allocates almost nothing.
func TestLengthBeyondInputIsRefused(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	// 2^44 items: the 22-byte record; 2^30: the 20-byte one (out of
	// memory); 2^26: the 19-byte one (2 GiB).
	recs := hostileRecords(c, 1<<44, 1<<30, 1<<26)
	if len(recs) < 100 {
		t.Fatalf("only %d hostile records: the generator misses length prefixes", len(recs))
	}
	for _, h := range recs {
		t.Run(h.name, func(t *testing.T) {
			decodeFails(t, c, h.data, 64<<10, "only")
		})
	}
}

func TestEveryTruncationIsRefused(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range writerRecords(t, c) {
		t.Run(rec.name, func(t *testing.T) {
			if _, err := c.Decode(context.Background(), rec.data); err != nil {
				t.Fatalf("the whole record: %v", err)
			}
			for n := range headerSize {
				if _, err := c.Decode(context.Background(), rec.data[:n]); !errors.Is(err, ErrNotEvent) {
					t.Errorf("first %d of %d bytes: %v, want ErrNotEvent", n, len(rec.data), err)
				}
			}
			for n := headerSize; n < len(rec.data); n++ {
				decodeFails(t, c, rec.data[:n], 64<<10, "truncated", fmt.Sprintf(" of %d: ", n))
			}
		})
	}
}

func TestTrailingBytesAreRefused(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range writerRecords(t, c) {
		t.Run(rec.name, func(t *testing.T) {
			for _, tail := range [][]byte{{0}, {0xff}, []byte("garbage")} {
				data := append(slices.Clip(rec.data), tail...)
				want := fmt.Sprintf("record of schema %s (writer %s): %d trailing bytes after the record ends at byte %d",
					c.writers[rec.fp].name, rec.fp, len(tail), len(rec.data))
				decodeFails(t, c, data, 64<<10, want)
			}
		})
	}
	ev := &CatchupRequest{RequestID: "r", Scope: ScopeAll, Reason: "periodic"}
	data, err := c.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DecodeInto(context.Background(), append(data, 0), &CatchupRequest{}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("DecodeInto with a trailing byte: %v, want ErrMalformed", err)
	}
}

func TestMalformedValuesAreRefused(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	head := func(name string) []byte { fp := c.currFP[name]; return append([]byte{0xc3, 0x01}, fp[:]...) }
	str := func(s string) []byte { return append(appendLong(nil, int64(len(s))), s...) }
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	// CatchupRequest: request_id, scope (enum), deployment_id (union null|string), reason, requested_at.
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"enum index past the symbols", cat(head(SchemaCatchupRequest), str("r"), appendLong(nil, 7), []byte{0}, str("x"), []byte{0}),
			"scope at byte 12 of 17: enum index 7"},
		{"negative enum index", cat(head(SchemaCatchupRequest), str("r"), appendLong(nil, -1), []byte{0}, str("x"), []byte{0}),
			"enum index -1"},
		{"union index past the types", cat(head(SchemaCatchupRequest), str("r"), []byte{0}, appendLong(nil, 2), str("x"), []byte{0}),
			"deployment_id at byte 13 of 17: union index 2"},
		{"negative string length", cat(head(SchemaCatchupRequest), appendLong(nil, -3)),
			"request_id at byte 10 of 11: negative string length -3"},
		{"long of eleven bytes", cat(head(SchemaCatchupRequest), str("r"), []byte{0, 0}, str("x"), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0}),
			"requested_at at byte 16 of 27: long overflows 64 bits"},
		{"long over 64 bits", cat(head(SchemaCatchupRequest), str("r"), []byte{0, 0}, str("x"), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}),
			"long overflows 64 bits"},
		{"string length over 64 bits", cat(head(SchemaCatchupRequest), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),
			"request_id at byte 10 of 21: length overflows 64 bits"},
	} {
		t.Run(tc.name, func(t *testing.T) { decodeFails(t, c, tc.data, 64<<10, tc.want) })
	}

	// Component.notify.timeout_ms is an int: its largest value, then one
	// bit more in its fifth byte.
	comp := &Component{ComponentID: "c", Notify: NotifyTarget{Kind: NotifyNone, TimeoutMs: math.MaxInt32}}
	data, err := c.Encode(comp)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f})
	if at < 0 {
		t.Fatalf("no MaxInt32 in % x", data)
	}
	data[at+4] = 0x1f
	decodeFails(t, c, data, 64<<10, "notify.timeout_ms at", "int overflows 32 bits")

	// A boolean is one byte, 0 or 1: find uninstall by flipping it.
	seg := func(uninstall bool) []byte {
		b, err := c.Encode(&PolicySegment{UpdateID: "u", Components: []ComponentDelta{{ComponentID: "c", Uninstall: uninstall}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	no, yes := seg(false), seg(true)
	at = -1
	for i := range no {
		if no[i] != yes[i] {
			at = i
			break
		}
	}
	no[at] = 5
	decodeFails(t, c, no, 64<<10, "components[0].uninstall at", "boolean byte 0x05")
}

func TestBlockSizeMustMatchItsItems(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	ev := &PdpNotification{NotificationID: "n", ReceivedAt: time.UnixMilli(0).UTC(), PushedBodies: []string{"a", "bc"}}
	data, err := c.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	// The encoder writes blocks with their byte size: count -2 (zigzag 3),
	// 5 bytes (zigzag 10), "a", "bc", the end.
	at := bytes.Index(data[headerSize:], []byte{3, 10, 2, 'a', 4, 'b', 'c', 0}) + headerSize
	if at < headerSize {
		t.Fatalf("no sized block in % x", data)
	}
	bad := slices.Clone(data)
	bad[at+1] = 8 // 4 bytes, but the items take 5
	decodeFails(t, c, bad, 64<<10, "pushed_bodies at", "block says 4 bytes, its items take 5")
}

// TestStringsUpToTheRecordLimitDecode: a string is bounded by the record
// that holds it, not by the Avro library's default of 1 MiB, so every
// record a writer can produce within the topic limit is readable.
func TestStringsUpToTheRecordLimitDecode(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	ev := &PolicyCatalogEntry{PolicyID: "p", Body: strings.Repeat("x", 3<<20), Status: StatusValid}
	checkRoundTrip(t, c, ev)
}

// panicking is a decoder with a bug.
type panicking struct{}

func (panicking) Decode(unsafe.Pointer, *avro.Reader) { panic("index out of range [3] with length 3") }

// TestDecoderPanicIsAnError: should the Avro decoder still panic on some
// record, the stage gets an error naming the schema, not a crash.
func TestDecoderPanicIsAnError(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.Encode(&CatchupRequest{RequestID: "r", Scope: ScopeAll})
	if err != nil {
		t.Fatal(err)
	}
	c.writers[c.currFP[SchemaCatchupRequest]].decoder = panicking{}
	_, err = c.Decode(context.Background(), data)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "record of schema policyflow.CatchupRequest") ||
		!strings.Contains(err.Error(), "decoder panicked: index out of range [3] with length 3") {
		t.Fatalf("decode with a panicking decoder: %v", err)
	}
	// The codec goes on decoding.
	if _, err := c.Decode(context.Background(), reportedRecord); !errors.Is(err, ErrMalformed) {
		t.Fatalf("next decode: %v", err)
	}
}

// TestDecodeAllocatesLittleMoreThanTheRecord decodes records packed with
// the smallest items every array and map can hold: the densest honest
// records. What they allocate stays within a small multiple of their size.
func TestDecodeAllocatesLittleMoreThanTheRecord(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	const perByte, fixed = 64, 16 << 10
	worst := 0.0
	for fp, w := range c.writers {
		for site := 0; ; site++ {
			g := denseGen{target: site, items: 4096}
			g.value(w.wire, 0)
			if !g.hit {
				break
			}
			data := append(append([]byte{0xc3, 0x01}, fp[:]...), g.out...)
			var derr error
			alloc := allocated(func() { _, derr = c.Decode(context.Background(), data) })
			if derr != nil {
				t.Fatalf("%s %s prefix %d: dense record does not decode: %v", w.name, fp, site, derr)
			}
			worst = max(worst, float64(alloc)/float64(len(data)))
			if alloc > uint64(perByte*len(data)+fixed) {
				t.Errorf("%s %s prefix %d: %d bytes allocated %d bytes, want at most %d per byte", w.name, fp, site, len(data), alloc, perByte)
			}
		}
	}
	t.Logf("worst: %.1f bytes allocated per byte of record", worst)
}

// denseGen writes a minimal encoding with its target-th array or map
// holding items minimal items (distinct keys for a map).
type denseGen struct {
	target, seen, items int
	hit                 bool
	out                 []byte
}

func (g *denseGen) value(w *wire, depth int) {
	switch w.kind {
	case wireNull:
	case wireBool, wireInt, wireLong, wireEnum, wireBytes:
		g.out = append(g.out, 0)
	case wireFloat, wireDouble, wireFixed:
		g.out = append(g.out, make([]byte, w.min)...)
	case wireUnion:
		i := len(w.branches) - 1
		g.out = appendLong(g.out, int64(i))
		g.value(w.branches[i], depth+1)
	case wireRecord:
		for _, f := range w.fields {
			g.value(f.w, depth+1)
		}
	case wireArray, wireMap:
		n := 0
		if g.seen == g.target {
			n, g.hit = g.items, true
		}
		g.seen++
		if n > 0 {
			g.out = appendLong(g.out, int64(n))
			for i := range n {
				if w.kind == wireMap {
					k := fmt.Sprint(i)
					g.out = append(appendLong(g.out, int64(len(k))), k...)
				}
				g.value(w.items, depth+1)
			}
		}
		g.out = append(g.out, 0)
	}
}

// checkSchema compiles a schema for checkBody.
func checkSchema(t *testing.T, js string) *wire {
	t.Helper()
	s, err := avro.ParseWithCache(js, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := compileWire(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestItemsThatTakeNoBytes: a writer schema may have arrays of items that
// encode in no bytes; each still counts as one, so that blocks of a few
// bytes cannot make the decoder walk billions of items.
func TestItemsThatTakeNoBytes(t *testing.T) {
	w := checkSchema(t, `{"type": "record", "name": "T", "fields": [{"name": "xs", "type": {"type": "array", "items": "null"}}]}`)
	if err := checkBody(w, []byte{2, 0}, 10); err != nil {
		t.Fatalf("one null: %v", err)
	}
	err := checkBody(w, []byte{6, 0}, 10)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "xs at byte 10 of 12: truncated: array block of 3 items, only 1 bytes left") {
		t.Fatalf("three nulls in two bytes: %v", err)
	}
	body := append(bytes.Repeat([]byte{100}, 200), 0) // blocks of 50 nulls
	err = checkBody(w, body, 10)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "xs at byte 14 of 211: array block of 50 items: a record of 201 bytes holds at most 1 more") {
		t.Fatalf("blocks of 50 nulls a byte: %v", err)
	}
}

// TestRecursionIsBounded: a recursive writer schema nests as deep as its
// record says, up to a limit that keeps the decoder's stack small.
func TestRecursionIsBounded(t *testing.T) {
	w := checkSchema(t, `{"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}`)
	if err := checkBody(w, append(bytes.Repeat([]byte{2}, 100), 0), 10); err != nil {
		t.Fatalf("100 levels: %v", err)
	}
	err := checkBody(w, append(bytes.Repeat([]byte{2}, 1000), 0), 10)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "nested deeper than 256 levels") {
		t.Fatalf("1000 levels: %v", err)
	}
}

// A NaN or an infinity in a double is refused, naming the field: a NaN
// demand compares unequal to every capacity, so a deployment carrying one
// passed every capacity check.
func TestNonFiniteNumbersAreRefused(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		v    float64
	}{{"NaN", math.NaN()}, {"+Inf", math.Inf(1)}, {"-Inf", math.Inf(-1)}} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := c.Encode(&PolicyRollout{PolicyID: "p", RolloutID: "r", Steps: []float64{0.5, 7}})
			if err != nil {
				t.Fatal(err)
			}
			seven := binary.LittleEndian.AppendUint64(nil, math.Float64bits(7))
			at := bytes.Index(data, seven)
			if at < 0 {
				t.Fatalf("no 7.0 in % x", data)
			}
			binary.LittleEndian.PutUint64(data[at:], math.Float64bits(tc.v))
			decodeFails(t, c, data, 64<<10, "steps[1] at", "not a finite number")
		})
	}
	if _, err := c.Decode(context.Background(), mustEncode(t, c, &PolicyRollout{PolicyID: "p", RolloutID: "r", Steps: []float64{0.5, 1}})); err != nil {
		t.Fatalf("finite steps refused: %v", err)
	}
}

func mustEncode(t *testing.T, c *Codec, ev Event) []byte {
	t.Helper()
	b, err := c.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
