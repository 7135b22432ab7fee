package admit

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

func imageOverride(t *testing.T, id, image string, created time.Time, priority int32) *Compiled {
	t.Helper()
	c, err := CompilePolicy(&events.AppPolicy{PolicyID: id, Mode: ModeEnforce, Created: created, Priority: priority,
		ObjectModel: `{"field":"image","value":"` + image + `","?":{"type":"io.policyflow.admission.DefaultOverride"}}`})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Two image overrides for one tenant: the later-created one has the lower
// id, yet the order follows creation (and priority above it), never ids;
// the verdict warns that both set the image, naming the winner.
func TestMutationOrderFollowsPriorityThenCreation(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	older := imageOverride(t, "zz-older", "ubuntu-old", t0, 0)
	newer := imageOverride(t, "aa-newer", "ubuntu-new", t0.Add(time.Minute), 0)
	req := mustRequest(t, `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web"}]}`)
	cases := []struct {
		name     string
		policies []*Compiled
		image    string
		winner   string
	}{
		{"later created wins at equal priority", []*Compiled{older, newer}, "ubuntu-new", "aa-newer"},
		{"the order given does not matter", []*Compiled{newer, older}, "ubuntu-new", "aa-newer"},
		{"higher priority wins over creation", []*Compiled{imageOverride(t, "zz-older", "ubuntu-old", t0, 5), newer}, "ubuntu-old", "zz-older"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Evaluate(context.Background(), req, tc.policies)
			if err != nil {
				t.Fatal(err)
			}
			if !v.Admitted || v.Request.Applications[0].Image != tc.image {
				t.Fatalf("image = %q, admitted %v; want %q", v.Request.Applications[0].Image, v.Admitted, tc.image)
			}
			if len(v.Mutations) != 2 {
				t.Errorf("mutations = %+v, want both overrides recorded", v.Mutations)
			}
			if len(v.Warnings) != 1 || v.Warnings[0].Rule != ConflictRule || v.Warnings[0].PolicyID != tc.winner ||
				!strings.Contains(v.Warnings[0].Message, "image is set by 2 policies") ||
				!strings.Contains(v.Warnings[0].Message, "zz-older") || !strings.Contains(v.Warnings[0].Message, "aa-newer") ||
				!strings.Contains(v.Warnings[0].Message, "policy "+tc.winner+" wins with \"") {
				t.Errorf("warnings = %+v, want one conflict naming both policies and the winner %s", v.Warnings, tc.winner)
			}
		})
	}
	// A request that set the image itself is left alone by both, and no
	// conflict is reported.
	v, err := Evaluate(context.Background(), mustRequest(t, `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","image":"mine"}]}`), []*Compiled{older, newer})
	if err != nil || v.Request.Applications[0].Image != "mine" || len(v.Warnings) != 0 || len(v.Mutations) != 0 {
		t.Errorf("request with its own image: %+v, %v", v, err)
	}
}

func TestPriorityOutOfRange(t *testing.T) {
	_, err := CompilePolicy(&events.AppPolicy{PolicyID: "p", Priority: MaxPriority + 1,
		ObjectModel: `{"field":"image","value":"x","?":{"type":"io.policyflow.admission.DefaultOverride"}}`})
	var pe *ParamError
	if err == nil || !errors.As(err, &pe) || pe.Field != "priority" {
		t.Errorf("priority over the limit: %v", err)
	}
}

// An override of instances without from would never apply: refused,
// saying what to add.
func TestInstancesOverrideNeedsFrom(t *testing.T) {
	_, err := Compile("p", json.RawMessage(`{"field":"instances","value":3,"?":{"type":"io.policyflow.admission.DefaultOverride"}}`), "", nil)
	if err == nil || !strings.Contains(err.Error(), `objectModel.from: is missing`) || !strings.Contains(err.Error(), `add "from": 1`) {
		t.Errorf("instances override without from: %v", err)
	}
	c := mustCompile(t, "p", `{"field":"instances","value":3,"from":1,"?":{"type":"io.policyflow.admission.DefaultOverride"}}`, "")
	v, err := Evaluate(context.Background(), mustRequest(t, `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web"}]}`), []*Compiled{c})
	if err != nil || v.Request.Applications[0].Instances != 3 {
		t.Errorf("instances override with from 1: %+v, %v", v.Request, err)
	}
}
