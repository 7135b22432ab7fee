package admission

import (
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/topology"
)

// TestStageOrdersMutationsByPriorityAndCreation: two image overrides of
// one tenant, the later-created one with the lower id: the later one
// wins at equal priority, the higher priority wins over it, and the
// verdict warns naming both.
func TestStageOrdersMutationsByPriorityAndCreation(t *testing.T) {
	c := stagetest.NewCluster(t, 1, stageTopics...)
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	override := func(id, image string, created time.Time, priority int32) *events.AppPolicy {
		return &events.AppPolicy{PolicyID: id, Mode: "enforce", Created: created, Updated: created, Priority: priority,
			ObjectModel: `{"field":"image","value":"` + image + `","?":{"type":"io.policyflow.admission.DefaultOverride"}}`}
	}
	c.Produce(t, topology.AppPolicies, "zz-older", override("zz-older", "ubuntu-old", t0, 0))
	c.Produce(t, topology.AppPolicies, "aa-newer", override("aa-newer", "ubuntu-new", t0.Add(time.Minute), 0))
	c.Produce(t, topology.AppPolicies, "mm-first", override("mm-first", "ubuntu-first", t0.Add(2*time.Minute), -1))
	c.ProduceRecords(t, c.Record(t, topology.DeployRequests, "d1", request("r1", "d1", "t1", `{"deployment_id":"d1","tenant":"t1","applications":[{"name":"web","class":"com.example.Web"}]}`)))
	stop := stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	v := stagetest.Decode[*events.AdmissionVerdict](t, c.Read(t, topology.AdmissionVerdicts, 1, 60*time.Second)[0])
	if !v.Admitted || !strings.Contains(v.Request, `"image":"ubuntu-new"`) {
		t.Fatalf("verdict = %+v; want ubuntu-new, the later-created policy's image", v)
	}
	if len(v.Warnings) != 1 || v.Warnings[0].PolicyID != "aa-newer" || v.Warnings[0].Rule != "mutation-conflict" ||
		!strings.Contains(v.Warnings[0].Message, "image is set by 3 policies, in this order: mm-first (priority -1") ||
		!strings.Contains(v.Warnings[0].Message, `then zz-older (priority 0, created 2023-11-14T22:13:20.000Z) to "ubuntu-old", then aa-newer`) {
		t.Errorf("warnings = %+v", v.Warnings)
	}
	stop()
	// The older policy given a higher priority wins.
	c.Produce(t, topology.AppPolicies, "zz-older", override("zz-older", "ubuntu-old", t0, 10))
	c.ProduceRecords(t, c.Record(t, topology.DeployRequests, "d2", request("r2", "d2", "t1", `{"deployment_id":"d2","tenant":"t1","applications":[{"name":"web","class":"com.example.Web"}]}`)))
	stagetest.Run(t, Stage(), stagetest.Env(c.Kafka))
	found := false
	for _, r := range c.Read(t, topology.AdmissionVerdicts, 2, 60*time.Second) {
		v := stagetest.Decode[*events.AdmissionVerdict](t, r)
		if v.DeploymentID != "d2" {
			continue
		}
		found = true
		if !strings.Contains(v.Request, `"image":"ubuntu-old"`) || len(v.Warnings) != 1 || v.Warnings[0].PolicyID != "zz-older" {
			t.Errorf("verdict on d2 = %+v; want ubuntu-old, the higher priority's", v)
		}
	}
	if !found {
		t.Error("no verdict on d2")
	}
}
