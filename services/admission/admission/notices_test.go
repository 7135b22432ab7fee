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
	"github.com/policyflow/policyflow/services/admission/admit"
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

// TestInstanceQuotaRaisesNotices: an InstanceQuota finding denies and is
// also a notice on admission.notices (admitted false), with the policy's
// webhook when it names one and as an event alone when it does not; two
// applications over the quota raise two notices with distinct ids.
func TestInstanceQuotaRaisesNotices(t *testing.T) {
	hooked, err := admit.Compile("q-hook", []byte(`{"maxInstances":2,"webhook":"http://hooks.example/quota","?":{"type":"io.policyflow.admission.InstanceQuota"}}`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := admit.Compile("q-env", []byte(`{"maxInstances":4,"scope":"environment","?":{"type":"io.policyflow.admission.InstanceQuota"}}`), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	dr := request("r1", "d1", "t1", `{"deployment_id":"d1","tenant":"t1","environment":"prod","applications":[{"name":"a","class":"x.A","instances":3},{"name":"b","class":"x.B","instances":3}]}`)
	outs, err := Decide(t.Context(), dr, nil, State{Policies: []*admit.Compiled{hooked, plain}, Owners: NewNames(), Deployed: admit.DeployedSet{}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*events.AdmissionNotice{}
	for _, o := range outs {
		if n, ok := o.Value.(*events.AdmissionNotice); ok {
			if o.Topic != topology.AdmissionNotices || string(o.Key) != "d1" {
				t.Errorf("notice on %s keyed %s", o.Topic, o.Key)
			}
			got[n.NoticeID] = n
		}
	}
	v := outs[len(outs)-1].Value.(*events.AdmissionVerdict)
	if v.Admitted || len(v.Violations) != 3 {
		t.Fatalf("verdict %+v; want denied by three quota findings", v)
	}
	a, b, env := got["r1/q-hook/instance-quota"], got["r1/q-hook/instance-quota/2"], got["r1/q-env/instance-quota"]
	if len(got) != 3 || a == nil || b == nil || env == nil {
		t.Fatalf("notices %v; want one per finding", got)
	}
	if a.Admitted || a.WebhookURL != "http://hooks.example/quota" || a.Rule != "instance-quota" || a.Object != `application "a" (x.A)` ||
		a.Message != `tenant "t1": application "a" (x.A): asks for 3 instances; the quota is 2 per application (rule instance-quota of policy q-hook)` {
		t.Errorf("notice of a = %+v", a)
	}
	if b.Object != `application "b" (x.B)` || env.WebhookURL != "" || env.Environment != "prod" || env.Admitted {
		t.Errorf("notices of b %+v, of the environment %+v", b, env)
	}
}
