package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/policyflow/policyflow/integration/backend"
	"github.com/policyflow/policyflow/services/nmp"
	"github.com/policyflow/policyflow/services/north-api/auth"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// composeCommand is the Compose CLI of this machine: `docker compose`
// (the plugin) or `docker-compose`.
func composeCommand(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Fatal("no Compose CLI: neither `docker compose` nor `docker-compose` runs (make compose installs Debian's docker-compose)")
	return nil
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestComposeFileRuns brings deploy/compose.yaml up on the Docker engine
// (the images built FROM scratch by deploy/build-images.sh), registers a
// component and pushes a policy through the North API, sees the policy in
// the component's Consul folder, and tears everything down. It runs on the
// containers backend (PF_BACKEND=containers).
func TestComposeFileRuns(t *testing.T) {
	if runtime.EnvOr("PF_BACKEND", backend.KindEmbedded) != backend.KindContainers {
		t.Skip("starts deploy/compose.yaml on Docker: runs with PF_BACKEND=containers")
	}
	root := repoRoot(t)
	compose := composeCommand(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	// The images the compose file runs: the backend's, policyctl (the
	// topology job) and every service.
	stageList, err := exec.Command("sh", filepath.Join(root, "deploy", "stages.sh"), "stages").Output()
	if err != nil {
		t.Fatalf("deploy/stages.sh stages: %v", err)
	}
	list, err := exec.Command("sh", filepath.Join(root, "deploy", "stages.sh"), "list").Output()
	if err != nil {
		t.Fatalf("deploy/stages.sh list: %v", err)
	}
	images := []string{"policyflow/devbroker:dev", "policyflow/consul:dev", "policyflow/policyctl:dev"}
	for _, s := range strings.Fields(string(list)) {
		images = append(images, "policyflow/"+s+":dev")
	}
	if err := backend.EnsureImages(ctx, images...); err != nil {
		t.Fatalf("build the images: %v", err)
	}

	// The North API's tokens file: an admin token, readable by the
	// container's user.
	token, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := json.Marshal(auth.File{Tokens: []auth.Entry{{Name: "compose-test", Role: auth.RoleAdmin, SHA256: auth.Hash(token)}}})
	tokensFile := filepath.Join(t.TempDir(), "api-tokens.json")
	if err := os.WriteFile(tokensFile, tokens, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokensFile, 0o644); err != nil {
		t.Fatal(err)
	}

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	project := "pfcompose" + hex.EncodeToString(b)
	consulPort, apiPort := freePort(t), freePort(t)
	env := append(os.Environ(),
		"PF_IMAGE_REPO=policyflow", "PF_IMAGE_TAG=dev",
		"PF_DEVBROKER_IMAGE=policyflow/devbroker:dev", "PF_CONSUL_IMAGE=policyflow/consul:dev",
		"PF_CONSUL_PORT="+strconv.Itoa(consulPort), "PF_NORTH_API_PORT="+strconv.Itoa(apiPort),
		"PF_API_TOKENS_FILE="+tokensFile, "PF_BROKERS=", "PF_CONSUL_ADDR=", "PF_TOPIC_PREFIX=")
	run := func(ctx context.Context, args ...string) (string, error) {
		all := append(append(append([]string{}, compose[1:]...), "-p", project, "-f", filepath.Join(root, "deploy", "compose.yaml")), args...)
		cmd := exec.CommandContext(ctx, compose[0], all...)
		cmd.Env = env
		cmd.Dir = filepath.Join(root, "deploy")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	down := func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer dcancel()
		if out, err := run(dctx, "down", "-v", "--remove-orphans", "--timeout", "10"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		}
	}
	t.Cleanup(down)
	logs := func() string {
		lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
		defer lcancel()
		out, _ := run(lctx, "logs", "--no-color", "--tail", "30")
		return out
	}
	if out, err := run(ctx, "up", "-d"); err != nil {
		t.Fatalf("compose up: %v\n%s\n%s", err, out, logs())
	}

	api := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	call := func(method, path string, body any) (int, string) {
		var r io.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			r = bytes.NewReader(raw)
		}
		req, _ := http.NewRequestWithContext(ctx, method, api+path, r)
		req.Header.Set("Content-Type", "application/json")
		auth.SetBearer(req, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	eventually := func(what string, wait time.Duration, check func() error) {
		t.Helper()
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if err := testkit.Wait(wait, check); err != nil {
			t.Fatalf("%s: %v\ncompose logs:\n%s", what, err, logs())
		}
	}
	eventually("the North API's views read", 5*time.Minute, func() error {
		code, body := call(http.MethodGet, "/healthcheck", nil)
		if code != http.StatusOK || !strings.Contains(body, `"ok"`) {
			return fmt.Errorf("/healthcheck: %d %s", code, body)
		}
		return nil
	})

	scn := "compose-" + project
	if code, body := call(http.MethodPut, "/v1/components/comp-1", map[string]any{
		"deployment_id": "dep-1", "service_component_name": scn,
		"policy_ids": []string{"DCAE.Config_Compose"}, "notify": map[string]any{"kind": "none"},
	}); code != http.StatusAccepted {
		t.Fatalf("register a component: %d %s", code, body)
	}
	if code, body := call(http.MethodPost, "/v1/policies", []map[string]any{{
		"policyName": "DCAE.Config_Compose.2.xml", "policyVersion": "2", "policyConfigStatus": "CONFIG_RETRIEVED",
		"matchingConditions": map[string]any{"ONAPName": "DCAE"}, "config": map[string]any{"replicas": 3},
	}}); code != http.StatusAccepted {
		t.Fatalf("push a policy: %d %s", code, body)
	}
	key := fmt.Sprintf("http://127.0.0.1:%d/v1/kv/%s:policies/items/DCAE.Config_Compose?raw", consulPort, scn)
	eventually("the policy in the component's Consul folder", 3*time.Minute, func() error {
		resp, err := http.Get(key)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &v) != nil {
			return fmt.Errorf("GET %s: %d %s", key, resp.StatusCode, body)
		}
		if cfg, _ := v["config"].(map[string]any); v["policyVersion"] != "2" || cfg["replicas"] != float64(3) {
			return fmt.Errorf("Consul holds %s", body)
		}
		return nil
	})

	// An agent package goes onto the North API's package volume and
	// comes back byte for byte.
	pkg, err := nmp.BuildPackage(nmp.Manifest{Version: "1.1.0", ConfigVersion: "1.1.0"}, map[string][]byte{"packages/agent.bin": []byte("agent 1.1.0")})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	up, _ := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/agentpackages?sha256="+hex.EncodeToString(sum[:]), bytes.NewReader(pkg))
	auth.SetBearer(up, token)
	resp, err := http.DefaultClient.Do(up)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("upload an agent package: %d %s\ncompose logs:\n%s", resp.StatusCode, out, logs())
	}
	eventually("the agent package downloads", time.Minute, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/agentpackages/1.1.0/file", nil)
		auth.SetBearer(req, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, pkg) {
			return fmt.Errorf("GET the package: %d, %d bytes (want %d)", resp.StatusCode, len(got), len(pkg))
		}
		return nil
	})

	// The status page's data shows every stage, read from its ops
	// listener, ready.
	eventually("every stage ready on /v1/status", time.Minute, func() error {
		code, body := call(http.MethodGet, "/v1/status", nil)
		var st struct {
			Stages []struct {
				Name   string `json:"name"`
				Ready  bool   `json:"ready"`
				Reason string `json:"reason"`
			} `json:"stages"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
			return fmt.Errorf("GET /v1/status: %d %s", code, body)
		}
		ready := map[string]bool{}
		for _, s := range st.Stages {
			ready[s.Name] = s.Ready
		}
		for _, s := range strings.Fields(string(stageList)) {
			if !ready[s] {
				return fmt.Errorf("stage %s not ready on /v1/status: %s", s, body)
			}
		}
		return nil
	})

	// Torn down: no container of the project is left.
	down()
	out, err = exec.Command("docker", "ps", "-a", "-q", "--filter", "label=com.docker.compose.project="+project).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	if left := strings.Fields(string(out)); len(left) > 0 {
		t.Errorf("compose down left %d containers of %s: %v", len(left), project, left)
	}
}

// TestComposeStagesRecoverFast reads deploy/compose.yaml: every service is
// a static member under an id of its own with the chosen session timeout,
// pdp-ingest runs no catch-up against a PDP the file does not ship, and
// every port variable deploy/README.md names is one the file reads.
func TestComposeStagesRecoverFast(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Environment map[string]string `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	list, err := exec.Command("sh", filepath.Join(root, "deploy", "stages.sh"), "list").Output()
	if err != nil {
		t.Fatalf("deploy/stages.sh list: %v", err)
	}
	// defaultOf is the value of a compose setting with the environment
	// unset: ${VAR:-default} is default.
	defaultOf := func(v string) string {
		if m := regexp.MustCompile(`^\$\{[A-Z_]+:-(.*)\}$`).FindStringSubmatch(v); m != nil {
			return m[1]
		}
		return v
	}
	ids := map[string]string{}
	for _, s := range strings.Fields(string(list)) {
		env := file.Services[s].Environment
		id := defaultOf(env["PF_INSTANCE_ID"])
		switch {
		case id == "":
			t.Errorf("service %s: no PF_INSTANCE_ID: a crashed container waits out the session timeout", s)
		case ids[id] != "":
			t.Errorf("services %s and %s share PF_INSTANCE_ID %s", s, ids[id], id)
		}
		ids[id] = s
		if got := defaultOf(env["PF_SESSION_TIMEOUT"]); got != sessionTimeout {
			t.Errorf("service %s: PF_SESSION_TIMEOUT %q, want %s", s, got, sessionTimeout)
		}
	}
	pdp := file.Services["pdp-ingest"].Environment
	if _, ok := file.Services["pdpsim"]; !ok && (defaultOf(pdp["PF_CATCHUP_ON_START"]) != "false" || defaultOf(pdp["PF_CATCHUP_INTERVAL"]) != "0") {
		t.Errorf("pdp-ingest: catch-ups against a PDP are on (PF_CATCHUP_ON_START %q, PF_CATCHUP_INTERVAL %q) but the file runs no PDP",
			pdp["PF_CATCHUP_ON_START"], pdp["PF_CATCHUP_INTERVAL"])
	}
	readme, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range regexp.MustCompile(`PF_[A-Z_]+_PORT\b`).FindAllString(string(readme), -1) {
		if !strings.Contains(string(raw), "${"+v+":-") {
			t.Errorf("deploy/README.md names %s, which deploy/compose.yaml does not read", v)
		}
	}
}
