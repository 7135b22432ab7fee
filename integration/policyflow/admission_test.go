package policyflow_test

import (
	"encoding/json"
	"fmt"
	"github.com/policyflow/policyflow/services/testkit"
	"net/http"
	"strings"
	"testing"
	"time"
)

// verdict is what GET /v1/deployments/{id} answers.
type verdict struct {
	DeploymentID string   `json:"deployment_id"`
	RequestID    string   `json:"request_id"`
	Tenant       string   `json:"tenant"`
	Admitted     bool     `json:"admitted"`
	Components   []string `json:"components"`
	Violations   []struct {
		PolicyID string `json:"policy_id"`
		Rule     string `json:"rule"`
		Message  string `json:"message"`
	} `json:"violations"`
	Mutations []struct {
		PolicyID string `json:"policy_id"`
		Field    string `json:"field"`
		New      string `json:"new"`
	} `json:"mutations"`
	// Warnings are findings that do not deny: soft placement policies,
	// audit-mode application policies.
	Warnings []struct {
		PolicyID string `json:"policy_id"`
		Rule     string `json:"rule"`
		Message  string `json:"message"`
	} `json:"warnings"`
}

// appPolicy creates a tenant application policy and returns its id.
func (p *pipeline) appPolicy(body map[string]any) string {
	p.t.Helper()
	var out struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(p.must(http.MethodPost, "/policies", body)), &out); err != nil || out.ID == "" {
		p.t.Fatalf("create policy: %v %+v", err, out)
	}
	return out.ID
}

// deploy submits a deployment request and returns the admission stage's
// verdict on it.
func (p *pipeline) deploy(req map[string]any) verdict {
	p.t.Helper()
	var acc struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(p.must(http.MethodPost, "/v1/deployments", req)), &acc); err != nil {
		p.t.Fatal(err)
	}
	var v verdict
	testkit.Eventually(p.t, time.Minute, testkit.Named("verdict on "+acc.RequestID, func() error {
		code, out := p.do(http.MethodGet, "/v1/deployments/"+req["deployment_id"].(string), nil)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, out)
		}
		v = verdict{}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return err
		}
		if v.RequestID != acc.RequestID {
			return fmt.Errorf("the verdict is on request %s, not yet on %s", v.RequestID, acc.RequestID)
		}
		return nil
	}))
	return v
}

func app(name, class string, extra map[string]any) map[string]any {
	a := map[string]any{"name": name, "class": class}
	for k, v := range extra {
		a[k] = v
	}
	return a
}

func TestAdmissionSeedExamples(t *testing.T) {
	p := start(t)
	sfx := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	dep := func(id, tenant string, apps ...map[string]any) map[string]any {
		return map[string]any{"deployment_id": id + "-" + sfx, "tenant": tenant, "environment": "prod", "applications": apps}
	}

	flavor := p.appPolicy(map[string]any{
		"description": "Policy to limit possible flavor", "tenantIds": []string{"tenant-a"},
		"objectModel": map[string]any{"maxFlavor": "m1.medium", "approvedApplications": []string{"com.example.Analytics"},
			"?": map[string]any{"type": "io.policyflow.admission.FlavorLimit"}},
	})
	blacklist := p.appPolicy(map[string]any{
		"description": "No telnet", "tenantIds": []string{"tenant-a"},
		"objectModel": map[string]any{"applications": []string{"io.murano.apps.Telnet"}, "?": map[string]any{"type": "io.policyflow.admission.Blacklist"}},
	})
	quota := p.appPolicy(map[string]any{
		"description": "At most 2 instances of a database, for every tenant",
		"objectModel": map[string]any{"maxInstances": 2, "applications": []string{"io.murano.databases.SqlDatabase"},
			"?": map[string]any{"type": "io.policyflow.admission.InstanceQuota"}},
	})
	override := p.appPolicy(map[string]any{
		"description": "The promoted image is the default of every Linux application",
		"objectModel": map[string]any{"field": "image", "value": "ubuntu-24.04-promoted", "applications": []string{"io.murano.apps.linux.Instance"},
			"?": map[string]any{"type": "io.policyflow.admission.DefaultOverride"}},
	})

	t.Run("flavor limit denies a large flavor and allows it for an approved application", func(t *testing.T) {
		v := p.deploy(dep("big", "tenant-a", app("web", "com.example.Web", map[string]any{"flavor": "m1.large"})))
		want := `tenant "tenant-a": application "web" (com.example.Web): flavor m1.large is larger than m1.medium, the largest allowed to applications not approved (rule flavor-limit of policy ` + flavor + `)`
		if v.Admitted || len(v.Violations) != 1 || v.Violations[0].Message != want || len(v.Components) != 0 {
			t.Fatalf("verdict %+v, want denied: %s", v, want)
		}
		v = p.deploy(dep("approved", "tenant-a", app("an", "com.example.Analytics", map[string]any{"flavor": "m1.xlarge"})))
		if !v.Admitted || len(v.Components) != 1 {
			t.Fatalf("verdict %+v, want admitted", v)
		}
		// The component is registered as a component registered directly is.
		var st struct {
			Registered   bool   `json:"registered"`
			DeploymentID string `json:"deployment_id"`
		}
		testkit.Eventually(p.t, time.Minute, testkit.Named("component "+v.Components[0]+" registered", func() error {
			code, out := p.do(http.MethodGet, "/v1/components/"+v.Components[0]+"/status", nil)
			if code != http.StatusOK {
				return fmt.Errorf("%d %s", code, out)
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil || !st.Registered || st.DeploymentID != v.DeploymentID {
				return fmt.Errorf("status %s", out)
			}
			return nil
		}))
		// Another tenant is not held to tenant-a's limit.
		if v := p.deploy(dep("other", "tenant-b", app("web", "com.example.Web", map[string]any{"flavor": "m1.xlarge"}))); !v.Admitted {
			t.Errorf("tenant-b: %+v, want admitted", v)
		}
	})

	t.Run("blacklist denies an inheritor of a blacklisted class", func(t *testing.T) {
		v := p.deploy(dep("telnet", "tenant-a", app("tn", "com.acme.SecureTelnet", map[string]any{"inherits": []string{"io.murano.apps.Telnet", "io.murano.Application"}})))
		if v.Admitted || len(v.Violations) != 1 || v.Violations[0].PolicyID != blacklist ||
			!strings.Contains(v.Violations[0].Message, `application "tn" (com.acme.SecureTelnet): inherits from io.murano.apps.Telnet, which is blacklisted`) {
			t.Fatalf("verdict %+v, want denied by %s", v, blacklist)
		}
	})

	t.Run("a global policy applies to every tenant", func(t *testing.T) {
		for _, tenant := range []string{"tenant-a", "tenant-b", "tenant-c"} {
			v := p.deploy(dep("db-"+tenant, tenant, app("db", "com.example.Postgres", map[string]any{"inherits": []string{"io.murano.databases.SqlDatabase"}, "instances": 3})))
			if v.Admitted || len(v.Violations) != 1 || v.Violations[0].PolicyID != quota ||
				!strings.Contains(v.Violations[0].Message, fmt.Sprintf(`tenant %q: application "db" (com.example.Postgres): asks for 3 instances; the quota is 2 per application`, tenant)) {
				t.Errorf("%s: verdict %+v, want denied by %s", tenant, v, quota)
			}
		}
	})

	t.Run("a default override mutates the request and the component's Consul folder shows it", func(t *testing.T) {
		v := p.deploy(dep("linux", "tenant-c", app("srv", "com.example.Nginx", map[string]any{"inherits": []string{"io.murano.apps.linux.Instance"}, "flavor": "m1.small"})))
		if !v.Admitted || len(v.Mutations) != 1 || v.Mutations[0].PolicyID != override || v.Mutations[0].Field != "image" || v.Mutations[0].New != `"ubuntu-24.04-promoted"` {
			t.Fatalf("verdict %+v, want admitted with the image mutated", v)
		}
		cid := v.Components[0]
		scn := cid // the default service_component_name is the component id
		testkit.Eventually(p.t, 2*time.Minute, testkit.Named(scn+" holds the admitted settings", func() error {
			item, ok := p.items(scn)["admission."+cid]
			if !ok {
				return fmt.Errorf("items %v", keys(p.items(scn)))
			}
			cfg, _ := item["config"].(map[string]any)
			if cfg["image"] != "ubuntu-24.04-promoted" || cfg["flavor"] != "m1.small" || cfg["class"] != "com.example.Nginx" {
				return fmt.Errorf("config %v", cfg)
			}
			return nil
		}))

		settings := "/policy_latest/admission." + cid
		if code, out := p.do(http.MethodGet, settings, nil); code != http.StatusOK {
			t.Fatalf("GET %s before the deletion: %d %s", settings, code, out)
		}

		// Deleted: the verdict goes, the component is uninstalled and
		// its Consul folder wiped, its settings policy leaves the
		// catalog.
		p.must(http.MethodDelete, "/v1/deployments/"+v.DeploymentID, nil)
		testkit.Eventually(p.t, time.Minute, testkit.Named(v.DeploymentID+" deleted", func() error {
			if code, out := p.do(http.MethodGet, "/v1/deployments/"+v.DeploymentID, nil); code != http.StatusNotFound {
				return fmt.Errorf("%d %s", code, out)
			}
			return nil
		}))
		testkit.Eventually(p.t, 2*time.Minute, testkit.Named(scn+" wiped", func() error {
			if items := p.items(scn); len(items) != 0 {
				return fmt.Errorf("items %v", keys(items))
			}
			return nil
		}))
		testkit.Eventually(p.t, time.Minute, testkit.Named("admission."+cid+" out of the catalog", func() error {
			if code, out := p.do(http.MethodGet, settings, nil); code != http.StatusNotFound {
				return fmt.Errorf("GET %s: %d %s", settings, code, out)
			}
			return nil
		}))
	})

	t.Run("the audit lists admitted deployments a new policy would deny", func(t *testing.T) {
		strict := p.appPolicy(map[string]any{
			"description": "tenant-b: nothing above m1.small", "tenantIds": []string{"tenant-b"}, "mode": "audit",
			"objectModel": map[string]any{"maxFlavor": "m1.small", "?": map[string]any{"type": "io.policyflow.admission.FlavorLimit"}},
		})
		var audit struct {
			Violations []struct {
				DeploymentID string `json:"deployment_id"`
			} `json:"violations"`
		}
		if err := json.Unmarshal([]byte(p.must(http.MethodGet, "/policies/"+strict+"/violations", nil)), &audit); err != nil {
			t.Fatal(err)
		}
		if len(audit.Violations) != 1 || audit.Violations[0].DeploymentID != "other-"+sfx {
			t.Errorf("audit %+v, want other-%s (m1.xlarge)", audit, sfx)
		}
		// In audit mode it warns and admits.
		if v := p.deploy(dep("audited", "tenant-b", app("web", "com.example.Web", map[string]any{"flavor": "m1.medium"}))); !v.Admitted {
			t.Errorf("audit-mode policy denied: %+v", v)
		}
		// The stage keeps the report: the deployment that ran before the
		// policy and the one admitted under it.
		want := "audited-" + sfx + " other-" + sfx
		testkit.Eventually(t, 60*time.Second, func() error {
			var report struct {
				Violations []struct {
					DeploymentID string `json:"deployment_id"`
				} `json:"violations"`
			}
			if err := json.Unmarshal([]byte(p.must(http.MethodGet, "/policies/"+strict+"/report", nil)), &report); err != nil {
				return err
			}
			var got []string
			for _, v := range report.Violations {
				got = append(got, v.DeploymentID)
			}
			if strings.Join(got, " ") != want {
				return fmt.Errorf("report lists %v, want %s", got, want)
			}
			return nil
		})
	})

	t.Run("deleting an environment's only monitoring deployment is refused while others remain", func(t *testing.T) {
		need := p.appPolicy(map[string]any{
			"description": "every environment of tenant-d runs monitoring", "tenantIds": []string{"tenant-d"},
			"objectModel": map[string]any{"application": "io.policyflow.Monitoring", "?": map[string]any{"type": "io.policyflow.admission.RequiredApplication"}},
		})
		mon := p.deploy(dep("mon", "tenant-d", app("mon", "com.example.Zabbix", map[string]any{"inherits": []string{"io.policyflow.Monitoring"}})))
		web := p.deploy(dep("web", "tenant-d", app("web", "com.example.Web", nil)))
		if !mon.Admitted || !web.Admitted {
			t.Fatalf("mon %+v, web %+v: want both admitted", mon, web)
		}
		want := `deleting deployment ` + mon.DeploymentID + ` would leave it without io.policyflow.Monitoring, which every environment must have: ` + web.DeploymentID + ` is still deployed in it`
		// The API refuses it from its view (409); a view that had not
		// read web's record yet lets it through to the stage, which
		// refuses it with a denied verdict. Either way mon stays.
		switch code, out := p.do(http.MethodDelete, "/v1/deployments/"+mon.DeploymentID, nil); code {
		case http.StatusConflict:
			if !strings.Contains(out, want) || !strings.Contains(out, "(rule required-application of policy "+need+")") {
				t.Fatalf("DELETE mon: 409 %s; want %q", out, want)
			}
		case http.StatusAccepted:
			testkit.Eventually(t, time.Minute, testkit.Named("the stage refuses deleting mon", func() error {
				_, out := p.do(http.MethodGet, "/v1/deployments/"+mon.DeploymentID, nil)
				if !strings.Contains(out, want) {
					return fmt.Errorf("verdict %s", out)
				}
				return nil
			}))
		default:
			t.Fatalf("DELETE mon: %d %s", code, out)
		}
		p.must(http.MethodDelete, "/v1/deployments/"+web.DeploymentID, nil)
		for _, id := range []string{web.DeploymentID, mon.DeploymentID} {
			if id == mon.DeploymentID {
				// The environment's last deployment may go.
				testkit.Eventually(t, time.Minute, testkit.Named("DELETE mon accepted", func() error {
					if code, out := p.do(http.MethodDelete, "/v1/deployments/"+id, nil); code != http.StatusAccepted {
						return fmt.Errorf("%d %s", code, out)
					}
					return nil
				}))
			}
			testkit.Eventually(t, time.Minute, testkit.Named(id+" deleted", func() error {
				if code, out := p.do(http.MethodGet, "/v1/deployments/"+id, nil); code != http.StatusNotFound {
					return fmt.Errorf("%d %s", code, out)
				}
				return nil
			}))
		}
	})
}
