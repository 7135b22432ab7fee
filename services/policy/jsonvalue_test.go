package policy

import (
	"encoding/json"
	"math"
	"runtime"
	"strings"
	"testing"
)

func TestNumbersCompareByExactValue(t *testing.T) {
	n := func(s string) json.Number { return json.Number(s) }
	groups := [][]any{
		{n("150"), n("1.50e2"), n("150.000"), n("1500e-1"), n("0.0015E+5"), 150, uint8(150), uint64(150), 150.0, float32(150)},
		{n("0"), n("-0"), n("0.000"), n("0e999999999999999999999"), 0, 0.0, math.Copysign(0, -1)},
		{n("1e999999"), n("10e999998"), n("0.1e1000000"), n("1e+999999")},
		{n("1e999998")},
		{n("1e-999999"), n("0.0001e-999995")},
		{n("-1e-999999")},
		{n("1e" + strings.Repeat("9", 29)), n("0.01e1" + strings.Repeat("0", 28) + "1")},
		{n("1.1")},
		{1.1},
		{n("2.5"), 2.5, float32(2.5)},
		{n("9223372036854775807"), int64(math.MaxInt64)},
		{n("9223372036854775808"), float64(math.MaxInt64), uint64(1) << 63},
		{n("18446744073709551615"), uint64(math.MaxUint64)},
		{math.SmallestNonzeroFloat64},
		{n("4.9406564584124654e-324")}, // what the float is written as, not its exact value
		{n("-1")},
	}
	for i, g := range groups {
		for j, h := range groups {
			for _, a := range g {
				for _, b := range h {
					want := i == j
					if got := jsonEqual(a, b); got != want {
						t.Errorf("jsonEqual(%T %v, %T %v) = %v; want %v", a, a, b, b, got, want)
					}
					ka, _ := scalarKey(a)
					kb, _ := scalarKey(b)
					if (ka == kb) != want {
						t.Errorf("scalarKey(%T %v) = %q, scalarKey(%T %v) = %q; want them equal: %v", a, a, ka, b, b, kb, want)
					}
				}
			}
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), n("1e"), n("1.e5"), n(".5"), n("0x10"), n("1/2"), n("")} {
		if _, ok := numberKey(bad); ok {
			t.Errorf("numberKey(%v) is ok; want no key for what is no JSON number", bad)
		}
	}
}

// A number with a large exponent costs what its text costs: a filter or a
// body carrying 1e999999 does not make every comparison build the integer
// 10^999999.
func TestLargeExponentsCostLittle(t *testing.T) {
	a, b := json.Number("1e999999"), json.Number("10e999998")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	equal := jsonEqual(a, b)
	_, okA := scalarKey(a)
	_, okB := scalarKey(b)
	runtime.ReadMemStats(&after)
	if !equal || !okA || !okB {
		t.Fatalf("1e999999 and 10e999998: equal %v, keys %v %v", equal, okA, okB)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 256<<10 {
		t.Fatalf("comparing 1e999999 with 10e999998 allocated %d bytes, want at most 256 KiB", n)
	}
}

func TestRawKind(t *testing.T) {
	for raw, want := range map[string]string{
		` {"a":1}`: "an object", `[1]`: "an array", `"s"`: "a string", `true`: "a boolean",
		`false`: "a boolean", `null`: "null", `-1.5`: "a number", `  `: "nothing",
	} {
		if got := RawKind([]byte(raw)); got != want {
			t.Errorf("RawKind(%q) = %q, want %q", raw, got, want)
		}
	}
}
