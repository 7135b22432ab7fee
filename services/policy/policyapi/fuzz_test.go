package policyapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/policy"
)

// FuzzComponentRequest decodes any bytes as the body of PUT
// /v1/components/{component_id}, as the North API does, and builds the
// component under the test rules. A refusal is a 400 (decoding) or an
// error that does not show the webhook URL's password; what is accepted
// has ids fit for Kafka keys and Consul folders, filters the matcher
// compiles alike, a notify target the rules allow, a config that is a
// JSON object, goes through the Avro codec unchanged, and is built again,
// unchanged, from what it carries. Seeds: the requests of the
// BuildComponent and decoding tests; findings are committed under
// testdata/fuzz/FuzzComponentRequest.
func FuzzComponentRequest(f *testing.F) {
	add := func(id string, req any) {
		data, err := json.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(id, data)
	}
	add("comp-1", validRequest())
	add("comp-1", componentBody())
	add("comp-2", ComponentRequest{DeploymentID: "d", ServiceComponentName: "s"})
	webhook := validRequest()
	webhook.Notify = NotifyRequest{Kind: "WebHook", WebhookURL: "https://app.example:8443/policies"}
	add("comp-3", webhook)
	for _, tc := range componentRefusals(ComponentRules{}, testScriptDir+"/plain.sh", testScriptDir+"/sub", "/tmp/x.sh") {
		r := validRequest()
		tc.edit(&r)
		if len(r.PolicyFilters) <= 4 {
			add(tc.id, r)
		}
	}
	for _, body := range []string{
		`{"deployment_id": "d",}`, "{\n \"deployment_id\": 5}", `{"deploymentid": "d"}`, `{"deployment_id": "d"`, ``, `{} {}`,
		`{"policy_filters": {"filter_id": "x"}}`,
		`{"deployment_id": "d", "service_component_name": "s", "notify": {"kind": "webhook", "webhook_url": "http://u:hunter2@127.0.0.1:1/x?token=s3cret"}}`,
		`{"deployment_id": "d", "service_component_name": "s", "DEPLOYMENT_ID": "../x", "config": {"a": 1, "a": 2}}`,
		`{"deployment_id": "d", "service_component_name": "s", "policy_filters": [{"filter_id": "f", "policyName": "\\Q(", "configAttributes": {"n": 1e999999}}]}`,
	} {
		f.Add("comp-4", []byte(body))
	}
	rules := testRules(f)
	now := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	codec := events.Default()
	f.Fuzz(func(t *testing.T, id string, data []byte) {
		var req ComponentRequest
		if e := web.DecodeBytes(data, &req, true, componentExample); e != nil {
			if e.Status != http.StatusBadRequest || e.Msg == "" {
				t.Fatalf("decoding refused with %d %q; want 400 and a reason", e.Status, e.Msg)
			}
			return
		}
		c, err := BuildComponent(id, req, 7, now, rules)
		if err != nil {
			if u, perr := url.Parse(req.Notify.WebhookURL); perr == nil && u.User != nil {
				if p, ok := u.User.Password(); ok && len(p) >= 4 && strings.Count(string(data)+id, p) == 1 && strings.Contains(err.Error(), p) {
					t.Fatalf("refusal %q shows the webhook password %q", err, p)
				}
			}
			return
		}
		for what, v := range map[string]string{"component_id": c.ComponentID, "deployment_id": c.DeploymentID, "service_component_name": c.ServiceComponentName} {
			if err := CheckID(what, v); err != nil {
				t.Fatalf("accepted %s: %v", what, err)
			}
		}
		if c.ComponentID != id || c.Generation != 7 || !c.UpdatedAt.Equal(now) {
			t.Fatalf("component %q generation %d at %v; want %q, 7, %v", c.ComponentID, c.Generation, c.UpdatedAt, id, now)
		}
		for i, pf := range c.PolicyFilters {
			attrs, err := policy.DecodeConfigAttributes(pf.ConfigAttributes)
			if err != nil {
				t.Fatalf("filter %d: the matcher cannot decode configAttributes %s: %v", i, pf.ConfigAttributes, err)
			}
			if _, err := policy.CompileFilter(policy.Filter{PolicyName: pf.PolicyName, ConfigName: pf.ConfigName, OnapName: pf.OnapName, ConfigAttributes: attrs}); err != nil {
				t.Fatalf("filter %d: the matcher cannot compile it: %v", i, err)
			}
		}
		var cfg map[string]any
		if err := json.Unmarshal([]byte(c.Config), &cfg); err != nil || cfg == nil {
			t.Fatalf("config %q is not a JSON object: %v", c.Config, err)
		}
		switch c.Notify.Kind {
		case events.NotifyScript:
			if _, err := rules.Targets.CheckScript(c.Notify.ScriptPath); err != nil {
				t.Fatalf("accepted script %q: %v", c.Notify.ScriptPath, err)
			}
		case events.NotifyWebhook:
			if _, err := rules.Targets.CheckWebhook(c.Notify.WebhookURL); err != nil {
				t.Fatalf("accepted webhook: %v", err)
			}
		case events.NotifyNone:
		default:
			t.Fatalf("notify kind %q", c.Notify.Kind)
		}

		value, err := codec.Encode(c)
		if err != nil {
			t.Fatalf("accepted component does not encode: %v", err)
		}
		back, err := codec.Decode(context.Background(), value)
		if err != nil {
			t.Fatalf("accepted component does not decode: %v", err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("the codec changed the component:\nsent %+v\ngot  %+v", c, back)
		}

		again, err := BuildComponent(id, requestOf(c), 7, now, rules)
		if err != nil {
			t.Fatalf("the component as registered is refused: %v", err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("built again, the component differs:\nfirst %+v\nagain %+v", c, again)
		}
	})
}

// requestOf is the registration that carries what c carries.
func requestOf(c *events.Component) ComponentRequest {
	r := ComponentRequest{
		ComponentID:          c.ComponentID,
		DeploymentID:         c.DeploymentID,
		ServiceComponentName: c.ServiceComponentName,
		Tenant:               c.Tenant,
		PolicyIDs:            c.PolicyIDs,
		Notify:               NotifyRequest{Kind: c.Notify.Kind, ScriptPath: c.Notify.ScriptPath, WebhookURL: c.Notify.WebhookURL, TimeoutMs: c.Notify.TimeoutMs},
		Config:               json.RawMessage(c.Config),
	}
	for _, pf := range c.PolicyFilters {
		r.PolicyFilters = append(r.PolicyFilters, FilterRequest{
			FilterID: pf.FilterID, PolicyName: pf.PolicyName, ConfigName: pf.ConfigName, OnapName: pf.OnapName,
			ConfigAttributes: json.RawMessage(pf.ConfigAttributes), Unique: pf.Unique,
		})
	}
	return r
}

// FuzzPoliciesLatestRequest reads any bytes as the body of POST
// /policies_latest. A refusal is a 400 with a reason; an accepted filter
// has a policyName, reads the same given as is or under "policy_filter",
// and is read again, unchanged, from its own JSON. Seeds: the filters of
// TestLatestPoliciesComeFromTheCatalog and hostile ones; findings are
// committed under testdata/fuzz/FuzzPoliciesLatestRequest.
func FuzzPoliciesLatestRequest(f *testing.F) {
	for _, body := range []string{
		`{"policyName": "DCAE.Config_.*"}`,
		`{"policy_filter": {"policyName": "DCAE.Config_.*", "configName": "beta"}}`,
		`{"policyName": "DCAE", "configAttributes": {"key1": "value1"}}`,
		`{"policyName": "SDNC.Config_X"}`,
		`{"policyName": "Config_"}`,
		`{"policyName": "DCAE.(Config"}`,
		`{"onapName": "DCAE"}`,
		filterExample,
		`{"policy_filter": {"policyName": ".*"}, "policyName": "x"}`,
		`{"policy_filter": null}`,
		`{"policyName": ".*", "configAttributes": null}`,
		`{"policyName": ".*", "configAttributes": {"n": 1e999999, "n": 2}}`,
		`{"POLICYNAME": "(?i)dcae", "unique": true, "requestID": "r", "filter_id": "f"}`,
		`{"policyName": "\\Q(", "extra": 1}`,
		`[{"policyName": ".*"}]`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cf, e := parseFilterBody(data, DefaultMaxFilterRegexBytes)
		if e != nil {
			if e.Status != http.StatusBadRequest || e.Msg == "" {
				t.Fatalf("refused with %d %q; want 400 and a reason", e.Status, e.Msg)
			}
			return
		}
		got := cf.Filter()
		if got.PolicyName == "" || cf.Pattern() == "" {
			t.Fatalf("accepted a filter without policyName: %s", cf)
		}
		own, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("accepted filter does not encode: %v", err)
		}
		for _, body := range [][]byte{own, []byte(`{"policy_filter": ` + string(own) + `}`)} {
			again, e := parseFilterBody(body, DefaultMaxFilterRegexBytes)
			if e != nil {
				t.Fatalf("the accepted filter as %s is refused: %s", body, e.Msg)
			}
			if back, _ := json.Marshal(again.Filter()); string(back) != string(own) {
				t.Fatalf("read again from %s, the filter differs: %s", body, back)
			}
		}
	})
}
