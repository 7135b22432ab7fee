package policyflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/consul-writer/consulwriter"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/apicheck"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/notifytarget"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/topology"
)

// uuid returns a random UUID, the form Consul's tokens take.
func uuid(t *testing.T) string {
	s := backend.Secret(t) // 32 hex digits
	return s[0:8] + "-" + s[8:12] + "-4" + s[13:16] + "-a" + s[17:20] + "-" + s[20:32]
}

// aclToken creates, with the management token, a policy of the given
// rules and a token holding it, and returns the token's secret.
func aclToken(t *testing.T, acl *consulapi.ACL, name, rules string) string {
	t.Helper()
	p, _, err := acl.PolicyCreate(&consulapi.ACLPolicy{Name: name, Rules: rules}, nil)
	if err != nil {
		t.Fatalf("create Consul policy %s: %v", name, err)
	}
	tok, _, err := acl.TokenCreate(&consulapi.ACLToken{Description: name, Policies: []*consulapi.ACLTokenPolicyLink{{ID: p.ID}}}, nil)
	if err != nil {
		t.Fatalf("create Consul token %s: %v", name, err)
	}
	return tok.SecretID
}

// The consul-writer and the agent-notifier run against a Consul agent with
// ACLs in default deny, each with a token that may write only its own
// keys: the writer a component's folder, the notifier its claim key (and
// read the folder, to build the notification). A write to a folder the
// writer's token has no right to is dead-lettered with the right to
// grant, and so is a notification whose folder the notifier may not read
// (Consul answers such a read with nothing, which would otherwise be sent
// as an empty notification); a token Consul does not know stops the stage
// at start, saying so.
func TestConsulStagesWithACLTokens(t *testing.T) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, 1)
	k := b.Kafka(prefix)

	bin, err := devstack.ConsulBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mgmt := uuid(t)
	agent, err := devstack.StartConsul(ctx, devstack.ConsulOptions{Binary: bin, ManagementToken: mgmt})
	if err != nil {
		t.Fatalf("start Consul with ACLs: %v", err)
	}
	t.Cleanup(func() {
		if err := agent.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin, err := consulapi.NewClient(&consulapi.Config{Address: agent.Addr, Token: mgmt})
	if err != nil {
		t.Fatal(err)
	}

	granted, refused := "granted-"+strings.TrimSuffix(prefix, "."), "refused-"+strings.TrimSuffix(prefix, ".")
	unreadable := "unreadable-" + strings.TrimSuffix(prefix, ".")
	unclaimable := "unclaimable-" + strings.TrimSuffix(prefix, ".")
	writerToken := aclToken(t, admin.ACL(), "consul-writer-"+granted,
		fmt.Sprintf("key_prefix %q { policy = \"write\" }\nkey_prefix %q { policy = \"write\" }\nkey_prefix %q { policy = \"write\" }",
			consulkv.Folder(granted), consulkv.Folder(unreadable), consulkv.Folder(unclaimable)))
	notifierToken := aclToken(t, admin.ACL(), "agent-notifier-"+granted,
		fmt.Sprintf("key_prefix %q { policy = \"read\" }\nkey %q { policy = \"write\" }\nkey %q { policy = \"write\" }\nkey_prefix %q { policy = \"read\" }",
			consulkv.Folder(granted), consulkv.ClaimKey(granted), consulkv.ClaimKey(unreadable), consulkv.Folder(unclaimable)))

	var hooks atomic.Int64
	var payload atomic.Value // the last notification's body
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		payload.Store(string(b))
		hooks.Add(1)
	}))
	defer hook.Close()

	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	env.Retry = runtime.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	nc := agentnotifier.DefaultConfig()
	nc.Consul = consulkv.Config{Addr: agent.Addr, Token: notifierToken}
	nc.Targets = notifytarget.Config{WebhookAllow: []string{"127.0.0.1"}}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runtime.RunStages(sctx, env,
			consulwriter.StageWith(consulwriter.Config{Consul: consulkv.Config{Addr: agent.Addr, Token: writerToken}}),
			agentnotifier.StageWith(nc))
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("stages: %v", err)
		}
	}()

	opts, err := k.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	collection := func(id, scn string) *kgo.Record {
		body := `{"policyName":"DCAE.Config_ACL.1.xml","policyVersion":"1","config":{"acl":true}}`
		ps := []events.Policy{{PolicyID: "DCAE.Config_ACL", PolicyName: "DCAE.Config_ACL.1.xml", PolicyVersion: "1", Body: body}}
		v, err := events.Default().Encode(&events.ComponentPolicies{
			ComponentID: id, DeploymentID: "dep-" + id, ServiceComponentName: scn, UpdateID: "u-" + id, Generation: 1,
			Policies: ps, UpdatedPolicies: ps, Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: hook.URL},
			UpdatedAt: time.Now().UTC(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return &kgo.Record{Topic: k.Topic(topology.ComponentPolicies), Key: []byte(id), Value: v}
	}
	if err := cl.ProduceSync(ctx, collection("comp-refused", refused), collection("comp-granted", granted), collection("comp-unreadable", unreadable),
		collection("comp-unclaimable", unclaimable)).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The granted folder is written, and the notifier records its claim.
	testkit.Eventually(t, time.Minute, testkit.Named("the granted folder written and its claim recorded", func() error {
		item, _, err := admin.KV().Get(consulkv.ItemKey(granted, "DCAE.Config_ACL"), nil)
		if err != nil || item == nil {
			return fmt.Errorf("item: %v %v", item, err)
		}
		claimKV, _, err := admin.KV().Get(consulkv.ClaimKey(granted), nil)
		if err != nil || claimKV == nil {
			return fmt.Errorf("claim: %v %v", claimKV, err)
		}
		claim, err := consulkv.ParseClaim(claimKV.Value)
		if err != nil || claim.UpdateID != "u-comp-granted" || claim.ExitCode == nil {
			return fmt.Errorf("claim %s (%v), want update u-comp-granted with its outcome", claimKV.Value, err)
		}
		return nil
	}))
	if n := hooks.Load(); n != 1 {
		t.Errorf("the granted component's webhook was called %d times, want once", n)
	}
	// The notification holds the policy the notifier read from the folder.
	if got, _ := payload.Load().(string); !strings.Contains(got, `"policies":[{`) || !strings.Contains(got, "DCAE.Config_ACL.1.xml") {
		t.Errorf("the granted component was notified with %s, want its policy DCAE.Config_ACL.1.xml under policies", got)
	}

	// The refused folder is not written; its record is dead-lettered with
	// the right to grant.
	var dead *kgo.Record
	testkit.Eventually(t, time.Minute, testkit.Named("the refused record dead-lettered", func() error {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		err := runtime.ReadPartitions(rctx, k, topology.DLQ(topology.StageConsulWriter), nil, func(r *kgo.Record) error {
			dead = r
			return nil
		})
		if err == nil && dead == nil {
			err = fmt.Errorf("no dead letter yet")
		}
		return err
	}))
	reason := header(dead, runtime.HeaderError)
	for _, want := range []string{"Consul denied the token the right to write under " + consulkv.Folder(refused),
		fmt.Sprintf("key_prefix %q", consulkv.Folder(refused)), "lacks permission 'key:write'"} {
		if !strings.Contains(reason, want) {
			t.Errorf("dead letter of %s says %q, want it to say %q", dead.Key, reason, want)
		}
	}
	if string(dead.Key) != "comp-refused" {
		t.Errorf("dead letter keyed %q, want comp-refused", dead.Key)
	}
	if pairs, _, err := admin.KV().List(consulkv.Prefix(refused), nil); err != nil || len(pairs) != 0 {
		t.Errorf("the refused folder holds %d keys (%v), want none", len(pairs), err)
	}

	// The folder the notifier may not read is written, and its
	// notification dead-lettered with the right to grant, not sent empty;
	// so is the notification whose claim the notifier may not write.
	notifierDead := map[string]*kgo.Record{}
	testkit.Eventually(t, time.Minute, testkit.Named("the notifications of the unreadable and the unclaimable folders dead-lettered", func() error {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		err := runtime.ReadPartitions(rctx, k, topology.DLQ(topology.StageAgentNotifier), nil, func(r *kgo.Record) error {
			notifierDead[string(r.Key)] = r
			return nil
		})
		if err == nil && (notifierDead["comp-unreadable"] == nil || notifierDead["comp-unclaimable"] == nil) {
			err = fmt.Errorf("dead letters so far: %d", len(notifierDead))
		}
		return err
	}))
	if why := header(notifierDead["comp-unreadable"], runtime.HeaderError); !strings.Contains(why, fmt.Sprintf("grant key_prefix %q { policy = \"read\" }", consulkv.Folder(unreadable))) {
		t.Errorf("the unreadable folder's notification was dead-lettered saying %q, want the read right to grant", why)
	}
	if why := header(notifierDead["comp-unclaimable"], runtime.HeaderError); !strings.Contains(why, fmt.Sprintf("grant it key %q { policy = \"write\" }", consulkv.ClaimKey(unclaimable))) {
		t.Errorf("the unclaimable folder's notification was dead-lettered saying %q, want the claim's write right to grant", why)
	}
	if n := hooks.Load(); n != 1 {
		t.Errorf("webhooks were called %d times, want once (the granted component only)", n)
	}

	// A token Consul does not know stops the consul-writer at start.
	wrong := consulwriter.StageWith(consulwriter.Config{Consul: consulkv.Config{Addr: agent.Addr, Token: uuid(t)}})
	wrong.Group = "policyflow-consul-writer-wrong-token"
	werr := wrong.Run(ctx, env)
	if werr == nil || !strings.Contains(werr.Error(), "Consul refused the token: ") || !strings.Contains(werr.Error(), "check --consul-token") {
		t.Errorf("the consul-writer with an unknown token: %v, want it to stop saying Consul refused the token", werr)
	}
}

// header returns a record header's value.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// The North API reads the component folders from a Consul agent with ACLs
// in default deny, with a token whose policy grants read on the folders:
// a folder it may read is served whole. A folder its token may not read
// is answered 502 with the rule to grant, never a raw error and never an
// empty or partial folder (Consul leaves out of a listing, without an
// error, the keys a token may not read); a token Consul does not know is
// answered 502 saying to check the North API's --consul-token.
func TestNorthAPIWithConsulACL(t *testing.T) {
	b := backend.Get(t)
	prefix := b.Prefix(t)
	b.ApplyTopology(t, prefix, 1)
	k := b.Kafka(prefix)

	bin, err := devstack.ConsulBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mgmt := uuid(t)
	agent, err := devstack.StartConsul(ctx, devstack.ConsulOptions{Binary: bin, ManagementToken: mgmt})
	if err != nil {
		t.Fatalf("start Consul with ACLs: %v", err)
	}
	t.Cleanup(func() {
		if err := agent.Stop(); err != nil {
			t.Error(err)
		}
	})
	admin, err := consulapi.NewClient(&consulapi.Config{Address: agent.Addr, Token: mgmt})
	if err != nil {
		t.Fatal(err)
	}
	suffix := strings.TrimSuffix(prefix, ".")
	readable, hidden, partial := "readable-"+suffix, "hidden-"+suffix, "partial-"+suffix
	for _, scn := range []string{readable, hidden, partial} {
		for key, value := range map[string]string{
			consulkv.ConfigKey(scn):                  `{"threshold":3}`,
			consulkv.ItemKey(scn, "DCAE.Config_ACL"): `{"policyName":"DCAE.Config_ACL.1.xml","policyVersion":"1","config":{"acl":true}}`,
			consulkv.EventKey(scn):                   `{"action":"gathered","update_id":"u-1","policies_count":1}`,
		} {
			if _, err := admin.KV().Put(&consulapi.KVPair{Key: key, Value: []byte(value)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	apiToken := aclToken(t, admin.ACL(), "north-api-"+suffix, fmt.Sprintf(
		"key %q { policy = \"read\" }\nkey_prefix %q { policy = \"read\" }\nkey %q { policy = \"read\" }",
		consulkv.ConfigKey(readable), consulkv.Prefix(readable), consulkv.ConfigKey(partial)))

	caller, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.File{Tokens: []auth.Entry{{Name: "acl", Role: auth.RoleAdmin, SHA256: auth.Hash(caller)}}}.Set()
	if err != nil {
		t.Fatal(err)
	}
	env := runtime.NewEnv(k, runtime.NewLogger(io.Discard, "error", false))
	serve := func(consulToken string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- northapi.ServeListener(sctx, env, ln, northapi.Options{Consul: consulkv.Config{Addr: agent.Addr, Token: consulToken}, Tokens: tokens})
		}()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("north api: %v", err)
			}
		})
		return "http://" + ln.Addr().String()
	}
	client := apicheck.Client(t, northapi.OpenAPI())
	get := func(api, path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+path, nil)
		auth.SetBearer(req, caller)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	// reason is the "error" of an answer's JSON body.
	reason := func(body string) string {
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		return e.Error
	}

	api := serve(apiToken)
	code, body := get(api, "/service_component_all/"+readable)
	var folder struct {
		Config   struct{ Threshold int }
		Policies struct {
			Event struct {
				UpdateID string `json:"update_id"`
			}
			Items []struct{ PolicyName string }
		}
	}
	if err := json.Unmarshal([]byte(body), &folder); code != http.StatusOK || err != nil || folder.Config.Threshold != 3 ||
		len(folder.Policies.Items) != 1 || folder.Policies.Items[0].PolicyName != "DCAE.Config_ACL.1.xml" || folder.Policies.Event.UpdateID != "u-1" {
		t.Errorf("GET /service_component_all/%s with a token that may read it: %d %s (%v); want 200 with its config, item and event", readable, code, body, err)
	}
	for _, tc := range []struct{ scn, want string }{
		{hidden, fmt.Sprintf("denied the North API's token the right to read %s; grant the token key %q { policy = \"read\" }", hidden, hidden)},
		{partial, fmt.Sprintf("denied the North API's token the right to read %s; grant the token key_prefix %q { policy = \"read\" }", consulkv.Prefix(partial), consulkv.Prefix(partial))},
	} {
		code, body := get(api, "/service_component_all/"+tc.scn)
		if code != http.StatusBadGateway || !strings.Contains(reason(body), tc.want) {
			t.Errorf("GET /service_component_all/%s with a token that may not read it all: %d %s; want 502 saying %q", tc.scn, code, body, tc.want)
		}
	}

	unknown := serve(uuid(t))
	code, body = get(unknown, "/service_component_all/"+readable)
	if want := "Consul refused the North API's token (ACL not found); check the North API's --consul-token"; code != http.StatusBadGateway || !strings.Contains(reason(body), want) {
		t.Errorf("GET /service_component_all/%s with a token Consul does not know: %d %s; want 502 saying %q", readable, code, body, want)
	}
}
