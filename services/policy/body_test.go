package policy

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestPolicyID(t *testing.T) {
	tests := []struct {
		name    string
		want    string
		wantErr string
	}{
		{name: "DCAE.Config_VM_MEMORY.222.xml", want: "DCAE.Config_VM_MEMORY"},
		{name: "DCAE.Config_host_capacity_policy_id_value.69.xml", want: "DCAE.Config_host_capacity_policy_id_value"},
		{name: "DCAE_alex.Config_alex_policy_number_1.3.xml", want: "DCAE_alex.Config_alex_policy_number_1"},
		{name: "DCAE.Config_VM_MEMORY", want: "DCAE.Config_VM_MEMORY"},
		{name: "DCAE.Config_VM_MEMORY.5.json", want: "DCAE.Config_VM_MEMORY"},
		{name: "DCAE.Config_x.5.xml.6.xml", want: "DCAE.Config_x.5.xml"},
		{name: "DCAE.Config_x.v5.xml", want: "DCAE.Config_x.v5.xml"}, // version not digits: no suffix
		{name: "DCAE.Config_x.5.x1", want: "DCAE.Config_x.5.x1"},     // extension not letters: no suffix
		{name: "DCAE.Config_x.5.", want: "DCAE.Config_x.5."},
		{name: "", wantErr: "policyName is empty"},
		{name: ".5.xml", wantErr: `nothing is left`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyID(tt.name)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrNoPolicyID) {
					t.Fatalf("PolicyID(%q) = %q, %v; want error containing %q", tt.name, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("PolicyID(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
			}
			b := Body{"policyName": tt.name}
			if id, err := b.PolicyID(); err != nil || id != tt.want {
				t.Fatalf("Body.PolicyID() = %q, %v; want %q", id, err, tt.want)
			}
		})
	}
}

func TestPolicyIDEqualsReferenceExpression(t *testing.T) {
	// The policy-handler strips `\.[0-9]+\.[a-zA-Z]+$`; PolicyID must agree
	// on every name.
	ref := regexp.MustCompile(`\.[0-9]+\.[a-zA-Z]+$`)
	parts := []string{".", "1", "23", "xml", "X", "a", "_", "é", "-", "0"}
	r := rand.New(rand.NewPCG(3, 5))
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		for n := r.IntN(7); n >= 0; n-- {
			sb.WriteString(parts[r.IntN(len(parts))])
		}
		name := sb.String()
		want := ref.ReplaceAllString(name, "")
		got, err := PolicyID(name)
		if want == "" {
			if err == nil {
				t.Fatalf("PolicyID(%q) = %q; want an error", name, got)
			}
			continue
		}
		if got != want {
			t.Fatalf("PolicyID(%q) = %q; want %q", name, got, want)
		}
	}
}

func TestVersion(t *testing.T) {
	tests := []struct {
		raw    any
		want   int64
		wantOK bool
	}{
		{"5", 5, true},
		{"10", 10, true},
		{"007", 7, true},
		{"0", 0, true},
		{"", 0, false},
		{"5a", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{" 5", 0, false},
		{"5.0", 0, false},
		{"٣", 0, false}, // Arabic-Indic digit: not an ASCII digit
		{"99999999999999999999", 0, false},
		{json.Number("5"), 0, false},
		{5.0, 0, false},
		{nil, 0, false},
	}
	for _, tt := range tests {
		b := Body{"policyVersion": tt.raw}
		got, ok := b.Version()
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Version(%#v) = %d, %v; want %d, %v", tt.raw, got, ok, tt.want, tt.wantOK)
		}
	}
	if _, ok := (Body{}).Version(); ok {
		t.Errorf("Version of a body without policyVersion is ok")
	}
}

func TestValidate(t *testing.T) {
	valid := func(mod func(Body)) Body {
		b := Body{
			"policyName":          "DCAE.Config_x.1.xml",
			"policyVersion":       "1",
			"policyConfigStatus":  "CONFIG_RETRIEVED",
			"policyConfigMessage": "Config Retrieved! ",
			"config":              `{"a":1}`,
		}
		if mod != nil {
			mod(b)
		}
		return b
	}
	tests := []struct {
		name    string
		body    Body
		wantErr string
	}{
		{name: "valid string config", body: valid(nil)},
		{name: "valid parsed config", body: valid(func(b Body) { b["config"] = map[string]any{"a": 1.0} })},
		{name: "valid non JSON string", body: valid(func(b Body) { b["config"] = "not json" })},
		{name: "valid zero", body: valid(func(b Body) { b["config"] = "0" })},
		{name: "valid false", body: valid(func(b Body) { b["config"] = false })},
		{name: "not found", body: valid(func(b Body) {
			b["policyConfigStatus"] = "CONFIG_NOT_FOUND"
			b["policyConfigMessage"] = "PE300 - Data Issue: Incorrect Params passed: Decision not a Permit."
		}), wantErr: `policyConfigStatus is "CONFIG_NOT_FOUND" (string), want "CONFIG_RETRIEVED" (policyConfigMessage "PE300`},
		{name: "status missing", body: valid(func(b Body) { delete(b, "policyConfigStatus") }), wantErr: "policyConfigStatus is missing"},
		{name: "status wrong type", body: valid(func(b Body) { b["policyConfigStatus"] = 1.0 }), wantErr: "policyConfigStatus is 1 (number)"},
		{name: "config missing", body: valid(func(b Body) { delete(b, "config") }), wantErr: "config is missing"},
		{name: "config null", body: valid(func(b Body) { b["config"] = nil }), wantErr: "config is empty"},
		{name: "config empty string", body: valid(func(b Body) { b["config"] = "" }), wantErr: "config is empty"},
		{name: "config empty object string", body: valid(func(b Body) { b["config"] = " {} " }), wantErr: "config is empty"},
		{name: "config empty array", body: valid(func(b Body) { b["config"] = []any{} }), wantErr: "config is empty"},
		{name: "config JSON null string", body: valid(func(b Body) { b["config"] = "null" }), wantErr: "config is empty"},
		{name: "config empty object", body: valid(func(b Body) { b["config"] = map[string]any{} }), wantErr: "config is empty"},
		{name: "nil body", body: nil, wantErr: "body is null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.body)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v; want error containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("Validate() error %v does not wrap ErrInvalidBody", err)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name   string
		config any
		want   any
	}{
		{name: "object string", config: `{"min_memory":"2GB","n":12345678901234567890}`,
			want: map[string]any{"min_memory": "2GB", "n": json.Number("12345678901234567890")}},
		{name: "array string", config: `[1, "a"]`, want: []any{json.Number("1"), "a"}},
		{name: "JSON string in string", config: `"hello"`, want: "hello"},
		{name: "number string", config: `42`, want: json.Number("42")},
		{name: "plain text kept", config: `min_memory=2GB`, want: `min_memory=2GB`},
		{name: "broken JSON kept", config: `{"a":`, want: `{"a":`},
		{name: "trailing garbage kept", config: `{"a":1} x`, want: `{"a":1} x`},
		{name: "two values kept", config: `{} {}`, want: `{} {}`},
		{name: "already parsed kept", config: map[string]any{"a": "b"}, want: map[string]any{"a": "b"}},
		{name: "empty string kept", config: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Body{"policyName": "DCAE.Config_x.1.xml", "config": tt.config, "extra": "kept"}
			got := Normalize(in)
			if !reflect.DeepEqual(got["config"], tt.want) {
				t.Fatalf("config = %#v; want %#v", got["config"], tt.want)
			}
			if got["extra"] != "kept" || got["policyName"] != "DCAE.Config_x.1.xml" {
				t.Fatalf("other fields lost: %#v", got)
			}
			if !reflect.DeepEqual(in["config"], tt.config) {
				t.Fatalf("input modified: %#v", in["config"])
			}
		})
	}
	if Normalize(nil) != nil {
		t.Fatalf("Normalize(nil) is not nil")
	}
	if got := Normalize(Body{"policyName": "x"}); len(got) != 1 {
		t.Fatalf("Normalize added fields: %#v", got)
	}
}

func TestDecodeBodies(t *testing.T) {
	data := []byte(`[{"policyName":"DCAE.Config_x.2.xml","policyVersion":"2","config":"{}","unknownField":{"deep":[1,2]},"n":1.50}]`)
	bodies, err := DecodeBodies(data)
	if err != nil {
		t.Fatalf("DecodeBodies: %v", err)
	}
	if len(bodies) != 1 || bodies[0].PolicyName() != "DCAE.Config_x.2.xml" {
		t.Fatalf("got %#v", bodies)
	}
	out, err := json.Marshal(bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"unknownField":{"deep":[1,2]}`) || !strings.Contains(string(out), `"n":1.50`) {
		t.Fatalf("unknown fields or exact numbers lost: %s", out)
	}
	for _, bad := range []string{`{}`, `[1]`, `[{}] x`, `[`} {
		if _, err := DecodeBodies([]byte(bad)); err == nil {
			t.Errorf("DecodeBodies(%s) succeeded", bad)
		}
	}
	if _, err := DecodeBody([]byte(`[]`)); err == nil || !strings.Contains(err.Error(), "want a JSON object") {
		t.Errorf("DecodeBody([]) = %v", err)
	}
	b, err := DecodeBody([]byte(`{"policyName":"a"}`))
	if err != nil || b.PolicyName() != "a" {
		t.Errorf("DecodeBody = %v, %v", b, err)
	}
}
