package agentnotifier

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

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

func refs(ps ...events.Policy) []events.PolicyRef { return events.Refs(ps) }

// items are the pairs of ps under the items folder of scn, as a read of
// the folder returns them.
func items(scn string, ps ...events.Policy) api.KVPairs {
	out := make(api.KVPairs, 0, len(ps))
	for _, p := range ps {
		out = append(out, &api.KVPair{Key: consulkv.ItemKey(scn, p.PolicyID), Value: []byte(p.Body)})
	}
	return out
}

func TestPayload(t *testing.T) {
	vm2 := vmMemory()
	vm2.PolicyName, vm2.PolicyVersion = "DCAE.Config_VM_MEMORY.223.xml", "223"
	vm2.Body = `{"policyName":"DCAE.Config_VM_MEMORY.223.xml","policyVersion":"223","config":{"min_memory":"16GB"}}`
	cases := []struct {
		name  string
		a     *events.ComponentApplied
		items api.KVPairs
		want  string
	}{
		{
			name:  "first collection",
			a:     &events.ComponentApplied{ServiceComponentName: "vm", PolicyRefs: refs(vmMemory()), UpdatedRefs: refs(vmMemory())},
			items: items("vm", vmMemory()),
			want: `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"updated_policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"removed_policies":[]}`,
		},
		{
			name:  "removal, bodies compacted",
			a:     &events.ComponentApplied{ServiceComponentName: "vm", PolicyRefs: refs(vmMemory()), RemovedPolicies: []events.Policy{other()}},
			items: items("vm", vmMemory()),
			want: `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
				`"updated_policies":[],"removed_policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}]}`,
		},
		{
			name: "nothing left",
			a:    &events.ComponentApplied{ServiceComponentName: "vm"},
			want: `{"policies":[],"updated_policies":[],"removed_policies":[]}`,
		},
		{
			// A later update landed before the notification: the
			// component is sent what Consul holds, which it reads.
			name:  "a newer version in Consul",
			a:     &events.ComponentApplied{ServiceComponentName: "vm", PolicyRefs: refs(vmMemory()), UpdatedRefs: refs(vmMemory())},
			items: items("vm", other(), vm2),
			want: `{"policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}},` +
				`{"policyName":"DCAE.Config_VM_MEMORY.223.xml","policyVersion":"223","config":{"min_memory":"16GB"}}],` +
				`"updated_policies":[{"policyName":"DCAE.Config_VM_MEMORY.223.xml","policyVersion":"223","config":{"min_memory":"16GB"}}],` +
				`"removed_policies":[]}`,
		},
		{
			name:  "an updated policy a later update removed",
			a:     &events.ComponentApplied{ServiceComponentName: "vm", PolicyRefs: refs(vmMemory(), other()), UpdatedRefs: refs(vmMemory(), other())},
			items: items("vm", other()),
			want: `{"policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}],"updated_policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}],` +
				`"removed_policies":[]}`,
		},
		{
			name: "keys of the folder that are not policies",
			a:    &events.ComponentApplied{ServiceComponentName: "vm"},
			items: append(items("vm", other()),
				&api.KVPair{Key: consulkv.ItemsPrefix("vm") + "sub/", Value: []byte(`{"a folder":1}`)},
				&api.KVPair{Key: consulkv.EventKey("vm"), Value: []byte(`{"action":"updated"}`)}),
			want: `{"policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}],"updated_policies":[],"removed_policies":[]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Payload(tc.a, tc.items)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("payload\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "not json", `"a string"`, `[1]`, `{"open":`} {
		a := &events.ComponentApplied{ServiceComponentName: "vm", RemovedPolicies: []events.Policy{{PolicyID: "B", Body: bad}}}
		if _, err := Payload(a, nil); err == nil || !strings.Contains(err.Error(), "removed_policies: policy B body is not a JSON object") {
			t.Errorf("removed body %q: error %v", bad, err)
		}
		a = &events.ComponentApplied{ServiceComponentName: "vm"}
		if _, err := Payload(a, items("vm", events.Policy{PolicyID: "B", Body: bad})); err == nil ||
			!strings.Contains(err.Error(), "policies: policy B body is not a JSON object (Consul key vm:policies/items/B)") {
			t.Errorf("body %q in Consul: error %v", bad, err)
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

// After skipped generations (compaction, a lagging stage, a failed
// notification) the notification says everything that changed since the
// component was last told with success, not only what its update did.
func TestPayloadSinceWhatTheComponentWasLastTold(t *testing.T) {
	pol := func(id, version, cfg string) events.Policy {
		return events.Policy{PolicyID: id, PolicyName: id + "." + version + ".xml", PolicyVersion: version,
			Body: `{"policyName":"` + id + "." + version + `.xml","policyVersion":"` + version + `","config":` + cfg + `}`}
	}
	a1, b1, c1, e1 := pol("A", "1", `{"a":1}`), pol("B", "1", `{"b":1}`), pol("C", "1", `{"c":1}`), pol("E", "1", `{"e":1}`)
	b2, d1 := pol("B", "2", `{"b":2}`), pol("D", "1", `{"d":1}`)
	// Told A1, B1, C1 and E1 with success.
	_, told, err := PayloadSince(&events.ComponentApplied{ServiceComponentName: "s"}, items("s", a1, b1, c1, e1), nil)
	if err != nil || len(told) != 4 || told["B"].Version != "1" || told["B"].Name != "B.1.xml" {
		t.Fatalf("told %v, %v", told, err)
	}
	// Five generations later Consul holds A1, B2 and D1: the update at
	// hand only says it added D and removed E (with E's last body); B's
	// change and C's removal came in generations the component never heard
	// of.
	a := &events.ComponentApplied{ServiceComponentName: "s", PolicyRefs: refs(a1, b2, d1), UpdatedRefs: refs(d1), RemovedPolicies: []events.Policy{e1}}
	got, now, err := PayloadSince(a, items("s", a1, b2, d1), told)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"policies":[` + a1.Body + `,` + b2.Body + `,` + d1.Body + `],` +
		`"updated_policies":[` + b2.Body + `,` + d1.Body + `],` +
		`"removed_policies":[{"policyName":"C.1.xml","policyVersion":"1"},` + e1.Body + `]}`
	if string(got) != want {
		t.Fatalf("payload\n got  %s\n want %s", got, want)
	}
	if len(now) != 3 || now["B"].Version != "2" || now["B"].Hash == told["B"].Hash {
		t.Fatalf("told now %v", now)
	}
	// Never told anything (no claim: the generations that brought A and B
	// were skipped before its first notification): everything it holds is
	// updated, and the update's removals are removed.
	got, _, _ = PayloadSince(a, items("s", a1, b2, d1), map[string]consulkv.Told{})
	if want := `{"policies":[` + a1.Body + `,` + b2.Body + `,` + d1.Body + `],"updated_policies":[` + a1.Body + `,` + b2.Body + `,` + d1.Body + `],"removed_policies":[` + e1.Body + `]}`; string(got) != want {
		t.Fatalf("payload for a component never told\n got  %s\n want %s", got, want)
	}
	// Without what it was told (a claim from before Told, or over
	// consulkv.MaxTold policies), the update's own lists.
	got, _, _ = PayloadSince(a, items("s", a1, b2, d1), nil)
	if want := `{"policies":[` + a1.Body + `,` + b2.Body + `,` + d1.Body + `],"updated_policies":[` + d1.Body + `],"removed_policies":[` + e1.Body + `]}`; string(got) != want {
		t.Fatalf("payload without told\n got  %s\n want %s", got, want)
	}
}
