package events

import (
	"context"
	"encoding/json"
	"reflect"
	"runtime/metrics"
	"testing"
)

// fuzzAllocLimit is what one decode of an input of at most fuzzSmallInput
// bytes may allocate. Honest records allocate a few dozen times their
// size; an allocation trusting a forged length would be far larger.
const (
	fuzzSmallInput = 1 << 10
	fuzzAllocLimit = 2 << 20
)

// FuzzDecode decodes any bytes with the codec of every schema, current and
// frozen. Decode must not panic, must not allocate more than a bound for a
// small input, and whatever it accepts must encode again and decode to the
// same value. Seeds: a valid record of every writer schema and the hostile
// records of TestLengthBeyondInputIsRefused; findings are committed under
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	c, err := NewCodec()
	if err != nil {
		f.Fatal(err)
	}
	for _, rec := range writerRecords(f, c) {
		f.Add(rec.data)
	}
	for _, h := range hostileRecords(c, 1<<44) {
		f.Add(h.data)
	}
	f.Add(reportedRecord)
	ctx := context.Background()
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	heapAllocs := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := c.Decode(ctx, data)
		if len(data) <= fuzzSmallInput {
			// Measured on a second decode of the same bytes: the first
			// decode of a schema also builds and caches its decoder.
			before := heapAllocs()
			_, _ = c.Decode(ctx, data)
			if n := heapAllocs() - before; n > fuzzAllocLimit {
				t.Fatalf("decode of %d bytes allocated %d bytes, want at most %d", len(data), n, fuzzAllocLimit)
			}
		}
		if err != nil {
			return
		}
		again, err := c.Encode(ev)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", ev.SchemaName(), err)
		}
		back, err := c.Decode(ctx, again)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", ev.SchemaName(), err)
		}
		if !reflect.DeepEqual(ev, back) {
			a, _ := json.Marshal(ev)
			z, _ := json.Marshal(back)
			t.Fatalf("re-encoding changed the %s:\nfirst: %s\nagain: %s", ev.SchemaName(), a, z)
		}
	})
}
