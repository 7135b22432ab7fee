package events

import (
	"context"
	"reflect"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/policyflow/policyflow/schemas"
)

// appliedBefore is the version of component.applied's schema that carried
// the collection's bodies (policies, updated_policies).
const appliedBefore = "history/component_applied.v2.avsc"

// encodeWith writes v in single-object encoding with the writer schema in
// file (one of schemas.History), as a writer of that version did.
func encodeWith(t *testing.T, file string, v Event) []byte {
	t.Helper()
	js, err := schemas.History.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := parseWriter(string(js))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	fp, err := fingerprint(w.schema)
	if err != nil {
		t.Fatal(err)
	}
	// A configuration of its own: hamba/avro caches encoders by
	// canonical form, which does not tell the versions' Policy apart.
	body, err := avro.Config{}.Freeze().Marshal(w.schema, v)
	if err != nil {
		t.Fatalf("encode with %s: %v", file, err)
	}
	return append(append([]byte{0xc3, 0x01}, fp[:]...), body...)
}

// TestComponentAppliedSize measures what references save: the encoded
// component.applied record of a component with five policies of 1 KiB, as
// a writer of the version with bodies wrote it and as the current one
// does. It also reads the older record: its bodies come back as
// references, its removed policies with their bodies. The sizes are
// logged (go test -run TestComponentAppliedSize -v).
func TestComponentAppliedSize(t *testing.T) {
	ps := benchPolicies(5, 1<<10)
	for _, tc := range []struct {
		name                         string
		collection, updated, removed []Policy
	}{
		{"first collection (all five updated)", ps, ps, nil},
		{"one policy updated", ps, ps[2:3], nil},
		{"one policy removed", ps[:4], nil, ps[4:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bodies int64
			for _, p := range tc.collection {
				bodies += int64(len(p.Body))
			}
			now := &ComponentApplied{
				ComponentID: "dcae-tca-analytics-7c9f", ServiceComponentName: "dcae-tca-analytics", UpdateID: "upd-5e1b",
				Action: "updated", ConsulIndex: 48_213, PoliciesCount: int32(len(tc.collection)), PoliciesBytes: bodies,
				KeysWritten: int32(len(tc.updated) + len(tc.removed) + 1), Generation: 13,
				PolicyRefs: Refs(tc.collection), UpdatedRefs: Refs(tc.updated), RemovedPolicies: append([]Policy{}, tc.removed...),
				Notify:         NotifyTarget{Kind: NotifyWebhook, WebhookURL: "http://dcae-tca-analytics:9091/policies/changed", TimeoutMs: 5_000},
				AppliedAt:      benchAt(7),
				LegacyPolicies: []Policy{}, LegacyUpdatedPolicies: []Policy{},
			}
			after := checkRoundTrip(t, Default(), now)

			old := *now
			old.PoliciesBytes, old.PolicyRefs, old.UpdatedRefs = 0, []PolicyRef{}, []PolicyRef{}
			old.LegacyPolicies, old.LegacyUpdatedPolicies = append([]Policy{}, tc.collection...), append([]Policy{}, tc.updated...)
			before := encodeWith(t, appliedBefore, &old)

			t.Logf("component.applied, 5 policies of 1 KiB, %s: %d bytes with bodies (%s), %d bytes with references",
				tc.name, len(before), appliedBefore, len(after))
			// Only removed policies still carry a body.
			limit := len(before) / 4
			if len(tc.removed) > 0 {
				limit = len(before) / 2
			}
			if len(after) >= limit {
				t.Errorf("%d bytes with references, %d with bodies: want under %d", len(after), len(before), limit)
			}

			ev, err := Default().Decode(context.Background(), before)
			if err != nil {
				t.Fatalf("read the record with bodies: %v", err)
			}
			got := ev.(*ComponentApplied)
			if !reflect.DeepEqual(got.Collection(), Refs(tc.collection)) || !reflect.DeepEqual(got.Updated(), Refs(tc.updated)) ||
				!reflect.DeepEqual(got.RemovedPolicies, old.RemovedPolicies) || got.CollectionBytes() != bodies {
				t.Errorf("record with bodies read as collection %v, updated %v, removed %d, %d bytes; want %v, %v, %d, %d",
					got.Collection(), got.Updated(), len(got.RemovedPolicies), got.CollectionBytes(),
					Refs(tc.collection), Refs(tc.updated), len(old.RemovedPolicies), bodies)
			}
			if !reflect.DeepEqual(now.Collection(), now.PolicyRefs) || !reflect.DeepEqual(now.Updated(), now.UpdatedRefs) || now.CollectionBytes() != bodies {
				t.Errorf("current record: collection %v, updated %v, %d bytes", now.Collection(), now.Updated(), now.CollectionBytes())
			}
		})
	}
}
