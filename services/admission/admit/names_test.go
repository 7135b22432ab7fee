package admit

import (
	"context"
	"strings"
	"testing"
)

// owners is Owners as maps: component id -> tenant, folder -> holders,
// deployment -> tenants.
type owners struct {
	comps   map[string]string
	folders map[string][]Holder
	deps    map[string][]string
}

func (o owners) Component(id string) (string, bool) { t, ok := o.comps[id]; return t, ok }
func (o owners) Folder(scn string) []Holder         { return o.folders[scn] }
func (o owners) FoldersUnder(scn string) []Holder {
	var out []Holder
	for f, hs := range o.folders {
		if strings.HasPrefix(f, scn+":") {
			out = append(out, hs...)
		}
	}
	return out
}
func (o owners) Deployment(id string) []string { return o.deps[id] }

// globex holds deployment gx.prod with component gx.prod.web in folder
// gx.prod.web, acme holds deployment gx with component gx.api in folder
// acme-api and component sh.acme in folder shared:acme, and the operators
// (no tenant) deployment ops with component
// ops.agent.
var globexAndAcme = owners{
	comps:   map[string]string{"gx.prod.web": "globex", "gx.api": "acme", "ops.agent": "", "sh.acme": "acme"},
	folders: map[string][]Holder{"gx.prod.web": {{"gx.prod.web", "globex"}}, "acme-api": {{"gx.api", "acme"}}, "shared:acme": {{"sh.acme", "acme"}}},
	deps:    map[string][]string{"gx.prod": {"globex"}, "gx": {"acme"}, "ops": {""}},
}

func TestCheckClaim(t *testing.T) {
	cases := []struct {
		name  string
		claim Claim
		owner string
		other bool
		msg   string // "" when the claim holds
	}{
		{"the owner writes its component again", Claim{"globex", "gx.prod", "gx.prod.web", "gx.prod.web", false}, "", false, ""},
		{"a new deployment with new names", Claim{"acme", "ac.prod", "ac.prod.web", "ac.prod.web", false}, "", false, ""},
		{"another tenant's deployment", Claim{"acme", "gx.prod", "gx.prod.db", "gx.prod.db", false}, "globex", true, `deployment gx.prod belongs to tenant "globex"`},
		{"another tenant's deployment, no component", Claim{Tenant: "acme", DeploymentID: "gx.prod"}, "globex", true, `deployment gx.prod belongs to tenant "globex"`},
		{"another tenant's component from an own deployment", Claim{"acme", "gx", "gx.prod.web", "gx.prod.web", false}, "globex", true, `component gx.prod.web belongs to tenant "globex"`},
		{"a new id in another tenant's deployment", Claim{"acme", "acme-dep", "gx.prod.db", "acme-db", false}, "globex", true, `component id gx.prod.db is the name of an application of deployment gx.prod, which belongs to tenant "globex"`},
		{"another tenant's folder", Claim{"acme", "gx", "gx.web", "gx.prod.web", false}, "globex", true, `service_component_name gx.prod.web is the Consul folder of component gx.prod.web of tenant "globex"`},
		{"an own folder of another component", Claim{"acme", "gx", "gx.web", "acme-api", false}, "acme", false, `service_component_name acme-api is the Consul folder of component gx.api; a folder belongs to one component`},
		{"an operator's write without tenant", Claim{"", "gx.prod", "gx.prod.web", "gx.prod.web", true}, "globex", true, `deployment gx.prod belongs to tenant "globex", not to tenant ""`},
		{"a tenant's claim of the operators' component", Claim{"acme", "ops", "ops.agent", "ops.agent", false}, "", true, `deployment ops belongs to tenant "", not to tenant "acme"`},
		{"an operator gives the operators' component to a tenant", Claim{"acme", "ops", "ops.agent", "ops.agent", true}, "", false, ""},
		// Consul keys of folder F are F:policies/...: an ACL on
		// gx.prod.web: covers gx.prod.web:dmaap's keys too.
		{"a folder under another tenant's", Claim{"acme", "ac", "ac.x", "gx.prod.web:dmaap", false}, "globex", true,
			`service_component_name gx.prod.web:dmaap lies under gx.prod.web:, the Consul folder of component gx.prod.web of tenant "globex"`},
		{"a folder over another tenant's", Claim{"globex", "gx.prod", "gx.prod.cfg", "shared", false}, "acme", true,
			`service_component_name shared holds under shared: the Consul folder of component sh.acme of tenant "acme"`},
		{"a folder under the tenant's own", Claim{"acme", "gx", "gx.api2", "acme-api:extra", false}, "", false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := CheckClaim(tc.claim, globexAndAcme)
			if tc.msg == "" {
				if c != nil {
					t.Fatalf("claim refused: %v", c)
				}
				return
			}
			if c == nil {
				t.Fatalf("claim held; want a conflict with %q", tc.owner)
			}
			if c.Owner != tc.owner || c.OtherTenant != tc.other || !strings.Contains(c.Error(), tc.msg) {
				t.Fatalf("conflict %+v (%v); want owner %q, other tenant %v, message with %q", c, c, tc.owner, tc.other, tc.msg)
			}
		})
	}
}

func TestComponentIDsAreUnambiguous(t *testing.T) {
	for _, js := range []string{
		`{"deployment_id":"gx","tenant":"acme","applications":[{"name":"prod.web","class":"a.b.C"}]}`,
		`{"deployment_id":"shared","tenant":"acme","applications":[{"name":"a.b","class":"a.b.C"}]}`,
	} {
		_, err := ParseRequest([]byte(js))
		if err == nil || !strings.Contains(err.Error(), "applications[0].name") {
			t.Errorf("%s: error %v; want applications[0].name refused for its '.'", js, err)
		}
	}
	r := mustRequest(t, `{"deployment_id":"gx.prod","tenant":"globex","applications":[{"name":"web","class":"a.b.C"}]}`)
	if id := r.ComponentID("web"); id != "gx.prod.web" || DeploymentOf(id) != "gx.prod" {
		t.Fatalf("component id %s of deployment %s; want gx.prod.web of gx.prod", id, DeploymentOf(id))
	}
}

func TestCheckNames(t *testing.T) {
	takeover := mustRequest(t, `{"deployment_id":"gx","tenant":"acme","applications":[{"name":"web","class":"a.b.C"},{"name":"db","class":"a.b.C","component":{"service_component_name":"gx.prod.web"}}]}`)
	v, err := Evaluate(context.Background(), takeover, nil)
	if err != nil {
		t.Fatal(err)
	}
	CheckNames(&v, globexAndAcme)
	if v.Admitted || len(v.Violations) != 1 {
		t.Fatalf("verdict %+v; want denied for the folder of gx.prod.web", v)
	}
	f := v.Violations[0]
	if f.PolicyID != NamesPolicyID || f.Object != `application "db"` || !strings.Contains(f.Message, `of tenant "globex"`) {
		t.Fatalf("violation %+v; want application \"db\" denied naming tenant globex", f)
	}

	twice := mustRequest(t, `{"deployment_id":"ac","tenant":"acme","applications":[{"name":"a","class":"a.b.C","component":{"service_component_name":"f"}},{"name":"b","class":"a.b.C","component":{"service_component_name":"f"}}]}`)
	v, _ = Evaluate(context.Background(), twice, nil)
	CheckNames(&v, owners{})
	if v.Admitted || len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, `also the Consul folder of application "a"`) {
		t.Fatalf("verdict %+v; want one folder named by two applications denied", v)
	}

	own := mustRequest(t, `{"deployment_id":"gx.prod","tenant":"globex","applications":[{"name":"web","class":"a.b.C"}]}`)
	v, _ = Evaluate(context.Background(), own, nil)
	CheckNames(&v, globexAndAcme)
	if !v.Admitted {
		t.Fatalf("verdict %+v; want the owner's request admitted", v)
	}
}
