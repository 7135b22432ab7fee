package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestDevRunsParticipantReplicas: `policyctl dev --participant-replicas 2`
// runs two replicas of the reference participant; an element deployed
// through policyctl lands in Consul.
func TestDevRunsParticipantReplicas(t *testing.T) {
	devTestEnv(t)
	dataDir := t.TempDir()
	t.Setenv("PF_DEV_DATA_DIR", dataDir)
	d := startDev(t, dataDir, "--stages", "replica-sync", "--participant-replicas", "2", "--participant-prefix", "dev-test/acm")
	stopped := false
	defer func() {
		if !stopped {
			d.shutdown(t)
		}
	}()
	if !strings.Contains(d.banner, "participant-consul, 2 replica(s)") {
		t.Errorf("banner does not name the replicas:\n%s", d.banner)
	}
	api := bannerAPI.FindStringSubmatch(d.banner)
	if api == nil {
		t.Fatalf("banner names no North API:\n%s", d.banner)
	}
	url := "http://" + api[1]
	until(t, func(v map[string]any) bool {
		reps, _ := v["replicas"].([]any)
		online := 0
		for _, r := range reps {
			if r.(map[string]any)["participantState"] == "ON_LINE" {
				online++
			}
		}
		return online == 2
	}, "participants", "show", "--api", url, "participant-consul")
	els := writeFile(t, "els.json", `[{"id": "e1", "type": "org.policyflow.ConsulKV", "properties": {"greeting": "hello"}}]`)
	if r := policyctl(t, "acm", "deploy", "--api", url, "--composition", "c1", "--elements", els, "participant-consul", "i1"); r.code != 0 {
		t.Fatalf("acm deploy: exit %d %q", r.code, r.errOut)
	}
	until(t, func(v map[string]any) bool {
		els, _ := v["elements"].([]any)
		return len(els) == 1 && els[0].(map[string]any)["state"] == "DEPLOYED"
	}, "acm", "status", "--api", url, "participant-consul", "i1")
	if code, body := httpDo(t, http.MethodGet, "http://"+d.consul+"/v1/kv/dev-test/acm/i1/e1?raw", ""); code != 200 || body != `{"greeting":"hello"}` {
		t.Errorf("Consul dev-test/acm/i1/e1: %d %q", code, body)
	}
	stopped = true
	if code := d.shutdown(t); code != 0 {
		t.Errorf("policyctl dev exited %d\nstderr:\n%s", code, d.errOut)
	}
}
