package northapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/topology"
)

// TestAgentReportKeepsEveryField: an agent's report, api.StatusRequest —
// the type the edge agent sends — with every field set, goes through the
// node status handler into agent.status and back out of GET .../status
// with every field kept. A field added to the report that the API drops
// (or that this test does not yet follow) fails here.
func TestAgentReportKeepsEveryField(t *testing.T) {
	s := newStack(t, nil)
	start := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	end := start.Add(90 * time.Second)
	rep := api.StatusRequest{DirectiveID: "d-7", Policy: "acme/p", Status: nmp.StateFailed, SoftwareVersion: "1.1.0", PreviousVersion: "1.0.0",
		Error: "install exited 3", AgentVersion: api.AgentVersion{Package: json.RawMessage(`{"version":"1.2.0"}`), Failed: "1.2.0", UpgradeStart: &start, UpgradeEnd: &end}}
	code, body, raw := s.call(t, http.MethodPut, "/v1/orgs/acme/nodes/n1/status", rep)
	if code != http.StatusOK {
		t.Fatalf("PUT status: %d %v %s", code, body, raw)
	}
	var accepted api.NodeStatusAccepted
	if err := json.Unmarshal(raw, &accepted); err != nil || accepted != (api.NodeStatusAccepted{Org: "acme", Node: "n1", Status: rep.Status}) {
		t.Fatalf("PUT status answered %s (%v)", raw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.server.nmp.World().WaitCaughtUp(ctx, topology.AgentStatus); err != nil {
		t.Fatalf("the view did not read agent.status: %v", err)
	}
	stored := s.server.nmp.World().Status("acme/n1")
	if stored == nil {
		t.Fatal("the accepted report is not in the view")
	}
	code, _, raw = s.call(t, http.MethodGet, "/v1/orgs/acme/nodes/n1/status", nil)
	if code != http.StatusOK {
		t.Fatalf("GET status: %d %s", code, raw)
	}
	var ans api.NodeStatusAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		t.Fatalf("GET status: %v\n%s", err, raw)
	}
	// Each field of the report: where agent.status keeps it, and where
	// the answer gives it back (nil: the answer does not carry it).
	kept := map[string][2]any{
		"DirectiveID":               {stored.DirectiveID, nil},
		"Policy":                    {stored.Policy, ans.Policy},
		"Status":                    {stored.Status, ans.Status},
		"SoftwareVersion":           {stored.SoftwareVersion, ans.SoftwareVersion},
		"PreviousVersion":           {stored.PreviousVersion, ans.PreviousVersion},
		"Error":                     {stored.ErrorMessage, ans.Error},
		"AgentVersion.Package":      {stored.Package, compact(ans.AgentVersion.Package)},
		"AgentVersion.Failed":       {stored.FailedVersion, ans.AgentVersion.Failed},
		"AgentVersion.UpgradeStart": {utc(stored.UpgradeStart), utc(ans.AgentVersion.UpgradeStart)},
		"AgentVersion.UpgradeEnd":   {utc(stored.UpgradeEnd), utc(ans.AgentVersion.UpgradeEnd)},
	}
	fields := leaves(reflect.ValueOf(rep), "")
	for name, v := range fields {
		if v == nil {
			t.Errorf("report field %s is zero: set it in the test's report", name)
			continue
		}
		where, ok := kept[name]
		if !ok {
			t.Errorf("report field %s is not followed to agent.status and the status answer: keep it in both and add it here", name)
			continue
		}
		want := fmt.Sprint(v)
		if fmt.Sprint(where[0]) != want {
			t.Errorf("report field %s = %s is stored as %v", name, want, where[0])
		}
		if where[1] != nil && fmt.Sprint(where[1]) != want {
			t.Errorf("report field %s = %s is answered as %v", name, want, where[1])
		}
	}
	if len(fields) != len(kept) {
		t.Errorf("the report has %d fields, the test follows %d", len(fields), len(kept))
	}
}

// leaves are the fields of a struct value, nested structs flattened to
// "Outer.Inner", each dereferenced (a json.RawMessage as its text), nil
// when zero.
func leaves(v reflect.Value, prefix string) map[string]any {
	out := map[string]any{}
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		name := prefix + f.Name
		switch {
		case fv.IsZero():
			out[name] = nil
		case fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Time{}):
			for k, x := range leaves(fv, name+".") {
				out[k] = x
			}
		case fv.Type() == reflect.TypeOf(json.RawMessage{}):
			out[name] = string(fv.Bytes())
		case fv.Kind() == reflect.Pointer:
			out[name] = utc(fv.Interface().(*time.Time))
		default:
			out[name] = fv.Interface()
		}
	}
	return out
}

// utc is a time as UTC text ("" for nil).
func utc(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
