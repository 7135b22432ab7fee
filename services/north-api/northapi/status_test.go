package northapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// TestPipelineStatusShowsARollout: a policy three components should have,
// written to all, one notified, one whose webhook failed and one notified
// by none (Consul alone), reads as should have 3, written 3, notified 2,
// failed 1; the failure is listed
// with its reason, secrets masked. Tenants may not read the whole
// pipeline.
func TestPipelineStatusShowsARollout(t *testing.T) {
	s := newStack(t, nil)
	suffix := fmt.Sprint(time.Now().UnixNano())
	pid := "Status.Config_" + suffix
	body := `{"policyName":"` + pid + `.3.xml","policyVersion":"3","policyConfigStatus":"CONFIG_RETRIEVED","matchingConditions":{"ONAPName":"DCAE"},"config":{"k":"v"}}`
	s.Produce(t, topology.PolicyCatalog, pid, &events.PolicyCatalogEntry{
		PolicyID: pid, PolicyName: pid + ".3.xml", PolicyVersion: "3", Body: body, Status: "VALID", UpdatedAt: time.Now().UTC(),
	})
	comps := []string{"st-ok-" + suffix, "st-failed-" + suffix, "st-none-" + suffix}
	for i, id := range comps {
		reg := componentBody()
		reg["service_component_name"] = "scn-" + id
		reg["policy_ids"] = []string{pid}
		reg["policy_filters"] = []map[string]any{}
		if code, _, raw := s.call(t, http.MethodPut, "/v1/components/"+id, reg); code != http.StatusAccepted {
			t.Fatalf("PUT %s: %d %s", id, code, raw)
		}
		ref := events.PolicyRef{PolicyID: pid, PolicyName: pid + ".3.xml", PolicyVersion: "3"}
		notify := events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://127.0.0.1:9/p"}
		if i == 2 {
			notify = events.NotifyTarget{Kind: events.NotifyNone}
		}
		s.Produce(t, topology.ComponentApplied, id, &events.ComponentApplied{
			ComponentID: id, ServiceComponentName: "scn-" + id, UpdateID: "u-" + id, Action: "gathered", ConsulIndex: 10, PoliciesCount: 1, Generation: 1,
			PolicyRefs: []events.PolicyRef{ref}, UpdatedRefs: []events.PolicyRef{ref},
			Notify: notify, AppliedAt: time.Now().UTC(),
		})
		if i == 2 {
			continue // no claim: nothing notifies it
		}
		claim := `{"update_id":"u-` + id + `","generation":1,"exit_code":0,"outcome":"ok","stderr":"","at":"2024-05-01T10:00:0` + fmt.Sprint(i) + `Z","http_status":200}`
		if i == 1 {
			claim = `{"update_id":"u-` + id + `","generation":1,"exit_code":1,"outcome":"failed","stderr":"POST http://u:hunter2@h/p?token=s3cret: 500 Internal Server Error","at":"2024-05-01T10:00:01Z","http_status":500}`
		}
		putKV(t, s.consul, "scn-"+id+":policies/notified", claim)
	}

	var st policyapi.PipelineStatus
	var raw []byte
	testkit.Eventually(t, 30*time.Second, func() error {
		var code int
		code, _, raw, _ = s.callAs(t, readOnlyToken, http.MethodGet, "/v1/status", nil)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/status as read-only: %d %s", code, raw)
		}
		st = policyapi.PipelineStatus{}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("GET /v1/status: %v %s", err, raw)
		}
		if len(st.Changes) > 0 && st.Changes[0].PolicyID == pid && st.Changes[0].Written == 3 {
			return nil
		}
		return fmt.Errorf("GET /v1/status does not show %s written to the three components: %s", pid, raw)
	})
	got := st.Changes[0]
	if got.Version != "3" || got.ShouldHave != 3 || got.Written != 3 || got.Notified != 2 || got.Failed != 1 {
		t.Errorf("rollout of %s: %+v; want version 3, should have 3, written 3, notified 2 (one by none), failed 1", pid, got)
	}
	var failed *policyapi.FailedNotification
	for i, f := range st.FailedNotifications {
		if f.ComponentID == comps[1] {
			failed = &st.FailedNotifications[i]
		}
		if f.ComponentID == comps[0] {
			t.Errorf("the notified component %s is listed as failed: %+v", comps[0], f)
		}
	}
	if failed == nil {
		t.Fatalf("failed notifications lack %s: %s", comps[1], raw)
	}
	if failed.ExitCode != 1 || failed.HTTPStatus != 500 || !strings.Contains(failed.Reason, "500 Internal Server Error") ||
		strings.Contains(failed.Reason, "hunter2") || strings.Contains(failed.Reason, "s3cret") {
		t.Errorf("failed notification %+v; want exit code 1, HTTP 500 and the reason with its secrets masked", *failed)
	}

	if code, _, raw, _ := s.callAs(t, tenantToken, http.MethodGet, "/v1/status", nil); code != http.StatusForbidden {
		t.Errorf("GET /v1/status as a tenant: %d %s; want 403", code, raw)
	}
	if code, _, raw, _ := s.callAs(t, "", http.MethodGet, "/v1/status", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/status without a token: %d %s; want 401", code, raw)
	}
}

// TestStatusPageIsServedWithoutData: the page needs no token and holds no
// data; it allows only its own script.
func TestStatusPageIsServedWithoutData(t *testing.T) {
	s := newStack(t, nil)
	resp, err := http.Get(s.url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /ui/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(page, "policyflow status") || !strings.Contains(page, `fetch("/v1/status"`) {
		t.Errorf("GET /ui/ is not the status page: %.200s", page)
	}
	if !strings.Contains(csp, "script-src 'sha256-") {
		t.Errorf("status page CSP %q; want only the page's own script", csp)
	}
	if resp, err := http.Get(s.url + "/ui/other"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /ui/other: %d; want 404", resp.StatusCode)
		}
	}
}

// TestStatusAnswersWhileConsulHangs: with a Consul agent that accepts
// connections and answers nothing (frozen), GET /v1/status still answers,
// within its Consul deadline: the stages and changes it reads from Kafka,
// Consul down with the reason, and the notified and failed counts marked
// unknown rather than read as zeros.
func TestStatusAnswersWhileConsulHangs(t *testing.T) {
	s := newStackWith(t, Options{Consul: consulkv.Config{Addr: testkit.SilentListener(t)}}, nil)
	pid := "Frozen.Config_status"
	body := `{"policyName":"` + pid + `.1.xml","policyVersion":"1","policyConfigStatus":"CONFIG_RETRIEVED","matchingConditions":{"ONAPName":"DCAE"},"config":{"k":"v"}}`
	s.Produce(t, topology.PolicyCatalog, pid, &events.PolicyCatalogEntry{
		PolicyID: pid, PolicyName: pid + ".1.xml", PolicyVersion: "1", Body: body, Status: "VALID", UpdatedAt: time.Now().UTC(),
	})
	for i := range 3 {
		id := fmt.Sprintf("frozen-%d", i)
		s.Produce(t, topology.DeployComponents, id, &events.Component{ComponentID: id, DeploymentID: "d-" + id, ServiceComponentName: "scn-" + id,
			PolicyIDs: []string{pid}, Config: "{}", Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://127.0.0.1:9/p"}, UpdatedAt: time.Now().UTC()})
	}
	client := &http.Client{Timeout: 20 * time.Second}
	var st policyapi.PipelineStatus
	testkit.Eventually(t, 60*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+readOnlyToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET /v1/status with Consul frozen: %v", err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v1/status: %d %s", resp.StatusCode, raw)
		}
		st = policyapi.PipelineStatus{}
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("GET /v1/status: %v %s", err, raw)
		}
		if len(st.Changes) == 0 || st.Changes[0].PolicyID != pid || st.Changes[0].ShouldHave != 3 {
			return fmt.Errorf("the status does not show %s for its 3 components yet: %s", pid, raw)
		}
		return nil
	})
	if len(st.Dependencies) != 1 || st.Dependencies[0].Name != "consul" || st.Dependencies[0].OK || !strings.Contains(st.Dependencies[0].Reason, "unknown") {
		t.Errorf("dependencies %+v; want consul down, saying what is unknown", st.Dependencies)
	}
	if c := st.Changes[0]; !c.NotificationsUnknown {
		t.Errorf("change %+v: notified and failed are not marked unknown while Consul does not answer", c)
	}
}
