package northapi

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/topology"
)

// TestTenantSeesGlobalAndOwnPoliciesOnly: a tenant reads, lists and
// subscribes to global policies and its own; another tenant's policy
// answers as one that does not exist, is left out of listings and of its
// folder's answer, and is refused in policy_ids. Operators see every one.
func TestTenantSeesGlobalAndOwnPoliciesOnly(t *testing.T) {
	const (
		global = "DCAE.Config_VM_MEMORY"
		own    = "admission.dep-t1.web"
		theirs = "admission.dep-t2.web"
	)
	owned := func(id, tenant string) func(s *stack) {
		return func(s *stack) {
			r := catalogRecord(id+".1.xml", "1", pdpBody(id+".1.xml", "1", map[string]any{"secret": tenant + "-settings"}))
			r.Tenant = tenant
			s.Produce(t, topology.PolicyCatalog, id, r)
		}
	}
	s := newStack(t, func(s *stack) {
		owned(global, "")(s)
		owned(own, "t1")(s)
		owned(theirs, "t2")(s)
	})

	// Reads: another tenant's policy is 404 with the words of a policy
	// that does not exist.
	code, body, _, _ := s.callAs(t, tenantToken, http.MethodGet, "/policy_latest/"+theirs, nil)
	_, none, _, _ := s.callAs(t, tenantToken, http.MethodGet, "/policy_latest/admission.dep-none.web", nil)
	wantError(t, "policy_latest of another tenant's policy", code, body, http.StatusNotFound, "no policy "+theirs)
	if strings.ReplaceAll(fmt.Sprint(body["error"]), theirs, "X") != strings.ReplaceAll(fmt.Sprint(none["error"]), "admission.dep-none.web", "X") {
		t.Errorf("another tenant's policy answers %q, a missing one %q: the answer tells them apart", body["error"], none["error"])
	}
	for _, id := range []string{global, own} {
		if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodGet, "/policy_latest/"+id, nil); code != http.StatusOK {
			t.Errorf("policy_latest %s as t1: %d %s", id, code, raw)
		}
	}
	if code, _, raw, _ := s.callAs(t, readOnlyToken, http.MethodGet, "/policy_latest/"+theirs, nil); code != http.StatusOK {
		t.Errorf("policy_latest %s as read-only: %d %s", theirs, code, raw)
	}
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodGet, "/v1/policies/"+theirs+"/rollout", nil)
	wantError(t, "rollout of another tenant's policy", code, body, http.StatusNotFound, "policy "+theirs+" is not in the catalog")
	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodGet, "/v1/policies/"+own+"/rollout", nil); code != http.StatusOK {
		t.Errorf("rollout %s as t1: %d %s", own, code, raw)
	}

	// Listings: a regular expression matching everything.
	for _, tc := range []struct {
		token string
		want  []string
	}{
		{tenantToken, []string{global, own}},
		{otherTenantToken, []string{global, theirs}},
		{operatorToken, []string{global, own, theirs}},
	} {
		code, body, raw, _ := s.callAs(t, tc.token, http.MethodPost, "/policies_latest", `{"policyName": ".*"}`)
		if code != http.StatusOK {
			t.Fatalf("policies_latest as %s: %d %s", tc.token, code, raw)
		}
		var got []string
		for id := range body {
			got = append(got, id)
		}
		sort.Strings(got)
		sort.Strings(tc.want)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("policies_latest .* as %s: %v, want %v", tc.token, got, tc.want)
		}
	}

	// Registration: policy_ids may name global policies and the tenant's.
	scn := fmt.Sprintf("scn-scope-%d", time.Now().UnixNano())
	reg := func(ids ...string) map[string]any {
		return map[string]any{"deployment_id": "dep-t1", "tenant": "t1", "service_component_name": scn,
			"policy_ids": ids, "notify": map[string]any{"kind": "none"}}
	}
	code, body, _, _ = s.callAs(t, tenantToken, http.MethodPut, "/v1/components/dep-t1.web", reg(global, theirs))
	wantError(t, "policy_ids naming another tenant's policy", code, body, http.StatusForbidden,
		"policy_ids[1] "+theirs+" belongs to another tenant")
	code, body, _, _ = s.callAs(t, operatorToken, http.MethodPut, "/v1/components/dep-t1.web", reg(theirs))
	wantError(t, "an operator registering a t1 component with t2's policy", code, body, http.StatusForbidden, "belongs to another tenant")
	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodPut, "/v1/components/dep-t1.web", reg(global, own, "DCAE.Config_NOT_YET")); code != http.StatusAccepted {
		t.Fatalf("register with global and own policies: %d %s", code, raw)
	}

	// The folder's answer never shows another tenant's policy, even one
	// written there before owners were checked.
	for _, id := range []string{global, own, theirs} {
		putKV(t, s.consul, consulkv.ItemKey(scn, id), fmt.Sprintf(`{"policyName":%q}`, id+".1.xml"))
	}
	items := func(token string) []string {
		code, body, raw, _ := s.callAs(t, token, http.MethodGet, "/service_component_all/"+scn, nil)
		if code != http.StatusOK {
			t.Fatalf("service_component_all as %s: %d %s", token, code, raw)
		}
		pol, _ := body["policies"].(map[string]any)
		list, _ := pol["items"].([]any)
		var names []string
		for _, it := range list {
			m, _ := it.(map[string]any)
			names = append(names, fmt.Sprint(m["policyName"]))
		}
		sort.Strings(names)
		return names
	}
	if got := items(tenantToken); fmt.Sprint(got) != fmt.Sprint([]string{global + ".1.xml", own + ".1.xml"}) {
		t.Errorf("service_component_all as t1: items %v, want the global policy and t1's", got)
	}
	if got := items(operatorToken); len(got) != 3 {
		t.Errorf("service_component_all as operator: items %v, want all three (what Consul holds)", got)
	}
}
