package events

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchAt is a timestamp as the codec returns it: milliseconds, UTC.
func benchAt(ms int64) time.Time { return time.UnixMilli(1_700_000_000_000 + ms).UTC() }

// benchBody is a policy_body of exactly size bytes (when size is above its
// bare form): a TCA policy whose description pads it to the size.
func benchBody(id, version string, size int) string {
	threshold := func(field string, value int, direction, severity string) map[string]any {
		return map[string]any{
			"closedLoopControlName": "ControlLoop-vFirewall-d0a1dfc6-94f5-4fd4-a5b5-4630b438850a",
			"version":               "1.0.2",
			"fieldPath":             field,
			"thresholdValue":        value,
			"direction":             direction,
			"severity":              severity,
			"closedLoopEventStatus": "ONSET",
		}
	}
	config := map[string]any{
		"domain": "measurementsForVfScaling",
		"metricsPerEventName": []any{map[string]any{
			"eventName":             "vFirewallBroadcastPackets",
			"controlLoopSchemaType": "VNF",
			"policyScope":           "DCAE",
			"policyName":            id,
			"policyVersion":         version,
			"thresholds": []any{
				threshold("$.event.measurementsForVfScalingFields.vNicUsageArray[*].receivedTotalPacketsDelta", 700, "GREATER_OR_EQUAL", "CRITICAL"),
			},
		}},
		"description": "",
	}
	body := map[string]any{
		"policyName":          id + "." + version + ".xml",
		"policyVersion":       version,
		"policyConfigStatus":  "CONFIG_RETRIEVED",
		"policyConfigMessage": "Config Retrieved! ",
		"type":                "JSON",
		"matchingConditions":  map[string]any{"ONAPName": "DCAE", "ConfigName": "tca"},
		"config":              config,
		"responseAttributes":  map[string]any{},
		"property":            nil,
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	if pad := size - len(b); pad > 0 {
		// Plain ASCII letters and spaces: JSON adds no escapes.
		config["description"] = strings.Repeat("threshold crossing alert ", pad/25+1)[:pad]
		if b, err = json.Marshal(body); err != nil {
			panic(err)
		}
	}
	return string(b)
}

// benchPolicy is a policy as segments and collections carry it: the body
// and its body_hash.
func benchPolicy(i, size int) Policy {
	id := fmt.Sprintf("DCAE.Config_tca-hi-lo_%03d", i)
	b := benchBody(id, "3", size)
	sum := sha256.Sum256([]byte(b))
	return Policy{PolicyID: id, PolicyName: id + ".3.xml", PolicyVersion: "3", Body: b, BodyHash: hex.EncodeToString(sum[:16])}
}

func benchPolicies(n, size int) []Policy {
	out := make([]Policy, n)
	for i := range out {
		out[i] = benchPolicy(i, size)
	}
	return out
}

func benchStr(s string) *string { return &s }

// benchSegment is a PolicySegment of n policies of 1 KiB, 8 per component,
// half of them updated and half added by a filter.
func benchSegment(n int) *PolicySegment {
	s := &PolicySegment{UpdateID: "upd-5e1b", DeploymentID: "dep-tca-00042", Index: 2, Count: 5, CatchUp: true, CreatedAt: benchAt(5)}
	for i := range n {
		if i%8 == 0 {
			s.Components = append(s.Components, ComponentDelta{ComponentID: fmt.Sprintf("dcae-tca-analytics-%02d", i/8),
				UpdatedPolicies: []Policy{}, AddedPolicies: []FilterMatch{}, RemovedPolicies: []RemovedPolicy{}})
		}
		d := &s.Components[len(s.Components)-1]
		p := benchPolicy(i, 1<<10)
		if i%2 == 0 {
			d.UpdatedPolicies = append(d.UpdatedPolicies, p)
			continue
		}
		if len(d.AddedPolicies) == 0 {
			d.AddedPolicies = []FilterMatch{{FilterID: "svc"}}
		}
		d.AddedPolicies[0].Policies = append(d.AddedPolicies[0].Policies, p)
	}
	return s
}

// benchSize is the encoded size of ev.
func benchSize(ev Event) int {
	b, err := Default().Encode(ev)
	if err != nil {
		panic(err)
	}
	return len(b)
}

// benchSized builds the events whose size varies in the pipeline with the
// size they have there; every other event is built by fill.
var benchSized = map[string]func() Event{
	SchemaPolicyCatalogEntry: func() Event {
		p := benchPolicy(1, 1<<10)
		return &PolicyCatalogEntry{PolicyID: p.PolicyID, PolicyName: p.PolicyName, PolicyVersion: p.PolicyVersion,
			Body: p.Body, BodyHash: p.BodyHash, Status: StatusValid, UpdatedAt: benchAt(1)}
	},
	SchemaPolicyChange: func() Event {
		p := benchPolicy(1, 1<<10)
		return &PolicyChange{ChangeID: "chg-7f3c2a", PolicyID: p.PolicyID, Action: ActionUpdated,
			OldVersion: benchStr("2"), NewVersion: benchStr(p.PolicyVersion), PolicyName: p.PolicyName,
			MatchingConditions: `{"ConfigName":"tca","ONAPName":"DCAE"}`, BodyHash: p.BodyHash, ChangedAt: benchAt(2)}
	},
	SchemaComponent: func() Event {
		return &Component{
			ComponentID:          "dcae-tca-analytics-7c9f",
			DeploymentID:         "dep-tca-00042",
			ServiceComponentName: "dcae-tca-analytics",
			Tenant:               "dcae",
			PolicyIDs:            []string{"DCAE.Config_tca-hi-lo_001"},
			PolicyFilters: []PolicyFilter{
				{FilterID: "svc", PolicyName: "DCAE.Config_tca-hi-lo_.*", OnapName: "DCAE", ConfigAttributes: `{"key1": "value1"}`},
				{FilterID: "all", PolicyName: "DCAE.Config_.*", ConfigName: "cfg7", ConfigAttributes: "{}", Unique: true},
			},
			Notify:     NotifyTarget{Kind: NotifyScript, ScriptPath: "/opt/app/tca/reconfigure.sh", TimeoutMs: 30_000},
			Config:     `{"streams_subscribes": {"tca_handle_in": {"type": "message_router", "dmaap_info": {"topic_url": "http://message-router:3904/events/unauthenticated.VES_MEASUREMENT_OUTPUT"}}}, "streams_publishes": {"tca_handle_out": {"type": "message_router", "dmaap_info": {"topic_url": "http://message-router:3904/events/unauthenticated.DCAE_CL_OUTPUT"}}}}`,
			Generation: 12,
			UpdatedAt:  benchAt(3),
		}
	},
	SchemaPolicyMatch: func() Event {
		// One changed policy reaching 20 components: half want it by id,
		// half select it by a filter. The matcher names it by reference.
		p := benchPolicy(1, 1<<10)
		p.Body = ""
		m := &PolicyMatch{UpdateID: "upd-5e1b", DeploymentID: "dep-tca-00042", CreatedAt: benchAt(4)}
		for i := range 20 {
			d := ComponentDelta{ComponentID: fmt.Sprintf("dcae-tca-analytics-%02d", i),
				UpdatedPolicies: []Policy{}, AddedPolicies: []FilterMatch{}, RemovedPolicies: []RemovedPolicy{}}
			if i%2 == 0 {
				d.UpdatedPolicies = []Policy{p}
			} else {
				d.AddedPolicies = []FilterMatch{{FilterID: "svc", Policies: []Policy{p}}}
			}
			m.Components = append(m.Components, d)
		}
		return m
	},
	SchemaPolicySegment: func() Event {
		// As many 1 KiB policies as fit in 64 KiB encoded, 8 per component:
		// a full piece of a segmenter run with a 64 KiB limit.
		n := 1
		for benchSize(benchSegment(n+1)) <= 64<<10 {
			n++
		}
		return benchSegment(n)
	},
	SchemaComponentPolicies: func() Event {
		ps := benchPolicies(10, 1<<10)
		return &ComponentPolicies{
			ComponentID: "dcae-tca-analytics-7c9f", DeploymentID: "dep-tca-00042", ServiceComponentName: "dcae-tca-analytics",
			UpdateID: "upd-5e1b", Generation: 13,
			Policies: ps, UpdatedPolicies: ps[:1], RemovedPolicies: []Policy{},
			Notify:    NotifyTarget{Kind: NotifyWebhook, WebhookURL: "http://dcae-tca-analytics:9091/policies/changed", TimeoutMs: 5_000},
			UpdatedAt: benchAt(6),
		}
	},
	SchemaComponentApplied: func() Event {
		ps := benchPolicies(10, 1<<10)
		return &ComponentApplied{
			ComponentID: "dcae-tca-analytics-7c9f", ServiceComponentName: "dcae-tca-analytics", UpdateID: "upd-5e1b",
			Action: "updated", ConsulIndex: 48_213, PoliciesCount: 10, PoliciesBytes: 10 << 10, KeysWritten: 2, Generation: 13,
			PolicyRefs: Refs(ps), UpdatedRefs: Refs(ps[:1]), RemovedPolicies: []Policy{}, ItemIndexes: benchItemIndexes(ps, 48_200),
			Notify:    NotifyTarget{Kind: NotifyWebhook, WebhookURL: "http://dcae-tca-analytics:9091/policies/changed", TimeoutMs: 5_000},
			AppliedAt: benchAt(7),
		}
	},
}

// benchItemIndexes are the item indexes of a write of ps at about index.
func benchItemIndexes(ps []Policy, index int64) []ItemIndex {
	out := make([]ItemIndex, len(ps))
	for i, p := range ps {
		out[i] = ItemIndex{PolicyID: p.PolicyID, ModifyIndex: index + int64(i)}
	}
	return out
}

// benchEvents is one event per schema, in name order. It follows
// SchemaNames, so a new event type is benchmarked without being listed.
func benchEvents() []Event {
	names := SchemaNames()
	slices.Sort(names)
	out := make([]Event, 0, len(names))
	for _, name := range names {
		if sized, ok := benchSized[name]; ok {
			out = append(out, sized())
			continue
		}
		ev := newEvent[name]()
		fill(reflect.ValueOf(ev).Elem(), 7)
		enumFix(ev)
		out = append(out, ev)
	}
	return out
}

// checkRoundTrip encodes ev, decodes it back and fails unless the decoded
// event equals ev. It returns the encoded record.
func checkRoundTrip(tb testing.TB, c *Codec, ev Event) []byte {
	tb.Helper()
	data, err := c.Encode(ev)
	if err != nil {
		tb.Fatalf("encode: %v", err)
	}
	out, err := c.Decode(context.Background(), data)
	if err != nil {
		tb.Fatalf("decode: %v", err)
	}
	if reflect.TypeOf(out) != reflect.TypeOf(ev) {
		tb.Fatalf("decoded a %T, want a %T", out, ev)
	}
	// Name the fields that differ: a whole 64 KiB event does not read.
	in, got := reflect.ValueOf(ev).Elem(), reflect.ValueOf(out).Elem()
	for i := range in.NumField() {
		a, z := in.Field(i).Interface(), got.Field(i).Interface()
		if !reflect.DeepEqual(a, z) {
			tb.Errorf("round trip changed %s:\n in: %.300s\nout: %.300s", in.Type().Field(i).Name, benchJSON(a), benchJSON(z))
		}
	}
	if tb.Failed() {
		tb.FailNow()
	}
	return data
}

func benchJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The benchmarks' events must stay valid even when no benchmark runs.
func TestBenchEventsRoundTrip(t *testing.T) {
	c := Default()
	for _, ev := range benchEvents() {
		t.Run(ev.SchemaName(), func(t *testing.T) { checkRoundTrip(t, c, ev) })
	}
}

func BenchmarkEncode(b *testing.B) {
	c := Default()
	for _, ev := range benchEvents() {
		b.Run(ev.SchemaName(), func(b *testing.B) {
			data := checkRoundTrip(b, c, ev)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Encode(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	c := Default()
	ctx := context.Background()
	for _, ev := range benchEvents() {
		b.Run(ev.SchemaName(), func(b *testing.B) {
			data := checkRoundTrip(b, c, ev)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Decode(ctx, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
