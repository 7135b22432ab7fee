package events

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/soe"
	"github.com/modern-go/reflect2"

	"github.com/policyflow/policyflow/schemas"
	"github.com/policyflow/policyflow/topology"
)

// ErrUnknownSchema is returned (wrapped) when a record names a writer
// schema fingerprint that neither the embedded schemas nor the configured
// SchemaSource know.
var ErrUnknownSchema = errors.New("unknown writer schema")

// ErrNotEvent is returned (wrapped) for bytes that are not a single-object
// encoded Avro record.
var ErrNotEvent = errors.New("not an Avro single-object encoded record")

// Fingerprint is the CRC-64-AVRO fingerprint of a schema's canonical form,
// in the little-endian byte order single-object encoding uses.
type Fingerprint [8]byte

// String is the fingerprint in hex, the key of the schemas topic.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// ParseFingerprint reads a fingerprint from its hex form.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(f) {
		return f, fmt.Errorf("fingerprint %q: want 16 hex digits", s)
	}
	copy(f[:], b)
	return f, nil
}

// SchemaSource finds writer schemas the codec does not embed, e.g. those of
// newer writers published on the schemas topic. Lookup returns the schema
// JSON, or an error wrapping ErrUnknownSchema.
type SchemaSource interface {
	Lookup(ctx context.Context, fp Fingerprint) (string, error)
}

// writerSchema is a version of an event's schema that records name by
// its fingerprint, with what decoding them takes.
type writerSchema struct {
	name   string
	schema avro.Schema
	json   string
	wire   *wire // the layout of its records, checked before decoding
	// resolved is the schema resolved into the current schema of the
	// same name; newValue returns a new value of the event's Go type and
	// decoder reads the resolved schema into it.
	resolved avro.Schema
	newValue func() Event
	decoder  avro.ValDecoder
}

// headerSize is the length of the single-object encoding header: the two
// magic bytes and the fingerprint.
const headerSize = 10

// maxRecordBytes is the largest record a topic accepts. No string, bytes or
// array of a record can be larger, whatever its length prefix claims.
var maxRecordBytes = func() int {
	n, err := strconv.Atoi(topology.MaxMessageBytes)
	if err != nil || n <= 0 {
		// A constant of package topology: a bad one fails every test here.
		panic(fmt.Sprintf("events: topology.MaxMessageBytes %q is not a size", topology.MaxMessageBytes))
	}
	return n
}()

// newAPI is the Avro configuration of a codec, its own rather than the
// package default that any importer could change: strings, bytes and
// arrays no larger than a record can be.
func newAPI() avro.API {
	return avro.Config{
		MaxByteSliceSize:  maxRecordBytes,
		MaxSliceAllocSize: maxRecordBytes,
	}.Freeze()
}

// Codec encodes events in Avro single-object encoding with their current
// schema and decodes records written with any known version of it.
type Codec struct {
	api     avro.API
	readers sync.Pool              // *avro.Reader of api
	encs    sync.Pool              // *avro.Writer of api
	current map[string]avro.Schema // full name -> current schema
	currFP  map[string]Fingerprint // full name -> fingerprint of current
	mu      sync.RWMutex           // guards writers and source
	writers map[Fingerprint]*writerSchema
	source  SchemaSource
}

var (
	defaultOnce  sync.Once
	defaultCodec *Codec
	errDefault   error
)

// Default returns the codec for the embedded schemas, built once.
func Default() *Codec {
	defaultOnce.Do(func() { defaultCodec, errDefault = NewCodec() })
	if errDefault != nil {
		// The schemas are embedded at build time and covered by tests, so
		// this only happens for a broken build.
		panic(fmt.Sprintf("events: embedded schemas do not load: %v", errDefault))
	}
	return defaultCodec
}

// NewCodec loads the current and every historic schema from package schemas.
func NewCodec() (*Codec, error) {
	api := newAPI()
	c := &Codec{
		api:     api,
		readers: sync.Pool{New: func() any { return avro.NewReader(nil, 0, avro.WithReaderConfig(api)) }},
		encs:    sync.Pool{New: func() any { return avro.NewWriter(nil, 512, avro.WithWriterConfig(api)) }},
		current: map[string]avro.Schema{},
		currFP:  map[string]Fingerprint{},
		writers: map[Fingerprint]*writerSchema{},
	}
	cur, err := loadDir(schemas.Current, ".")
	if err != nil {
		return nil, err
	}
	for _, w := range cur {
		if w.newValue = newEvent[w.name]; w.newValue == nil {
			return nil, fmt.Errorf("events: schema %s has no Go type", w.name)
		}
		fp, err := fingerprint(w.schema)
		if err != nil {
			return nil, err
		}
		w.resolved = w.schema
		w.decoder = c.api.DecoderOf(w.resolved, reflect2.TypeOf(w.newValue()))
		c.current[w.name] = w.schema
		c.currFP[w.name] = fp
		c.writers[fp] = w
	}
	for name := range newEvent {
		if _, ok := c.current[name]; !ok {
			return nil, fmt.Errorf("events: Go type for %s has no schema file", name)
		}
	}
	hist, err := loadDir(schemas.History, "history")
	if err != nil {
		return nil, err
	}
	for _, w := range hist {
		if err := c.addWriter(w); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// SetSource sets where schemas the codec does not embed are looked up.
func (c *Codec) SetSource(s SchemaSource) { c.mu.Lock(); c.source = s; c.mu.Unlock() }

func loadDir(fsys fs.FS, dir string) ([]*writerSchema, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("events: list schemas in %s: %w", dir, err)
	}
	var out []*writerSchema
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".avsc") {
			continue
		}
		p := path.Join(dir, e.Name())
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("events: read schema %s: %w", p, err)
		}
		w, err := parseWriter(string(b))
		if err != nil {
			return nil, fmt.Errorf("events: schema %s: %w", p, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func parseWriter(js string) (*writerSchema, error) {
	// Every file defines its own nested types (Policy, NotifyTarget, ...),
	// so each is parsed with a cache of its own.
	s, err := avro.ParseWithCache(js, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	n, ok := s.(avro.NamedSchema)
	if !ok || s.Type() != avro.Record {
		return nil, errors.New("top level must be a named record")
	}
	w, err := compileWire(s)
	if err != nil {
		return nil, err
	}
	return &writerSchema{name: n.FullName(), schema: s, json: js, wire: w}, nil
}

func fingerprint(s avro.Schema) (Fingerprint, error) {
	var f Fingerprint
	b, err := soe.ComputeFingerprint(s)
	if err != nil {
		return f, fmt.Errorf("events: fingerprint: %w", err)
	}
	copy(f[:], b)
	return f, nil
}

// addWriter registers a writer schema and resolves it into the current
// reader schema of the same name.
func (c *Codec) addWriter(w *writerSchema) error {
	fp, err := fingerprint(w.schema)
	if err != nil {
		return err
	}
	c.mu.RLock()
	_, known := c.writers[fp]
	c.mu.RUnlock()
	if known {
		return nil
	}
	reader, ok := c.current[w.name]
	if !ok {
		return fmt.Errorf("events: writer schema %s (%s) has no reader schema here: %w", w.name, fp, ErrUnknownSchema)
	}
	// A fresh checker per resolution: hamba/avro caches by canonical form,
	// which drops defaults.
	res, err := avro.NewSchemaCompatibility().Resolve(reader, w.schema)
	if err != nil {
		return fmt.Errorf("events: writer schema %s (%s) cannot be read with the current schema: %w", w.name, fp, err)
	}
	w.resolved, w.newValue = res, newEvent[w.name]
	w.decoder = c.api.DecoderOf(w.resolved, reflect2.TypeOf(w.newValue()))
	c.mu.Lock()
	c.writers[fp] = w
	c.mu.Unlock()
	return nil
}

// Register adds a writer schema given as JSON (e.g. read from the schemas
// topic) and returns its fingerprint.
func (c *Codec) Register(schemaJSON string) (Fingerprint, error) {
	w, err := parseWriter(schemaJSON)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("events: register schema: %w", err)
	}
	fp, err := fingerprint(w.schema)
	if err != nil {
		return fp, err
	}
	return fp, c.addWriter(w)
}

// Schema returns the current schema of an event full name.
func (c *Codec) Schema(name string) (avro.Schema, bool) {
	s, ok := c.current[name]
	return s, ok
}

// CurrentSchemas returns the fingerprint and JSON of every current schema,
// for publishing on the schemas topic.
func (c *Codec) CurrentSchemas() map[Fingerprint]string {
	out := make(map[Fingerprint]string, len(c.currFP))
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, fp := range c.currFP {
		out[fp] = c.writers[fp].json
	}
	return out
}

// Encode writes v with its current schema in single-object encoding.
func (c *Codec) Encode(v Event) ([]byte, error) {
	name := v.SchemaName()
	s, ok := c.current[name]
	if !ok {
		return nil, fmt.Errorf("events: encode %s: no schema", name)
	}
	fp := c.currFP[name]
	// The header and the body are written into one pooled buffer and
	// copied out once (Marshal would copy the body out, and the header
	// would then be prepended by a second copy).
	w := c.encs.Get().(*avro.Writer)
	w.Reset(nil)
	w.Error = nil
	_, _ = w.Write(soe.Magic)
	_, _ = w.Write(fp[:])
	w.WriteVal(s, v)
	if err := w.Error; err != nil {
		c.encs.Put(w)
		return nil, fmt.Errorf("events: encode %s: %w", name, err)
	}
	out := append([]byte(nil), w.Buffer()...)
	if cap(w.Buffer()) <= maxPooledWriter {
		c.encs.Put(w)
	}
	return out, nil
}

// maxPooledWriter is the largest buffer an encoder goes back to the pool
// with: one very large event should not keep its buffer for good.
const maxPooledWriter = 1 << 20

// Peek returns the writer fingerprint and the event name of an encoded
// record, when the schema is known.
func (c *Codec) Peek(data []byte) (Fingerprint, string, error) {
	fp, err := header(data)
	if err != nil {
		return fp, "", err
	}
	c.mu.RLock()
	w, ok := c.writers[fp]
	c.mu.RUnlock()
	if !ok {
		return fp, "", fmt.Errorf("events: fingerprint %s: %w", fp, ErrUnknownSchema)
	}
	return fp, w.name, nil
}

// writer returns the writer schema of a fingerprint, asking the schema
// source when the codec does not know it yet.
func (c *Codec) writer(ctx context.Context, fp Fingerprint) (*writerSchema, error) {
	c.mu.RLock()
	w, ok := c.writers[fp]
	src := c.source
	c.mu.RUnlock()
	if ok {
		return w, nil
	}
	if src == nil {
		return nil, fmt.Errorf("events: fingerprint %s: %w", fp, ErrUnknownSchema)
	}
	js, err := src.Lookup(ctx, fp)
	if err != nil {
		return nil, fmt.Errorf("events: look up fingerprint %s: %w", fp, err)
	}
	got, err := c.Register(js)
	if err != nil {
		return nil, err
	}
	if got != fp {
		return nil, fmt.Errorf("events: schema source returned %s for fingerprint %s: %w", got, fp, ErrUnknownSchema)
	}
	c.mu.RLock()
	w = c.writers[fp]
	c.mu.RUnlock()
	return w, nil
}

// header returns the writer fingerprint of a record.
func header(data []byte) (Fingerprint, error) {
	var fp Fingerprint
	if len(data) < headerSize || data[0] != soe.Magic[0] || data[1] != soe.Magic[1] {
		return fp, fmt.Errorf("events: %d bytes: %w", len(data), ErrNotEvent)
	}
	copy(fp[:], data[2:headerSize])
	return fp, nil
}

// Decode reads a record written with any known version of its schema into
// a new value of its Go type. The record must be exactly one encoding:
// truncated records, trailing bytes and lengths that claim more than the
// record holds are errors wrapping ErrMalformed, and nothing is allocated
// for them beyond a small multiple of the record's size.
func (c *Codec) Decode(ctx context.Context, data []byte) (Event, error) {
	fp, err := header(data)
	if err != nil {
		return nil, err
	}
	w, err := c.writer(ctx, fp)
	if err != nil {
		return nil, err
	}
	v := w.newValue()
	if err := c.decode(fp, w, data, v, w.decoder); err != nil {
		return nil, err
	}
	return v, nil
}

// DecodeInto reads a record into v, which must be the Go type of the
// record's schema. It checks the record as Decode does.
func (c *Codec) DecodeInto(ctx context.Context, data []byte, v Event) error {
	fp, err := header(data)
	if err != nil {
		return err
	}
	w, err := c.writer(ctx, fp)
	if err != nil {
		return err
	}
	if w.name != v.SchemaName() {
		return fmt.Errorf("events: record is a %s, not a %s", w.name, v.SchemaName())
	}
	return c.decode(fp, w, data, v, nil)
}

// decode checks the body of a record against its writer's layout, then
// reads it with the writer schema resolved into the reader's, into v: with
// dec, the writer's decoder, when v is a value of its newValue, else
// looked up by v's type.
func (c *Codec) decode(fp Fingerprint, w *writerSchema, data []byte, v Event, dec avro.ValDecoder) (err error) {
	defer func() {
		// The body is checked before it is read, so a panic is a bug of
		// the decoder; it still must not take the stage down with it.
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panicked: %v: %w", p, ErrMalformed)
		}
		if err != nil {
			err = fmt.Errorf("events: decode record of schema %s (writer %s): %w", w.name, fp, err)
		}
	}()
	body := data[headerSize:]
	if err := checkBody(w.wire, body, headerSize); err != nil {
		return err
	}
	r := c.readers.Get().(*avro.Reader)
	defer func() {
		r.Reset(nil) // a pooled reader must not keep the record alive
		r.Error = nil
		c.readers.Put(r)
	}()
	r.Reset(body)
	r.Error = nil
	if dec != nil {
		dec.Decode(reflect2.PtrOf(v), r)
	} else {
		r.ReadVal(w.resolved, v)
	}
	switch {
	case errors.Is(r.Error, io.EOF) || errors.Is(r.Error, io.ErrUnexpectedEOF):
		return fmt.Errorf("truncated: the decoder ran past byte %d: %w", len(data), ErrMalformed)
	case r.Error != nil:
		return r.Error
	}
	// Peek at the end of the bytes sets io.EOF.
	if r.Peek(); r.Error == nil {
		return fmt.Errorf("trailing bytes after the decoder's end: %w", ErrMalformed)
	}
	return nil
}
