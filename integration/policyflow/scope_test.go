package policyflow_test

import (
	"fmt"
	"github.com/policyflow/policyflow/services/testkit"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestATenantCannotReadAnotherTenantsSettings is the attack on the
// settings policy admission publishes for every admitted application
// (admission.<component_id>, globex's admitted configuration with its
// password): tenant acme asks for it by name, by a regular expression
// matching everything, through the rollout, in the policy_ids of a
// component it registers, and through a ".*" filter and policy_ids of a
// component it has admitted. Each read answers as if it did not exist,
// the registration is refused, and acme's folders get global policies and
// acme's own settings only.
func TestATenantCannotReadAnotherTenantsSettings(t *testing.T) {
	p, tokens := startTenants(t, "globex", "acme")
	sfx := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	acme := func(method, path string, body any) (int, string) {
		t.Helper()
		return p.doAs(tokens["acme"], method, path, body)
	}
	const secret = "globex-db-password"

	// A global policy, and globex's admitted settings in globex's folder.
	global := "DCAE.Config_SCOPE_" + sfx
	p.publish(global+".1.xml", "1", `{"global": true}`, map[string]any{"ONAPName": "DCAE"})
	v := p.deploy(map[string]any{"deployment_id": "gx-" + sfx, "tenant": "globex", "applications": []map[string]any{
		app("web", "com.example.Web", map[string]any{"properties": map[string]any{"db_password": secret}})}})
	if !v.Admitted || len(v.Components) != 1 {
		t.Fatalf("globex's deployment: %+v", v)
	}
	theirs := "admission." + v.Components[0]
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("globex's folder holds its settings", func() error {
		if _, ok := p.items(v.Components[0])[theirs]; !ok {
			return fmt.Errorf("items %v", keys(p.items(v.Components[0])))
		}
		if code, out := p.do(http.MethodGet, "/policy_latest/"+global, nil); code != http.StatusOK {
			return fmt.Errorf("the global policy is not in the catalog yet: %d %s", code, out)
		}
		return nil
	}))

	// Reads: 404 as for a policy that does not exist, or left out.
	for _, path := range []string{"/policy_latest/" + theirs, "/v1/policies/" + theirs + "/rollout"} {
		if code, out := acme(http.MethodGet, path, nil); code != http.StatusNotFound || strings.Contains(out, secret) {
			t.Errorf("acme GET %s: %d %s, want 404 without globex's settings", path, code, out)
		}
	}
	if code, out := acme(http.MethodPost, "/policies_latest", map[string]any{"policyName": ".*"}); code != http.StatusOK ||
		strings.Contains(out, theirs) || strings.Contains(out, secret) || !strings.Contains(out, global) {
		t.Errorf("acme POST /policies_latest .*: %d %s, want the global policy and not globex's settings", code, out)
	}

	// Registration naming globex's settings in policy_ids: refused.
	scn := "acme-folder-" + sfx
	reg := func(ids []string, filters []map[string]any) map[string]any {
		return map[string]any{"deployment_id": "acme-dep-" + sfx, "tenant": "acme", "service_component_name": scn,
			"policy_ids": ids, "policy_filters": filters, "notify": map[string]any{"kind": "none"}}
	}
	if code, out := acme(http.MethodPut, "/v1/components/acme-c-"+sfx, reg([]string{theirs}, nil)); code != http.StatusForbidden || !strings.Contains(out, "belongs to another tenant") {
		t.Errorf("acme registers policy_ids [%s]: %d %s, want 403", theirs, code, out)
	}
	// A filter matching everything brings the global policy, not globex's.
	if code, out := acme(http.MethodPut, "/v1/components/acme-c-"+sfx, reg(nil, []map[string]any{{"filter_id": "all", "policyName": ".*"}})); code != http.StatusAccepted {
		t.Fatalf("acme registers a .* filter: %d %s", code, out)
	}
	// Through admission, which registers the component itself: policy_ids
	// and a .* filter bring acme's own settings and the global policy.
	av := p.deploy(map[string]any{"deployment_id": "acme-adm-" + sfx, "tenant": "acme", "applications": []map[string]any{
		app("web", "com.example.Web", map[string]any{"component": map[string]any{
			"policy_ids": []string{theirs}, "policy_filters": []map[string]any{{"filter_id": "all", "policyName": ".*"}}, "notify": map[string]any{"kind": "none"}}})}})
	if !av.Admitted || len(av.Components) != 1 {
		t.Fatalf("acme's deployment: %+v", av)
	}
	own := "admission." + av.Components[0]
	// Both of acme's components get the global policy and acme's own
	// settings (the .* filter selects them), never globex's.
	for folder, want := range map[string][]string{scn: {global, own}, av.Components[0]: {global, own}} {
		testkit.Eventually(p.t, 2*time.Minute, testkit.Named("acme's folder "+folder+" holds "+strings.Join(want, ", "), func() error {
			items := p.items(folder)
			for _, id := range want {
				if _, ok := items[id]; !ok {
					return fmt.Errorf("items %v", keys(items))
				}
			}
			return nil
		}))
		if items := p.items(folder); items[theirs] != nil || len(items) != len(want) {
			t.Errorf("acme's folder %s holds %v, want %v only", folder, keys(items), want)
		}
		if code, out := acme(http.MethodGet, "/service_component_all/"+folder, nil); code != http.StatusOK || strings.Contains(out, secret) {
			t.Errorf("acme GET /service_component_all/%s: %d %s, want 200 without globex's settings", folder, code, out)
		}
	}
}
