package admit

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseRequest: any bytes as a deployment request are refused with a
// *RequestError or accepted as a request that normalizes to itself and
// evaluates without panicking.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`,
		`{"deployment_id":"d1","tenant":"t1","environment":"e","applications":[{"name":"a","class":"x.A","inherits":["y.B"],"instances":3,"properties":{"k":[1,{"z":null}]},"scripts":["s"],"component":{"policy_ids":["P.x"],"policy_filters":[{"filter_id":"f","policyName":"P.*"}],"notify":{"kind":"none"}}}]}`,
		`{"deployment_id":"../x","tenant":"","applications":[]}`,
		`{"deployment_id":"d","tenant":"t","applications":[{"name":"a","class":"x.A","instances":1e99}]}`,
		`[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	policies := []*Compiled{}
	for i, m := range []string{flavorModel,
		`{"field":"image","value":"img","?":{"type":"io.policyflow.admission.DefaultOverride"}}`,
		`{"validations":[{"expression":"app.instances < 5 && app.image != ''","message":"m"}],"mutations":[{"field":"properties.o","expression":"request.tenant"}],"?":{"type":"io.policyflow.admission.CEL"}}`,
	} {
		c, err := Compile(string(rune('a'+i)), json.RawMessage(m), "", nil)
		if err != nil {
			f.Fatal(err)
		}
		policies = append(policies, c)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<10 {
			return
		}
		r, err := ParseRequest(data)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Field == "" {
				t.Fatalf("refusal %T %v names no field", err, err)
			}
			return
		}
		again := r.Clone()
		if err := again.Normalize(); err != nil {
			t.Fatalf("an accepted request no longer normalizes: %v", err)
		}
		v, err := Evaluate(context.Background(), r, policies)
		if err != nil {
			t.Fatal(err)
		}
		if v.Request == nil || v.Admitted != (len(v.Violations) == 0) {
			t.Fatalf("verdict %+v", v)
		}
	})
}

// FuzzCompile: any objectModel is refused with a *ParamError or an
// *UnknownKindError, or compiles.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{flavorModel,
		`{"applications":["a.B"],"namespaces":["c"],"?":{"type":"io.policyflow.admission.Blacklist"}}`,
		`{"validations":[{"expression":"app.flavor ==","message":"m"}],"?":{"type":"io.policyflow.admission.CEL"}}`,
		`{"mutations":[{"field":"instances","expression":"app.instances + 1"}],"?":{"type":"io.policyflow.admission.CEL"}}`,
		`{"field":"properties.x","value":{"a":[1]},"from":null,"?":{"type":"io.policyflow.admission.DefaultOverride"}}`,
		`{"?":{"type":"com.example.MyAspect"}}`, `[]`, `{"?":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4<<10 {
			return
		}
		_, err := Compile("p", data, "", nil)
		if err != nil && !IsParamError(err) && !IsUnknownKind(err) {
			t.Fatalf("refusal %T %v is neither a parameter error nor an unknown kind", err, err)
		}
	})
}
