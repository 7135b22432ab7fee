package northapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// TestOrgNodesList: GET /v1/orgs/{org}/nodes lists the org's nodes by
// node id, a page at a time, with filters; a tenant reads its own org
// only.
func TestOrgNodesList(t *testing.T) {
	s := newStack(t, nil)
	// 25 nodes of org t1: n00…n24; the last five at 1.1.0, n05…n09 of
	// pattern web, the others of property arch, arm64 for the even ones;
	// n03 rejected a package's signature.
	var all []string
	for i := range 25 {
		id := fmt.Sprintf("n%02d", i)
		all = append(all, id)
		arch, version := "amd64", "1.0.0"
		if i%2 == 0 {
			arch = "arm64"
		}
		if i >= 20 {
			version = "1.1.0"
		}
		reg := map[string]any{"properties": []any{map[string]any{"name": "arch", "value": arch}}, "softwareVersion": version}
		if i >= 5 && i < 10 { // a pattern node has no properties
			reg = map[string]any{"pattern": "web", "softwareVersion": version}
		}
		if code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/t1/nodes/"+id, reg); code != 200 {
			t.Fatalf("register %s: %d %s", id, code, raw)
		}
	}
	// A node of another org, never listed with t1's.
	if code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/t2/nodes/x1", map[string]any{"softwareVersion": "1.0.0"}); code != 200 {
		t.Fatalf("register t2/x1: %d %s", code, raw)
	}
	rejected := map[string]any{"policy": "t1/p", "status": "signature rejected", "softwareVersion": "1.0.0", "error": "package 1.1.0: the package's signature is not one of a trusted key"}
	if code, _, raw := s.call(t, http.MethodPut, "/v1/orgs/t1/nodes/n03/status", rejected); code != 200 {
		t.Fatalf("report: %d %s", code, raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, topic := range []string{topology.AgentNodes, topology.AgentStatus} {
		if err := s.server.nmp.World().WaitCaughtUp(ctx, topic); err != nil {
			t.Fatalf("the view did not read %s: %v", topic, err)
		}
	}
	list := func(token, query string) (int, api.OrgNodes, []byte) {
		t.Helper()
		code, _, raw, _ := s.callAs(t, token, http.MethodGet, "/v1/orgs/t1/nodes"+query, nil)
		var a api.OrgNodes
		if code == 200 {
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatalf("%s: %v %s", query, err, raw)
			}
		}
		return code, a, raw
	}
	ids := func(a api.OrgNodes) []string {
		var out []string
		for _, n := range a.Nodes {
			out = append(out, n.Node)
		}
		return out
	}

	// The org's reader pages through all 25, 10 at a time, by node id.
	testkit.Eventually(t, 10*time.Second, func() error { // the registrations reach the view
		if _, a, _ := list(tenantToken, "?limit=100"); len(a.Nodes) != 25 {
			return fmt.Errorf("%d nodes listed", len(a.Nodes))
		}
		return nil
	})
	var got []string
	var sizes []int
	token := ""
	for page := 0; ; page++ {
		q := "?limit=10"
		if token != "" {
			q += "&page_token=" + url.QueryEscape(token)
		}
		code, a, raw := list(tenantToken, q)
		if code != 200 || a.Org != "t1" || page > 3 {
			t.Fatalf("page %d: %d %s", page, code, raw)
		}
		got, sizes = append(got, ids(a)...), append(sizes, len(a.Nodes))
		if token = a.NextPageToken; token == "" {
			break
		}
	}
	if !slices.Equal(got, all) || !slices.Equal(sizes, []int{10, 10, 5}) {
		t.Fatalf("pages of %v listed %v, want %v", sizes, got, all)
	}

	// What a node shows: registration and last report.
	_, a, raw := list(readOnlyToken, "?status="+url.QueryEscape("signature rejected"))
	if want := []string{"n03"}; !slices.Equal(ids(a), want) {
		t.Fatalf("status filter: %s", raw)
	}
	if n := a.Nodes[0]; n.Policy != "t1/p" || n.SoftwareVersion != "1.0.0" || n.Error == "" || n.ReportedAt == nil || len(n.Properties) == 0 {
		t.Fatalf("n03 shows %s", raw)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"?software_version=1.1.0", all[20:]},
		{"?pattern=web", all[5:10]},
		{"?property=arch%3Darm64&software_version=1.1.0", []string{"n20", "n22", "n24"}},
		{"?pattern=t1%2Fweb&software_version=1.1.0", nil},
		{"?property=arch%3Dsparc", nil},
		{"?status=waiting&pattern=web", all[5:10]},
		{"?status=waiting&limit=2&software_version=1.0.0", []string{"n00", "n01"}},
	} {
		code, a, raw := list(tenantToken, tc.query)
		if code != 200 || !slices.Equal(ids(a), tc.want) {
			t.Errorf("%s: %d %s, want %v", tc.query, code, raw, tc.want)
		}
	}
	// Paging over a filter: the token names where the last page ended.
	_, a, _ = list(tenantToken, "?property=arch%3Dodd&limit=1")
	if len(a.Nodes) != 0 || a.NextPageToken != "" {
		t.Errorf("no node matches, yet %v and token %q", ids(a), a.NextPageToken)
	}
	_, a, _ = list(tenantToken, "?software_version=1.1.0&limit=5")
	if a.NextPageToken != "" {
		t.Errorf("the last page (exactly full) answers the token %q", a.NextPageToken)
	}

	// Refusals, each with what to fix.
	for _, tc := range []struct{ query, want string }{
		{"?limit=0", "limit"},
		{"?limit=1001", "limit"},
		{"?page_token=%21%21", "page_token"},
		{"?status=exploded", "want one of"},
		{"?property=arch", "name=value"},
		{"?pattern=a%2Fb%2Fc", "pattern"},
		{"?sort=node", "sort"},
	} {
		code, body, _, _ := s.callAs(t, tenantToken, http.MethodGet, "/v1/orgs/t1/nodes"+tc.query, nil)
		wantError(t, tc.query, code, body, 400, tc.want)
	}
	// Another tenant is refused as on the other org routes; an agent's
	// token lists nothing.
	code, body, _, _ := s.callAs(t, otherTenantToken, http.MethodGet, "/v1/orgs/t1/nodes", nil)
	wantError(t, "another tenant", code, body, 403, "acts for org t2")
	code, body, _, _ = s.callAs(t, agentToken, http.MethodGet, "/v1/orgs/t1/nodes", nil)
	wantError(t, "an agent", code, body, 403)
	// The other tenant lists its own org, without t1's nodes.
	code, body, raw, _ = s.callAs(t, otherTenantToken, http.MethodGet, "/v1/orgs/t2/nodes", nil)
	if code != 200 {
		t.Fatalf("t2 in its org: %d %v %s", code, body, raw)
	}
	var t2 api.OrgNodes
	if err := json.Unmarshal(raw, &t2); err != nil || !slices.Equal(ids(t2), []string{"x1"}) {
		t.Fatalf("t2's nodes: %v %s", err, raw)
	}
}
