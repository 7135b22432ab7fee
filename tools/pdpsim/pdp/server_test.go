package pdp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/policy"
)

// call sends a request and decodes the JSON answer into out (when not nil).
func call(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q; body %s", method, url, ct, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, data, err)
		}
	}
	return resp.StatusCode
}

func getConfig(t *testing.T, base, req string) (int, []policy.Body) {
	t.Helper()
	var out []map[string]any
	status := call(t, http.MethodPost, base+"/getConfig", req, &out)
	bodies := make([]policy.Body, len(out))
	for i, b := range out {
		bodies[i] = b
	}
	return status, bodies
}

func names(bodies []policy.Body) []string {
	out := make([]string, len(bodies))
	for i, b := range bodies {
		out[i] = b.PolicyName()
	}
	return out
}

func newSim(t *testing.T, opts ...Option) (*Server, string) {
	t.Helper()
	s := NewServer(opts...)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func TestGetConfig(t *testing.T) {
	s, base := newSim(t)
	for _, b := range SeedPolicies() {
		if _, err := s.Put(b); err != nil {
			t.Fatal(err)
		}
	}
	if status := call(t, http.MethodPut, base+"/sim/policies", `[
	  {"policyName": "DCAE.Config_VM_MEMORY", "policyVersion": "10", "config": {"min_memory": "8GB"},
	   "matchingConditions": {"ONAPName": "DCAE", "ConfigName": "vm_memory", "key1": "value1"}},
	  {"policyName": "DCAE.Config_VM_MEMORY.9.xml", "config": "{\"min_memory\":\"4GB\"}"},
	  {"policyName": "DCAE.Config_VM_MEMORY_BIG.1.xml", "config": "{}"},
	  {"policyName": "OTHER.Config_x.1.xml", "config": "x", "matchingConditions": {"ONAPName": "ECOMP"}}
	]`, nil); status != http.StatusOK {
		t.Fatalf("PUT status %d", status)
	}

	tests := []struct {
		name       string
		req        string
		wantStatus int
		want       []string
	}{
		{name: "policy_id returns all its versions", req: `{"policyName": "DCAE.Config_VM_MEMORY"}`, wantStatus: 200,
			// Matched from the start of the full name, as the policy-handler's PDP mock does.
			want: []string{"DCAE.Config_VM_MEMORY.5.xml", "DCAE.Config_VM_MEMORY.9.xml", "DCAE.Config_VM_MEMORY.10.xml", "DCAE.Config_VM_MEMORY_BIG.1.xml"}},
		{name: "regex over a scope", req: `{"policyName": "DCAE.Config_.*", "requestID": "abc"}`, wantStatus: 200,
			want: []string{"DCAE.Config_VM_MEMORY.5.xml", "DCAE.Config_VM_MEMORY.9.xml", "DCAE.Config_VM_MEMORY.10.xml", "DCAE.Config_VM_MEMORY_BIG.1.xml", "DCAE.Config_VM_STORAGE.1.xml"}},
		{name: "one version by full name", req: `{"policyName": "DCAE.Config_VM_MEMORY.9.xml"}`, wantStatus: 200,
			want: []string{"DCAE.Config_VM_MEMORY.9.xml"}},
		{name: "onapName", req: `{"policyName": ".*", "onapName": "ECOMP"}`, wantStatus: 200, want: []string{"OTHER.Config_x.1.xml"}},
		{name: "configName", req: `{"policyName": ".*", "configName": "vm_storage"}`, wantStatus: 200, want: []string{"DCAE.Config_VM_STORAGE.1.xml"}},
		{name: "configAttributes", req: `{"policyName": ".*", "configAttributes": {"key1": "value1"}, "unique": false}`, wantStatus: 200,
			want: []string{"DCAE.Config_VM_MEMORY.10.xml"}},
		{name: "nothing matches", req: `{"policyName": "DCAE.Config_nothing"}`, wantStatus: 404},
		{name: "no policyName", req: `{"configName": "vm_storage"}`, wantStatus: 400},
		{name: "bad regex", req: `{"policyName": "DCAE.Config_(x"}`, wantStatus: 400},
		{name: "bad JSON", req: `{"policyName": `, wantStatus: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, bodies := getConfig(t, base, tt.req)
			if status != tt.wantStatus {
				t.Fatalf("status %d; want %d (%v)", status, tt.wantStatus, bodies)
			}
			if tt.wantStatus != 200 {
				if len(bodies) != 1 || bodies[0][policy.FieldConfigStatus] != policy.ConfigNotFound || bodies[0].PolicyName() != "" {
					t.Fatalf("error answer %v; want one CONFIG_NOT_FOUND element without policyName", bodies)
				}
				if tt.wantStatus == 404 && bodies[0][policy.FieldConfigMessage] != NotFoundMessage {
					t.Fatalf("404 message %v", bodies[0][policy.FieldConfigMessage])
				}
				return
			}
			if got := names(bodies); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
		})
	}

	// The answer looks like the PDP's: config stringified, status set, and
	// the latest per policy_id is what a client would pick.
	_, bodies := getConfig(t, base, `{"policyName": "DCAE.Config_VM_MEMORY"}`)
	latest, errored := policy.Latest(bodies)
	mem := latest["DCAE.Config_VM_MEMORY"]
	if mem.VersionString() != "10" || !reflect.DeepEqual(mem["config"], map[string]any{"min_memory": "8GB"}) {
		t.Fatalf("latest = %v", mem)
	}
	if _, ok := errored["DCAE.Config_VM_MEMORY_BIG"]; !ok {
		t.Fatalf("DCAE.Config_VM_MEMORY_BIG with config {} is not errored: %v", latest)
	}
	for _, b := range bodies {
		if _, ok := b["config"].(string); !ok {
			t.Fatalf("config is not a string as the PDP sends it: %#v", b["config"])
		}
		if b[policy.FieldConfigStatus] != policy.ConfigRetrieved || b[policy.FieldConfigMessage] != policy.ConfigRetrievedMessage || b["type"] != "JSON" {
			t.Fatalf("PDP fields missing: %v", b)
		}
		if _, ok := b["property"]; !ok {
			t.Fatalf("property missing: %v", b)
		}
	}

	// The ONAP path works too.
	var viaPath []map[string]any
	if status := call(t, http.MethodPost, base+"/pdp/api/getConfig", `{"policyName": "DCAE.Config_VM_STORAGE"}`, &viaPath); status != 200 || len(viaPath) != 1 {
		t.Fatalf("/pdp/api/getConfig: %d %v", status, viaPath)
	}
}

func TestAdminAPI(t *testing.T) {
	s, base := newSim(t)
	var putAns struct {
		Loaded []policy.LoadedPolicy `json:"loaded"`
	}
	status := call(t, http.MethodPut, base+"/sim/policies",
		`{"policyName": "DCAE.Config_a", "policyVersion": 3, "config": {"x": 1}, "matchingConditions": {"ONAPName": "DCAE"}, "custom": [1]}`, &putAns)
	if status != 200 || len(putAns.Loaded) != 1 {
		t.Fatalf("PUT: %d %+v", status, putAns)
	}
	want := policy.LoadedPolicy{PolicyName: "DCAE.Config_a.3.xml", VersionNo: "3", Matches: map[string]string{"ONAPName": "DCAE"}, UpdateType: "NEW"}
	if !reflect.DeepEqual(putAns.Loaded[0], want) {
		t.Fatalf("loaded %+v; want %+v", putAns.Loaded[0], want)
	}
	var list []map[string]any
	if call(t, http.MethodGet, base+"/sim/policies", "", &list); len(list) != 1 || list[0]["config"] != `{"x":1}` ||
		!reflect.DeepEqual(list[0]["custom"], []any{1.0}) {
		t.Fatalf("list = %v", list)
	}

	for _, bad := range []struct{ body, want string }{
		{`{"config": "x"}`, "policyName is required"},
		{`{"policyName": "DCAE.Config_a"}`, "needs a policyVersion"},
		{`{"policyName": "DCAE.Config_a.4.xml", "policyVersion": "5"}`, "differs from the version"},
		{`{"policyName": "DCAE.Config_a", "policyVersion": "v5"}`, "not all digits"},
		{`[{"policyName": "DCAE.Config_b.1.xml"}, {"policyName": ""}]`, "policyName is required"},
		{`"text"`, "want a JSON object"},
	} {
		var ans map[string]string
		if status := call(t, http.MethodPut, base+"/sim/policies", bad.body, &ans); status != 400 || !strings.Contains(ans["error"], bad.want) {
			t.Errorf("PUT %s: %d %v; want 400 mentioning %q", bad.body, status, ans, bad.want)
		}
	}
	if got := names(s.Policies()); !reflect.DeepEqual(got, []string{"DCAE.Config_a.3.xml"}) {
		t.Fatalf("a refused batch changed the store: %v", got)
	}

	if _, err := s.Put(policy.Body{"policyName": "DCAE.Config_a.4.xml", "config": "y"}); err != nil {
		t.Fatal(err)
	}
	l, err := s.Put(policy.Body{"policyName": "DCAE.Config_a.5.xml", "config": "z"})
	if err != nil || l.UpdateType != policy.UpdateTypeUpdate {
		t.Fatalf("Put of a further version: %+v, %v", l, err)
	}

	var delAns struct {
		Removed []policy.RemovedPolicy `json:"removed"`
	}
	if status := call(t, http.MethodDelete, base+"/sim/policies/DCAE.Config_a.4.xml", "", &delAns); status != 200 ||
		!reflect.DeepEqual(delAns.Removed, []policy.RemovedPolicy{{PolicyName: "DCAE.Config_a.4.xml", VersionNo: "4"}}) {
		t.Fatalf("DELETE one version: %d %+v", status, delAns)
	}
	if status := call(t, http.MethodDelete, base+"/sim/policies/DCAE.Config_a", "", &delAns); status != 200 ||
		!reflect.DeepEqual(delAns.Removed, []policy.RemovedPolicy{{PolicyName: "DCAE.Config_a.3.xml", VersionNo: "3"}, {PolicyName: "DCAE.Config_a.5.xml", VersionNo: "5"}}) {
		t.Fatalf("DELETE all versions: %d %+v", status, delAns)
	}
	if status := call(t, http.MethodDelete, base+"/sim/policies/DCAE.Config_a", "", nil); status != 404 {
		t.Fatalf("DELETE of nothing: %d", status)
	}
	if len(s.Policies()) != 0 {
		t.Fatalf("store not empty: %v", s.Policies())
	}
	if status := call(t, http.MethodGet, base+"/healthz", "", nil); status != 200 {
		t.Fatalf("healthz: %d", status)
	}
}

// receiver collects the PDP notifications it is sent.
type receiver struct {
	mu     sync.Mutex
	got    []policy.Notification
	auth   []string // the Authorization header of each notification
	status int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var n policy.Notification
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "want a JSON POST", http.StatusBadRequest)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.got = append(rc.got, n)
	rc.auth = append(rc.auth, r.Header.Get("Authorization"))
	if rc.status != 0 {
		http.Error(w, "north api is down", rc.status)
	}
}

func (rc *receiver) fail(status int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.status = status
}

func (rc *receiver) take() []policy.Notification {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.got
	rc.got = nil
	return out
}

func TestNotifications(t *testing.T) {
	rc := &receiver{}
	north := httptest.NewServer(rc)
	defer north.Close()
	s, base := newSim(t, WithNotifyURL(north.URL+"/v1/pdp/notifications"))

	if status := call(t, http.MethodPut, base+"/sim/policies",
		`{"policyName": "DCAE.Config_VM_MEMORY.5.xml", "config": {"min_memory": "2GB"}, "matchingConditions": {"ONAPName": "DCAE", "priority": 1}}`, nil); status != 200 {
		t.Fatalf("PUT: %d", status)
	}
	if status := call(t, http.MethodPut, base+"/sim/policies",
		`{"policyName": "DCAE.Config_VM_MEMORY.222.xml", "config": {"min_memory": "8GB"}}`, nil); status != 200 {
		t.Fatalf("PUT: %d", status)
	}
	if status := call(t, http.MethodDelete, base+"/sim/policies/DCAE.Config_VM_MEMORY.5.xml", "", nil); status != 200 {
		t.Fatalf("DELETE: %d", status)
	}
	want := []policy.Notification{
		{LoadedPolicies: []policy.LoadedPolicy{{PolicyName: "DCAE.Config_VM_MEMORY.5.xml", VersionNo: "5",
			Matches: map[string]string{"ONAPName": "DCAE", "priority": "1"}, UpdateType: "NEW"}},
			RemovedPolicies: []policy.RemovedPolicy{}, NotificationType: "Update"},
		{LoadedPolicies: []policy.LoadedPolicy{{PolicyName: "DCAE.Config_VM_MEMORY.222.xml", VersionNo: "222", UpdateType: "UPDATE"}},
			RemovedPolicies: []policy.RemovedPolicy{}, NotificationType: "Update"},
		{LoadedPolicies: []policy.LoadedPolicy{},
			RemovedPolicies: []policy.RemovedPolicy{{PolicyName: "DCAE.Config_VM_MEMORY.5.xml", VersionNo: "5"}}, NotificationType: "Remove"},
	}
	if got := rc.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("notifications:\n%+v\nwant:\n%+v", got, want)
	}

	// When the receiver fails, the change is kept and the admin call says so.
	rc.fail(http.StatusServiceUnavailable)
	var ans map[string]any
	status := call(t, http.MethodPut, base+"/sim/policies", `{"policyName": "DCAE.Config_VM_STORAGE.1.xml", "config": "{\"a\":1}"}`, &ans)
	if status != http.StatusBadGateway || !strings.Contains(ans["error"].(string), "503") {
		t.Fatalf("PUT with failing receiver: %d %v", status, ans)
	}
	if got := names(s.Policies()); !reflect.DeepEqual(got, []string{"DCAE.Config_VM_MEMORY.222.xml", "DCAE.Config_VM_STORAGE.1.xml"}) {
		t.Fatalf("store = %v", got)
	}
}

func TestNotify(t *testing.T) {
	rc := &receiver{}
	north := httptest.NewServer(rc)
	defer north.Close()
	n := policy.Notification{LoadedPolicies: []policy.LoadedPolicy{{PolicyName: "DCAE.Config_a.1.xml", VersionNo: "1"}}}
	if err := Notify(context.Background(), nil, north.URL, n); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	got := rc.take()
	if len(got) != 1 || got[0].LoadedPolicies[0].PolicyName != "DCAE.Config_a.1.xml" {
		t.Fatalf("received %+v", got)
	}
	// With a client that sends a token, the receiver gets it.
	if err := Notify(context.Background(), auth.Client("tok"), north.URL, n); err != nil {
		t.Fatalf("Notify with a token: %v", err)
	}
	rc.mu.Lock()
	if fmt.Sprint(rc.auth) != "[ Bearer tok]" {
		t.Errorf("Authorization headers received %q, want none, then Bearer tok", rc.auth)
	}
	rc.mu.Unlock()
	rc.fail(http.StatusInternalServerError)
	err := Notify(context.Background(), nil, north.URL, n)
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "north api is down") {
		t.Fatalf("Notify to a failing receiver: %v", err)
	}
	north.Close()
	if err := Notify(context.Background(), nil, north.URL, n); err == nil {
		t.Fatalf("Notify to a closed receiver succeeded")
	}
}

func TestPutCopiesBody(t *testing.T) {
	s := NewServer()
	b := policy.Body{"policyName": "DCAE.Config_a.1.xml", "config": "x", "matchingConditions": map[string]any{"ONAPName": "DCAE"}}
	if _, err := s.Put(b); err != nil {
		t.Fatal(err)
	}
	b["matchingConditions"].(map[string]any)["ONAPName"] = "changed"
	got := s.Policies()[0]["matchingConditions"].(map[string]any)["ONAPName"]
	if got != "DCAE" {
		t.Fatalf("stored body changed with the caller's: %v", got)
	}
	out, _ := json.Marshal(s.Policies()[0])
	if !bytes.Contains(out, []byte(`"policyVersion":"1"`)) {
		t.Fatalf("policyVersion not derived from the name: %s", out)
	}
}

// A simulator given a state file answers, started again on it, with the
// versions loaded and removed before it stopped, through the Go API and
// the admin API alike.
func TestPersistKeepsThePoliciesAcrossARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pdp-policies.json")
	s := NewServer()
	if err := s.Persist(path); err != nil {
		t.Fatal(err)
	}
	for _, b := range SeedPolicies() {
		if _, err := s.Put(b); err != nil {
			t.Fatal(err)
		}
	}
	reopen := func() *Server {
		t.Helper()
		again := NewServer()
		if err := again.Persist(path); err != nil {
			t.Fatal(err)
		}
		return again
	}
	if got, want := names(reopen().Policies()), names(SeedPolicies()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after Put and a restart the simulator holds %v, want %v", got, want)
	}
	srv := httptest.NewServer(s.Handler())
	loaded := `{"policyName": "DCAE.Config_Kept.3.xml", "config": {"k": "v"}}`
	if code := call(t, http.MethodPut, srv.URL+"/sim/policies", loaded, nil); code != http.StatusOK {
		t.Fatalf("PUT /sim/policies: %d", code)
	}
	if code := call(t, http.MethodDelete, srv.URL+"/sim/policies/DCAE.Config_VM_STORAGE", "", nil); code != http.StatusOK {
		t.Fatalf("DELETE /sim/policies: %d", code)
	}
	srv.Close()
	want := names(s.Policies())

	again := reopen()
	if got := names(again.Policies()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a restart the simulator holds %v, want %v", got, want)
	}
	if !reflect.DeepEqual(again.Policies(), s.Policies()) {
		t.Errorf("after a restart the bodies differ:\n%v\nwant\n%v", again.Policies(), s.Policies())
	}

	// A file that is not a list of bodies is refused with its path.
	if err := os.WriteFile(path, []byte(`{"not": "a list"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewServer().Persist(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Persist on a broken file: %v; want an error naming %s", err, path)
	}
}
