package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestBodyHashIsSHA256(t *testing.T) {
	// The first 16 bytes of SHA-256("{}"): any process, any language,
	// gets the same name for the same bytes.
	if got, want := BodyHash("{}"), "44136fa355b3678a1146ad16f7e8649e"; got != want {
		t.Fatalf("BodyHash({}) = %s, want %s", got, want)
	}
	if BodyHash(`{"a":1}`) == BodyHash(`{"a":2}`) {
		t.Fatal("two bodies got one hash")
	}
}

// HeaderOf, reading a body back from the catalog, derives what Check gave
// when the body entered, byte for byte.
func TestHeaderOfTheCanonicalBodyIsCheckedHeader(t *testing.T) {
	tests := []struct {
		name   string
		raw    string
		wantMC string
	}{
		{"conditions", rawBody(nil), `{"ONAPName":"DCAE"}`},
		{"no conditions", rawBody(map[string]string{"matchingConditions": ""}), "{}"},
		{"empty conditions", rawBody(map[string]string{"matchingConditions": "{}"}), "{}"},
		{"numbers, nesting and HTML kept as given, keys sorted",
			rawBody(map[string]string{"matchingConditions": `{"z": 1.50, "ONAPName": "<DCAE&>", "a": {"y": [1, 2e3], "b": null}}`}),
			`{"ONAPName":"<DCAE&>","a":{"b":null,"y":[1,2e3]},"z":1.50}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Check([]byte(tt.raw))
			if err != nil {
				t.Fatal(err)
			}
			h := c.Header()
			if h.MatchingConditions != tt.wantMC {
				t.Fatalf("matchingConditions %s, want %s", h.MatchingConditions, tt.wantMC)
			}
			if h.PolicyID != c.PolicyID || h.PolicyName != c.PolicyName || h.PolicyVersion != c.PolicyVersion || h.BodyHash != BodyHash(string(c.JSON)) {
				t.Fatalf("header %+v does not name the checked body %+v", h, c)
			}
			back, err := HeaderOf(string(c.JSON))
			if err != nil {
				t.Fatal(err)
			}
			if back != h {
				t.Fatalf("HeaderOf the canonical body\n got  %+v\n want %+v", back, h)
			}
		})
	}
}

func TestHeaderOfRefuses(t *testing.T) {
	for _, body := range []string{`[]`, `{`, `{"config": 1}`, `{"policyName": "DCAE.X.1.xml", "matchingConditions": [1]}`} {
		if h, err := HeaderOf(body); err == nil {
			t.Errorf("HeaderOf(%s) = %+v, want an error", body, h)
		}
	}
}

// Filters match a header's Matchable body exactly as they match the whole
// body: the header carries everything they look at.
func TestFiltersMatchTheHeaderAsTheBody(t *testing.T) {
	bodies := []string{
		rawBody(nil),
		rawBody(map[string]string{"matchingConditions": ""}),
		rawBody(map[string]string{"matchingConditions": `{"ONAPName": "DCAE", "ConfigName": "vm", "key1": "value1", "n": 2.0}`}),
		rawBody(map[string]string{"policyName": `"DCAE.Config_other.3.xml"`, "policyVersion": `"3"`, "matchingConditions": `{"key1": "value2"}`}),
	}
	filters := []Filter{
		{PolicyName: "DCAE.Config_VM_.*"},
		{PolicyName: "DCAE.Config_VM_MEMORY", OnapName: "DCAE"},
		{PolicyName: "DCAE.*", ConfigName: "vm", ConfigAttributes: map[string]any{"key1": "value1"}},
		{PolicyName: "DCAE.*", ConfigAttributes: map[string]any{"n": 2}},
		{PolicyName: "DCAE.Config_other.*", ConfigAttributes: map[string]any{"key1": "value2"}},
	}
	ix := NewIndex()
	for i, f := range filters {
		cf, err := CompileFilter(f)
		if err != nil {
			t.Fatal(err)
		}
		ix.Add(string(rune('a'+i)), cf)
	}
	for _, raw := range bodies {
		c, err := Check([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		whole, err := DecodeBody(c.JSON)
		if err != nil {
			t.Fatal(err)
		}
		head, err := c.Header().Matchable()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ix.Matches(head), ix.Matches(whole); !slices.Equal(got, want) {
			t.Errorf("%s: the header matches %v, the body %v", c.PolicyName, got, want)
		}
		if len(ix.Matches(whole)) == 0 {
			t.Errorf("%s: no filter matches it; the case tests nothing", c.PolicyName)
		}
	}
	if _, err := (Header{PolicyName: "DCAE.X.1.xml", MatchingConditions: `[1]`}).Matchable(); err == nil || !strings.Contains(err.Error(), "not an object") {
		t.Fatalf("conditions that are no object: %v", err)
	}
}
