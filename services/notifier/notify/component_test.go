package notify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
)

func vmMemory() events.Policy {
	return events.Policy{
		PolicyID: "DCAE.Config_VM_MEMORY", PolicyName: "DCAE.Config_VM_MEMORY.222.xml", PolicyVersion: "222",
		Body: `{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}`,
	}
}

func other() events.Policy {
	return events.Policy{PolicyID: "X", PolicyName: "X.3.xml", PolicyVersion: "3", Body: "{ \"policyName\": \"X.3.xml\",\n \"config\": {\"x\": [1, 2]} }"}
}

func TestPayload(t *testing.T) {
	cases := []struct {
		name string
		a    *events.ComponentApplied
		want string
	}{
		{
			name: "first collection",
			a:    &events.ComponentApplied{Policies: []events.Policy{vmMemory()}, UpdatedPolicies: []events.Policy{vmMemory()}},
			want: `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"updated_policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"removed_policies":[]}`,
		},
		{
			name: "removal, bodies compacted",
			a:    &events.ComponentApplied{Policies: []events.Policy{vmMemory()}, RemovedPolicies: []events.Policy{other()}},
			want: `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"updated_policies":[],"removed_policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}]}`,
		},
		{
			name: "nothing left",
			a:    &events.ComponentApplied{},
			want: `{"policies":[],"updated_policies":[],"removed_policies":[]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Payload(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("payload\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "not json", `"a string"`, `[1]`, `{"open":`} {
		a := &events.ComponentApplied{UpdatedPolicies: []events.Policy{{PolicyID: "B", Body: bad}}}
		if _, err := Payload(a); err == nil || !strings.Contains(err.Error(), "policy B body is not a JSON object") {
			t.Errorf("body %q: error %v", bad, err)
		}
	}
}

func TestShouldNotify(t *testing.T) {
	script := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/bin/true"}
	applied := func(gen int64, n events.NotifyTarget, uninstalled bool) *events.ComponentApplied {
		return &events.ComponentApplied{UpdateID: "u", Generation: gen, Notify: n, Uninstalled: uninstalled}
	}
	cases := []struct {
		name  string
		claim *consulkv.Claim
		a     *events.ComponentApplied
		want  bool
	}{
		{"never notified", nil, applied(1, script, false), true},
		{"older claim", &consulkv.Claim{Generation: 4}, applied(5, script, false), true},
		{"same generation claimed (replay)", &consulkv.Claim{Generation: 5}, applied(5, script, false), false},
		{"newer claim", &consulkv.Claim{Generation: 6}, applied(5, script, false), false},
		{"no notify target", nil, applied(1, events.NotifyTarget{Kind: events.NotifyNone}, false), false},
		{"uninstalled", nil, applied(1, script, true), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, why := ShouldNotify(tc.claim, tc.a)
			if got != tc.want || (!got && why == "") {
				t.Fatalf("ShouldNotify = %v (%q), want %v with a reason when false", got, why, tc.want)
			}
		})
	}
}

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
