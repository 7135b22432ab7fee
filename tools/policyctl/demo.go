package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/admission/hooks"
	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/north-api/northapi"
	"github.com/policyflow/policyflow/services/policy"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/tools/devstack"
	"github.com/policyflow/policyflow/tools/pdpsim/pdp"
)

// The North API and a PDP simulator run inside `policyctl dev`, so the
// embedded stack is whole: components register through the API and
// pdp-ingest fetches policy bodies from the simulator's /getConfig.
var (
	devAPIAddr string
	devPDPAddr string
	devDemo    bool
	// Bound in prepare, so the banner and pdp-ingest's --pdp-url name the
	// real addresses (ports may be 0 = free).
	devAPIListener net.Listener
	devPDPListener net.Listener
	// The North API's admin token and its tokens file, set in prepare.
	devAPIToken  devstack.DevToken
	devAPITokens *auth.Store
	// devTokenDir holds the token files of an --ephemeral stack; removed
	// when the API stops.
	devTokenDir string
)

// devPDPStateFile is where, in the data directory, the PDP simulator
// keeps its policies.
const devPDPStateFile = "pdp-policies.json"

func init() {
	registerDevHook(devHook{
		name: "north-api",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&devAPIAddr, "api-addr", runtime.EnvOr("PF_API_ADDR", "127.0.0.1:8080"), "host:port of the North API; empty to not run it (env PF_API_ADDR)")
		},
		prepare: prepareDevAPI,
		run:     runDevAPI,
	})
	registerDevHook(devHook{
		name: "pdp-simulator",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&devPDPAddr, "pdp-addr", runtime.EnvOr("PF_DEV_PDP_ADDR", "127.0.0.1:8181"), "host:port of the PDP simulator (pdp-ingest's default --pdp-url); empty to not run it (env PF_DEV_PDP_ADDR)")
			fs.BoolVar(&devDemo, "demo", false, "load the sample components and policies and show an update landing in Consul and in a component's script")
		},
		prepare: prepareDevPDP,
		run:     runDevPDP,
	})
}

// prepareDevAPI binds the North API's address and gives it its tokens:
// the admin token kept in the data dir (made on first start) and the
// hashed tokens file next to it, which the API reloads when it changes.
func prepareDevAPI(_ context.Context, s *devStack) error {
	if devAPIAddr == "" {
		return nil
	}
	dir := s.DataDir
	if dir == "" {
		var err error
		if devTokenDir, err = os.MkdirTemp("", "policyflow-dev-"); err != nil {
			return fmt.Errorf("make a directory for the API token: %w", err)
		}
		dir = devTokenDir
	}
	tok, err := devstack.EnsureDevToken(dir)
	if err != nil {
		return err
	}
	store, err := auth.Open(tok.TokensFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", devAPIAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pick another with --api-addr)", devAPIAddr, err)
	}
	devAPIListener, devAPIToken, devAPITokens = ln, tok, store
	s.AddBannerLine("North API", fmt.Sprintf("http://%s   (policyctl --api http://%s)", ln.Addr(), ln.Addr()))
	where := "in " + tok.TokenFile + ", where policyctl finds it"
	switch {
	case s.DataDir == "":
		where = "this run only: export PF_TOKEN=" + tok.Token + " for policyctl"
	case tok.TokenFile != defaultTokenFile():
		where = "in " + tok.TokenFile + "; export PF_TOKEN_FILE=" + tok.TokenFile + " for policyctl"
	}
	made := ""
	if tok.Created {
		made = "new, "
	}
	// External policies and instance notices call only the hosts
	// PF_ADMISSION_HOOK_ALLOW names (read by this North API and the
	// stack's admission stage alike).
	hookHosts := "nowhere (env PF_ADMISSION_HOOK_ALLOW)"
	if h := hooks.ConfigFromEnv(); len(h.Allow) > 0 {
		hookHosts = strings.Join(h.Allow, ", ")
	}
	s.AddBannerLine("policy engines", hookHosts+"   (External policies and instance notices may call these)")
	s.AddBannerLine("API token", fmt.Sprintf("%s   (%sadmin; %s; tokens file %s)", tok.Token, made, where, tok.TokensFile))
	key, _, err := devstack.EnsureDevSigningKey(dir)
	if err != nil {
		return err
	}
	s.AddBannerLine("Package key", fmt.Sprintf("%s   (agentpackage publish signs with it; edge agents: --trusted-key %s.pub --insecure)", key, key))
	return nil
}

func runDevAPI(ctx context.Context, s *devStack) error {
	if devAPIListener == nil {
		return nil
	}
	if devTokenDir != "" {
		defer os.RemoveAll(devTokenDir)
	}
	go devAPITokens.Watch(ctx, auth.DefaultReloadInterval, s.Env.Log)
	reg := northapi.RegistrationFromEnv()
	reg.Targets = s.Targets
	// Agent packages: under the data dir, or for this run only.
	pkgDir := runtime.EnvOr("PF_PACKAGE_DIR", "")
	if pkgDir == "" {
		if s.DataDir != "" {
			pkgDir = filepath.Join(s.DataDir, "agent-packages")
		} else {
			tmp, err := os.MkdirTemp("", "policyflow-agent-packages")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			pkgDir = tmp
		}
	}
	if err := os.MkdirAll(pkgDir, 0o700); err != nil {
		return fmt.Errorf("agent package store %s: %w", pkgDir, err)
	}
	// The admission stage of the stack reads PF_ADMISSION_HOOK_ALLOW too.
	return northapi.ServeListener(ctx, s.Env, devAPIListener, northapi.Options{Consul: s.Consul, Tokens: devAPITokens, Registration: reg, PackageDir: pkgDir,
		Hooks: hooks.ConfigFromEnv()})
}

func prepareDevPDP(_ context.Context, s *devStack) error {
	if devDemo {
		// The demo's script runs from its own directory, which the
		// agent-notifier and the North API must allow.
		dir := demoDir(s)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make the demo's directory: %w", err)
		}
		s.Targets.ScriptDirs = append(s.Targets.ScriptDirs, dir)
	}
	if devPDPAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", devPDPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pick another with --pdp-addr)", devPDPAddr, err)
	}
	devPDPListener = ln
	if s.StageConfig.PDPURL == "" { // --pdp-url not given: pdp-ingest asks the simulator
		s.StageConfig.PDPURL = "http://" + ln.Addr().String()
	}
	s.AddBannerLine("PDP simulator", fmt.Sprintf("http://%s/getConfig", ln.Addr()))
	return nil
}

func runDevPDP(ctx context.Context, s *devStack) error {
	ln := devPDPListener
	if ln == nil {
		return nil
	}
	opts := []pdp.Option{pdp.WithLogger(s.Env.Log.With().Str("component", "pdpsim").Logger())}
	if devAPIListener != nil {
		// Like a real PDP, the simulator notifies the pipeline of every
		// change made through its admin API (PUT and DELETE
		// /sim/policies), with the dev stack's token.
		opts = append(opts,
			pdp.WithNotifyURL("http://"+devAPIListener.Addr().String()+"/v1/pdp/notifications"),
			pdp.WithHTTPClient(auth.Client(devAPIToken.Token)))
	}
	sim := pdp.NewServer(opts...)
	if s.DataDir != "" {
		// The stack's PDP keeps its policies with the rest of the stack's
		// state: started again, it lists what the catalog holds from it, so
		// pdp-ingest's catch-ups withhold or remove nothing.
		if err := sim.Persist(filepath.Join(s.DataDir, devPDPStateFile)); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if devDemo && devAPIListener != nil {
		if err := runDemo(ctx, s, sim); err != nil && ctx.Err() == nil {
			// The stack stays up: a demo that did not finish is reported,
			// not fatal.
			fmt.Fprintf(s.Out, "demo: %v\n", err)
		}
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demoDir is where the demo's script and its log live: demo/ in the
// stack's data directory, or in the data directory's default place with
// --ephemeral.
func demoDir(s *devStack) string {
	if s.DataDir != "" {
		return filepath.Join(s.DataDir, "demo")
	}
	if root, err := defaultDataDir(); err == nil {
		return filepath.Join(root, "demo")
	}
	return filepath.Join(os.TempDir(), "policyflow-demo")
}

// runDemo registers two components, publishes DCAE.Config_VM_MEMORY v5
// and then v222 (on the data of an earlier run, the two versions after
// the one in force), and shows what landed in Consul and what the script
// got.
func runDemo(ctx context.Context, s *devStack, sim *pdp.Server) error {
	dir := demoDir(s)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	log := filepath.Join(dir, "notifications.log")
	script := filepath.Join(dir, "reconfigure.sh")
	body := "#!/bin/sh\n# Demo reconfigure script: records the argv it was called with.\nprintf '%s argc=%s %s %s\\n' \"$(date -u +%H:%M:%S)\" \"$#\" \"$1\" \"$2\" >> " + shellQuote(log) + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		return err
	}
	base := "http://" + devAPIListener.Addr().String()
	notifyURL := base + "/v1/pdp/notifications"
	client := auth.Client(devAPIToken.Token)
	if err := devstack.WaitHTTP(ctx, "http://"+s.OpsAddr+"/readyz", 2*time.Minute); err != nil {
		return fmt.Errorf("the stages and the North API are not ready: %w", err)
	}
	// The North API joins /readyz only once it has started reading its
	// views, which may be after the stages are ready: its own word counts.
	if err := waitAPIViews(ctx, base, 2*time.Minute); err != nil {
		return err
	}
	components := map[string]any{
		"demo-vm-memory": map[string]any{
			"deployment_id": "demo-deployment", "service_component_name": "demo-vm-memory",
			"policy_ids": []string{"DCAE.Config_VM_MEMORY"},
			"notify":     map[string]any{"kind": "script", "script_path": script, "timeout_ms": 10000},
			"config":     map[string]any{"app": "vm-memory-collector"},
		},
		"demo-dcae-all": map[string]any{
			"deployment_id": "demo-deployment", "service_component_name": "demo-dcae-all",
			"policy_filters": []map[string]any{{"filter_id": "dcae-vm", "policyName": "DCAE.Config_VM_.*", "onapName": "DCAE"}},
			"config":         map[string]any{"app": "dcae-dashboard"},
		},
	}
	for id, c := range components {
		if err := putJSON(ctx, client, base+"/v1/components/"+id, c); err != nil {
			return fmt.Errorf("register component %s: %w", id, err)
		}
	}
	fmt.Fprintf(s.Out, "demo: registered components demo-vm-memory (policy_id DCAE.Config_VM_MEMORY, script %s) and demo-dcae-all (filter DCAE.Config_VM_.*)\n", script)
	// A run on the data of an earlier one publishes the next versions: the
	// catalog (and the PDP simulator, which keeps its policies in the data
	// dir) already holds the last run's, so the seed's v5 would be an older
	// version than the one in force.
	first, second := int64(5), int64(222)
	if v, found, err := catalogVersion(ctx, client, base, "DCAE.Config_VM_MEMORY"); err != nil {
		return err
	} else if found && v >= first {
		first, second = v+1, v+2
		fmt.Fprintf(s.Out, "demo: the catalog holds DCAE.Config_VM_MEMORY v%d from an earlier run; this run publishes v%d and v%d\n", v, first, second)
	}
	for _, b := range pdp.SeedPolicies() {
		if b.PolicyName() == "DCAE.Config_VM_MEMORY.5.xml" {
			b[policy.FieldPolicyName] = fmt.Sprintf("DCAE.Config_VM_MEMORY.%d.xml", first)
			b[policy.FieldPolicyVersion] = fmt.Sprint(first)
		}
		lp, err := sim.Put(b)
		if err != nil {
			return err
		}
		if err := pdp.Notify(ctx, client, notifyURL, policy.Notification{LoadedPolicies: []policy.LoadedPolicy{lp}}); err != nil {
			return err
		}
	}
	kv, err := s.Consul.Client()
	if err != nil {
		return err
	}
	const scn = "demo-vm-memory"
	key := consulkv.ItemKey(scn, "DCAE.Config_VM_MEMORY")
	if err := waitConsul(ctx, kv, key, "2GB"); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "demo: version %d landed: %s\n", first, key)
	lp, err := sim.Put(policy.Body{
		policy.FieldPolicyName: fmt.Sprintf("DCAE.Config_VM_MEMORY.%d.xml", second), policy.FieldPolicyVersion: fmt.Sprint(second),
		policy.FieldConfig:             `{"min_memory":"8GB"}`,
		policy.FieldMatchingConditions: map[string]any{policy.MatchingONAPName: "DCAE", policy.MatchingConfigName: "vm_memory"},
	})
	if err != nil {
		return err
	}
	start := time.Now()
	if err := pdp.Notify(ctx, client, notifyURL, policy.Notification{LoadedPolicies: []policy.LoadedPolicy{lp}}); err != nil {
		return err
	}
	if err := waitConsul(ctx, kv, key, "8GB"); err != nil {
		return err
	}
	pair, _, _ := kv.KV().Get(key, nil)
	eventKey := consulkv.EventKey(scn)
	event, _, _ := kv.KV().Get(eventKey, nil)
	fmt.Fprintf(s.Out, "demo: version %d reached Consul in %s\n  %s = %s\n", second, time.Since(start).Round(time.Millisecond), key, compact(pair.Value))
	if event != nil {
		fmt.Fprintf(s.Out, "  %s = %s\n", eventKey, compact(event.Value))
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(log); err == nil && bytes.Contains(b, []byte(fmt.Sprintf("DCAE.Config_VM_MEMORY.%d.xml", second))) {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			fmt.Fprintf(s.Out, "demo: the component's script was run as `%s policies <json>`; its last call:\n  %s\n", script, lines[len(lines)-1])
			fmt.Fprintf(s.Out, "demo: try  policyctl component status --api %s demo-vm-memory  and  curl -s -H \"Authorization: Bearer $(cat %s)\" %s/service_component_all/demo-vm-memory\n",
				base, devAPIToken.TokenFile, base)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the script at %s was not run with version %d within 30s; see %s", script, second, log)
}

// waitAPIViews waits until the North API's /healthcheck says its views
// have caught up.
func waitAPIViews(ctx context.Context, base string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var h northapi.Health
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthcheck", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h)
			resp.Body.Close()
		}
		if err == nil && h.Status == "ok" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the North API at %s has not caught up after %s: %+v (%v)", base, timeout, h.Views, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// catalogVersion asks the North API for the version of policyID in force
// (GET /policy_latest), waiting while its views are still being read.
func catalogVersion(ctx context.Context, client *http.Client, base, policyID string) (version int64, found bool, err error) {
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/policy_latest/"+policyID, nil)
		if err != nil {
			return 0, false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, false, fmt.Errorf("ask the North API for %s: %w", policyID, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return 0, false, nil
		case resp.StatusCode == http.StatusOK:
			var latest struct {
				PolicyBody policy.Body `json:"policy_body"`
			}
			if err := json.Unmarshal(body, &latest); err != nil {
				return 0, false, fmt.Errorf("the North API's answer for %s: %w", policyID, err)
			}
			v, ok := latest.PolicyBody.Version()
			return v, ok, nil
		case resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline):
			return 0, false, fmt.Errorf("ask the North API for %s: %d %s", policyID, resp.StatusCode, bytes.TrimSpace(body))
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func compact(b []byte) string {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return string(b)
	}
	return out.String()
}

func putJSON(ctx context.Context, client *http.Client, url string, v any) error {
	b, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("%s: %s", resp.Status, e.Error)
	}
	return nil
}

func waitConsul(ctx context.Context, c *consulapi.Client, key, contains string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		pair, _, err := c.KV().Get(key, (&consulapi.QueryOptions{}).WithContext(ctx))
		if err == nil && pair != nil && bytes.Contains(pair.Value, []byte(contains)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s does not hold %q after 2 minutes: is every stage running? see /readyz", key, contains)
}
