package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const stagedAnswer = `{"rollout_id":"r1","version":"2","previous_version":"1","state":"paused","reason":"promoted to step 2 by ops",` +
	`"plan":{"steps":[0.1,0.5,1],"auto":true,"pause_s":60,"max_failed":2},"current_step":2,"step_started_at":"2026-01-01T00:00:00Z",` +
	`"step_done_at":null,"steps":[{"step":1,"share":0.1,"components":3,"notified":3,"failed":0},{"step":2,"share":0.5,"components":12,"notified":9,"failed":3},` +
	`{"step":3,"share":1,"components":15,"notified":0,"failed":0}],"updated_by":"ops","updated_at":"2026-01-01T00:00:00Z"}`

// rollout promote|pause|resume|abort POLICY_ID posts to the action's route
// with the reason, and prints the rollout with the current step marked;
// rollout POLICY_ID -o table shows the staged rollout under the counts.
func TestRolloutActionsAndStagedTable(t *testing.T) {
	hermeticEnv(t)
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(body))
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"policy_id":"DCAE.Config_a","version":"2","components":30,"in_consul":15,"notified":12,"failed":3,"pending":15,"staged":`+stagedAnswer+`}`)
			return
		}
		_, _ = io.WriteString(w, stagedAnswer)
	}))
	t.Cleanup(srv.Close)
	for _, action := range []string{"promote", "pause", "resume", "abort"} {
		r := policyctl(t, "rollout", action, "DCAE.Config_a", "--reason", "why not", "--api", srv.URL)
		if r.code != 0 || !strings.Contains(r.out, "PAUSED at step 2 of 3") || !strings.Contains(r.out, ">  2     50%") {
			t.Fatalf("rollout %s: exit %d, stdout %q, stderr %q", action, r.code, r.out, r.errOut)
		}
		if want := "POST /v1/policies/DCAE.Config_a/rollout/" + action + ` {"reason":"why not"}`; got[len(got)-1] != want {
			t.Fatalf("rollout %s sent %q, want %q", action, got[len(got)-1], want)
		}
	}
	r := policyctl(t, "rollout", "DCAE.Config_a", "-o", "table", "--api", srv.URL)
	if r.code != 0 || !strings.Contains(r.out, "12 notified, 3 failed") || !strings.Contains(r.out, "version 2 (previous 1): PAUSED") {
		t.Fatalf("rollout -o table: exit %d, stdout %q, stderr %q", r.code, r.out, r.errOut)
	}
	if r := policyctl(t, "rollout", "promote", "--api", srv.URL); r.code != exitUsage || !strings.Contains(r.errOut, "rollout promote takes one POLICY_ID") {
		t.Fatalf("rollout promote with no POLICY_ID: exit %d, %q", r.code, r.errOut)
	}
}
