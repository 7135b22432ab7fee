package northapi

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/services/placement"
	"github.com/policyflow/policyflow/topology"
)

func placementExampleJSON(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../placement/examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDatacentersAndPlacements(t *testing.T) {
	s := newStack(t, nil)
	dc := placementExampleJSON(t, "datacenter.json")

	// Operators store datacenters; tenants and readers may not.
	code, out, _, _ := s.callAs(t, tenantToken, http.MethodPut, "/v1/datacenters/dc-example", dc)
	wantError(t, "tenant PUT", code, out, http.StatusForbidden)
	code, out, raw, _ := s.callAs(t, operatorToken, http.MethodPut, "/v1/datacenters/dc-example", dc)
	if code != http.StatusOK || out["leaves"] != float64(15) || out["updated_by"] != "operator" {
		t.Fatalf("PUT: %d %s", code, raw)
	}
	recs := s.records(t, topology.Datacenters, 1)
	if string(recs[0].Key) != "dc-example" {
		t.Errorf("record keyed %q", recs[0].Key)
	}

	// 400 lists every problem with the field to fix.
	bad := placementExampleJSON(t, "datacenter.json")
	loc := bad["location"].([]any)
	loc[1].(map[string]any)["level"] = "row"
	delete(loc[2].(map[string]any), "capacity")
	code, out, _ = s.call(t, http.MethodPut, "/v1/datacenters/dc-example", bad)
	wantError(t, "PUT a bad model", code, out, http.StatusBadRequest, `location[1].level: unknown level "row"`, `location[2].capacity: leaf "r1-pm1" has 0 numbers`)
	code, out, _ = s.call(t, http.MethodPut, "/v1/datacenters/dc-other", dc)
	wantError(t, "PUT under another id", code, out, http.StatusBadRequest, `the model is datacenter "dc-example" but the path names "dc-other"`)
	code, out, _ = s.call(t, http.MethodPut, "/v1/datacenters/a..b", dc)
	wantError(t, "PUT a bad id", code, out, http.StatusBadRequest, `datacenter_id "a..b"`)

	// Reads, by every reader.
	code, out, raw, _ = s.callAs(t, tenantToken, http.MethodGet, "/v1/datacenters", nil)
	if list, _ := out["datacenters"].([]any); code != http.StatusOK || len(list) != 1 || list[0].(map[string]any)["datacenter_id"] != "dc-example" {
		t.Fatalf("GET list: %d %s", code, raw)
	}
	code, out, raw = s.call(t, http.MethodGet, "/v1/datacenters/dc-example", nil)
	if m, _ := out["model"].(map[string]any); code != http.StatusOK || m["id"] != "dc-example" || len(out["levels"].([]any)) != 4 {
		t.Fatalf("GET one: %d %s", code, raw)
	}
	code, out, _ = s.call(t, http.MethodGet, "/v1/datacenters/dc-none", nil)
	wantError(t, "GET unknown", code, out, http.StatusNotFound, "datacenter dc-none does not exist")

	// A proposed placement meets every hard policy.
	ha := placementExampleJSON(t, "ha-clusters.json")
	delete(ha, "placement")
	code, out, raw, _ = s.callAs(t, tenantToken, http.MethodPost, "/v1/placements", ha)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/placements: %d %s", code, raw)
	}
	tpl, err := placement.ParseTemplate(mustJSON(t, ha))
	if err != nil {
		t.Fatal(err)
	}
	tpl.Placement = map[string]string{}
	for k, v := range out["placement"].(map[string]any) {
		tpl.Placement[k] = v.(string)
	}
	m, err := placement.ParseDatacenter(mustJSON(t, dc))
	if err != nil {
		t.Fatal(err)
	}
	if fs, err := placement.Check(m, tpl); err != nil || len(fs) != 0 {
		t.Fatalf("proposal %v: %v %v", tpl.Placement, err, fs)
	}

	// 422 names the hard policies that cannot be met together.
	pols := ha["placement_policies"].([]any)
	pols[0].(map[string]any)["properties"].(map[string]any)["n"] = 5
	code, out, raw = s.call(t, http.MethodPost, "/v1/placements", ha)
	if ps, _ := out["policies"].([]any); code != http.StatusUnprocessableEntity || len(ps) != 1 || ps[0] != "ha-G1" ||
		!strings.Contains(out["error"].(string), "spreads group G1 over at least 5 rack, and datacenter dc-example has 3") {
		t.Fatalf("POST infeasible: %d %s", code, raw)
	}
	pols[0].(map[string]any)["properties"].(map[string]any)["n"] = 0
	code, out, _ = s.call(t, http.MethodPost, "/v1/placements", ha)
	wantError(t, "POST n=0", code, out, http.StatusBadRequest, "placement_policies[0].properties.n: is 0")
	pols[0].(map[string]any)["properties"].(map[string]any)["n"] = 2
	ha["datacenter"] = "dc-none"
	code, out, _ = s.call(t, http.MethodPost, "/v1/placements", ha)
	wantError(t, "POST unknown datacenter", code, out, http.StatusNotFound, "datacenter dc-none does not exist")

	// A dry run checks the placement too.
	req := placementExampleJSON(t, "ha-clusters.json")
	req["deployment_id"], req["tenant"] = "ha", "t1"
	req["applications"] = []any{map[string]any{"name": "app", "class": "com.example.App"}}
	req["placement"].(map[string]any)["M12"] = "r1-pm1"
	code, out, raw = s.call(t, http.MethodPost, "/v1/deployments?dry_run=true", req)
	if vs, _ := out["violations"].([]any); code != http.StatusOK || out["admitted"] != false || len(vs) != 1 ||
		!strings.Contains(vs[0].(map[string]any)["message"].(string), "M11 and M12 share pm r1-pm1") {
		t.Fatalf("dry run: %d %s", code, raw)
	}

	// Delete: a tombstone.
	code, out, _, _ = s.callAs(t, readOnlyToken, http.MethodDelete, "/v1/datacenters/dc-example", nil)
	wantError(t, "read-only DELETE", code, out, http.StatusForbidden)
	code, _, raw = s.call(t, http.MethodDelete, "/v1/datacenters/dc-example", nil)
	if code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, raw)
	}
	if recs := s.records(t, topology.Datacenters, 2); recs[1].Value != nil {
		t.Errorf("DELETE wrote %q, want a tombstone", recs[1].Value)
	}
	code, out, _ = s.call(t, http.MethodGet, "/v1/datacenters/dc-example", nil)
	wantError(t, "GET deleted", code, out, http.StatusNotFound)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPlacementsOverTheCapAnswer503(t *testing.T) {
	s := newStackWith(t, Options{MaxPlacements: 1}, nil)
	if code, _, raw, _ := s.callAs(t, operatorToken, http.MethodPut, "/v1/datacenters/dc-example", placementExampleJSON(t, "datacenter.json")); code != http.StatusOK {
		t.Fatalf("PUT datacenter: %d %s", code, raw)
	}
	ha := placementExampleJSON(t, "ha-clusters.json")
	delete(ha, "placement")
	dry := placementExampleJSON(t, "ha-clusters.json")
	dry["deployment_id"], dry["tenant"] = "ha", "t1"
	dry["applications"] = []any{map[string]any{"name": "app", "class": "com.example.App"}}

	// The one slot is taken by a computation still running.
	release, ok := s.server.adm.TakePlacementSlot()
	if !ok {
		t.Fatal("no free placement slot before any computation")
	}
	code, out, _, h := s.callAs(t, tenantToken, http.MethodPost, "/v1/placements", ha)
	wantError(t, "POST /v1/placements with every slot taken", code, out, http.StatusServiceUnavailable, "1 placement computations are running", "--max-placements")
	if ra := h.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("503 without a Retry-After: %q", ra)
	}
	code, out, _ = s.call(t, http.MethodPost, "/v1/deployments?dry_run=true", dry)
	wantError(t, "dry run naming a datacenter with every slot taken", code, out, http.StatusServiceUnavailable, "--max-placements")

	// Once it ends, both compute again, and release their slot.
	release()
	for range 2 {
		if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodPost, "/v1/placements", ha); code != http.StatusOK {
			t.Fatalf("POST /v1/placements with a free slot: %d %s", code, raw)
		}
		if code, _, raw := s.call(t, http.MethodPost, "/v1/deployments?dry_run=true", dry); code != http.StatusOK {
			t.Fatalf("dry run with a free slot: %d %s", code, raw)
		}
	}
}

// TestOneTenantTakesOnlyItsShareOfPlacementsAndDryRuns: with four slots,
// a tenant running two placement computations and two dry runs (half of
// them) gets 429 for one more, naming its share; another tenant still
// computes at once. Without the share, the first tenant's costly
// requests took every slot and the second got 503.
func TestOneTenantTakesOnlyItsShareOfPlacementsAndDryRuns(t *testing.T) {
	s := newStackWith(t, Options{MaxPlacements: 4}, nil)
	if code, _, raw, _ := s.callAs(t, operatorToken, http.MethodPut, "/v1/datacenters/dc-example", placementExampleJSON(t, "datacenter.json")); code != http.StatusOK {
		t.Fatalf("PUT datacenter: %d %s", code, raw)
	}
	ha := placementExampleJSON(t, "ha-clusters.json")
	delete(ha, "placement")
	dry := func(tenant string) map[string]any {
		d := placementExampleJSON(t, "ha-clusters.json")
		d["deployment_id"], d["tenant"] = "ha-"+tenant, tenant
		d["applications"] = []any{map[string]any{"name": "app", "class": "com.example.App"}}
		return d
	}
	release, ok := s.server.adm.TakeTenantSlots("t1", 2)
	if !ok {
		t.Fatal("t1 could not take two slots of four")
	}
	defer release()
	code, out, _, h := s.callAs(t, tenantToken, http.MethodPost, "/v1/placements", ha)
	wantError(t, "t1's third placement", code, out, http.StatusTooManyRequests, `tenant "t1" runs 2 placement computations`, "half of --max-placements")
	if ra := h.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("429 without a Retry-After: %q", ra)
	}
	code, out, _, _ = s.callAs(t, tenantToken, http.MethodPost, "/v1/deployments?dry_run=true", dry("t1"))
	wantError(t, "t1's third dry run", code, out, http.StatusTooManyRequests, `tenant "t1" runs 2 dry runs`)
	if code, _, raw, _ := s.callAs(t, otherTenantToken, http.MethodPost, "/v1/placements", ha); code != http.StatusOK {
		t.Fatalf("t2's placement while t1 holds its share: %d %s", code, raw)
	}
	if code, _, raw, _ := s.callAs(t, otherTenantToken, http.MethodPost, "/v1/deployments?dry_run=true", dry("t2")); code != http.StatusOK {
		t.Fatalf("t2's dry run while t1 holds its share: %d %s", code, raw)
	}
}
