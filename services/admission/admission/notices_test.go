package admission

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/topology"
)

// TestStageAsksEnginesAndSendsNotices: the stage asks an External
// policy's engine (a real HTTP server on an allowed host) and denies what
// it denies; a request over an InstanceNotice threshold is admitted with
// a notice on admission.notices, written with the verdict, and posted to
// the policy's webhook, again after a failed attempt.
func TestStageAsksEnginesAndSendsNotices(t *testing.T) {
	var mu sync.Mutex
	var hooked []NoticeBody
	hookCalls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/engine":
			var q struct {
				Request struct{ Tenant string } `json:"request"`
			}
			json.NewDecoder(r.Body).Decode(&q)
			json.NewEncoder(w).Encode(map[string]any{"allowed": q.Request.Tenant != "bad", "message": "not this tenant"})
		case "/hook":
			mu.Lock()
			defer mu.Unlock()
			if hookCalls++; hookCalls == 1 {
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			var n NoticeBody
			json.NewDecoder(r.Body).Decode(&n)
			hooked = append(hooked, n)
		}
	}))
	defer srv.Close()

	c := stagetest.NewCluster(t, 1, stageTopics...)
	c.Produce(t, topology.AppPolicies, "engine", &events.AppPolicy{PolicyID: "engine", Mode: "enforce",
		ObjectModel: `{"url":"` + srv.URL + `/engine","?":{"type":"io.policyflow.admission.External"}}`})
	c.Produce(t, topology.AppPolicies, "notice", &events.AppPolicy{PolicyID: "notice", Mode: "enforce",
		ObjectModel: `{"maxInstances":2,"webhook":"` + srv.URL + `/hook","?":{"type":"io.policyflow.admission.InstanceNotice"}}`})
	c.ProduceRecords(t,
		c.Record(t, topology.DeployRequests, "d-big", request("r1", "d-big", "t1", `{"deployment_id":"d-big","tenant":"t1","environment":"prod","applications":[{"name":"web","class":"com.example.Web","instances":3}]}`)),
		c.Record(t, topology.DeployRequests, "d-bad", request("r2", "d-bad", "bad", `{"deployment_id":"d-bad","tenant":"bad","applications":[{"name":"web","class":"com.example.Web"}]}`)),
	)
	stagetest.Run(t, StageWith(hooks.Config{Allow: []string{"127.0.0.1"}}), stagetest.Env(c.Kafka))

	verdicts := map[string]*events.AdmissionVerdict{}
	for _, r := range c.Read(t, topology.AdmissionVerdicts, 2, 60*time.Second) {
		v := stagetest.Decode[*events.AdmissionVerdict](t, r)
		verdicts[v.DeploymentID] = v
	}
	if v := verdicts["d-bad"]; v == nil || v.Admitted || len(v.Violations) != 1 || v.Violations[0].Rule != "external" ||
		!strings.Contains(v.Violations[0].Message, "/engine denies: not this tenant (rule external of policy engine)") {
		t.Errorf("verdict on d-bad = %+v", v)
	}
	if v := verdicts["d-big"]; v == nil || !v.Admitted || len(v.Warnings) != 1 || v.Warnings[0].Rule != "instance-notice" {
		t.Errorf("verdict on d-big = %+v", v)
	}
	recs := c.Read(t, topology.AdmissionNotices, 1, 30*time.Second)
	n := stagetest.Decode[*events.AdmissionNotice](t, recs[0])
	want := `tenant "t1": environment "prod": spawns 3 instances, more than the 2 the notice is set at (rule instance-notice of policy notice)`
	if string(recs[0].Key) != "d-big" || n.NoticeID != "r1/notice/instance-notice" || n.Tenant != "t1" || n.Environment != "prod" ||
		n.Message != want || n.WebhookURL != srv.URL+"/hook" || !n.Admitted {
		t.Errorf("notice %q = %+v", recs[0].Key, n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		got, calls := append([]NoticeBody(nil), hooked...), hookCalls
		mu.Unlock()
		if len(got) > 0 {
			if got[0].NoticeID != "r1/notice/instance-notice" || got[0].Message != want || calls != 2 {
				t.Errorf("webhook got %+v after %d calls; want the notice on the second", got, calls)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook got no notice (%d calls)", calls)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
