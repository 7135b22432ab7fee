package policyflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

func scnFor(p *pipeline, name string) string {
	return name + "-" + strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
}

func (p *pipeline) waitItems(scn string, want map[string]string) {
	p.t.Helper()
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named(fmt.Sprintf("%s holds %v", scn, want), func() error {
		got := p.items(scn)
		if len(got) != len(want) {
			return fmt.Errorf("items %v", keys(got))
		}
		for id, cfg := range want {
			if c := configOf(got[id]); c != cfg {
				return fmt.Errorf("%s config %s, want %s", id, c, cfg)
			}
		}
		return nil
	}))
}

func TestFilterGainsAndLosesPolicies(t *testing.T) {
	p := start(t)
	scn := scnFor(p, "filtered")
	p.register("comp-f", map[string]any{
		"deployment_id": "dep-f", "service_component_name": scn,
		"policy_filters": []map[string]any{{
			"filter_id": "gold", "policyName": "DCAE.Config_FLT_.*", "onapName": "DCAE",
			"configAttributes": map[string]any{"tier": "gold"},
		}},
	})
	gold := map[string]any{"ONAPName": "DCAE", "tier": "gold"}
	silver := map[string]any{"ONAPName": "DCAE", "tier": "silver"}
	p.publish("DCAE.Config_FLT_A.1.xml", "1", `{"a": 1}`, gold)
	p.publish("DCAE.Config_FLT_B.1.xml", "1", `{"b": 1}`, silver)
	p.publish("DCAE.Config_OTHER.1.xml", "1", `{"o": 1}`, gold)
	p.waitItems(scn, map[string]string{"DCAE.Config_FLT_A": `{"a":1}`})

	// B's new version matches; A's new version no longer does.
	p.publish("DCAE.Config_FLT_B.2.xml", "2", `{"b": 2}`, gold)
	p.waitItems(scn, map[string]string{"DCAE.Config_FLT_A": `{"a":1}`, "DCAE.Config_FLT_B": `{"b":2}`})
	p.publish("DCAE.Config_FLT_A.2.xml", "2", `{"a": 2}`, silver)
	p.waitItems(scn, map[string]string{"DCAE.Config_FLT_B": `{"b":2}`})

	// A removal removes.
	p.unpublish("DCAE.Config_FLT_B")
	p.waitItems(scn, map[string]string{})

	// An uninstall clears the folder.
	p.publish("DCAE.Config_FLT_C.1.xml", "1", `{"c": 1}`, gold)
	p.waitItems(scn, map[string]string{"DCAE.Config_FLT_C": `{"c":1}`})
	p.must(http.MethodDelete, "/v1/components/comp-f", nil)
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("folder cleared", func() error {
		pairs, _, err := p.consul.KV().List(consulkv.Folder(scn), nil)
		if err != nil {
			return err
		}
		if len(pairs) != 0 {
			return fmt.Errorf("%d keys left", len(pairs))
		}
		return nil
	}))
}

func TestTenMegabyteDeltaAppliedAsOneChange(t *testing.T) {
	p := start(t)
	scn := scnFor(p, "bulk")
	// A 10 MB JSON cannot be one argv element (Linux caps one at 128 KiB),
	// so this component is notified by webhook.
	var mu sync.Mutex
	var posts [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, b)
		mu.Unlock()
	}))
	defer hook.Close()
	// 25 policies of ~400 KB: registering a component that wants them all
	// makes one 10 MB delta, which the segmenter must split.
	filler := strings.Repeat("x", 400*1024)
	for i := 0; i < 25; i++ {
		p.publish(fmt.Sprintf("DCAE.Config_BULK_%02d.1.xml", i), "1", fmt.Sprintf(`{"n": %d, "pad": %q}`, i, filler), map[string]any{"ONAPName": "DCAE"})
	}
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("catalog has 25 bulk policies", func() error {
		code, body := p.do(http.MethodPost, "/policies_latest", map[string]any{"policyName": "DCAE.Config_BULK_.*"})
		var m map[string]any
		_ = json.Unmarshal([]byte(body), &m)
		if code != http.StatusOK || len(m) != 25 {
			return fmt.Errorf("%d, %d policies", code, len(m))
		}
		return nil
	}))
	p.register("comp-bulk", map[string]any{
		"deployment_id": "dep-bulk", "service_component_name": scn,
		"policy_filters": []map[string]any{{"filter_id": "bulk", "policyName": "DCAE.Config_BULK_.*"}},
		"notify":         map[string]any{"kind": "webhook", "webhook_url": hook.URL},
	})
	testkit.Eventually(p.t, 3*time.Minute, testkit.Named("25 policies in Consul", func() error {
		if n := len(p.items(scn)); n != 25 {
			return fmt.Errorf("%d items", n)
		}
		return nil
	}))
	ev := p.event(scn)
	if ev["policies_count"] != float64(25) {
		t.Fatalf("event %v", ev)
	}
	testkit.Eventually(p.t, time.Minute, testkit.Named("one notification", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(posts) != 1 {
			return fmt.Errorf("%d posts", len(posts))
		}
		return nil
	}))
	// A barrier instead of a wait: one more policy gives the component a
	// second update, notified after anything left of the first (a
	// component's notifications run in order). The first notification
	// must then be the only one of the first update.
	p.publish("DCAE.Config_BULK_25.1.xml", "1", `{"n": 25}`, map[string]any{"ONAPName": "DCAE"})
	testkit.Eventually(p.t, time.Minute, testkit.Named("the barrier's notification", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(posts) < 2 {
			return fmt.Errorf("%d posts", len(posts))
		}
		return nil
	}))
	mu.Lock()
	defer mu.Unlock()
	var payloads [2]struct {
		Policies []map[string]any `json:"policies"`
	}
	for i := range payloads {
		if err := json.Unmarshal(posts[i], &payloads[i]); err != nil {
			t.Fatal(err)
		}
	}
	if len(posts) != 2 || len(payloads[0].Policies) != 25 || len(payloads[1].Policies) != 26 {
		t.Fatalf("%d notifications carrying %d and %d policies; want the update of 25 once, then the barrier's of 26",
			len(posts), len(payloads[0].Policies), len(payloads[1].Policies))
	}
	// The delta really was segmented.
	var pieces int
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := runtime.ReadPartitions(ctx, p.kafka, "policy.segments", nil, func(*kgo.Record) error { pieces++; return nil }); err != nil {
		t.Fatal(err)
	}
	if pieces < 10 {
		t.Fatalf("%d segments on policy.segments, want a 10 MB delta cut into 10 or more", pieces)
	}
}

func TestBadInputIsAnsweredAndThePipelineGoesOn(t *testing.T) {
	p := start(t)
	scn := scnFor(p, "after-bad")
	cases := []struct {
		name, method, path string
		body               any
		code               int
		says               string
	}{
		{"oversize body", http.MethodPost, "/v1/policies", []map[string]any{{
			"policyName": "DCAE.Config_BIG.1.xml", "policyVersion": "1", "policyConfigStatus": "CONFIG_RETRIEVED",
			"config": map[string]any{"pad": strings.Repeat("y", 600*1024)},
		}}, http.StatusBadRequest, "512"},
		{"empty config", http.MethodPost, "/v1/policies", []map[string]any{{
			"policyName": "DCAE.Config_EMPTY.1.xml", "policyVersion": "1", "policyConfigStatus": "CONFIG_RETRIEVED", "config": "",
		}}, http.StatusBadRequest, "config"},
		{"uncompilable filter", http.MethodPut, "/v1/components/comp-bad", map[string]any{
			"deployment_id": "d", "service_component_name": "s",
			"policy_filters": []map[string]any{{"filter_id": "f", "policyName": "DCAE.(?=lookahead)"}},
		}, http.StatusBadRequest, "policyName"},
		{"unknown component", http.MethodGet, "/v1/components/nobody/status", nil, http.StatusNotFound, "nobody"},
	}
	for _, c := range cases {
		code, body := p.do(c.method, c.path, c.body)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s, want %d naming %q", c.name, code, body, c.code, c.says)
		}
	}

	// Bytes that are no event, put on the topic behind the API's back, go
	// to the dead-letter topic with the reason.
	opts, _ := p.kafka.ClientOpts()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: p.kafka.Topic("pdp.notifications"), Key: []byte("X"), Value: []byte("{not avro")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var reason string
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("dead letter", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := runtime.ReadPartitions(ctx, p.kafka, "dlq.pdp-ingest", nil, func(r *kgo.Record) error {
			for _, h := range r.Headers {
				if h.Key == runtime.HeaderError {
					reason = string(h.Value)
				}
			}
			return nil
		})
		if err == nil && reason == "" {
			err = fmt.Errorf("no dead letter yet")
		}
		return err
	}))
	if !strings.Contains(reason, "Avro") {
		t.Fatalf("dead letter reason %q", reason)
	}

	// And the pipeline goes on.
	p.register("comp-ok", map[string]any{"deployment_id": "dep-ok", "service_component_name": scn, "policy_ids": []string{"DCAE.Config_OK"}})
	p.publish("DCAE.Config_OK.3.xml", "3", `{"ok": true}`, map[string]any{"ONAPName": "DCAE"})
	p.waitItems(scn, map[string]string{"DCAE.Config_OK": `{"ok":true}`})
}
