package policyflow_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/testkit"
)

// placementExample reads a file of services/placement/examples.
func placementExample(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../services/placement/examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPlacementSeedUseCases: seed 002's use cases through the North API
// and the admission stage. The datacenter (services/placement/examples)
// is one room of 3 racks of 4 PMs and a storage box each.
func TestPlacementSeedUseCases(t *testing.T) {
	p := start(t)
	sfx := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	var dc struct {
		DatacenterID string `json:"datacenter_id"`
		Leaves       int    `json:"leaves"`
	}
	if err := json.Unmarshal([]byte(p.must(http.MethodPut, "/v1/datacenters/dc-example", placementExample(t, "datacenter.json"))), &dc); err != nil || dc.Leaves != 15 {
		t.Fatalf("PUT datacenter: %v %+v", err, dc)
	}
	// request turns a template of the examples into a deployment request.
	request := func(id string, tpl map[string]any) map[string]any {
		tpl["deployment_id"], tpl["tenant"] = id+"-"+sfx, "tenant-p"
		tpl["applications"] = []any{app("app", "com.example.AppServer", nil)}
		return tpl
	}

	// undeploy deletes deployments and waits until they are gone: what
	// they held is free for the next subtest.
	undeploy := func(t *testing.T, ids ...string) {
		t.Helper()
		for _, id := range ids {
			id += "-" + sfx
			p.must(http.MethodDelete, "/v1/deployments/"+id, nil)
			testkit.Eventually(t, time.Minute, testkit.Named(id+" deleted", func() error {
				if code, out := p.do(http.MethodGet, "/v1/deployments/"+id, nil); code != http.StatusNotFound {
					return fmt.Errorf("%d %s", code, out)
				}
				return nil
			}))
		}
	}

	// Multiple HA clusters of appservers: 12 VMs in 3 groups of 4, each
	// group under LLMN anti-collocation L1=rack, L2=PM, N=2.
	t.Run("HA clusters: a compliant placement is admitted, two members of a cluster on one PM are denied, a proposal is admitted", func(t *testing.T) {
		v := p.deploy(request("ha-ok", placementExample(t, "ha-clusters.json")))
		if !v.Admitted || len(v.Violations) != 0 || len(v.Warnings) != 0 {
			t.Fatalf("compliant placement: %+v", v)
		}

		bad := placementExample(t, "ha-clusters.json")
		bad["placement"].(map[string]any)["M12"] = "r1-pm1" // with M11
		v = p.deploy(request("ha-bad", bad))
		want := `tenant "tenant-p": resources M11, M12: M11 and M12 share pm r1-pm1; LLMN anti-collocation (L1=rack, L2=pm, N=2) of group G1 allows no two members in one pm (rule placement.llmn-anti-collocation of policy ha-G1)`
		if v.Admitted || len(v.Violations) != 1 || v.Violations[0].Message != want || v.Violations[0].PolicyID != "ha-G1" {
			t.Fatalf("two members of G1 on one PM: %+v\nwant denied: %s", v, want)
		}

		tpl := placementExample(t, "ha-clusters.json")
		delete(tpl, "placement")
		var proposal struct {
			Placement map[string]string `json:"placement"`
			Warnings  []any             `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(p.must(http.MethodPost, "/v1/placements", tpl)), &proposal); err != nil || len(proposal.Placement) != 12 || len(proposal.Warnings) != 0 {
			t.Fatalf("POST /v1/placements: %v %+v", err, proposal)
		}
		tpl["placement"] = proposal.Placement
		if v := p.deploy(request("ha-proposed", tpl)); !v.Admitted || len(v.Warnings) != 0 {
			t.Fatalf("the proposed placement %v: %+v", proposal.Placement, v)
		}
		undeploy(t, "ha-ok", "ha-proposed")
	})

	// Hadoop with direct attached storage: a hop-count limit of 0 between
	// a VM and its volume puts the volume on the VM's host.
	t.Run("Hadoop: hop-count 0 between a VM and its volume means direct attached storage", func(t *testing.T) {
		v := p.deploy(request("hadoop-das", placementExample(t, "hadoop.json")))
		if !v.Admitted || len(v.Violations) != 0 {
			t.Fatalf("volumes on their VMs' hosts: %+v", v)
		}
		remote := placementExample(t, "hadoop.json")
		remote["placement"].(map[string]any)["volume-2"] = "r2-sb1" // the rack's storage box
		v = p.deploy(request("hadoop-remote", remote))
		want := `tenant "tenant-p": resources datanode-2, volume-2: datanode-2 and volume-2 are 2 network hops apart (r2-pm1 to r2-sb1); hop-count limit 0 (the same host: direct attached) (rule placement.hop-count-limit of policy das-2)`
		if v.Admitted || len(v.Violations) != 1 || v.Violations[0].Message != want {
			t.Fatalf("a volume on the storage box: %+v\nwant denied: %s", v, want)
		}
		undeploy(t, "hadoop-das")
	})

	// The seed's Hadoop template as written (Proposal A: groups object,
	// policies in groups, volumes and attachments, OS::VolExclusive,
	// OS::VolNotMoved) on a datacenter with the seed's compute_node level.
	t.Run("Hadoop as the seed writes it: proposed, admitted, two volumes on one host denied", func(t *testing.T) {
		if err := json.Unmarshal([]byte(p.must(http.MethodPut, "/v1/datacenters/dc-heat", placementExample(t, "heat-datacenter.json"))), &dc); err != nil || dc.Leaves != 12 {
			t.Fatalf("PUT datacenter: %v %+v", err, dc)
		}
		tpl := placementExample(t, "heat-hadoop.json")
		tpl["datacenter"] = "dc-heat"
		var proposal struct {
			Placement map[string]string `json:"placement"`
			Warnings  []any             `json:"warnings"`
		}
		if err := json.Unmarshal([]byte(p.must(http.MethodPost, "/v1/placements", tpl)), &proposal); err != nil || len(proposal.Placement) != 9 || len(proposal.Warnings) != 0 {
			t.Fatalf("POST /v1/placements: %v %+v", err, proposal)
		}
		tpl["placement"] = proposal.Placement
		if v := p.deploy(request("hadoop-seed", tpl)); !v.Admitted || len(v.Warnings) != 0 {
			t.Fatalf("the proposed placement %v: %+v", proposal.Placement, v)
		}
		bad := placementExample(t, "heat-hadoop.json")
		bad["datacenter"] = "dc-heat"
		placed := map[string]any{}
		for k, v := range proposal.Placement {
			placed[k] = v
		}
		host := proposal.Placement["WCA4-hadoop-datanode-1"]
		placed["WCA4-hadoop-datanode-2"], placed["Storage volume used by datanode server_2"] = host, host
		bad["placement"] = placed
		v := p.deploy(request("hadoop-seed-bad", bad))
		found := false
		for _, f := range v.Violations {
			found = found || f.Rule == "placement.volume-exclusive"
		}
		if v.Admitted || !found {
			t.Fatalf("two volumes on %s: %+v", host, v)
		}
	})

	t.Run("a soft violation admits with a warning", func(t *testing.T) {
		tpl := placementExample(t, "ha-clusters.json")
		tpl["placement_policies"] = append(tpl["placement_policies"].([]any), map[string]any{
			"id": "first-two-apart", "type": "anti-collocation", "mode": "soft", "applies_to": []any{"M11", "M12"}, "properties": map[string]any{"level": "rack"}})
		v := p.deploy(request("ha-soft", tpl))
		want := `tenant "tenant-p": resources M11, M12: M11 and M12 share rack r1; anti-collocation at rack (rule placement.anti-collocation of policy first-two-apart)`
		if !v.Admitted || len(v.Violations) != 0 || len(v.Warnings) != 1 || v.Warnings[0].Message != want {
			t.Fatalf("soft violation: %+v\nwant admitted with the warning: %s", v, want)
		}
		undeploy(t, "ha-soft")
	})

	// Capacity already used counts: ha-clusters puts 4 vCPU on each of 12
	// PMs of 16. Four fit; the fifth is denied naming the PM, its
	// capacity and who uses it; deleting one makes room.
	t.Run("capacity: the fifth HA deployment onto the same PMs is denied until one is deleted", func(t *testing.T) {
		for i := 1; i <= 4; i++ {
			if v := p.deploy(request(fmt.Sprintf("ha-%d", i), placementExample(t, "ha-clusters.json"))); !v.Admitted {
				t.Fatalf("ha-%d: %+v", i, v)
			}
		}
		v := p.deploy(request("ha-5", placementExample(t, "ha-clusters.json")))
		want := fmt.Sprintf(`tenant "tenant-p": resources M11: leaf r1-pm1 is overloaded in vcpu: M11 demand 4, its capacity is 16, of which 16 is in use by deployments ha-1-%[1]s, ha-2-%[1]s, ha-3-%[1]s, ha-4-%[1]s; non-overload (rule placement.non-overload of policy non-overload)`, sfx)
		if v.Admitted || len(v.Violations) != 12 || v.Violations[0].Message != want {
			t.Fatalf("ha-5: %+v\nwant denied, first: %s", v, want)
		}
		undeploy(t, "ha-1")
		if v := p.deploy(request("ha-5", placementExample(t, "ha-clusters.json"))); !v.Admitted {
			t.Fatalf("ha-5 after ha-1 was deleted: %+v", v)
		}
	})

	t.Run("an unknown datacenter is denied with the reason", func(t *testing.T) {
		tpl := placementExample(t, "ha-clusters.json")
		tpl["datacenter"] = "dc-nowhere"
		v := p.deploy(request("ha-nowhere", tpl))
		if v.Admitted || len(v.Violations) != 1 || v.Violations[0].Rule != "placement.datacenter" ||
			!strings.Contains(v.Violations[0].Message, `unknown datacenter "dc-nowhere": store its model first (PUT /v1/datacenters/dc-nowhere`) {
			t.Fatalf("unknown datacenter: %+v", v)
		}
	})
}
