package executor

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
)

func TestNext(t *testing.T) {
	at := time.UnixMilli(5000).UTC()
	script := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: "/opt/app/reconfigure.sh"}
	hook := events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://dcae-vm:9091/policies"}
	registered := component("c1", "dcae-vm") // deployment dep-1, notify script
	moved := component("c1", "dcae-vm-2")
	moved.DeploymentID, moved.Notify = "dep-2", hook
	otherBody := pol("A", "2")
	otherBody.Body = `{"policyName":"A.2.xml","policyVersion":"2","config":{"v":"other"}}`
	otherBody = hashed(otherBody)

	// installed is c1's collection as an earlier update left it.
	installed := func(gen int64, ps ...events.Policy) *events.ComponentPolicies {
		return &events.ComponentPolicies{
			ComponentID: "c1", DeploymentID: "dep-1", ServiceComponentName: "dcae-vm", UpdateID: "u-old",
			Generation: gen, Policies: ps, UpdatedPolicies: []events.Policy{}, RemovedPolicies: []events.Policy{},
			Notify: script, UpdatedAt: time.UnixMilli(1000).UTC(),
		}
	}
	uninstalled := installed(4)
	uninstalled.Uninstalled = true
	uninstalled.Policies = []events.Policy{}
	// delta is an update u-new for c1.
	delta := func(catchUp bool, cd events.ComponentDelta) Delta {
		cd.ComponentID = "c1"
		return Delta{ComponentDelta: cd, UpdateID: "u-new", DeploymentID: "dep-1", CatchUp: catchUp, At: at}
	}
	// want is the collection u-new gives c1 as registered; its updated
	// policies are listed without their bodies.
	want := func(gen int64, ps, updated, removed []events.Policy) *events.ComponentPolicies {
		refs := make([]events.Policy, len(updated))
		for i, p := range updated {
			p.Body = ""
			refs[i] = p
		}
		return &events.ComponentPolicies{
			ComponentID: "c1", DeploymentID: "dep-1", ServiceComponentName: "dcae-vm", UpdateID: "u-new",
			Generation: gen, Policies: ps, UpdatedPolicies: refs, RemovedPolicies: removed,
			Notify: script, UpdatedAt: at,
		}
	}
	inDep2 := func(d Delta) Delta { d.DeploymentID = "dep-2"; return d }
	ps := func(p ...events.Policy) []events.Policy { return append([]events.Policy{}, p...) }
	catchUp := func(cp *events.ComponentPolicies) *events.ComponentPolicies { cp.CatchUp = true; return cp }
	gone := func(cp *events.ComponentPolicies) *events.ComponentPolicies { cp.Uninstalled = true; return cp }

	cases := []struct {
		name    string
		cur     *events.ComponentPolicies
		comp    *events.Component
		d       Delta
		want    *events.ComponentPolicies
		wantErr bool
	}{
		{
			name: "first gather: a new component gets the whole collection, sorted, all of it updated, generation 1",
			comp: registered,
			d:    delta(false, events.ComponentDelta{UpdatedPolicies: ps(pol("B", "2"), pol("A", "1"))}),
			want: want(1, ps(pol("A", "1"), pol("B", "2")), ps(pol("A", "1"), pol("B", "2")), ps()),
		},
		{
			name: "first gather: a new component with no policy still gets its empty collection",
			comp: registered,
			d:    delta(false, events.ComponentDelta{}),
			want: want(1, ps(), ps(), ps()),
		},
		{
			name: "first gather: a component registered again after its uninstall starts anew, its generation going on",
			cur:  uninstalled,
			comp: registered,
			d:    delta(false, events.ComponentDelta{UpdatedPolicies: ps(pol("A", "1"))}),
			want: want(5, ps(pol("A", "1")), ps(pol("A", "1")), ps()),
		},
		{
			name: "update: adds, updates and removes against the installed collection; generation and update_id move on",
			cur:  installed(41, pol("A", "1"), pol("B", "1")),
			comp: registered,
			d: delta(false, events.ComponentDelta{
				UpdatedPolicies: ps(pol("A", "2")),
				AddedPolicies:   []events.FilterMatch{{FilterID: "f1", Policies: ps(pol("C", "1"))}},
				RemovedPolicies: []events.RemovedPolicy{{PolicyID: "B", PolicyVersion: ver("1")}},
			}),
			want: want(42, ps(pol("A", "2"), pol("C", "1")), ps(pol("A", "2"), pol("C", "1")), ps(pol("B", "1"))),
		},
		{
			name: "update: removing the last policy leaves an empty collection, still installed",
			cur:  installed(2, pol("A", "1")),
			comp: registered,
			d:    delta(false, events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "A"}}}),
			want: want(3, ps(), ps(), ps(pol("A", "1"))),
		},
		{
			name: "update: the collection takes the registration's deployment, service_component_name and notify target",
			cur:  installed(2, pol("A", "1")),
			comp: moved,
			d:    delta(false, events.ComponentDelta{UpdatedPolicies: ps(pol("A", "2"))}),
			want: &events.ComponentPolicies{
				ComponentID: "c1", DeploymentID: "dep-2", ServiceComponentName: "dcae-vm-2", UpdateID: "u-new",
				Generation: 3, Policies: ps(pol("A", "2")), UpdatedPolicies: ps(ref(pol("A", "2"))), RemovedPolicies: ps(),
				Notify: hook, UpdatedAt: at,
			},
		},
		{
			name: "no change: a changed registration alone writes nothing",
			cur:  installed(2, pol("A", "1")),
			comp: moved,
			d:    delta(false, events.ComponentDelta{UpdatedPolicies: ps(pol("A", "1"))}),
		},
		{
			name: "no change: a delta repeating the installed policies writes nothing",
			cur:  installed(2, pol("A", "1")),
			comp: registered,
			d: delta(false, events.ComponentDelta{
				UpdatedPolicies: ps(pol("A", "1")),
				AddedPolicies:   []events.FilterMatch{{FilterID: "f1", Policies: ps(pol("A", "1"))}},
				RemovedPolicies: []events.RemovedPolicy{{PolicyID: "missing"}},
			}),
		},
		{
			name: "fencing: a lower version of an installed policy writes nothing",
			cur:  installed(2, pol("A", "10")),
			comp: registered,
			d:    delta(false, events.ComponentDelta{UpdatedPolicies: ps(pol("A", "9"))}),
		},
		{
			name: "fencing: the removal of a version older than the installed one writes nothing",
			cur:  installed(2, pol("A", "5")),
			comp: registered,
			d:    delta(false, events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "A", PolicyVersion: ver("4")}}}),
		},
		{
			name: "fencing: a stale version among newer ones is left out, the rest applies",
			cur:  installed(2, pol("A", "10"), pol("B", "1")),
			comp: registered,
			d:    delta(false, events.ComponentDelta{UpdatedPolicies: ps(pol("A", "9"), pol("B", "2"))}),
			want: want(3, ps(pol("A", "10"), pol("B", "2")), ps(pol("B", "2")), ps()),
		},
		{
			name: "catch-up: the collection is flagged catch_up and takes a same-version body that differs",
			cur:  installed(2, pol("A", "2")),
			comp: registered,
			d:    delta(true, events.ComponentDelta{UpdatedPolicies: ps(otherBody)}),
			want: catchUp(want(3, ps(otherBody), ps(otherBody), ps())),
		},
		{
			name: "catch-up: a catch-up that finds the component as it should be writes nothing",
			cur:  installed(2, pol("A", "2")),
			comp: registered,
			d:    delta(true, events.ComponentDelta{UpdatedPolicies: ps(pol("A", "2"))}),
		},
		{
			name: "uninstall: a tombstoned component's collection ends empty, removing all it had, where it was installed",
			cur:  installed(7, pol("A", "1"), pol("B", "3")),
			d:    delta(false, events.ComponentDelta{RemovedPolicies: []events.RemovedPolicy{{PolicyID: "A"}}}),
			want: gone(want(8, ps(), ps(), ps(pol("A", "1"), pol("B", "3")))),
		},
		{
			name: "uninstall: a delta marked uninstall wins over a registration not yet tombstoned, and carries catch_up",
			cur:  installed(7, pol("A", "1")),
			comp: moved,
			d:    inDep2(delta(true, events.ComponentDelta{Uninstall: true})),
			want: catchUp(gone(want(8, ps(), ps(), ps(pol("A", "1"))))),
		},
		{
			name: "uninstall: a component that never had a collection gets nothing",
			d:    delta(false, events.ComponentDelta{Uninstall: true}),
		},
		{
			name: "uninstall: an uninstalled component gets nothing again",
			cur:  uninstalled,
			d:    delta(false, events.ComponentDelta{Uninstall: true}),
		},
		{
			name:    "refused: a delta without component_id",
			comp:    registered,
			d:       Delta{ComponentDelta: events.ComponentDelta{UpdatedPolicies: ps(pol("A", "1"))}, UpdateID: "u-new", DeploymentID: "dep-1", At: at},
			wantErr: true,
		},
		{
			name:    "refused: a policy with an empty body",
			comp:    registered,
			d:       delta(false, events.ComponentDelta{UpdatedPolicies: ps(events.Policy{PolicyID: "A", PolicyVersion: "1"})}),
			wantErr: true,
		},
		{
			name:    "refused: a malformed uninstall delta too",
			cur:     installed(2, pol("A", "1")),
			d:       delta(false, events.ComponentDelta{Uninstall: true, RemovedPolicies: []events.RemovedPolicy{{}}}),
			wantErr: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before events.ComponentPolicies
			if tc.cur != nil {
				before = *tc.cur
				before.Policies = slices.Clone(tc.cur.Policies)
			}
			got, err := Next(tc.cur, tc.comp, tc.d)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("accepted, wrote %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if tc.cur != nil && !reflect.DeepEqual(*tc.cur, before) {
				t.Errorf("Next changed the current collection: %+v, was %+v", *tc.cur, before)
			}
			// The executor keeps committed collections compacted: the
			// next collection must not depend on what compact leaves out.
			fromCompact, err := Next(compacted(tc.cur), tc.comp, tc.d)
			if err != nil || !reflect.DeepEqual(fromCompact, tc.want) {
				t.Errorf("from the compacted collection: got %+v (%v)\nwant %+v", fromCompact, err, tc.want)
			}
		})
	}
}
