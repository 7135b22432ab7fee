package policyflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/policyflow/policyflow/services/policy/policyapi"
	"github.com/policyflow/policyflow/services/testkit"
)

// written is what a request could have written anywhere: the end offset
// of every partition of every topic of the pipeline, every Consul key's
// modify index in the test's folders with Consul's KV index, and the
// calls each component's script got.
type written struct {
	ends    map[string]int64
	kv      map[string]uint64
	kvIndex uint64
	calls   map[string]int
}

func (p *pipeline) written(scns []string, recs map[string]*recorder) written {
	p.t.Helper()
	adm := p.b.Admin(p.t)
	ctx := context.Background()
	td, err := adm.ListTopics(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	// Every topic of the cluster (the internal ones, which hold the
	// groups' offsets, aside), the pipeline's and any other.
	topics, ours := td.Names(), 0
	for _, name := range topics {
		if strings.HasPrefix(name, p.kafka.Prefix) {
			ours++
		}
	}
	if ours < 10 {
		p.t.Fatalf("the pipeline's topics are not listed: %v", topics)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		p.t.Fatal(err)
	}
	w := written{ends: map[string]int64{}, kv: map[string]uint64{}, calls: map[string]int{}}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			p.t.Fatalf("end offset of %s[%d]: %v", o.Topic, o.Partition, o.Err)
		}
		// catchup.progress is written only in answer to a record of
		// catchup.requests, which is compared: the progress of the
		// catch-up pdp-ingest asks for when it starts may still be
		// coming in (each stage reports each partition when it gets
		// there), and is no write of a dry run.
		if o.Topic == p.kafka.Topic("catchup.progress") {
			return
		}
		w.ends[fmt.Sprintf("%s[%d]", o.Topic, o.Partition)] = o.Offset
	})
	for _, scn := range scns {
		for k, v := range p.modifyIndexes(scn) {
			w.kv[k] = v
		}
	}
	// The index of the whole KV store: any write anywhere moves it.
	_, meta, err := p.consul.KV().Keys("", "", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	w.kvIndex = meta.LastIndex
	for id, r := range recs {
		w.calls[id] = len(r.calls(p.t))
	}
	return w
}

// TestWhatIfWritesNothing: a dry run of a push and of a PDP notification
// answers what publishing would do (the components added, updated and
// removed, what stays, the diff, what would be refused) and writes
// nothing at all: no record on any topic, no Consul key, no notification.
// A tenant's dry run shows only its components; a misspelt dry_run is
// refused, not published.
func TestWhatIfWritesNothing(t *testing.T) {
	p, tokens := startTenants(t, "acme", "globex")
	sfx := strings.ToLower(strings.TrimSuffix(p.kafka.Prefix, "."))
	id := "DCAE.Config_WHATIF_" + sfx
	recs := map[string]*recorder{}
	var scns []string
	reg := func(cid, tenant string, ids []string, filters []map[string]any) {
		recs[cid] = p.newRecorder()
		scn := "whatif-" + cid + "-" + sfx
		scns = append(scns, scn)
		p.register(cid+"-"+sfx, map[string]any{"deployment_id": "dep-" + cid + "-" + sfx, "service_component_name": scn, "tenant": tenant,
			"policy_ids": ids, "policy_filters": filters, "notify": map[string]any{"kind": "script", "script_path": recs[cid].path}})
	}
	reg("acme", "acme", []string{id}, nil)
	reg("globex", "globex", []string{id}, nil)
	reg("old", "", nil, []map[string]any{{"filter_id": "f", "policyName": "DCAE.Config_WHATIF_.*", "configName": "old"}})
	reg("new", "", nil, []map[string]any{{"filter_id": "f", "policyName": "DCAE.Config_WHATIF_.*", "configName": "new"}})
	body := func(v int, configName string, limit int) map[string]any {
		return map[string]any{"policyName": fmt.Sprintf("%s.%d.xml", id, v), "policyVersion": fmt.Sprint(v), "policyConfigStatus": "CONFIG_RETRIEVED",
			"matchingConditions": map[string]any{"ONAPName": "DCAE", "ConfigName": configName}, "config": map[string]any{"limit": limit}}
	}
	p.must(http.MethodPost, "/v1/policies", body(5, "old", 1))
	for _, scn := range []string{scns[0], scns[1], scns[2]} {
		testkit.Eventually(t, 2*time.Minute, testkit.Named("version 5 in "+scn, func() error {
			if got := p.items(scn)[id]["policyVersion"]; got != "5" {
				return fmt.Errorf("version %v", got)
			}
			return nil
		}))
		p.settledIndexes(scn)
	}
	before := p.written(scns, recs)

	dry := func(token, path string, b any) policyapi.WhatIf {
		t.Helper()
		code, out := p.doAs(token, http.MethodPost, path, b)
		if code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, code, out)
		}
		var w policyapi.WhatIf
		if err := json.Unmarshal([]byte(out), &w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	changes := func(w policyapi.WhatIf) []string {
		var out []string
		for _, c := range w.Components {
			from := "-"
			if c.FromVersion != nil {
				from = *c.FromVersion
			}
			out = append(out, strings.TrimSuffix(c.ComponentID, "-"+sfx)+" "+c.Change+" from "+from)
		}
		sort.Strings(out)
		return out
	}

	// Version 6 moves the policy from ConfigName old to new.
	w := dry(p.token, "/v1/policies?dry_run=true", body(6, "new", 2))
	want := []string{"acme updated from 5", "globex updated from 5", "new added from -", "old removed from 5"}
	if got := changes(w); !reflect.DeepEqual(got, want) || w.Count != 4 || w.Unchanged != 0 || w.Version != "6" ||
		w.LoadedVersion == nil || *w.LoadedVersion != "5" || len(w.Refused) != 0 || len(w.Diff) == 0 {
		t.Errorf("dry run of version 6: %v, %+v; want %v", got, w, want)
	}
	// The same version again changes nothing.
	w = dry(p.token, "/v1/policies?dry_run=true", []any{body(5, "old", 1)})
	if w.Count != 0 || w.Unchanged != 3 || len(w.Refused) != 0 || len(w.Diff) != 0 {
		t.Errorf("dry run of the loaded version: %+v", w)
	}
	// An older version is refused as the publish would refuse it.
	w = dry(p.token, "/v1/policies?dry_run=true", body(4, "new", 2))
	if len(w.Refused) != 1 || w.Refused[0].Status != http.StatusConflict || w.Count != 0 || w.Unchanged != 3 {
		t.Errorf("dry run of version 4: %+v, want it refused with 409", w)
	}
	// A tenant sees its own components only.
	w = dry(tokens["acme"], "/v1/policies?dry_run=true", body(6, "new", 2))
	if got := changes(w); !reflect.DeepEqual(got, []string{"acme updated from 5"}) {
		t.Errorf("acme's dry run: %v, want only acme's component", got)
	}
	w = dry(tokens["globex"], "/v1/policies?dry_run=true", body(6, "new", 2))
	if got := changes(w); !reflect.DeepEqual(got, []string{"globex updated from 5"}) {
		t.Errorf("globex's dry run: %v, want only globex's component", got)
	}
	// A PDP notification's dry run.
	w = dry(p.token, "/v1/pdp/notifications?dry_run=true", map[string]any{"loadedPolicies": []map[string]any{
		{"policyName": id + ".7.xml", "versionNo": "7", "matches": map[string]any{"ONAPName": "DCAE", "ConfigName": "new"}}}})
	if got := changes(w); !reflect.DeepEqual(got, want) || w.Version != "7" {
		t.Errorf("dry run of a notification of version 7: %v, %+v; want %v", got, w, want)
	}
	w = dry(p.token, "/v1/pdp/notifications?dry_run=true", map[string]any{"removedPolicies": []map[string]any{{"policyName": id + ".5.xml", "versionNo": "5"}}})
	if got := changes(w); !reflect.DeepEqual(got, []string{"acme removed from 5", "globex removed from 5", "old removed from 5"}) {
		t.Errorf("dry run of the removal of version 5: %v", got)
	}
	// A misspelt dry run, a tenant's publish: refused, nothing done.
	if code, out := p.do(http.MethodPost, "/v1/policies?dryrun=true", body(6, "new", 2)); code != http.StatusBadRequest || !strings.Contains(out, "takes only dry_run") {
		t.Errorf("POST /v1/policies?dryrun=true: %d %s, want 400", code, out)
	}
	if code, out := p.doAs(tokens["acme"], http.MethodPost, "/v1/policies", body(6, "new", 2)); code != http.StatusForbidden {
		t.Errorf("acme publishes: %d %s, want 403", code, out)
	}

	// Anything written would be on a topic, in Consul or with a script by
	// now: every stage handles a record in milliseconds here.
	time.Sleep(3 * time.Second)
	after := p.written(scns, recs)
	if !reflect.DeepEqual(before.ends, after.ends) {
		for k, v := range after.ends {
			if before.ends[k] != v {
				t.Errorf("%s ended at %d before the dry runs and at %d after", k, before.ends[k], v)
			}
		}
	}
	if !reflect.DeepEqual(before.kv, after.kv) || before.kvIndex != after.kvIndex {
		t.Errorf("Consul changed: keys %v index %d before, %v index %d after", before.kv, before.kvIndex, after.kv, after.kvIndex)
	}
	if !reflect.DeepEqual(before.calls, after.calls) {
		t.Errorf("scripts were run: calls %v before, %v after", before.calls, after.calls)
	}
}
