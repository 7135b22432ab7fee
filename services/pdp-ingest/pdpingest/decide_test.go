package pdpingest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/policy"
)

const memID = "DCAE.Config_VM_MEMORY"

// pdpBody is a policy_body as the PDP returns it from /getConfig: config
// as a JSON string.
func pdpBody(id, version, config string) policy.Body {
	return policy.Body{
		"policyName":          id + "." + version + ".xml",
		"policyVersion":       version,
		"policyConfigStatus":  policy.ConfigRetrieved,
		"policyConfigMessage": policy.ConfigRetrievedMessage,
		"type":                "JSON",
		"matchingConditions":  map[string]any{"ONAPName": "DCAE", "ConfigName": "vm_memory"},
		"config":              config,
		"property":            nil,
	}
}

func jsonOf(t *testing.T, b policy.Body) string {
	t.Helper()
	s, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(s)
}

// catalogEntry is what the catalog holds after body was applied.
func catalogEntry(t *testing.T, b policy.Body) *events.PolicyCatalogEntry {
	t.Helper()
	c, err := policy.Check([]byte(jsonOf(t, b)))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := entry(c, "", events.SourcePDP, time.UnixMilli(1).UTC())
	return e
}

// noSource is e as written before the catalog recorded sources.
func noSource(e *events.PolicyCatalogEntry) *events.PolicyCatalogEntry {
	p := *e
	p.Source = ""
	return &p
}

// pushedEntry is e as a pushed body makes it.
func pushedEntry(e *events.PolicyCatalogEntry) *events.PolicyCatalogEntry {
	p := *e
	p.Source = events.SourcePushed
	return &p
}

// raws is what a PDP answering bodies sends, one raw body each.
func raws(t *testing.T, bodies ...policy.Body) []json.RawMessage {
	t.Helper()
	out := make([]json.RawMessage, 0, len(bodies))
	for _, b := range bodies {
		out = append(out, json.RawMessage(jsonOf(t, b)))
	}
	return out
}

func errored(t *testing.T, e *events.PolicyCatalogEntry, reason string) *events.PolicyCatalogEntry {
	t.Helper()
	c := *e
	c.Status, c.Error = events.StatusErrored, &reason
	return &c
}

func loaded(names ...string) *events.PdpNotification {
	n := &events.PdpNotification{NotificationID: "n-1", Source: "pdp", ReceivedAt: time.UnixMilli(5).UTC()}
	for _, name := range names {
		n.LoadedPolicies = append(n.LoadedPolicies, events.LoadedPolicy{PolicyName: name, VersionNo: strings.Split(name, ".")[2]})
	}
	return n
}

// loadedNames is a notification loading names as given, with no version
// taken from them.
func loadedNames(names ...string) *events.PdpNotification {
	n := &events.PdpNotification{NotificationID: "n-5", Source: "pdp"}
	for _, name := range names {
		n.LoadedPolicies = append(n.LoadedPolicies, events.LoadedPolicy{PolicyName: name, VersionNo: "1"})
	}
	return n
}

func removed(names ...string) *events.PdpNotification {
	n := &events.PdpNotification{NotificationID: "n-2", Source: "pdp"}
	for _, name := range names {
		n.RemovedPolicies = append(n.RemovedPolicies, events.UnloadedPolicy{PolicyName: name, VersionNo: strings.Split(name, ".")[2]})
	}
	return n
}

func pushed(bodies ...string) *events.PdpNotification {
	return &events.PdpNotification{NotificationID: "n-3", Source: "north-api", PushedBodies: bodies}
}

// pushedBy is bodies pushed for tenant, as the admission stage pushes
// settings policies.
func pushedBy(tenant string, bodies ...string) *events.PdpNotification {
	return &events.PdpNotification{NotificationID: "n-4", Source: "admission", PushedBodies: bodies, Tenant: tenant}
}

// owned is e belonging to tenant.
func owned(e *events.PolicyCatalogEntry, tenant string) *events.PolicyCatalogEntry {
	c := *e
	c.Tenant = tenant
	return &c
}

func TestRouteNotification(t *testing.T) {
	big := pdpBody(memID, "7", `{"blob":"`+strings.Repeat("x", policy.MaxBodyBytes)+`"}`)
	empty := pdpBody(memID, "7", "")
	noName := pdpBody(memID, "7", `{"a":1}`)
	delete(noName, "policyName")
	notDigits := pdpBody(memID, "7", `{"a":1}`)
	notDigits["policyVersion"] = "7b"
	good := pdpBody(memID, "8", `{"a":1}`)
	other := pdpBody("DCAE.Config_other", "2", `{"b":2}`)
	traversal := pdpBody("DCAE.Config_VM_/../../../evil", "2", `{"a":1}`)
	poisoned := pdpBody(memID, "8", `{"a":1}`)
	poisoned["policyVersion"] = "999"

	multi := loaded(memID+".222.xml", "DCAE.Config_CPU.3.xml")
	multi.RemovedPolicies = []events.UnloadedPolicy{{PolicyName: "DCAE.Config_CPU.2.xml", VersionNo: "2"}, {PolicyName: "DCAE.Config_gone.1.xml", VersionNo: "1"}}
	multi.PushedBodies = []string{jsonOf(t, other)}

	tests := []struct {
		name     string
		key      string
		n        *events.PdpNotification
		wantID   string
		askPDP   bool
		pushed   int
		resend   map[string]string // policy_id -> loaded/removed/pushed counts "l/r/p"
		wantErrs []string
	}{
		{name: "policy_id from policyName", key: memID, n: loaded(memID + ".222.xml"), wantID: memID, askPDP: true},
		{name: "removal asks the PDP", key: memID, n: removed(memID + ".5.xml"), wantID: memID, askPDP: true},
		{name: "pushed body only", key: memID, n: pushed(jsonOf(t, good)), wantID: memID, pushed: 1},
		{name: "nothing named", key: memID, n: &events.PdpNotification{NotificationID: "n-0"}},
		{name: "multi-policy notification is split", key: "whatever", n: multi, resend: map[string]string{
			memID: "1/0/0", "DCAE.Config_CPU": "1/1/0", "DCAE.Config_gone": "0/1/0", "DCAE.Config_other": "0/0/1",
		}},
		{name: "key other than the policy_id is re-keyed", key: "pdp-batch-7", n: loaded(memID + ".5.xml"), resend: map[string]string{memID: "1/0/0"}},
		{name: "loaded entry without name", key: memID, n: &events.PdpNotification{NotificationID: "n-9", LoadedPolicies: []events.LoadedPolicy{{VersionNo: "1"}}}, wantErrs: []string{"loaded_policies[0]", "policyName is empty"}},
		{name: "body over 512 KiB", key: memID, n: pushed(jsonOf(t, good), jsonOf(t, big)), wantErrs: []string{"pushed_bodies[1]", "over the limit of 524288 bytes"}},
		{name: "empty config", key: memID, n: pushed(jsonOf(t, empty)), wantErrs: []string{"pushed_bodies[0]", "config is empty"}},
		{name: "no policy_id", key: memID, n: pushed(jsonOf(t, noName)), wantErrs: []string{"pushed_bodies[0]", "policyName is missing"}},
		{name: "version not an integer", key: memID, n: pushed(jsonOf(t, notDigits)), wantErrs: []string{`policyVersion "7b" (string) is not a string of digits`}},
		{name: "not a JSON object", key: memID, n: pushed(`["a"]`), wantErrs: []string{"pushed_bodies[0]", "want a JSON object"}},
		{name: "pushed name with a traversal", key: memID, n: pushed(jsonOf(t, traversal)),
			wantErrs: []string{"pushed_bodies[0]", `"DCAE.Config_VM_/../../../evil.2.xml"`, "character '/' at byte 15 is not allowed"}},
		{name: "pushed version other than the name's", key: memID, n: pushed(jsonOf(t, poisoned)),
			wantErrs: []string{"pushed_bodies[0]", `policyVersion "999" is not the version 8 in its policyName`}},
		{name: "pushed body with a key twice", key: memID, n: pushed(strings.Replace(jsonOf(t, good), `"policyVersion":"8"`, `"policyVersion":"8","policyVersion":"999"`, 1)),
			wantErrs: []string{"pushed_bodies[0]", `the key "policyVersion" appears twice`}},
		{name: "loaded name without a version", key: memID, n: loadedNames(memID),
			wantErrs: []string{"loaded_policies[0]", "does not end in .<version>.<ext>"}},
		{name: "loaded name with a space", key: memID, n: loadedNames("DCAE.Config VM.1.xml"),
			wantErrs: []string{"loaded_policies[0]", "character ' ' at byte 11 is not allowed"}},
		{name: "removed name with a traversal", key: memID, n: &events.PdpNotification{NotificationID: "n-4", RemovedPolicies: []events.UnloadedPolicy{{PolicyName: "DCAE/../x.1.xml", VersionNo: "1"}}},
			wantErrs: []string{"removed_policies[0]", "character '/'"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RouteNotification([]byte(tc.key), tc.n)
			if len(tc.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("accepted, want an error saying %q", tc.wantErrs)
				}
				for _, w := range tc.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.resend != nil {
				if r.PolicyID != "" || len(r.Resend) != len(tc.resend) {
					t.Fatalf("got route %+v, want %d parts to resend", r, len(tc.resend))
				}
				for _, k := range r.Resend {
					p := k.Notification
					got := fmt.Sprintf("%d/%d/%d", len(p.LoadedPolicies), len(p.RemovedPolicies), len(p.PushedBodies))
					if got != tc.resend[k.PolicyID] {
						t.Errorf("part %s carries %s loaded/removed/pushed, want %s", k.PolicyID, got, tc.resend[k.PolicyID])
					}
					for _, l := range p.LoadedPolicies {
						if id, _ := policy.PolicyID(l.PolicyName); id != k.PolicyID {
							t.Errorf("part %s carries %s", k.PolicyID, l.PolicyName)
						}
					}
					if again, err := RouteNotification([]byte(k.PolicyID), p); err != nil || again.PolicyID != k.PolicyID || len(again.Resend) != 0 {
						t.Errorf("part %s is not handled in place when it comes back: %+v %v", k.PolicyID, again, err)
					}
					if p.Source != tc.n.Source || !p.ReceivedAt.Equal(tc.n.ReceivedAt) || !strings.HasPrefix(p.NotificationID, tc.n.NotificationID) {
						t.Errorf("part %s lost the notification's origin: %+v", k.PolicyID, p)
					}
				}
				return
			}
			if r.PolicyID != tc.wantID || r.AskPDP != tc.askPDP || len(r.Pushed) != tc.pushed || len(r.Resend) != 0 {
				t.Fatalf("got route %+v, want policy %q askPDP %v pushed %d", r, tc.wantID, tc.askPDP, tc.pushed)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	v5 := pdpBody(memID, "5", `{"min_memory":"2GB"}`)
	v222 := pdpBody(memID, "222", `{"min_memory":"8GB"}`)
	v9 := pdpBody(memID, "9", `{"min_memory":"9GB"}`)
	v10 := pdpBody(memID, "10", `{"min_memory":"10GB"}`)
	v6a := pdpBody(memID, "6a", `{"min_memory":"6GB"}`)
	v6 := pdpBody(memID, "6", `{"min_memory":"6GB"}`)
	v223bad := pdpBody(memID, "223", "")
	v223notRetrieved := pdpBody(memID, "223", `{"min_memory":"1GB"}`)
	v223notRetrieved["policyConfigStatus"] = policy.ConfigNotFound
	v223 := pdpBody(memID, "223", `{"min_memory":"1GB"}`)
	v223poisoned := pdpBody(memID, "223", `{"min_memory":"1GB"}`)
	v223poisoned["policyVersion"] = "999"
	v223listMC := pdpBody(memID, "223", `{"min_memory":"1GB"}`)
	v223listMC["matchingConditions"] = []any{"DCAE"}
	otherID := pdpBody(memID+"_BIG", "999", `{"min_memory":"64GB"}`)
	v5other := pdpBody(memID, "5", `{"min_memory":"3GB"}`)

	e5, e222, e10, e6 := catalogEntry(t, v5), catalogEntry(t, v222), catalogEntry(t, v10), catalogEntry(t, v6)
	badReason := "latest version 223 of DCAE.Config_VM_MEMORY from the PDP is invalid: validate policy_body \"DCAE.Config_VM_MEMORY.223.xml\": config is empty (\"\" (string)): invalid policy_body"
	e5errored := errored(t, e5, badReason)

	type want struct {
		catalog *events.PolicyCatalogEntry // nil: no catalog write
		remove  bool
		action  string // "": no change
		old     string
		new     string
		errHas  string // the change's error mentions it
	}
	tests := []struct {
		name    string
		n       *events.PdpNotification
		current *events.PolicyCatalogEntry
		pdp     []policy.Body
		pdpRaw  []json.RawMessage // answered after pdp
		want    want
		wantErr string
	}{
		{name: "first version", n: loaded(memID + ".5.xml"), pdp: []policy.Body{v5},
			want: want{catalog: e5, action: events.ActionUpdated, new: "5"}},
		{name: "newer version", n: loaded(memID + ".222.xml"), current: e5, pdp: []policy.Body{v5, v222},
			want: want{catalog: e222, action: events.ActionUpdated, old: "5", new: "222"}},
		{name: "greatest integer version: 10 > 9", n: loaded(memID + ".10.xml"), current: nil, pdp: []policy.Body{v10, v9},
			want: want{catalog: e10, action: events.ActionUpdated, new: "10"}},
		{name: "non-digit version skipped", n: loaded(memID + ".5.xml"), current: e5, pdp: []policy.Body{v5, v6a}},
		{name: "bodies of other policy_ids ignored", n: loaded(memID + ".5.xml"), current: e5, pdp: []policy.Body{otherID, v5}},
		{name: "replay changes nothing", n: loaded(memID + ".222.xml"), current: e222, pdp: []policy.Body{v5, v222}},
		{name: "stale notification changes nothing", n: loaded(memID + ".5.xml"), current: e222, pdp: []policy.Body{v5, v222}},
		{name: "invalid latest reported as errored, not replaced by older", n: loaded(memID + ".223.xml"), current: e5, pdp: []policy.Body{v5, v223bad},
			want: want{catalog: e5errored, action: events.ActionErrored, old: "5", errHas: "config is empty"}},
		{name: "latest not retrieved is errored", n: loaded(memID + ".223.xml"), current: e5, pdp: []policy.Body{v5, v223notRetrieved},
			want: want{catalog: errored(t, e5, "latest version 223 of DCAE.Config_VM_MEMORY from the PDP is invalid: validate policy_body \"DCAE.Config_VM_MEMORY.223.xml\": policyConfigStatus is \"CONFIG_NOT_FOUND\" (string), want \"CONFIG_RETRIEVED\" (policyConfigMessage \"Config Retrieved! \"): invalid policy_body"),
				action: events.ActionErrored, old: "5", errHas: "CONFIG_NOT_FOUND"}},
		{name: "latest whose policyVersion is not its name's is errored", n: loaded(memID + ".223.xml"), current: e5, pdp: []policy.Body{v5, v223poisoned},
			want: want{catalog: errored(t, e5, "latest version 999 of DCAE.Config_VM_MEMORY from the PDP is invalid: check policy_body \"DCAE.Config_VM_MEMORY.223.xml\": policyVersion \"999\" is not the version 223 in its policyName; give policyVersion \"223\" or leave it out: invalid policy_body"),
				action: events.ActionErrored, old: "5", errHas: `policyVersion "999" is not the version 223`}},
		{name: "latest with a key twice is errored", n: loaded(memID + ".223.xml"), current: e5, pdp: []policy.Body{v5},
			pdpRaw: []json.RawMessage{json.RawMessage(strings.Replace(jsonOf(t, v223), `"type":"JSON"`, `"type":"JSON","type":"XML"`, 1))},
			want: want{catalog: errored(t, e5, "latest version 223 of DCAE.Config_VM_MEMORY from the PDP is invalid: check policy_body \"DCAE.Config_VM_MEMORY.223.xml\": the key \"type\" appears twice in the object at the top level; give every key once: invalid policy_body"),
				action: events.ActionErrored, old: "5", errHas: `the key "type" appears twice`}},
		{name: "latest whose matchingConditions is a list is errored", n: loaded(memID + ".223.xml"), current: e5, pdp: []policy.Body{v5, v223listMC},
			want: want{catalog: errored(t, e5, "latest version 223 of DCAE.Config_VM_MEMORY from the PDP is invalid: check policy_body \"DCAE.Config_VM_MEMORY.223.xml\": matchingConditions is [\"DCAE\"] (array), want a JSON object such as {\"ONAPName\": \"DCAE\"}; leave it out when there are none: invalid policy_body"),
				action: events.ActionErrored, old: "5", errHas: "matchingConditions is"}},
		{name: "errored again changes nothing", n: loaded(memID + ".223.xml"), current: e5errored, pdp: []policy.Body{v5, v223bad}},
		{name: "invalid first version: change only", n: loaded(memID + ".223.xml"), pdp: []policy.Body{v223bad},
			want: want{action: events.ActionErrored, errHas: "config is empty"}},
		{name: "errored entry recovers when the bad version goes", n: removed(memID + ".223.xml"), current: e5errored, pdp: []policy.Body{v5},
			want: want{catalog: e5, action: events.ActionUpdated, old: "5", new: "5"}},
		{name: "removed policy with another version left is an update", n: removed(memID + ".222.xml"), current: e222, pdp: []policy.Body{v5},
			want: want{catalog: e5, action: events.ActionUpdated, old: "222", new: "5"}},
		{name: "removed policy with no version left", n: removed(memID + ".5.xml"), current: e5, pdp: nil,
			want: want{remove: true, action: events.ActionRemoved, old: "5"}},
		{name: "removed policy with only non-digit versions left", n: removed(memID + ".5.xml"), current: e5, pdp: []policy.Body{v6a},
			want: want{remove: true, action: events.ActionRemoved, old: "5"}},
		{name: "removal of an unknown policy changes nothing", n: removed(memID + ".5.xml"), pdp: nil},
		{name: "pushed first version", n: pushed(jsonOf(t, v5)),
			want: want{catalog: pushedEntry(e5), action: events.ActionUpdated, new: "5"}},
		{name: "pushed newer version", n: pushed(jsonOf(t, v6)), current: e5,
			want: want{catalog: pushedEntry(e6), action: events.ActionUpdated, old: "5", new: "6"}},
		{name: "the PDP's version replaces a pushed one and is from the PDP", n: loaded(memID + ".222.xml"), current: pushedEntry(e5), pdp: []policy.Body{v5, v222},
			want: want{catalog: e222, action: events.ActionUpdated, old: "5", new: "222"}},
		{name: "the PDP confirms a pushed body: only its source is written", n: loaded(memID + ".5.xml"), current: pushedEntry(e5), pdp: []policy.Body{v5},
			want: want{catalog: e5}},
		{name: "an entry without source learns it from the PDP", n: loaded(memID + ".5.xml"), current: noSource(e5), pdp: []policy.Body{v5},
			want: want{catalog: e5}},
		{name: "pushed older version never goes backwards", n: pushed(jsonOf(t, v5)), current: e222},
		{name: "pushed same version and body changes nothing", n: pushed(jsonOf(t, v5)), current: e5},
		{name: "pushed in order, the greatest stays", n: pushed(jsonOf(t, v10), jsonOf(t, v9)), current: e5,
			want: want{catalog: pushedEntry(e10), action: events.ActionUpdated, old: "5", new: "10"}},
		{name: "pushed same version with another body is refused", n: pushed(jsonOf(t, v5other)), current: e5,
			wantErr: "differs from the body the catalog holds"},
		{name: "pushed for a tenant: the tenant owns it", n: pushedBy("acme", jsonOf(t, v5)),
			want: want{catalog: owned(pushedEntry(e5), "acme"), action: events.ActionUpdated, new: "5"}},
		{name: "the owner pushes a newer version", n: pushedBy("acme", jsonOf(t, v6)), current: owned(e5, "acme"),
			want: want{catalog: owned(pushedEntry(e6), "acme"), action: events.ActionUpdated, old: "5", new: "6"}},
		{name: "a global policy becomes a tenant's", n: pushedBy("acme", jsonOf(t, v6)), current: e5,
			want: want{catalog: owned(pushedEntry(e6), "acme"), action: events.ActionUpdated, old: "5", new: "6"}},
		{name: "another tenant may not push over a tenant's policy", n: pushedBy("globex", jsonOf(t, v6)), current: owned(e5, "acme"),
			wantErr: `policy DCAE.Config_VM_MEMORY belongs to tenant "acme"; a notification of tenant "globex" may not change it`},
		{name: "a global push may not replace a tenant's policy", n: pushed(jsonOf(t, v6)), current: owned(e5, "acme"),
			wantErr: `belongs to tenant "acme"; a global notification may not change it`},
		{name: "the PDP may not remove a tenant's policy", n: removed(memID + ".5.xml"), current: owned(e5, "acme"), pdp: nil,
			wantErr: `belongs to tenant "acme"; a global notification may not change it`},
		{name: "a notification of the owner that asks the PDP is global", n: func() *events.PdpNotification {
			n := removed(memID + ".5.xml")
			n.Tenant = "acme"
			return n
		}(), current: owned(e5, "acme"), pdp: nil,
			wantErr: `belongs to tenant "acme"; a global notification may not change it`},
	}
	now := time.UnixMilli(1).UTC()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RouteNotification([]byte(memID), tc.n)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Decide(Request{Route: r, Current: tc.current, PDPBodies: append(raws(t, tc.pdp...), tc.pdpRaw...), Now: now, ChangeID: "c-1"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Every change moves the policy_id to a greater revision,
			// the one the change carries; an errored latest keeps the
			// revision of the body in force.
			var prev int64
			if tc.current != nil {
				prev = tc.current.Revision
			}
			if d.Change != nil {
				rev := d.Change.Revision
				switch {
				case d.Change.Action == events.ActionErrored && d.Catalog != nil:
					if rev != prev || d.Catalog.Revision != prev {
						t.Fatalf("errored: change revision %d, entry %d, want the current %d kept", rev, d.Catalog.Revision, prev)
					}
				case rev <= prev || d.Catalog != nil && d.Catalog.Revision != rev:
					t.Fatalf("change revision %d (entry %v), want one greater than %d carried by both", rev, d.Catalog, prev)
				}
			}
			if d.Catalog != nil && tc.want.catalog != nil {
				c := *d.Catalog
				c.Revision = tc.want.catalog.Revision
				d.Catalog = &c
			}
			if !reflect.DeepEqual(d.Catalog, tc.want.catalog) {
				t.Fatalf("catalog write:\n got  %s\n want %s", show(d.Catalog), show(tc.want.catalog))
			}
			if d.Remove != tc.want.remove {
				t.Fatalf("tombstone %v, want %v", d.Remove, tc.want.remove)
			}
			if tc.want.action == "" {
				if d.Change != nil {
					t.Fatalf("got change %s, want none", show(d.Change))
				}
				return
			}
			c := d.Change
			if c == nil {
				t.Fatalf("no change, want %s", tc.want.action)
			}
			if c.Action != tc.want.action || deref(c.OldVersion) != tc.want.old || deref(c.NewVersion) != tc.want.new ||
				c.PolicyID != memID || c.ChangeID != "c-1" || !c.ChangedAt.Equal(now) {
				t.Fatalf("got change %s, want %s %q -> %q", show(c), tc.want.action, tc.want.old, tc.want.new)
			}
			switch c.Action {
			case events.ActionUpdated:
				// The header of the body the catalog now holds: what
				// the matcher reads instead of the body.
				h, err := policy.HeaderOf(d.Catalog.Body)
				if err != nil {
					t.Fatal(err)
				}
				if c.PolicyName != h.PolicyName || c.MatchingConditions != h.MatchingConditions || c.BodyHash != h.BodyHash || d.Catalog.BodyHash != h.BodyHash {
					t.Fatalf("UPDATED change carries name %q conditions %s hash %s, catalog hash %s; want those of the catalog's body %+v",
						c.PolicyName, c.MatchingConditions, c.BodyHash, d.Catalog.BodyHash, h)
				}
				if c.Tenant != d.Catalog.Tenant {
					t.Fatalf("UPDATED change carries tenant %q, the catalog entry %q", c.Tenant, d.Catalog.Tenant)
				}
				if c.MatchingConditions != `{"ConfigName":"vm_memory","ONAPName":"DCAE"}` {
					t.Fatalf("UPDATED change carries conditions %s", c.MatchingConditions)
				}
			case events.ActionErrored:
				if c.Error == nil || !strings.Contains(*c.Error, tc.want.errHas) {
					t.Fatalf("ERRORED change carries error %v, want an error mentioning %q", c.Error, tc.want.errHas)
				}
			}
		})
	}
}

// The catalog carries the config parsed, as the seed's policy-handler does.
func TestCatalogBodyCarriesConfigParsed(t *testing.T) {
	e := catalogEntry(t, pdpBody(memID, "5", `{"min_memory":"2GB","note":"<a&b>"}`))
	var got map[string]any
	if err := json.Unmarshal([]byte(e.Body), &got); err != nil {
		t.Fatal(err)
	}
	cfg, ok := got["config"].(map[string]any)
	if !ok || cfg["min_memory"] != "2GB" {
		t.Fatalf("catalog body config is %#v, want the parsed object", got["config"])
	}
	if !strings.Contains(e.Body, "<a&b>") {
		t.Fatalf("catalog body %s escapes HTML characters", e.Body)
	}
	if e.PolicyName != memID+".5.xml" || e.PolicyVersion != "5" || e.PolicyID != memID || e.Status != events.StatusValid {
		t.Fatalf("catalog entry %s", show(e))
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestWithdraw: the admission stage removes a settings policy it pushed
// for a tenant when the deployment is deleted. The owner's removal is
// applied without asking the PDP; another tenant's removal, a removal of
// a global policy, and a removal from any other source (which asks the
// PDP, so it is global) are refused; a removal older than the entry
// keeps it.
func TestWithdraw(t *testing.T) {
	const id = "admission.dep-1.web"
	e5 := owned(pushedEntry(catalogEntry(t, pdpBody(id, "5", `{"a":1}`))), "acme")
	removal := func(source, tenant, version string) *events.PdpNotification {
		return &events.PdpNotification{NotificationID: "n-5", Source: source, Tenant: tenant,
			RemovedPolicies: []events.UnloadedPolicy{{PolicyName: id + "." + version + ".json", VersionNo: version}}}
	}
	tests := []struct {
		name     string
		n        *events.PdpNotification
		current  *events.PolicyCatalogEntry
		withdraw bool
		remove   bool
		wantErr  string
	}{
		{name: "the owner's removal is applied", n: removal(events.NotifierAdmission, "acme", "7"), current: e5, withdraw: true, remove: true},
		{name: "the same version is removed", n: removal(events.NotifierAdmission, "acme", "5"), current: e5, withdraw: true, remove: true},
		{name: "a removal older than the entry keeps it", n: removal(events.NotifierAdmission, "acme", "4"), current: e5, withdraw: true},
		{name: "nothing to remove", n: removal(events.NotifierAdmission, "acme", "7"), withdraw: true},
		{name: "another tenant's removal is refused", n: removal(events.NotifierAdmission, "globex", "7"), current: e5, withdraw: true,
			wantErr: `policy admission.dep-1.web belongs to tenant "acme"; a removal of tenant "globex" may not remove it`},
		{name: "a tenant may not remove a global policy", n: removal(events.NotifierAdmission, "acme", "7"), current: owned(e5, ""), withdraw: true,
			wantErr: `policy admission.dep-1.web is global; a removal of tenant "acme" may not remove it`},
		{name: "another source asks the PDP: global, refused", n: removal("north-api", "acme", "7"), current: e5,
			wantErr: `belongs to tenant "acme"; a global notification may not change it`},
		{name: "a removal with no tenant asks the PDP: global, refused", n: removal(events.NotifierAdmission, "", "7"), current: e5,
			wantErr: `belongs to tenant "acme"; a global notification may not change it`},
	}
	now := time.UnixMilli(9).UTC()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := RouteNotification([]byte(id), tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if r.Withdraw != tc.withdraw || r.Withdraw && r.AskPDP {
				t.Fatalf("route %+v: withdraw %v, want %v without asking the PDP", r, r.Withdraw, tc.withdraw)
			}
			d, err := Decide(Request{Route: r, Current: tc.current, Now: now, ChangeID: "c-9"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Remove != tc.remove || d.Catalog != nil {
				t.Fatalf("decision %+v: remove %v, want %v and no catalog write", d, d.Remove, tc.remove)
			}
			if tc.remove && (d.Change == nil || d.Change.Action != events.ActionRemoved || d.Change.PolicyID != id || deref(d.Change.OldVersion) != "5") {
				t.Fatalf("change %s, want REMOVED of version 5", show(d.Change))
			}
			if !tc.remove && d.Change != nil {
				t.Fatalf("change %s, want none", show(d.Change))
			}
		})
	}
}
