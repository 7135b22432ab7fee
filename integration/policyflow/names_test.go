package policyflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// TestATenantCannotTakeOverAnotherTenantsComponent is the attack on the
// names admission derives: tenant acme asks for a deployment whose
// component id (<deployment_id>.<name>, the parts chosen so that they
// join to globex's id) or Consul folder is globex's, through the API, its
// dry run, and straight onto deploy.requests. Each is refused, and
// globex's folder keeps globex's settings.
func TestATenantCannotTakeOverAnotherTenantsComponent(t *testing.T) {
	p, tokens := startTenants(t, "globex", "acme")
	sfx := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	as := func(tenant, method, path string, body any) (int, string) {
		t.Helper()
		return p.doAs(tokens[tenant], method, path, body)
	}
	app := func(name, password string, folder string) map[string]any {
		a := map[string]any{"name": name, "package": "a.b", "class": "a.b.C", "properties": map[string]any{"db_password": password}}
		if folder != "" {
			a["component"] = map[string]any{"service_component_name": folder, "notify": map[string]any{"kind": "none"}}
		}
		return a
	}
	deployment := func(id, tenant string, apps ...map[string]any) map[string]any {
		return map[string]any{"deployment_id": id, "tenant": tenant, "applications": apps}
	}
	// globex deploys gx.prod/web and shared.a/b.
	gx, shared := "gx"+sfx, "shared"+sfx
	for _, d := range []map[string]any{
		deployment(gx+".prod", "globex", app("web", "globex-secret", "")),
		deployment(shared+".a", "globex", app("b", "globex-secret", "")),
	} {
		if code, out := as("globex", http.MethodPost, "/v1/deployments", d); code != http.StatusAccepted {
			t.Fatalf("globex deploys %s: %d %s", d["deployment_id"], code, out)
		}
	}
	globexHolds := func(cid string) {
		t.Helper()
		testkit.Eventually(p.t, 2*time.Minute, testkit.Named(cid+" holds globex's settings", func() error {
			item, ok := p.items(cid)["admission."+cid]
			if !ok {
				return fmt.Errorf("items %v", keys(p.items(cid)))
			}
			cfg, _ := item["config"].(map[string]any)
			props, _ := cfg["properties"].(map[string]any)
			if props["db_password"] != "globex-secret" {
				return fmt.Errorf("config %v", cfg)
			}
			return nil
		}))
		if code, out := as("globex", http.MethodGet, "/v1/components/"+cid+"/status", nil); code != http.StatusOK {
			t.Errorf("globex reads its component %s: %d %s", cid, code, out)
		}
	}
	globexHolds(gx + ".prod.web")
	globexHolds(shared + ".a.b")

	// Through the API, and its dry run: gx/prod.web with globex's folder
	// named (the dot variant), shared/a.b with the folder left to default
	// (the slash variant), and a name without '.' with globex's folder.
	attacks := []struct {
		name   string
		req    map[string]any
		code   int
		reason string
	}{
		{"gx/prod.web", deployment(gx, "acme", app("prod.web", "attacker", gx+".prod.web")), http.StatusBadRequest, `"prod.web" holds a '.'`},
		{"shared/a.b", deployment(shared, "acme", app("a.b", "attacker", "")), http.StatusBadRequest, `"a.b" holds a '.'`},
		{"gx/web in globex's folder", deployment(gx, "acme", app("web", "attacker", gx+".prod.web")), http.StatusForbidden, `of tenant "globex"`},
		{"into globex's deployment", deployment(gx+".prod", "acme", app("db", "attacker", "")), http.StatusForbidden, `deployment ` + gx + `.prod belongs to tenant "globex"`},
	}
	// said is what an answer says: its error, or its verdict's violations.
	type answer struct {
		Error      string `json:"error"`
		Admitted   *bool  `json:"admitted"`
		Violations []struct {
			Message string `json:"message"`
		} `json:"violations"`
	}
	said := func(out string) (answer, string) {
		var a answer
		_ = json.Unmarshal([]byte(out), &a)
		text := a.Error
		for _, v := range a.Violations {
			text += "\n" + v.Message
		}
		return a, text
	}
	for _, a := range attacks {
		code, out := as("acme", http.MethodPost, "/v1/deployments", a.req)
		if _, text := said(out); code != a.code || !strings.Contains(text, a.reason) {
			t.Errorf("acme deploys %s: %d %s; want %d naming %s", a.name, code, out, a.code, a.reason)
		}
		code, out = as("acme", http.MethodPost, "/v1/deployments?dry_run=true", a.req)
		dry, text := said(out)
		if code == http.StatusOK && (dry.Admitted == nil || *dry.Admitted) || code/100 != 2 && code/100 != 4 || !strings.Contains(text, a.reason) {
			t.Errorf("acme's dry run of %s: %d %s; want it refused or denied naming %s", a.name, code, out, a.reason)
		}
	}

	// Straight onto deploy.requests, around the API: a denied verdict
	// naming the reason, or, for globex's deployment, whose verdict it
	// would replace, a dead letter.
	opts, _ := p.kafka.ClientOpts()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	write := func(a map[string]any) string {
		t.Helper()
		body, _ := json.Marshal(a)
		id := fmt.Sprintf("raw-%d", time.Now().UnixNano())
		v, err := events.Default().Encode(&events.DeploymentRequest{RequestID: id, DeploymentID: a["deployment_id"].(string), Tenant: "acme", Request: string(body),
			SubmittedBy: "acme", SubmittedAt: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: p.kafka.Topic("deploy.requests"), Key: []byte(a["deployment_id"].(string)), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, a := range attacks[:3] {
		id := write(a.req)
		dep := a.req["deployment_id"].(string)
		testkit.Eventually(p.t, time.Minute, testkit.Named("verdict on "+a.name, func() error {
			code, out := as("acme", http.MethodGet, "/v1/deployments/"+dep, nil)
			var v verdict
			if err := json.Unmarshal([]byte(out), &v); code != http.StatusOK || err != nil || v.RequestID != id {
				return fmt.Errorf("%d %s", code, out)
			}
			if v.Admitted || len(v.Violations) != 1 || !strings.Contains(v.Violations[0].Message, a.reason) {
				t.Errorf("verdict on %s written to deploy.requests: %s; want denied naming %s", a.name, out, a.reason)
			}
			return nil
		}))
	}
	write(attacks[3].req)
	testkit.Eventually(p.t, time.Minute, testkit.Named("dead letter of the request for globex's deployment", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var reason string
		err := runtime.ReadPartitions(ctx, p.kafka, "dlq.admission", nil, func(r *kgo.Record) error {
			for _, h := range r.Headers {
				if h.Key == runtime.HeaderError && string(r.Key) == gx+".prod" {
					reason = string(h.Value)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !strings.Contains(reason, attacks[3].reason) {
			return fmt.Errorf("no dead letter naming %s yet (%q)", attacks[3].reason, reason)
		}
		return nil
	}))
	// globex still owns and reads its deployment and components, and its
	// folders hold its settings.
	code, out := as("globex", http.MethodGet, "/v1/deployments/"+gx+".prod", nil)
	var v verdict
	if err := json.Unmarshal([]byte(out), &v); code != http.StatusOK || err != nil || v.Tenant != "globex" || !v.Admitted {
		t.Errorf("globex reads its deployment: %d %s", code, out)
	}
	globexHolds(gx + ".prod.web")
	globexHolds(shared + ".a.b")
}
