package events

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
	"github.com/hamba/avro/v2/soe"

	"github.com/policyflow/policyflow/schemas"
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

type writerSchema struct {
	name   string
	schema avro.Schema
	json   string
}

// Codec encodes events in Avro single-object encoding with their current
// schema and decodes records written with any known version of it.
type Codec struct {
	current map[string]avro.Schema // full name -> current schema
	currFP  map[string]Fingerprint // full name -> fingerprint of current
	mu      sync.RWMutex           // guards writers and resolved
	writers map[Fingerprint]writerSchema
	// resolved holds, per writer fingerprint, the writer schema resolved
	// into the current reader schema of the same name.
	resolved map[Fingerprint]avro.Schema
	source   SchemaSource
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
	c := &Codec{
		current:  map[string]avro.Schema{},
		currFP:   map[string]Fingerprint{},
		writers:  map[Fingerprint]writerSchema{},
		resolved: map[Fingerprint]avro.Schema{},
	}
	cur, err := loadDir(schemas.Current, ".")
	if err != nil {
		return nil, err
	}
	for _, w := range cur {
		if _, ok := newEvent[w.name]; !ok {
			return nil, fmt.Errorf("events: schema %s has no Go type", w.name)
		}
		fp, err := fingerprint(w.schema)
		if err != nil {
			return nil, err
		}
		c.current[w.name] = w.schema
		c.currFP[w.name] = fp
		c.writers[fp] = w
		c.resolved[fp] = w.schema
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

func loadDir(fsys fs.FS, dir string) ([]writerSchema, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("events: list schemas in %s: %w", dir, err)
	}
	var out []writerSchema
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

func parseWriter(js string) (writerSchema, error) {
	// Every file defines its own nested types (Policy, NotifyTarget, ...),
	// so each is parsed with a cache of its own.
	s, err := avro.ParseWithCache(js, "", &avro.SchemaCache{})
	if err != nil {
		return writerSchema{}, fmt.Errorf("parse: %w", err)
	}
	n, ok := s.(avro.NamedSchema)
	if !ok || s.Type() != avro.Record {
		return writerSchema{}, errors.New("top level must be a named record")
	}
	return writerSchema{name: n.FullName(), schema: s, json: js}, nil
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
func (c *Codec) addWriter(w writerSchema) error {
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
	c.mu.Lock()
	c.writers[fp] = w
	c.resolved[fp] = res
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
	body, err := avro.Marshal(s, v)
	if err != nil {
		return nil, fmt.Errorf("events: encode %s: %w", name, err)
	}
	out := make([]byte, 0, 10+len(body))
	out = append(out, soe.Magic...)
	out = append(out, fp[:]...)
	return append(out, body...), nil
}

// Peek returns the writer fingerprint and the event name of an encoded
// record, when the schema is known.
func (c *Codec) Peek(data []byte) (Fingerprint, string, error) {
	var fp Fingerprint
	if len(data) < 10 || data[0] != soe.Magic[0] || data[1] != soe.Magic[1] {
		return fp, "", fmt.Errorf("events: %d bytes: %w", len(data), ErrNotEvent)
	}
	copy(fp[:], data[2:10])
	c.mu.RLock()
	w, ok := c.writers[fp]
	c.mu.RUnlock()
	if !ok {
		return fp, "", fmt.Errorf("events: fingerprint %s: %w", fp, ErrUnknownSchema)
	}
	return fp, w.name, nil
}

func (c *Codec) readerFor(ctx context.Context, fp Fingerprint) (string, avro.Schema, error) {
	c.mu.RLock()
	w, ok := c.writers[fp]
	res := c.resolved[fp]
	src := c.source
	c.mu.RUnlock()
	if ok {
		return w.name, res, nil
	}
	if src == nil {
		return "", nil, fmt.Errorf("events: fingerprint %s: %w", fp, ErrUnknownSchema)
	}
	js, err := src.Lookup(ctx, fp)
	if err != nil {
		return "", nil, fmt.Errorf("events: look up fingerprint %s: %w", fp, err)
	}
	got, err := c.Register(js)
	if err != nil {
		return "", nil, err
	}
	if got != fp {
		return "", nil, fmt.Errorf("events: schema source returned %s for fingerprint %s: %w", got, fp, ErrUnknownSchema)
	}
	c.mu.RLock()
	w, res = c.writers[fp], c.resolved[fp]
	c.mu.RUnlock()
	return w.name, res, nil
}

// Decode reads a record written with any known version of its schema into
// a new value of its Go type.
func (c *Codec) Decode(ctx context.Context, data []byte) (Event, error) {
	if len(data) < 10 || data[0] != soe.Magic[0] || data[1] != soe.Magic[1] {
		return nil, fmt.Errorf("events: %d bytes: %w", len(data), ErrNotEvent)
	}
	var fp Fingerprint
	copy(fp[:], data[2:10])
	name, s, err := c.readerFor(ctx, fp)
	if err != nil {
		return nil, err
	}
	v := newEvent[name]()
	if err := avro.Unmarshal(s, data[10:], v); err != nil {
		return nil, fmt.Errorf("events: decode %s (writer %s): %w", name, fp, err)
	}
	return v, nil
}

// DecodeInto reads a record into v, which must be the Go type of the
// record's schema.
func (c *Codec) DecodeInto(ctx context.Context, data []byte, v Event) error {
	if len(data) < 10 || data[0] != soe.Magic[0] || data[1] != soe.Magic[1] {
		return fmt.Errorf("events: %d bytes: %w", len(data), ErrNotEvent)
	}
	var fp Fingerprint
	copy(fp[:], data[2:10])
	name, s, err := c.readerFor(ctx, fp)
	if err != nil {
		return err
	}
	if name != v.SchemaName() {
		return fmt.Errorf("events: record is a %s, not a %s", name, v.SchemaName())
	}
	if err := avro.Unmarshal(s, data[10:], v); err != nil {
		return fmt.Errorf("events: decode %s (writer %s): %w", name, fp, err)
	}
	return nil
}
