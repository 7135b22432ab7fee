package admit

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, id, model, mode string, tenants ...string) *Compiled {
	t.Helper()
	var ts []string
	if len(tenants) > 0 {
		ts = tenants
	}
	c, err := Compile(id, json.RawMessage(model), mode, ts)
	if err != nil {
		t.Fatalf("compile %s: %v", id, err)
	}
	return c
}

func mustRequest(t *testing.T, js string) *Request {
	t.Helper()
	r, err := ParseRequest([]byte(js))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	return r
}

const flavorModel = `{"maxFlavor": "m1.medium", "approvedApplications": ["com.example.Analytics"], "?": {"type": "io.policyflow.admission.FlavorLimit", "id": "446373ef-03b5-4925-b095-6c56568fa518"}}`

func TestEvaluate(t *testing.T) {
	tenantA := "726ed856965f43cc8e565bc991fa76c3"
	cases := []struct {
		name      string
		policies  func(t *testing.T) []*Compiled
		request   string
		admitted  bool
		violation []string // substrings, one per violation, in order
		warnings  []string
		check     func(t *testing.T, v Verdict)
	}{
		{
			name: "flavor limit denies a large flavor to the tenant",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-flavor", flavorModel, "", tenantA)}
			},
			request:   `{"deployment_id":"d1","tenant":"` + tenantA + `","environment":"prod","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`,
			violation: []string{`tenant "` + tenantA + `": application "web" (com.example.Web): flavor m1.large is larger than m1.medium, the largest allowed to applications not approved (rule flavor-limit of policy p-flavor)`},
		},
		{
			name: "flavor limit allows the large flavor to an approved application",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-flavor", flavorModel, "", tenantA)}
			},
			request:  `{"deployment_id":"d1","tenant":"` + tenantA + `","applications":[{"name":"an","class":"com.example.Analytics","flavor":"m1.xlarge"}]}`,
			admitted: true,
		},
		{
			name: "an inheritor of an approved application is approved",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-flavor", flavorModel, "", tenantA)}
			},
			request:  `{"deployment_id":"d1","tenant":"` + tenantA + `","applications":[{"name":"an","class":"com.acme.BigAnalytics","inherits":["com.example.Analytics"],"flavor":"m1.xlarge"}]}`,
			admitted: true,
		},
		{
			name: "flavor limit of one tenant leaves another tenant alone",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-flavor", flavorModel, "", tenantA)}
			},
			request:  `{"deployment_id":"d1","tenant":"other","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.xlarge"}]}`,
			admitted: true,
		},
		{
			name: "an unknown flavor cannot be shown within the limit",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-flavor", flavorModel, "", tenantA)}
			},
			request:   `{"deployment_id":"d1","tenant":"` + tenantA + `","applications":[{"name":"web","class":"com.example.Web","flavor":"huge"}]}`,
			violation: []string{"flavor huge is not one of m1.tiny"},
		},
		{
			name: "blacklist denies an inheritor of a blacklisted class",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-bl", `{"applications":["io.murano.apps.Telnet"],"?":{"type":"io.policyflow.admission.Blacklist"}}`, "", "t1")}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"ok","class":"com.example.Web"},{"name":"tn","class":"com.acme.FancyTelnet","inherits":["io.murano.apps.Telnet","io.murano.Application"]}]}`,
			violation: []string{`application "tn" (com.acme.FancyTelnet): inherits from io.murano.apps.Telnet, which is blacklisted (rule blacklist of policy p-bl)`},
		},
		{
			name: "blacklist by namespace catches the package",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-bl", `{"namespaces":["com.untrusted"],"?":{"type":"io.policyflow.admission.Blacklist"}}`, "")}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"x","package":"com.untrusted.tools","class":"org.x.Tool"}]}`,
			violation: []string{"is in namespace com.untrusted"},
		},
		{
			name: "a global policy applies to every tenant",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-quota", `{"maxInstances":3,"?":{"type":"io.policyflow.admission.InstanceQuota"}}`, "")}
			},
			request:   `{"deployment_id":"d1","tenant":"anyone","applications":[{"name":"w","class":"com.example.Web","instances":4}]}`,
			violation: []string{`tenant "anyone": application "w" (com.example.Web): asks for 4 instances; the quota is 3 per application`},
		},
		{
			name: "required application missing from the environment",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-req", `{"application":"io.policyflow.Monitoring","?":{"type":"io.policyflow.admission.RequiredApplication"}}`, "")}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","environment":"staging","applications":[{"name":"w","class":"com.example.Web"}]}`,
			violation: []string{`environment "staging": deploys no io.policyflow.Monitoring, which every environment must have`},
		},
		{
			name: "required application present through inheritance",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-req", `{"application":"io.policyflow.Monitoring","?":{"type":"io.policyflow.admission.RequiredApplication"}}`, "")}
			},
			request:  `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"w","class":"com.example.Web"},{"name":"m","class":"com.acme.Zabbix","inherits":["io.policyflow.Monitoring"]}]}`,
			admitted: true,
		},
		{
			name: "default override sets the promoted image where none is given and leaves a chosen one",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-img", `{"field":"image","value":"ubuntu-24.04-promoted","from":"ubuntu-22.04","applications":["io.murano.apps.linux.Instance"],"?":{"type":"io.policyflow.admission.DefaultOverride"}}`, "")}
			},
			request:  `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"com.example.A","inherits":["io.murano.apps.linux.Instance"]},{"name":"b","class":"com.example.B","inherits":["io.murano.apps.linux.Instance"],"image":"ubuntu-22.04"},{"name":"c","class":"com.example.C","inherits":["io.murano.apps.linux.Instance"],"image":"debian-12"},{"name":"w","class":"com.example.Win"}]}`,
			admitted: true,
			check: func(t *testing.T, v Verdict) {
				imgs := map[string]string{}
				for _, a := range v.Request.Applications {
					imgs[a.Name] = a.Image
				}
				want := map[string]string{"a": "ubuntu-24.04-promoted", "b": "ubuntu-24.04-promoted", "c": "debian-12", "w": ""}
				for k, w := range want {
					if imgs[k] != w {
						t.Errorf("image of %s = %q, want %q", k, imgs[k], w)
					}
				}
				if len(v.Mutations) != 2 || v.Mutations[1].Old != `"ubuntu-22.04"` || v.Mutations[0].PolicyID != "p-img" {
					t.Errorf("mutations = %+v", v.Mutations)
				}
			},
		},
		{
			name: "mutations run before validations: an injected script is seen by a CEL validation, a default flavor by the limit",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{
					mustCompile(t, "a-check", `{"validations":[{"expression":"app.scripts.exists(s, s == 'harden.sh')","message":"every VM runs harden.sh"}],"?":{"type":"io.policyflow.admission.CEL"}}`, ""),
					mustCompile(t, "b-flavor", `{"maxFlavor":"m1.small","?":{"type":"io.policyflow.admission.FlavorLimit"}}`, ""),
					mustCompile(t, "z-inject", `{"script":"harden.sh","?":{"type":"io.policyflow.admission.ScriptInjection"}}`, ""),
					mustCompile(t, "z-override", `{"field":"flavor","value":"m1.large","?":{"type":"io.policyflow.admission.DefaultOverride"}}`, ""),
				}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"w","class":"com.example.Web"}]}`,
			violation: []string{"flavor m1.large is larger than m1.small"},
			check: func(t *testing.T, v Verdict) {
				if got := v.Request.Applications[0].Scripts; len(got) != 1 || got[0] != "harden.sh" {
					t.Errorf("scripts = %v", got)
				}
				if strings.Join(v.Policies, ",") != "a-check,b-flavor,z-inject,z-override" {
					t.Errorf("policies = %v", v.Policies)
				}
			},
		},
		{
			name: "audit mode reports without denying",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-flavor", flavorModel, ModeAudit, tenantA)}
			},
			request:  `{"deployment_id":"d1","tenant":"` + tenantA + `","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`,
			admitted: true,
			warnings: []string{"flavor m1.large is larger than m1.medium"},
		},
		{
			name: "the instance notice warns, never denies",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "p-note", `{"maxInstances":5,"?":{"type":"io.policyflow.admission.InstanceNotice"}}`, "")}
			},
			request:  `{"deployment_id":"d1","tenant":"t1","environment":"e","applications":[{"name":"a","class":"x.A","instances":3},{"name":"b","class":"x.B","instances":3}]}`,
			admitted: true,
			warnings: []string{`environment "e": spawns 6 instances, more than the 5 the notice is set at`},
		},
		{
			name: "CEL validation in request scope and CEL mutation of a property",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{
					mustCompile(t, "c1", `{"mutations":[{"field":"properties.owner","expression":"request.tenant + '-' + app.name"}],"validations":[{"expression":"request.applications.size() <= 1","message":"one application per environment","scope":"request"}],"?":{"type":"io.policyflow.admission.CEL"}}`, ""),
				}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","environment":"e","applications":[{"name":"a","class":"x.A"},{"name":"b","class":"x.B"}]}`,
			violation: []string{`environment "e": one application per environment (rule validations[0] of policy c1)`},
			check: func(t *testing.T, v Verdict) {
				if got := v.Request.Applications[1].Properties["owner"]; got != "t1-b" {
					t.Errorf("owner = %v", got)
				}
			},
		},
		{
			name: "CEL over fields the request leaves out, and the README's examples",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "c-readme", `{"validations":[{"expression":"app.instances <= 4 || app.flavor == 'm1.small'","message":"more than 4 instances only on m1.small"},{"expression":"request.applications.exists(a, a['class'] == 'io.policyflow.Monitoring')","message":"every environment runs monitoring","scope":"request"},{"expression":"app.image == '' && size(app.scripts) == 0 && request.environment == ''","message":"defaults"}],"mutations":[{"field":"properties.owner","expression":"request.tenant + '/' + app.name"}],"?":{"type":"io.policyflow.admission.CEL"}}`, "")}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"x.A","instances":5,"flavor":"m1.large"},{"name":"m","class":"io.policyflow.Monitoring"}]}`,
			violation: []string{`application "a" (x.A): more than 4 instances only on m1.small (rule validations[0] of policy c-readme)`},
			check: func(t *testing.T, v Verdict) {
				if got := v.Request.Applications[0].Properties["owner"]; got != "t1/a" {
					t.Errorf("owner = %v", got)
				}
			},
		},
		{
			name: "a CEL evaluation over the cost limit denies with the reason",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "c-cost", `{"validations":[{"expression":"[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))","message":"costly"}],"?":{"type":"io.policyflow.admission.CEL"}}`, "")}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"x.A"}]}`,
			violation: []string{"costly (the expression"},
			check: func(t *testing.T, v Verdict) {
				if !strings.Contains(v.Violations[0].Message, "cost") {
					t.Errorf("message %q does not say the cost limit was hit", v.Violations[0].Message)
				}
			},
		},
		{
			name: "a CEL mutation yielding a bad instance count is a violation and changes nothing",
			policies: func(t *testing.T) []*Compiled {
				return []*Compiled{mustCompile(t, "c-bad", `{"mutations":[{"field":"instances","expression":"app.instances - 5"}],"?":{"type":"io.policyflow.admission.CEL"}}`, "")}
			},
			request:   `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"a","class":"x.A","instances":2}]}`,
			violation: []string{"could not be applied"},
			check: func(t *testing.T, v Verdict) {
				if v.Request.Applications[0].Instances != 2 {
					t.Errorf("instances = %d, want 2", v.Request.Applications[0].Instances)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := mustRequest(t, tc.request)
			before, _ := req.JSON()
			v, err := Evaluate(context.Background(), req, tc.policies(t))
			if err != nil {
				t.Fatal(err)
			}
			if after, _ := req.JSON(); string(after) != string(before) {
				t.Errorf("Evaluate changed its input")
			}
			if v.Admitted != (len(tc.violation) == 0) || tc.admitted != v.Admitted {
				t.Fatalf("admitted = %v, want %v; violations %v", v.Admitted, tc.admitted, Texts(req.Tenant, v.Violations))
			}
			match := func(what string, got []Finding, want []string) {
				texts := Texts(req.Tenant, got)
				if len(texts) != len(want) {
					t.Fatalf("%s = %q, want %d matching %q", what, texts, len(want), want)
				}
				for i := range want {
					if !strings.Contains(texts[i], want[i]) {
						t.Errorf("%s[%d] = %q, want it to contain %q", what, i, texts[i], want[i])
					}
				}
			}
			match("violations", v.Violations, tc.violation)
			match("warnings", v.Warnings, tc.warnings)
			if tc.check != nil {
				tc.check(t, v)
			}
		})
	}
}

func TestCompileRefusals(t *testing.T) {
	cases := []struct {
		name, model, mode string
		field, msg        string // for a *ParamError
		unknown           bool
	}{
		{name: "not an object", model: `[1]`, field: "objectModel", msg: "JSON object"},
		{name: "no header", model: `{"maxFlavor":"m1.small"}`, field: "objectModel.?", msg: "missing"},
		{name: "no type", model: `{"?":{}}`, field: "objectModel.?.type", msg: "missing"},
		{name: "unknown kind", model: `{"?":{"type":"com.example.MyAspect"}}`, unknown: true},
		{name: "unknown parameter", model: `{"maxFlavour":"m1.small","?":{"type":"io.policyflow.admission.FlavorLimit"}}`, field: "objectModel.maxFlavour", msg: "not a parameter"},
		{name: "flavor not in order", model: `{"maxFlavor":"m9.giant","?":{"type":"io.policyflow.admission.FlavorLimit"}}`, field: "objectModel.maxFlavor", msg: "not in the flavor order"},
		{name: "maxFlavor wrong type", model: `{"maxFlavor":3,"?":{"type":"io.policyflow.admission.FlavorLimit"}}`, field: "objectModel.maxFlavor", msg: "must be a string, got a number"},
		{name: "negative quota", model: `{"maxInstances":-1,"?":{"type":"io.policyflow.admission.InstanceQuota"}}`, field: "objectModel.maxInstances", msg: "whole number"},
		{name: "empty blacklist", model: `{"?":{"type":"io.policyflow.admission.Blacklist"}}`, field: "objectModel.applications", msg: "both empty"},
		{name: "override of an unknown field", model: `{"field":"ram","value":1,"?":{"type":"io.policyflow.admission.DefaultOverride"}}`, field: "objectModel.field", msg: "not a field"},
		{name: "override with a value of the wrong type", model: `{"field":"image","value":1,"?":{"type":"io.policyflow.admission.DefaultOverride"}}`, field: "objectModel.value", msg: "must be a string"},
		{name: "bad mode", model: flavorModel, mode: "dry", field: "mode", msg: "not a mode"},
		{name: "CEL syntax error has its position", model: `{"validations":[{"expression":"app.flavor ==","message":"m"}],"?":{"type":"io.policyflow.admission.CEL"}}`, field: "objectModel.validations[0].expression", msg: "line:1:"},
		{name: "CEL undeclared variable", model: `{"validations":[{"expression":"app.flavor == 'x'","message":"m","scope":"request"}],"?":{"type":"io.policyflow.admission.CEL"}}`, field: "objectModel.validations[0].expression", msg: "undeclared reference to 'app'"},
		{name: "CEL validation not boolean", model: `{"validations":[{"expression":"'yes'","message":"m"}],"?":{"type":"io.policyflow.admission.CEL"}}`, field: "objectModel.validations[0].expression", msg: "must yield bool"},
		{name: "CEL mutation of the wrong type", model: `{"mutations":[{"field":"image","expression":"42"}],"?":{"type":"io.policyflow.admission.CEL"}}`, field: "objectModel.mutations[0].expression", msg: "must yield string"},
		{name: "CEL validation without message", model: `{"validations":[{"expression":"true"}],"?":{"type":"io.policyflow.admission.CEL"}}`, field: "objectModel.validations[0].message", msg: "missing"},
		{name: "CEL unknown rule field", model: `{"validations":[{"expr":"true","message":"m"}],"?":{"type":"io.policyflow.admission.CEL"}}`, field: "objectModel.validations", msg: "unknown field"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile("p", json.RawMessage(tc.model), tc.mode, nil)
			if err == nil {
				t.Fatal("compiled; want a refusal")
			}
			if tc.unknown {
				if !IsUnknownKind(err) {
					t.Fatalf("err = %v, want an unknown kind", err)
				}
				return
			}
			pe, ok := err.(*ParamError)
			if !ok {
				t.Fatalf("err = %T %v, want a *ParamError", err, err)
			}
			if pe.Field != tc.field || !strings.Contains(pe.Msg, tc.msg) {
				t.Errorf("err = %q (field %q), want field %q and %q in the message", err, pe.Field, tc.field, tc.msg)
			}
		})
	}
}

func TestParseRequestRefusals(t *testing.T) {
	cases := []struct{ name, body, field string }{
		{"no tenant", `{"deployment_id":"d","applications":[{"name":"a","class":"x.A"}]}`, "tenant"},
		{"no deployment id", `{"tenant":"t","applications":[{"name":"a","class":"x.A"}]}`, "deployment_id"},
		{"no applications", `{"deployment_id":"d","tenant":"t"}`, "applications"},
		{"class not a qualified name", `{"deployment_id":"d","tenant":"t","applications":[{"name":"a","class":"not a class"}]}`, "applications[0].class"},
		{"no class", `{"deployment_id":"d","tenant":"t","applications":[{"name":"a"}]}`, "applications[0].class"},
		{"two apps, one name", `{"deployment_id":"d","tenant":"t","applications":[{"name":"a","class":"x.A"},{"name":"a","class":"x.B"}]}`, "applications[1].name"},
		{"negative instances", `{"deployment_id":"d","tenant":"t","applications":[{"name":"a","class":"x.A","instances":-2}]}`, "applications[0].instances"},
		{"unknown field", `{"deployment_id":"d","tenant":"t","flavour":"x","applications":[{"name":"a","class":"x.A"}]}`, "request"},
		{"slash in name", `{"deployment_id":"d","tenant":"t","applications":[{"name":"a/b","class":"x.A"}]}`, "applications[0].name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRequest([]byte(tc.body))
			re, ok := err.(*RequestError)
			if !ok {
				t.Fatalf("err = %v, want a *RequestError", err)
			}
			if re.Field != tc.field {
				t.Errorf("field = %q (%v), want %q", re.Field, err, tc.field)
			}
		})
	}
}

func TestAuditFindsWhatAPolicyWouldDeny(t *testing.T) {
	p := mustCompile(t, "p-flavor", flavorModel, ModeAudit, "t1")
	big := mustRequest(t, `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`)
	small := mustRequest(t, `{"deployment_id":"d2","tenant":"t1","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.small"}]}`)
	other := mustRequest(t, `{"deployment_id":"d3","tenant":"t2","applications":[{"name":"web","class":"com.example.Web","flavor":"m1.large"}]}`)
	if got := Audit(context.Background(), big, p); len(got) != 1 || got[0].Rule != "flavor-limit" {
		t.Errorf("audit of the large flavor = %+v", got)
	}
	if got := Audit(context.Background(), small, p); len(got) != 0 {
		t.Errorf("audit of the small flavor = %+v", got)
	}
	if got := Audit(context.Background(), other, p); len(got) != 0 {
		t.Errorf("audit of another tenant's deployment = %+v", got)
	}
}
