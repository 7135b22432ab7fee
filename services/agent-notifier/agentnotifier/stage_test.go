package agentnotifier

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/internal/stagetest"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/topology"
)

// newCluster is an in-process Kafka with the topics (base names), each
// taking records as big as the stages may write.
func newCluster(t *testing.T, topics ...string) *stagetest.Cluster {
	t.Helper()
	c := stagetest.NewCluster(t, 3)
	c.CreateTopics(t, map[string]string{"max.message.bytes": topology.MaxMessageBytes}, topics...)
	return c
}

// testConfig is the default configuration with scripts allowed from
// scriptDirs and webhooks to 127.0.0.1 (where the tests' servers listen).
func testConfig(t testing.TB, scriptDirs ...string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Targets = notifytarget.Config{ScriptDirs: scriptDirs, WebhookAllow: []string{"127.0.0.1"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// recorder is a reconfigure script that writes its arguments, NUL
// separated, to a new file per call.
type recorder struct {
	dir    string
	script string
}

// newRecorder puts a recorder in a new directory under parent (a script
// directory the notifier allows).
func newRecorder(t *testing.T, parent string) *recorder {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "recorder")
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	if err := os.Mkdir(calls, 0o755); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, dir, "reconfigure.sh",
		fmt.Sprintf("printf '%%s\\0' \"$@\" > \"$(mktemp '%s/call.XXXXXX')\"\necho reconfigured >&2\n", calls))
	return &recorder{dir: calls, script: script}
}

// calls returns the arguments of every call so far.
func (r *recorder) calls(t *testing.T) [][]string {
	t.Helper()
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(r.dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		args := strings.Split(string(b), "\x00")
		out = append(out, args[:len(args)-1]) // every argument ends with NUL
	}
	return out
}

// waitClaim polls the claim key of scn until it records the outcome
// of an update.
func waitClaim(t *testing.T, c *api.Client, scn, update string) (consulkv.Claim, *api.KVPair) {
	t.Helper()
	var cl consulkv.Claim
	var p *api.KVPair
	testkit.Eventually(t, 60*time.Second, func() error {
		var err error
		if p, _, err = c.KV().Get(consulkv.ClaimKey(scn), nil); err != nil {
			t.Fatal(err)
		}
		if p != nil {
			if cl, err = consulkv.ParseClaim(p.Value); err == nil && cl.UpdateID == update && cl.ExitCode != nil {
				return nil
			}
		}
		return fmt.Errorf("no claim with the outcome of update %s in %s", update, consulkv.ClaimKey(scn))
	})
	return cl, p
}

// hold makes the Consul folder of scn hold exactly ps as its items, and
// an event, as the consul-writer leaves it after writing their collection. It may be
// called from a webhook's handler: it reports an error without stopping
// the test.
func hold(t testing.TB, consul *api.Client, scn string, ps ...events.Policy) {
	t.Helper()
	if _, err := consul.KV().DeleteTree(consulkv.ItemsPrefix(scn), nil); err != nil {
		t.Errorf("empty the items of %s: %v", scn, err)
		return
	}
	for _, p := range ps {
		if _, err := consul.KV().Put(&api.KVPair{Key: consulkv.ItemKey(scn, p.PolicyID), Value: []byte(p.Body)}, nil); err != nil {
			t.Errorf("put policy %s of %s: %v", p.PolicyID, scn, err)
			return
		}
	}
	ev := consulkv.Event{Action: consulkv.ActionUpdated, UpdateID: "held", PoliciesCount: len(ps)}
	if _, err := consul.KV().Put(&api.KVPair{Key: consulkv.EventKey(scn), Value: ev.JSON()}, nil); err != nil {
		t.Errorf("put the event of %s: %v", scn, err)
	}
}

func applied(update string, gen int64, notify events.NotifyTarget, policies, updated, removed []events.Policy) *events.ComponentApplied {
	return &events.ComponentApplied{
		ComponentID: "c1", ServiceComponentName: "dcae-vm", UpdateID: update, Action: "updated", Generation: gen,
		PoliciesCount: int32(len(policies)), PolicyRefs: events.Refs(policies), UpdatedRefs: events.Refs(updated), RemovedPolicies: removed,
		Notify: notify, AppliedAt: time.UnixMilli(5000).UTC(),
	}
}

func TestNotifierStage(t *testing.T) {
	consulCfg, consul := stagetest.Consul(t)
	c := newCluster(t, topology.ComponentApplied, topology.DLQ(topology.StageAgentNotifier))
	scripts := t.TempDir()
	rec := newRecorder(t, scripts)
	stagetest.Run(t, stageOn(t, consulCfg, scripts), stagetest.Env(c.Kafka))
	script := events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: rec.script}
	vm, x := vmMemory(), other()

	// The first collection: the script gets exactly "policies" and the JSON.
	hold(t, consul, "dcae-vm", vm)
	c.Produce(t, topology.ComponentApplied, "c1", applied("u1", 1, script, []events.Policy{vm}, []events.Policy{vm}, nil))
	claim, claimPair := waitClaim(t, consul, "dcae-vm", "u1")
	want1 := `{"policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
		`"updated_policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}],` +
		`"removed_policies":[]}`
	calls := rec.calls(t)
	if len(calls) != 1 || len(calls[0]) != 2 || calls[0][0] != "policies" || calls[0][1] != want1 {
		t.Fatalf("script calls %q, want one call with exactly [policies %s]", calls, want1)
	}
	if claim.Generation != 1 || *claim.ExitCode != 0 || claim.Stderr != "reconfigured\n" || claim.At == "" {
		t.Fatalf("claim %+v", claim)
	}

	// A replay of u1 notifies nobody; u2 is notified once.
	hold(t, consul, "dcae-vm", x)
	c.Produce(t, topology.ComponentApplied, "c1", applied("u1", 1, script, []events.Policy{vm}, []events.Policy{vm}, nil))
	c.Produce(t, topology.ComponentApplied, "c1", applied("u2", 2, script, []events.Policy{x}, []events.Policy{x}, []events.Policy{vm}))
	claim, pair2 := waitClaim(t, consul, "dcae-vm", "u2")
	calls = rec.calls(t)
	if len(calls) != 2 {
		t.Fatalf("%d script calls after the replay of u1 and u2, want 2", len(calls))
	}
	var payloads []string
	for _, cl := range calls {
		payloads = append(payloads, cl[1])
	}
	sort.Strings(payloads)
	want2 := `{"policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}],"updated_policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}],` +
		`"removed_policies":[{"policyName":"DCAE.Config_VM_MEMORY.222.xml","policyVersion":"222","config":{"min_memory":"8GB"}}]}`
	if payloads[0] != want1 || payloads[1] != want2 {
		t.Fatalf("payloads %q, want u1's and u2's", payloads)
	}
	if claim.Generation != 2 || pair2.ModifyIndex <= claimPair.ModifyIndex {
		t.Fatalf("claim after u2 %+v", claim)
	}

	// A failing script is run again, then recorded as failed; the next
	// record goes on.
	fail := writeScript(t, scripts, "fail.sh", "echo boom >&2\nexit 3\n")
	c.Produce(t, topology.ComponentApplied, "c1", applied("u3", 3, events.NotifyTarget{Kind: events.NotifyScript, ScriptPath: fail}, []events.Policy{x}, nil, nil))
	if claim, _ = waitClaim(t, consul, "dcae-vm", "u3"); *claim.ExitCode != 3 || claim.Stderr != "boom\n" {
		t.Fatalf("claim of the failing script %+v", claim)
	}

	// A webhook gets the same JSON by POST.
	var mu sync.Mutex
	var hooks []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		hooks = append(hooks, r.Method+" "+r.Header.Get("Content-Type")+" "+string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	c.Produce(t, topology.ComponentApplied, "c1", applied("u4", 4, events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: srv.URL}, []events.Policy{x}, nil, []events.Policy{vm}))
	claim, _ = waitClaim(t, consul, "dcae-vm", "u4")
	mu.Lock()
	gotHooks := append([]string(nil), hooks...)
	mu.Unlock()
	// The component was last told with success at u2, which removed
	// DCAE.Config_VM_MEMORY and added X: nothing changed since, whatever
	// u4 says it removed.
	want4 := `POST application/json {"policies":[{"policyName":"X.3.xml","config":{"x":[1,2]}}],"updated_policies":[],` +
		`"removed_policies":[]}`
	if len(gotHooks) != 1 || gotHooks[0] != want4 || *claim.ExitCode != 0 || claim.HTTPStatus != 200 {
		t.Fatalf("webhook calls %q, claim %+v", gotHooks, claim)
	}

	// A notification bigger than one argument may be is recorded as
	// failed with the reason.
	big := events.Policy{PolicyID: "BIG", PolicyVersion: "1", Body: `{"blob":"` + strings.Repeat("b", 200_000) + `"}`}
	hold(t, consul, "dcae-vm", big)
	c.Produce(t, topology.ComponentApplied, "c1", applied("u5", 5, script, []events.Policy{big}, []events.Policy{big}, nil))
	if claim, _ = waitClaim(t, consul, "dcae-vm", "u5"); *claim.ExitCode != -1 || !strings.Contains(claim.Stderr, "128 KiB") {
		t.Fatalf("claim of the oversized notification %+v", claim)
	}

	// An uninstalled component and one without a notify target are not
	// notified; the claim stays as it is.
	_, before := waitClaim(t, consul, "dcae-vm", "u5")
	hold(t, consul, "dcae-vm", x)
	un := applied("u6", 6, script, nil, nil, []events.Policy{x})
	un.Uninstalled = true
	c.Produce(t, topology.ComponentApplied, "c1", un)
	c.Produce(t, topology.ComponentApplied, "c1", applied("u7", 7, events.NotifyTarget{Kind: events.NotifyNone}, []events.Policy{x}, nil, nil))
	c.Produce(t, topology.ComponentApplied, "c1", applied("u8", 8, script, []events.Policy{x}, nil, nil))
	waitClaim(t, consul, "dcae-vm", "u8")
	if n := len(rec.calls(t)); n != 3 {
		t.Fatalf("%d script calls, want 3 (u1, u2, u8)", n)
	}
	if p, _, _ := consul.KV().Get(consulkv.ClaimKey("dcae-vm"), nil); p == nil || p.ModifyIndex <= before.ModifyIndex || !bytes.Contains(p.Value, []byte(`"generation":8`)) {
		t.Fatalf("claim after u8: %v", p)
	}
}
