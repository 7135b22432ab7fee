package policyflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/api"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// lastCallHas waits until the recorder's last call carries every want.
func (p *pipeline) lastCallHas(rec *recorder, what string, want ...string) int {
	p.t.Helper()
	n := 0
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named(what, func() error {
		calls := rec.calls(p.t)
		n = len(calls)
		if n == 0 {
			return fmt.Errorf("no call")
		}
		for _, w := range want {
			if !strings.Contains(calls[n-1].raw, w) {
				return fmt.Errorf("last of %d calls lacks %s: %s", n, w, calls[n-1].raw)
			}
		}
		return nil
	}))
	return n
}

// catchup asks for a catch-up and waits until both stages reported from
// every partition.
func (p *pipeline) catchup(method, path string, body any) api.CatchupStatus {
	p.t.Helper()
	var accepted struct {
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal([]byte(p.must(method, path, body)), &accepted); err != nil || accepted.RequestID == "" {
		p.t.Fatalf("catch-up answer without request_id: %v", err)
	}
	var st api.CatchupStatus
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("catch-up "+accepted.RequestID+" done", func() error {
		code, out := p.do(http.MethodGet, "/v1/catchup/"+accepted.RequestID, nil)
		st = api.CatchupStatus{}
		if err := json.Unmarshal([]byte(out), &st); code != http.StatusOK || err != nil {
			return fmt.Errorf("%d %s", code, out)
		}
		if !st.Done {
			return fmt.Errorf("not done: %s", out)
		}
		return nil
	}))
	return st
}

// A catch-up with nothing changed writes nothing to Consul and notifies
// nobody; a key deleted by hand is restored by the next catch-up, and the
// component is notified once of its folder as restored.
func TestCatchupRestoresKeysDeletedByHandAndOtherwiseDoesNothing(t *testing.T) {
	p := start(t)
	rec := p.newRecorder()
	scn := scnFor(p, "drift")
	match := map[string]any{"ONAPName": "DCAE"}
	p.register("comp-drift", map[string]any{
		"deployment_id": "dep-drift", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_DRIFT_A", "DCAE.Config_DRIFT_B"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_DRIFT_A.1.xml", "1", `{"a": 1}`, match)
	p.publish("DCAE.Config_DRIFT_B.1.xml", "1", `{"b": 1}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_DRIFT_A": `{"a":1}`, "DCAE.Config_DRIFT_B": `{"b":1}`})
	calls := p.lastCallHas(rec, "the script is told of both policies", `"a":1`, `"b":1`)

	before := p.settledIndexes(scn)
	st := p.catchup(http.MethodPost, "/v1/catchup", map[string]any{"reason": "nothing changed"})
	if st.Matcher.Compared < 1 || st.Matcher.Differed != 0 || st.ConsulWriter.Compared < 1 || st.ConsulWriter.Differed != 0 || st.ConsulWriter.KeysWritten != 0 {
		t.Fatalf("catch-up with nothing changed: %+v, want components and folders compared, none differing", st)
	}
	if after := p.modifyIndexes(scn); !equalMaps(before, after) {
		t.Fatalf("a catch-up with nothing changed wrote to Consul: before %v after %v", before, after)
	}
	// A key deleted by hand: the seed's GET /catch_up puts it back, and
	// only it (and the event key).
	bKey := consulkv.ItemKey(scn, "DCAE.Config_DRIFT_B")
	if _, err := p.consul.KV().Delete(bKey, nil); err != nil {
		t.Fatal(err)
	}
	st = p.catchup(http.MethodGet, "/catch_up", nil)
	if st.ConsulWriter.Differed != 1 || st.ConsulWriter.KeysWritten != 2 {
		t.Fatalf("catch-up after a key was deleted: %+v, want one folder written back with 2 keys", st)
	}
	p.waitItems(scn, map[string]string{"DCAE.Config_DRIFT_A": `{"a":1}`, "DCAE.Config_DRIFT_B": `{"b":1}`})
	// The component may have read the folder without the key: it is told
	// of the folder as restored, every policy in it as updated (its claim
	// records that notification).
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named("the component told of its restored folder", func() error {
		got := rec.calls(p.t)
		if len(got) != calls+1 || !strings.Contains(got[len(got)-1].raw, `"updated_policies":[{`) || !strings.Contains(got[len(got)-1].raw, `"b":1`) {
			return fmt.Errorf("%d calls since the catch-ups, want 1 telling of the restored folder", len(got)-calls)
		}
		return nil
	}))
	after := p.modifyIndexes(scn)
	for k, i := range before {
		if k != bKey && k != consulkv.EventKey(scn) && k != consulkv.ClaimKey(scn) && after[k] != i {
			t.Fatalf("catch-up rewrote %s, which nobody changed: ModifyIndex %d -> %d", k, i, after[k])
		}
	}

	// Barrier for the notifier: the next version's notification comes
	// after anything the catch-ups would have sent, so it and the
	// repair's must be the only calls since.
	p.publish("DCAE.Config_DRIFT_A.2.xml", "2", `{"a": 2}`, match)
	if n := p.lastCallHas(rec, "the script is told of version 2", `"a":2`); n != calls+2 {
		t.Fatalf("%d calls since the catch-ups, want the repair's and the barrier's: a catch-up with nothing changed notified the component", n-calls)
	}
}

// A PDP notification that never arrives is repaired by the periodic
// catch-up: pdp-ingest compares the PDP's full state with its catalog.
func TestPeriodicCatchupRepairsAMissedPDPNotification(t *testing.T) {
	p := start(t, func(p *pipeline) { p.catchupEvery = 2 * time.Second })
	rec := p.newRecorder()
	scn := scnFor(p, "missed")
	p.register("comp-missed", map[string]any{
		"deployment_id": "dep-missed", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_MISSED"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	// In the PDP, and nobody tells the pipeline.
	if _, err := p.pdp.Put(policy.Body{
		policy.FieldPolicyName: "DCAE.Config_MISSED.3.xml", policy.FieldPolicyVersion: "3",
		policy.FieldConfig: `{"m": 3}`, policy.FieldMatchingConditions: map[string]any{"ONAPName": "DCAE"},
	}); err != nil {
		t.Fatal(err)
	}
	p.waitItems(scn, map[string]string{"DCAE.Config_MISSED": `{"m":3}`})
	p.lastCallHas(rec, "the script is told of version 3", `"m":3`)
}

// The PDP withdraws the newest version while an older one remains: the
// older one is the latest again, and components holding the withdrawn one
// get it as an update and are notified.
func TestWithdrawnNewestVersionFallsBackToTheRemainingOne(t *testing.T) {
	p := start(t)
	rec := p.newRecorder()
	scn := scnFor(p, "withdraw")
	match := map[string]any{"ONAPName": "DCAE", "ConfigName": "vm_memory"}
	p.register("comp-withdraw", map[string]any{
		"deployment_id": "dep-withdraw", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_WD"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_WD.5.xml", "5", `{"min_memory": "2GB"}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_WD": `{"min_memory":"2GB"}`})
	p.publish("DCAE.Config_WD.222.xml", "222", `{"min_memory": "8GB"}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_WD": `{"min_memory":"8GB"}`})
	p.lastCallHas(rec, "the script is told of version 222", "8GB")

	p.unpublish("DCAE.Config_WD.222.xml")
	p.waitItems(scn, map[string]string{"DCAE.Config_WD": `{"min_memory":"2GB"}`})
	p.lastCallHas(rec, "the script is told of version 5 again", "2GB", `"policyVersion":"5"`)

	// The rollout view says the same: version 5, in Consul and notified.
	testkit.Eventually(p.t, time.Minute, testkit.Named("rollout of version 5 complete", func() error {
		var r struct {
			Version    string `json:"version"`
			Components int    `json:"components"`
			InConsul   int    `json:"in_consul"`
			Notified   int    `json:"notified"`
			Pending    int    `json:"pending"`
		}
		code, body := p.do(http.MethodGet, "/v1/policies/DCAE.Config_WD/rollout", nil)
		if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
			return fmt.Errorf("%d %s", code, body)
		}
		if r.Version != "5" || r.Components != 1 || r.InConsul != 1 || r.Notified != 1 || r.Pending != 0 {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	}))
}

// samePartitionAs returns a policy id, made from prefix, whose records go
// to the same partition of every policy_id-keyed topic as id's: records of
// the two are then handled in the order they were published, by pdp-ingest
// and by the matcher, so the second one's arrival at a component shows that
// whatever the first one caused has arrived before it.
func samePartitionAs(t *testing.T, id, prefix string, partitions int) string {
	t.Helper()
	part := runtime.Partitioner().ForTopic("any")
	want := part.Partition(&kgo.Record{Key: []byte(id)}, partitions)
	for i := range 1000 {
		c := fmt.Sprintf("%s%d", prefix, i)
		if part.Partition(&kgo.Record{Key: []byte(c)}, partitions) == want {
			return c
		}
	}
	t.Fatalf("no policy id %sN (N < 1000) shares %s's partition of %d", prefix, id, partitions)
	return ""
}

// The PDP pushes version 5 again while version 222 is loaded: nothing
// changes. Consul keeps 222 and the component is not notified; a marker
// policy published after it, on the same partition, arrives alone.
func TestRepushOfAnOlderVersionChangesNothing(t *testing.T) {
	p := start(t)
	rec := p.newRecorder()
	scn := scnFor(p, "repush")
	match := map[string]any{"ONAPName": "DCAE", "ConfigName": "vm_memory"}
	marker := samePartitionAs(t, "DCAE.Config_RP", "DCAE.Config_RPMARK", pipelinePartitions)
	p.register("comp-repush", map[string]any{
		"deployment_id": "dep-repush", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_RP", marker},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_RP.5.xml", "5", `{"min_memory": "2GB"}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_RP": `{"min_memory":"2GB"}`})
	p.publish("DCAE.Config_RP.222.xml", "222", `{"min_memory": "8GB"}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_RP": `{"min_memory":"8GB"}`})
	calls := p.lastCallHas(rec, "the script is told of version 222", "8GB")
	rpKey := consulkv.ItemKey(scn, "DCAE.Config_RP")
	before := p.modifyIndexes(scn)[rpKey]

	// Version 5 again, with the same body, then the marker.
	p.publish("DCAE.Config_RP.5.xml", "5", `{"min_memory": "2GB"}`, match)
	p.publish(marker+".1.xml", "1", `{"marker": 1}`, match)
	p.waitItems(scn, map[string]string{"DCAE.Config_RP": `{"min_memory":"8GB"}`, marker: `{"marker":1}`})
	n := p.lastCallHas(rec, "the script is told of the marker", `"marker":1`)
	if n != calls+1 {
		t.Fatalf("%d calls since version 222, want only the marker's: the re-push of version 5 notified the component", n-calls)
	}
	last := rec.calls(t)[n-1]
	if len(last.payload.UpdatedPolicies) != 1 || configOf(last.payload.UpdatedPolicies[0]) != `{"marker":1}` {
		t.Fatalf("the marker's notification updates %s, want the marker only", last.raw)
	}
	if !strings.Contains(last.raw, `"policyVersion":"222"`) {
		t.Fatalf("the marker's notification does not list version 222 of DCAE.Config_RP: %s", last.raw)
	}
	if after := p.modifyIndexes(scn)[rpKey]; after != before {
		t.Fatalf("%s was written again after the re-push of version 5: ModifyIndex %d -> %d", rpKey, before, after)
	}
}

// policyctl builds tools/policyctl of this checkout into a directory of
// the test and returns the binary's path.
func policyctl(t *testing.T) string {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "policyctl")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, "tools", "policyctl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -o %s ./tools/policyctl: %v\n%s", bin, err, out)
	}
	return bin
}

// `policyctl catch-up` restores a key deleted by hand, and its summary
// says what it compared and wrote back.
func TestPolicyctlCatchupRestoresAKeyDeletedByHand(t *testing.T) {
	bin := policyctl(t)
	p := start(t)
	rec := p.newRecorder()
	scn := scnFor(p, "ctl-drift")
	match := map[string]any{"ONAPName": "DCAE"}
	p.register("comp-ctl-drift", map[string]any{
		"deployment_id": "dep-ctl-drift", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_CTL_A", "DCAE.Config_CTL_B"},
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_CTL_A.1.xml", "1", `{"a": 1}`, match)
	p.publish("DCAE.Config_CTL_B.1.xml", "1", `{"b": 1}`, match)
	want := map[string]string{"DCAE.Config_CTL_A": `{"a":1}`, "DCAE.Config_CTL_B": `{"b":1}`}
	p.waitItems(scn, want)
	p.lastCallHas(rec, "the script is told of both policies", `"a":1`, `"b":1`)
	aKey, bKey := consulkv.ItemKey(scn, "DCAE.Config_CTL_A"), consulkv.ItemKey(scn, "DCAE.Config_CTL_B")
	aIndex := p.modifyIndexes(scn)[aKey]
	if _, err := p.consul.KV().Delete(bKey, nil); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "catch-up", "--api", p.api, "--reason", "a key deleted by hand", "--wait-timeout", "2m")
	cmd.Env = append(os.Environ(), "PF_TOKEN="+p.token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("policyctl catch-up: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var summary struct {
		RequestID          string `json:"request_id"`
		ComponentsCompared int64  `json:"components_compared"`
		FoldersCompared    int64  `json:"folders_compared"`
		FoldersWrittenBack *int64 `json:"folders_written_back"`
		ConsulKeysWritten  *int64 `json:"consul_keys_written"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &summary); err != nil {
		t.Fatalf("policyctl catch-up printed no JSON summary (%v): %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	if summary.RequestID == "" || summary.ComponentsCompared < 1 || summary.FoldersCompared < 1 ||
		summary.FoldersWrittenBack == nil || *summary.FoldersWrittenBack != 1 || summary.ConsulKeysWritten == nil || *summary.ConsulKeysWritten != 2 {
		t.Fatalf("policyctl catch-up summary %s: want a request_id, components and folders compared, one folder written back with 2 keys (the item and the event key)", stdout.String())
	}
	if !strings.Contains(stderr.String(), "catch-up "+summary.RequestID+": ") {
		t.Fatalf("policyctl catch-up showed no progress of %s on stderr: %s", summary.RequestID, stderr.String())
	}
	p.waitItems(scn, want)
	if got := p.modifyIndexes(scn)[aKey]; got != aIndex {
		t.Fatalf("the catch-up rewrote %s, which nobody changed: ModifyIndex %d -> %d", aKey, aIndex, got)
	}
}

// pdpCatchup waits for a catch-up pdp-ingest ran (periodic or on start)
// after the one named after ("" for any), whose comparison of the catalog
// with the PDP satisfies ok, and that is done everywhere; it returns what
// GET /v1/catchup/{request_id} says of it. pdp-ingest's catch-ups are
// found on catchup.progress; their ids (pdp-ingest-<unix nanoseconds>)
// sort by time.
func (p *pipeline) pdpCatchup(what, after string, ok func(api.CatalogProgress) error) api.CatchupStatus {
	p.t.Helper()
	var st api.CatchupStatus
	parts := make([]int32, pipelinePartitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	codec := events.Default()
	testkit.Eventually(p.t, 2*time.Minute, testkit.Named(what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		found := map[string]api.CatalogProgress{}
		err := runtime.ReadPartitions(ctx, p.kafka, topology.CatchupProgress, parts, func(rec *kgo.Record) error {
			var pr events.CatchupProgress
			if err := codec.DecodeInto(ctx, rec.Value, &pr); err != nil {
				return err
			}
			if pr.Stage == events.ProgressPDPIngest && pr.RequestID > after {
				c := api.CatalogProgress{Listed: pr.Compared, Differed: pr.Differed, Removed: pr.Removed}
				if pr.RemovalWithheld != nil {
					c.RemovalWithheld = *pr.RemovalWithheld
				}
				found[pr.RequestID] = c
			}
			return nil
		})
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(found))
		for id := range found {
			ids = append(ids, id)
		}
		sort.Sort(sort.Reverse(sort.StringSlice(ids)))
		var last error = fmt.Errorf("pdp-ingest reported no catch-up after %q", after)
		for _, id := range ids {
			if last = ok(found[id]); last != nil {
				continue
			}
			// The newest that did: what the API says of it, once done.
			code, out := p.do(http.MethodGet, "/v1/catchup/"+id, nil)
			st = api.CatchupStatus{}
			if err := json.Unmarshal([]byte(out), &st); code != http.StatusOK || err != nil {
				return fmt.Errorf("GET /v1/catchup/%s: %d %s", id, code, out)
			}
			if st.PDPIngest == nil || ok(*st.PDPIngest) != nil || !st.Done {
				return fmt.Errorf("GET /v1/catchup/%s: %s, want it done and pdp_ingest as reported", id, out)
			}
			return nil
		}
		return fmt.Errorf("none of %d catch-ups of pdp-ingest: %v", len(ids), last)
	}))
	return st
}

// The PDP removes a policy and its notification is lost: a catch-up of
// pdp-ingest removes it from the catalog and every component's folder,
// and tells the component. A policy pushed directly, which the PDP never
// had, stays.
func TestCatchupRemovesAPolicyWhoseRemovalWasMissed(t *testing.T) {
	p := start(t, func(p *pipeline) { p.catchupEvery = 2 * time.Second })
	rec := p.newRecorder()
	scn := scnFor(p, "missed-removal")
	match := map[string]any{"ONAPName": "DCAE"}
	ids := []string{"DCAE.Config_MR_A", "DCAE.Config_MR_B", "DCAE.Config_MR_GONE", "DCAE.Config_MR_PUSHED"}
	p.register("comp-missed-removal", map[string]any{
		"deployment_id": "dep-missed-removal", "service_component_name": scn,
		"policy_ids": ids,
		"notify":     map[string]any{"kind": "script", "script_path": rec.path},
	})
	p.publish("DCAE.Config_MR_A.1.xml", "1", `{"a": 1}`, match)
	p.publish("DCAE.Config_MR_B.1.xml", "1", `{"b": 1}`, match)
	p.publish("DCAE.Config_MR_GONE.4.xml", "4", `{"gone": 4}`, match)
	p.must(http.MethodPost, "/v1/policies", map[string]any{
		"policyName": "DCAE.Config_MR_PUSHED.1.xml", "policyConfigStatus": "CONFIG_RETRIEVED", "config": map[string]any{"p": 1}, "matchingConditions": match,
	})
	p.waitItems(scn, map[string]string{"DCAE.Config_MR_A": `{"a":1}`, "DCAE.Config_MR_B": `{"b":1}`, "DCAE.Config_MR_GONE": `{"gone":4}`, "DCAE.Config_MR_PUSHED": `{"p":1}`})

	// Gone from the PDP, and nobody tells the pipeline.
	if removed := p.pdp.Remove("DCAE.Config_MR_GONE"); len(removed) != 1 {
		t.Fatalf("the PDP removed %v, want version 4", removed)
	}
	p.waitItems(scn, map[string]string{"DCAE.Config_MR_A": `{"a":1}`, "DCAE.Config_MR_B": `{"b":1}`, "DCAE.Config_MR_PUSHED": `{"p":1}`})
	p.lastCallHas(rec, "the script is told of the removal", `"removed_policies":[{`, "DCAE.Config_MR_GONE.4.xml")
	if code, out := p.do(http.MethodGet, "/policy_latest/DCAE.Config_MR_GONE", nil); code != http.StatusNotFound {
		t.Fatalf("GET /policy_latest of the removed policy: %d %s, want 404", code, out)
	}
	st := p.pdpCatchup("a catch-up reports the removal", "", func(c api.CatalogProgress) error {
		if c.Removed != 1 || c.RemovalWithheld != "" {
			return fmt.Errorf("pdp_ingest %+v, want one removal", c)
		}
		return nil
	})
	if st.PDPIngest.Listed != 2 {
		t.Fatalf("pdp_ingest %+v, want the PDP's 2 policies listed", *st.PDPIngest)
	}
	// Later catch-ups leave the pushed policy where it is.
	p.pdpCatchup("a later catch-up finds nothing to remove", st.RequestID, func(c api.CatalogProgress) error {
		if c.Removed != 0 || c.Differed != 0 || c.RemovalWithheld != "" {
			return fmt.Errorf("pdp_ingest %+v, want nothing different", c)
		}
		return nil
	})
	p.waitItems(scn, map[string]string{"DCAE.Config_MR_A": `{"a":1}`, "DCAE.Config_MR_B": `{"b":1}`, "DCAE.Config_MR_PUSHED": `{"p":1}`})
	if code, out := p.do(http.MethodGet, "/policy_latest/DCAE.Config_MR_PUSHED", nil); code != http.StatusOK {
		t.Fatalf("GET /policy_latest of the pushed policy: %d %s, want it still there", code, out)
	}
}

// A PDP that answers a catch-up with nothing (it lost its store, or a
// wrong filter) does not empty the components: the catch-up removes
// nothing and says why, in GET /v1/catchup/{request_id} and in a metric.
func TestCatchupWithAnEmptyPDPAnswerRemovesNothing(t *testing.T) {
	p := start(t, func(p *pipeline) { p.catchupEvery = 2 * time.Second })
	scn := scnFor(p, "empty-pdp")
	match := map[string]any{"ONAPName": "DCAE"}
	p.register("comp-empty-pdp", map[string]any{
		"deployment_id": "dep-empty-pdp", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_EP_A", "DCAE.Config_EP_B"},
	})
	p.publish("DCAE.Config_EP_A.1.xml", "1", `{"a": 1}`, match)
	p.publish("DCAE.Config_EP_B.1.xml", "1", `{"b": 1}`, match)
	want := map[string]string{"DCAE.Config_EP_A": `{"a":1}`, "DCAE.Config_EP_B": `{"b":1}`}
	p.waitItems(scn, want)

	p.pdp.Remove("DCAE.Config_EP_A")
	p.pdp.Remove("DCAE.Config_EP_B")
	st := p.pdpCatchup("a catch-up withholds the removals", "", func(c api.CatalogProgress) error {
		if c.Removed != 0 || !strings.Contains(c.RemovalWithheld, "the PDP listed no policy") {
			return fmt.Errorf("pdp_ingest %+v, want the removals withheld because the listing is empty", c)
		}
		return nil
	})
	if st.PDPIngest.Listed != 0 || st.Matcher.Differed != 0 {
		t.Fatalf("catch-up %+v: want nothing listed and no component sent anything", st)
	}
	samples, _ := p.scrape()
	if n := value(samples, "policyflow_catchup_removals_total", `outcome="withheld"`); n < 2 {
		t.Fatalf("policyflow_catchup_removals_total{outcome=\"withheld\"} = %g, want at least the 2 policies", n)
	}
	if n := value(samples, "policyflow_catchup_removals_total", `outcome="removed"`); n != 0 {
		t.Fatalf("policyflow_catchup_removals_total{outcome=\"removed\"} = %g, want 0", n)
	}
	// The catch-up above is done everywhere: the folder is as it was.
	if got := p.items(scn); len(got) != 2 {
		t.Fatalf("after a catch-up with an empty PDP answer %s holds %v, want both policies", scn, keys(got))
	}
}
