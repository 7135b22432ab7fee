package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
)

// fill sets every field of v to a non-zero value, so a round trip proves
// each Go field is carried by its schema field.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed+1)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.UnixMilli(1_700_000_000_000 + int64(seed)).UTC()))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), seed*31+i)
		}
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed%1000 + 1))
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), seed+1)
		fill(s.Index(1), seed+2)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		e := reflect.New(v.Type().Elem()).Elem()
		fill(k, seed+1)
		fill(e, seed+2)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

// enumFix puts valid enum symbols where the filler wrote arbitrary strings.
func enumFix(ev Event) {
	switch e := ev.(type) {
	case *PolicyCatalogEntry:
		e.Status = StatusErrored
	case *PolicyChange:
		e.Action = ActionRemoved
	case *Component:
		e.Notify.Kind = NotifyScript
	case *ComponentPolicies:
		e.Notify.Kind = NotifyWebhook
	case *ComponentApplied:
		e.Notify.Kind = NotifyScript
	case *CatchupRequest:
		e.Scope = ScopeDeployment
	case *ParticipantOperation:
		e.Kind = "DEPLOY"
	case *ParticipantMessage:
		e.Kind = "RESULT"
	case *ReplicaState:
		e.Kind = "ELEMENT"
	}
}

func TestEveryEventRoundTrips(t *testing.T) {
	c, err := NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range SchemaNames() {
		t.Run(name, func(t *testing.T) {
			in := newEvent[name]()
			fill(reflect.ValueOf(in).Elem(), 7)
			enumFix(in)
			b, err := c.Encode(in)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			fp, got, err := c.Peek(b)
			if err != nil || got != name {
				t.Fatalf("peek: %s %v, want %s", got, err, name)
			}
			if fp != c.currFP[name] {
				t.Fatalf("fingerprint %s, want current %s", fp, c.currFP[name])
			}
			out, err := c.Decode(context.Background(), b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(in, out) {
				a, _ := json.Marshal(in)
				z, _ := json.Marshal(out)
				t.Fatalf("round trip changed the event:\n in: %s\nout: %s", a, z)
			}
		})
	}
}

func TestZeroValuesEncode(t *testing.T) {
	c := Default()
	for _, name := range SchemaNames() {
		v := newEvent[name]()
		enumFix(v)
		if _, err := c.Encode(v); err != nil {
			// Enum fields left empty are an error by design: a writer must
			// say which symbol it means. Everything else must encode.
			var hasEnum bool
			s, _ := c.Schema(name)
			for _, f := range s.(*avro.RecordSchema).Fields() {
				if f.Type().Type() == avro.Enum {
					hasEnum = true
				}
			}
			if !hasEnum {
				t.Errorf("%s: zero value does not encode: %v", name, err)
			}
		}
	}
}

func TestDecodeRefusesGarbageWithReason(t *testing.T) {
	c := Default()
	_, err := c.Decode(context.Background(), []byte(`{"json": "not avro"}`))
	if !errors.Is(err, ErrNotEvent) {
		t.Fatalf("got %v, want ErrNotEvent", err)
	}
	bad := []byte{0xc3, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0}
	_, err = c.Decode(context.Background(), bad)
	if !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("got %v, want ErrUnknownSchema", err)
	}
	// A record of another event type.
	good, err := c.Encode(&CatchupRequest{RequestID: "r", Scope: ScopeAll, Reason: "periodic"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DecodeInto(context.Background(), good, &Component{}); err == nil {
		t.Fatal("a CatchupRequest decoded into a Component")
	}
}

// evolve returns the current schema JSON of name with its fields edited.
func evolve(t *testing.T, name string, edit func(fields []any) []any) string {
	t.Helper()
	s, _ := Default().Schema(name)
	var m map[string]any
	if err := json.Unmarshal([]byte(s.String()), &m); err != nil {
		t.Fatal(err)
	}
	m["fields"] = edit(m["fields"].([]any))
	b, _ := json.Marshal(m)
	return string(b)
}

func TestReadsNewerWriter(t *testing.T) {
	// A newer writer added a field with a default; this reader ignores it.
	newer := evolve(t, SchemaCatchupRequest, func(f []any) []any {
		return append(f, map[string]any{"name": "priority", "type": "int", "default": 0})
	})
	ws, err := avro.ParseWithCache(newer, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := avro.Marshal(ws, map[string]any{
		"request_id": "r1", "scope": "DEPLOYMENT", "deployment_id": map[string]any{"string": "dep-1"},
		"reason": "on-demand", "requested_at": time.UnixMilli(5).UTC(), "component_id": nil, "priority": 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	fp, _ := fingerprint(ws)
	rec := append(append([]byte{0xc3, 0x01}, fp[:]...), body...)

	c, _ := NewCodec()
	if _, err := c.Decode(context.Background(), rec); !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("without a source: %v, want ErrUnknownSchema", err)
	}
	c.SetSource(sourceFunc(func(_ context.Context, got Fingerprint) (string, error) {
		if got != fp {
			return "", ErrUnknownSchema
		}
		return newer, nil
	}))
	ev, err := c.Decode(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	got := ev.(*CatchupRequest)
	if got.RequestID != "r1" || got.Scope != ScopeDeployment || got.DeploymentID == nil || *got.DeploymentID != "dep-1" {
		t.Fatalf("decoded %+v", got)
	}
}

func TestReadsOlderWriter(t *testing.T) {
	// An older writer did not have "tenant" yet; the reader gets its default.
	older := evolve(t, SchemaComponent, func(f []any) []any {
		var out []any
		for _, x := range f {
			if x.(map[string]any)["name"] != "tenant" {
				out = append(out, x)
			}
		}
		return out
	})
	c, _ := NewCodec()
	fp, err := c.Register(older)
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := avro.ParseWithCache(older, "", &avro.SchemaCache{})
	body, err := avro.Marshal(ws, map[string]any{
		"component_id": "c1", "deployment_id": "d1", "service_component_name": "scn1",
		"policy_ids": []any{"DCAE.Config_VM_MEMORY"}, "policy_filters": []any{},
		"notify": map[string]any{"kind": "SCRIPT", "script_path": "/bin/true", "webhook_url": "", "timeout_ms": 0},
		"config": "{}", "generation": int64(3), "updated_at": time.UnixMilli(9).UTC(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var comp Component
	if err := c.DecodeInto(context.Background(), append(append([]byte{0xc3, 0x01}, fp[:]...), body...), &comp); err != nil {
		t.Fatal(err)
	}
	if comp.ComponentID != "c1" || comp.Tenant != "" || comp.Notify.ScriptPath != "/bin/true" || comp.Generation != 3 {
		t.Fatalf("decoded %+v", comp)
	}
}

func TestRegisterRefusesIncompatibleSchema(t *testing.T) {
	// Changing a field's type is not readable by the current reader.
	bad := evolve(t, SchemaComponent, func(f []any) []any {
		for _, x := range f {
			if m := x.(map[string]any); m["name"] == "generation" {
				m["type"] = "string"
				m["default"] = "0"
			}
		}
		return f
	})
	c, _ := NewCodec()
	if _, err := c.Register(bad); err == nil {
		t.Fatal("an incompatible writer schema was accepted")
	}
}

type sourceFunc func(context.Context, Fingerprint) (string, error)

func (f sourceFunc) Lookup(ctx context.Context, fp Fingerprint) (string, error) { return f(ctx, fp) }

func TestFingerprintHex(t *testing.T) {
	fp := Default().currFP[SchemaComponent]
	back, err := ParseFingerprint(fp.String())
	if err != nil || back != fp {
		t.Fatalf("hex round trip: %v %v", back, err)
	}
	if _, err := ParseFingerprint("xyz"); err == nil {
		t.Fatal("bad hex accepted")
	}
}
