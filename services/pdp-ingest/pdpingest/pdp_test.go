package pdpingest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/policy"
)

// fakePDP serves POST /getConfig like an ONAP PDP: policyName is a regular
// expression matched from the start of the full policy name; no match is
// a 400 with the PDP's CONFIG_NOT_FOUND entry.
type fakePDP struct {
	mu     sync.Mutex
	bodies []policy.Body
	status int // when not 0, every request gets it (the PDP is down)
	calls  int
	asked  []string
	header http.Header
}

func (f *fakePDP) set(bodies ...policy.Body) {
	f.mu.Lock()
	f.bodies = bodies
	f.mu.Unlock()
}

func (f *fakePDP) down(status int) {
	f.mu.Lock()
	f.status = status
	f.mu.Unlock()
}

func (f *fakePDP) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakePDP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/getConfig" {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.header = r.Header.Clone()
	if f.status != 0 {
		http.Error(w, "PDP unavailable", f.status)
		return
	}
	var req struct {
		PolicyName string `json:"policyName"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.asked = append(f.asked, req.PolicyName)
	re, err := regexp.Compile("^(?:" + req.PolicyName + ")")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var out []policy.Body
	for _, b := range f.bodies {
		if re.MatchString(b.PolicyName()) {
			out = append(out, b)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if len(out) == 0 {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode([]map[string]any{{
			"policyConfigMessage": "PE300 - Data Issue: Incorrect Params passed: Decision not a Permit.",
			"policyConfigStatus":  policy.ConfigNotFound, "type": nil, "config": nil,
			"policyName": nil, "policyVersion": nil, "matchingConditions": nil,
			"responseAttributes": nil, "property": nil,
		}})
		return
	}
	_ = json.NewEncoder(w).Encode(out)
}

func TestPDPAllVersions(t *testing.T) {
	f := &fakePDP{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	header, err := ParseHeaders("ClientAuth=Basic dXNlcg==, Environment=TEST")
	if err != nil {
		t.Fatal(err)
	}
	p := NewPDP(srv.URL+"/", 5*time.Second, header)
	ctx := context.Background()

	f.set(pdpBody(memID, "5", `{"min_memory":"2GB"}`), pdpBody(memID, "222", `{"min_memory":"8GB"}`),
		pdpBody(memID+"_BIG", "1", `{"a":1}`), pdpBody("DCAE.Config_other", "3", `{"a":1}`))
	got, err := p.AllVersions(ctx, memID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, raw := range got {
		b, err := policy.DecodeBody(raw)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, b.PolicyName())
	}
	if strings.Join(names, ",") != memID+".5.xml,"+memID+".222.xml" {
		t.Fatalf("got %v, want both versions of %s and nothing else", names, memID)
	}
	if f.asked[0] != `DCAE\.Config_VM_MEMORY\..*` {
		t.Fatalf("asked the PDP for policyName %q", f.asked[0])
	}
	if f.header.Get("ClientAuth") != "Basic dXNlcg==" || f.header.Get("Environment") != "TEST" || f.header.Get("Content-Type") != "application/json" {
		t.Fatalf("PDP got headers %v", f.header)
	}

	got, err = p.AllVersions(ctx, "DCAE.Config_unknown")
	if err != nil || len(got) != 0 {
		t.Fatalf("unknown policy: got %v %v, want no version and no error", got, err)
	}

	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusUnauthorized} {
		f.down(status)
		if _, err := p.AllVersions(ctx, memID); err == nil || !strings.Contains(err.Error(), http.StatusText(status)) {
			t.Fatalf("PDP answering %d: got %v, want an error naming the status", status, err)
		}
	}
	f.down(0)

	noAnswer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`[{"policyConfigMessage":"No Response Received","policyConfigStatus":"CONFIG_NOT_FOUND","policyName":null}]`))
	}))
	defer noAnswer.Close()
	if _, err := NewPDP(noAnswer.URL, time.Second, nil).AllVersions(ctx, memID); err == nil {
		t.Fatal("a PDP that could not answer was taken as having no version")
	}
	notFound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.NotFound(w, nil) }))
	defer notFound.Close()
	if got, err := NewPDP(notFound.URL, time.Second, nil).AllVersions(ctx, memID); err != nil || len(got) != 0 {
		t.Fatalf("404: got %v %v, want no version", got, err)
	}

	srv.Close()
	if _, err := p.AllVersions(ctx, memID); err == nil {
		t.Fatal("an unreachable PDP gave no error")
	}
}

func TestParseHeadersRefusesMalformedPairs(t *testing.T) {
	if _, err := ParseHeaders("ClientAuth"); err == nil {
		t.Fatal("a header without a value separator was accepted")
	}
	h, err := ParseHeaders("")
	if err != nil || len(h) != 0 {
		t.Fatalf("empty: %v %v", h, err)
	}
}
